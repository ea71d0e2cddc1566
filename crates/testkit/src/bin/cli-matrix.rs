//! `cli-matrix`: runs the project's capture scenarios through each given Claude Code CLI
//! against the test kit's fake API, writes one transcript per scenario, and a drift report.
//!
//! ```text
//! cli-matrix --out DIR [--strict] [--json] VERSION...
//! ```
//!
//! Each VERSION is looked up in the CLI cache that `scripts/install-clis.sh` fills (a path to a
//! `claude` executable works too). Transcripts are `DIR/<version>/<scenario>.ndjson`, in the
//! capture format of `crates/protocol/tests/fixtures` (`{"dir":"in"|"out"|"meta","t_ms":N,
//! "msg":{..}}`); the report is `DIR/report.md`. Every line a CLI wrote goes through the
//! protocol model: lines of a known type that do not fit it (drift), lines of no known type,
//! lines that are not JSON objects (malformed), and lines whose typed reading does not
//! re-encode to the same value are listed, and so are the types, fields and field shapes that
//! not every version writes.
//!
//! `scripts/cli-matrix.sh` installs the CLIs and runs this.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde_json::{json, Value};
use switchboard_protocol::Message;
use switchboard_testkit::sandbox::cli_cache;
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;

/// How long a scenario may wait for the CLI's next line.
const LINE_TIMEOUT: Duration = Duration::from_secs(60);

/// The scenarios, in the order they run.
const SCENARIOS: &[&str] = &[
    "plain_text",
    "permission_allow",
    "permission_deny",
    "multi_turn",
    "api_retry",
    "interrupt",
    "thinking",
    "controls",
    "subagent",
    "resume",
    "safety_check",
    "clear",
    "rate_limit",
    "steer",
    "background",
    "elicitation",
    "refusal",
];

/// The tests' MCP server (its `ask` tool elicits a colour), for the `elicitation` scenario.
const MCP_SERVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../e2e/mcp-echo.mjs");

struct Args {
    out: PathBuf,
    strict: bool,
    json: bool,
    only: Option<Vec<String>>,
    versions: Vec<String>,
}

const USAGE: &str = "\
usage: cli-matrix --out DIR [--strict] [--json] [--only SCENARIO,...] VERSION...

Runs the capture scenarios through each Claude Code CLI VERSION (installed by
scripts/install-clis.sh, or a path to a `claude` executable) against the test kit's fake
API; writes DIR/<version>/<scenario>.ndjson and the drift report DIR/report.md.

  --out DIR       where transcripts and the report go (created)
  --strict        exit 1 when a scenario fails or any line is malformed, does not fit the
                  model (drift), is of no known type, or does not re-encode unchanged
  --json          print the summary as JSON instead of text
  --only LIST     run only these scenarios (comma-separated)
";

fn parse_args() -> Result<Args, String> {
    let mut args =
        Args { out: PathBuf::new(), strict: false, json: false, only: None, versions: Vec::new() };
    let mut out = None;
    let mut iter = std::env::args().skip(1);
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "-h" | "--help" => return Err(String::new()),
            "--out" => out = Some(iter.next().ok_or("--out needs a directory")?),
            "--strict" => args.strict = true,
            "--json" => args.json = true,
            "--only" => {
                let list = iter.next().ok_or("--only needs a list of scenarios")?;
                let names: Vec<String> = list.split(',').map(str::to_owned).collect();
                if let Some(unknown) = names.iter().find(|name| !SCENARIOS.contains(&name.as_str()))
                {
                    return Err(format!(
                        "no scenario {unknown:?}; there are: {}",
                        SCENARIOS.join(", ")
                    ));
                }
                args.only = Some(names);
            }
            flag if flag.starts_with('-') => return Err(format!("unknown option {flag}")),
            version => args.versions.push(version.to_owned()),
        }
    }
    args.out = PathBuf::from(out.ok_or("--out DIR is required")?);
    if args.versions.is_empty() {
        return Err("name at least one CLI version".to_owned());
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(problem) if problem.is_empty() => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(problem) => {
            eprintln!("cli-matrix: {problem}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cli-matrix: cannot start a runtime: {error}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(clean) if clean || !args.strict => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(error) => {
            eprintln!("cli-matrix: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// One version's run.
struct VersionRun {
    version: String,
    program: PathBuf,
    outcomes: Vec<(String, Result<(), String>)>,
}

async fn run(args: &Args) -> anyhow::Result<bool> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let scenarios: Vec<&str> = match &args.only {
        Some(only) => {
            SCENARIOS.iter().copied().filter(|name| only.iter().any(|o| o == name)).collect()
        }
        None => SCENARIOS.to_vec(),
    };
    let mut runs = Vec::new();
    for version in &args.versions {
        runs.push(locate(version)?);
    }
    // Versions run side by side; each version's scenarios one after another.
    let mut tasks = Vec::new();
    for (version, program) in runs {
        let dir = args.out.join(&version);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let scenarios = scenarios.clone().into_iter().map(str::to_owned).collect::<Vec<_>>();
        tasks.push(tokio::spawn(async move {
            let mut outcomes = Vec::new();
            for scenario in scenarios {
                let started = Instant::now();
                let outcome = run_scenario(&program, &scenario, &dir).await;
                eprintln!(
                    "cli-matrix: {version} {scenario}: {} ({:.1} s)",
                    match &outcome {
                        Ok(()) => "ok".to_owned(),
                        Err(error) => format!("FAILED: {error}"),
                    },
                    started.elapsed().as_secs_f64()
                );
                outcomes.push((scenario, outcome));
            }
            VersionRun { version, program, outcomes }
        }));
    }
    let mut finished = Vec::new();
    for task in tasks {
        finished.push(task.await.map_err(|error| anyhow!("a version's run panicked: {error}"))?);
    }
    let analysis = analyse(&args.out, &finished)?;
    let report = analysis.markdown(&finished);
    let report_path = args.out.join("report.md");
    std::fs::write(&report_path, report)
        .with_context(|| format!("cannot write {}", report_path.display()))?;
    let clean = analysis.clean(&finished);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&analysis.summary_json(&finished))?);
    } else {
        print!("{}", analysis.summary_text(&finished));
        println!("report: {}", report_path.display());
    }
    Ok(clean)
}

/// The CLI for `version`: a path, or the cache's copy.
fn locate(version: &str) -> anyhow::Result<(String, PathBuf)> {
    let path = Path::new(version);
    if version.contains('/') {
        if !path.is_file() {
            bail!("{version} is not a file");
        }
        return Ok((label_of(path), path.to_path_buf()));
    }
    if version.is_empty()
        || !version.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
    {
        bail!("{version:?} is not a version number");
    }
    let program = cli_cache().join(version).join("node_modules/.bin/claude");
    if !program.exists() {
        bail!(
            "claude {version} is not installed at {}: run scripts/install-clis.sh {version}",
            program.display()
        );
    }
    Ok((version.to_owned(), program))
}

/// A label for a CLI given by path: its `--version`, else its file name.
fn label_of(path: &Path) -> String {
    #[allow(clippy::disallowed_methods)] // the matrix runs CLIs itself, below Switchboard
    let output = std::process::Command::new(path).arg("--version").output();
    output
        .ok()
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .and_then(|text| text.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| path.display().to_string().replace('/', "_"))
}

// ----- driving one CLI --------------------------------------------------------------------

/// How a permission request is answered.
#[derive(Clone, Copy, PartialEq)]
enum Answer {
    Allow,
    Deny,
}

/// One CLI process under a scenario, and the transcript.
struct Driver {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    stderr: tokio::task::JoinHandle<String>,
    transcript: Vec<String>,
    start: Instant,
    answer: Answer,
    next_request: u64,
    session_id: Option<String>,
    tools: Vec<String>,
}

impl Driver {
    async fn spawn(
        program: &Path,
        sandbox: &CliSandbox,
        api: &FakeApi,
        extra: &[String],
        subscriber: bool,
        transcript: Vec<String>,
        start: Instant,
    ) -> anyhow::Result<Driver> {
        let mut command = sandbox.cli_command(program, &api.base_url());
        // As the daemon runs it: the CLI states its turns (`system/session_state_changed`).
        command.env("CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS", "1");
        if subscriber {
            command.env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
            command.envs(sandbox.subscriber_env(&api.base_url()));
            command.env("CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS", "1");
        }
        command
            .args(["--permission-prompt-tool", "stdio", "--include-partial-messages"])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child =
            command.spawn().with_context(|| format!("cannot run {}", program.display()))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let stderr = child.stderr.take().context("no stderr")?;
        let (tx, lines) = mpsc::channel(1024);
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if tx.send(line).await.is_err() {
                    break;
                }
            }
        });
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            let _ = BufReader::new(stderr).take(64 * 1024).read_to_string(&mut text).await;
            text
        });
        let mut driver = Driver {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
            transcript,
            start,
            answer: Answer::Allow,
            next_request: 0,
            session_id: None,
            tools: Vec::new(),
        };
        driver.meta(json!({"spawn": program.display().to_string(), "extra_args": extra}));
        Ok(driver)
    }

    fn t_ms(&self) -> u128 {
        self.start.elapsed().as_millis()
    }

    fn meta(&mut self, what: Value) {
        self.transcript.push(meta_line(self.t_ms() as u64, what));
    }

    async fn send(&mut self, message: Value) -> anyhow::Result<()> {
        let text = message.to_string();
        self.transcript.push(format!(r#"{{"dir":"out","t_ms":{},"msg":{text}}}"#, self.t_ms()));
        let stdin = self.stdin.as_mut().context("stdin is closed")?;
        stdin.write_all(format!("{text}\n").as_bytes()).await.context("the CLI's stdin closed")?;
        stdin.flush().await?;
        Ok(())
    }

    async fn control(&mut self, request: Value) -> anyhow::Result<String> {
        self.next_request += 1;
        let request_id = format!("matrix-{}", self.next_request);
        self.send(json!({"type": "control_request", "request_id": request_id, "request": request}))
            .await?;
        Ok(request_id)
    }

    async fn initialize(&mut self) -> anyhow::Result<()> {
        // As Switchboard registers its policy's PreToolUse hook.
        let id = self
            .control(json!({"subtype": "initialize", "hooks": {"PreToolUse": [
                {"matcher": null, "hookCallbackIds": ["matrix-policy"]}
            ]}}))
            .await?;
        self.until(&format!("the answer to initialize ({id})"), |line| response_to(line, &id))
            .await?;
        Ok(())
    }

    async fn prompt(&mut self, text: &str) -> anyhow::Result<()> {
        let uuid = uuid::Uuid::new_v4().to_string();
        self.send(json!({"type": "user", "message": {"role": "user", "content": text},
            "parent_tool_use_id": null, "session_id": "", "uuid": uuid}))
            .await
    }

    /// The next line from the CLI, answering what it asks on the way.
    async fn next(&mut self) -> anyhow::Result<Value> {
        let raw = match tokio::time::timeout(LINE_TIMEOUT, self.lines.recv()).await {
            Ok(Some(raw)) => raw,
            Ok(None) => bail!("the CLI closed its output"),
            Err(_) => bail!("no line from the CLI for {} s", LINE_TIMEOUT.as_secs()),
        };
        let parsed: Option<Value> =
            serde_json::from_str::<Value>(&raw).ok().filter(Value::is_object);
        let Some(value) = parsed else {
            let line = json!({"dir": "in", "t_ms": self.t_ms() as u64, "raw": raw});
            self.transcript.push(line.to_string());
            return Ok(Value::Null);
        };
        self.transcript.push(format!(r#"{{"dir":"in","t_ms":{},"msg":{raw}}}"#, self.t_ms()));
        if value["type"] == "system" && value["subtype"] == "init" {
            self.session_id = value["session_id"].as_str().map(str::to_owned);
            self.tools = value["tools"]
                .as_array()
                .map(|tools| tools.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default();
        }
        if value["type"] == "control_request" {
            let id = value["request_id"].clone();
            let response = match value["request"]["subtype"].as_str() {
                Some("can_use_tool") => match self.answer {
                    Answer::Allow => {
                        json!({"behavior": "allow", "updatedInput": value["request"]["input"]})
                    }
                    Answer::Deny => json!({"behavior": "deny", "message": "denied by the matrix"}),
                },
                // No opinion: the permission request decides.
                Some("hook_callback") => json!({}),
                // An MCP server's question, answered as a person would.
                Some("elicitation") => json!({"action": "accept", "content": {"colour": "blue"}}),
                _ => {
                    let error = json!({"type": "control_response", "response": {"subtype": "error",
                        "request_id": id, "error": "not supported by the matrix"}});
                    self.send(error).await?;
                    return Ok(value);
                }
            };
            self.send(json!({"type": "control_response", "response": {"subtype": "success",
                "request_id": id, "response": response}}))
                .await?;
        }
        Ok(value)
    }

    /// Reads lines until one satisfies `done`, which it returns.
    async fn until(&mut self, what: &str, done: impl Fn(&Value) -> bool) -> anyhow::Result<Value> {
        loop {
            let line = self.next().await.with_context(|| format!("waiting for {what}"))?;
            if done(&line) {
                return Ok(line);
            }
        }
    }

    async fn until_result(&mut self) -> anyhow::Result<Value> {
        self.until("the turn's result", |line| {
            line["type"] == "result" && line["parent_tool_use_id"].is_null()
        })
        .await
    }

    /// Closes stdin, lets the CLI exit (reading what it still writes), and gives back the
    /// transcript.
    async fn finish(mut self) -> Vec<String> {
        drop(self.stdin.take());
        let deadline = tokio::time::sleep(Duration::from_secs(20));
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                line = self.lines.recv() => match line {
                    Some(raw) => {
                        let entry = match serde_json::from_str::<Value>(&raw) {
                            Ok(value) if value.is_object() => format!(r#"{{"dir":"in","t_ms":{},"msg":{raw}}}"#, self.t_ms()),
                            _ => json!({"dir": "in", "t_ms": self.t_ms() as u64, "raw": raw}).to_string(),
                        };
                        self.transcript.push(entry);
                    }
                    None => break,
                },
                () = &mut deadline => {
                    let _ = self.child.start_kill();
                    break;
                }
            }
        }
        let status = self.child.wait().await.ok().and_then(|status| status.code());
        let stderr = (&mut self.stderr).await.unwrap_or_default();
        let stderr: String = stderr.chars().take(4000).collect();
        self.meta(json!({"exit_code": status, "stderr": stderr}));
        self.transcript
    }
}

/// A `meta` line of the transcript: what happened around the protocol, its fields flat as in
/// the fixtures (`{"dir":"meta","t_ms":N,…}`; no `msg`, so decoders skip it).
fn meta_line(t_ms: u64, what: Value) -> String {
    let mut line = json!({"dir": "meta", "t_ms": t_ms});
    if let (Some(line), Value::Object(fields)) = (line.as_object_mut(), what) {
        line.extend(fields);
    }
    line.to_string()
}

fn response_to(line: &Value, request_id: &str) -> bool {
    line["type"] == "control_response" && line["response"]["request_id"] == request_id
}

fn touch(name: &str) -> Value {
    json!({"command": format!("touch {name} && ls"), "description": "Make a file"})
}

/// The fake API's script for a scenario.
fn script(scenario: &str, workdir: &Path) -> Scenario {
    let hello = workdir.join("hello.txt").display().to_string();
    match scenario {
        "plain_text" => Scenario::new().reply(Reply::text("Hello from the matrix.")),
        "permission_allow" => Scenario::new()
            .reply(Reply::tool_use("Bash", touch("allowed.txt")).when_prompt("RUN"))
            .reply(Reply::text("Done.").when_tool_result()),
        "permission_deny" => Scenario::new()
            .reply(Reply::tool_use("Bash", touch("denied.txt")).when_prompt("RUN"))
            .reply(Reply::text("Understood.").when_tool_result()),
        "multi_turn" => Scenario::new()
            .reply(Reply::text("first answer").when_prompt("ONE"))
            .reply(Reply::text("second answer").when_prompt("TWO")),
        "api_retry" => Scenario::new()
            .reply(Reply::http_error(529, "overloaded_error", "Overloaded", 1))
            .reply(Reply::text("Recovered after a retry.")),
        "interrupt" => Scenario::new()
            .reply(
                Reply::text("one two three four five six seven").when_prompt("LONG").hold_after(2),
            )
            .reply(Reply::text("after the interrupt").when_prompt("NEXT")),
        "thinking" => Scenario::new().reply(
            Reply::default()
                .then_thinking("Let me think about it.")
                .then_text("Thought it through."),
        ),
        "controls" => Scenario::new().fallback("Controls answered."),
        "subagent" => {
            // As the demo scripts it: `run_in_background` (newer CLIs may otherwise run an
            // Agent in the background) is a field the older Task tool does not know.
            let task = |tool: &str, word: &str| {
                let input = json!({"description": "Read the fixture", "prompt": "SUBAGENT_PROMPT: read hello.txt", "subagent_type": "general-purpose", "run_in_background": false});
                Reply::tool_use(tool, input).when_prompt(word)
            };
            Scenario::new()
                .reply(Reply::text("Ready.").when_prompt("WARM UP"))
                .reply(task("Agent", "DELEGATE_AGENT"))
                .reply(task("Task", "DELEGATE_TASK"))
                .reply(
                    Reply::tool_use("Read", json!({"file_path": hello}))
                        .when_prompt("SUBAGENT_PROMPT"),
                )
                .reply(
                    Reply::text("SUBAGENT_DONE: it says hello.")
                        .when_tool_result_contains("hello world"),
                )
                .reply(Reply::text("Parent done.").when_tool_result_contains("SUBAGENT_DONE"))
        }
        "resume" => Scenario::new()
            .reply(Reply::text("Remembered: the word is heron.").when_prompt("REMEMBER"))
            .reply(Reply::text("The word was heron.").when_prompt("RECALL")),
        // A removal on a critical path: newer CLIs ask with their safety check's hints. `rm`
        // refuses a path ending in `..`, and the scenario denies it: nothing is removed.
        "safety_check" => Scenario::new()
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "rm -rf /nonexistent-switchboard/..", "description": "Clean up"}),
                )
                .when_prompt("RUN"),
            )
            .reply(Reply::text("Left it alone.").when_tool_result()),
        "clear" => Scenario::new()
            .reply(Reply::text("Before the clear.").when_prompt("ONE"))
            .reply(Reply::text("After the clear.").when_prompt("TWO")),
        // As a claude.ai login's CLI sees them (the driver gives it one): the usage windows'
        // headers on an answer, then a 429 for every try of the next turn.
        "rate_limit" => {
            let resets = (now_seconds() + 3600).to_string();
            let week = (now_seconds() + 86_400).to_string();
            let headers = |reply: Reply, status: &str| {
                reply
                    .header("anthropic-ratelimit-unified-status", status)
                    .header("anthropic-ratelimit-unified-representative-claim", "five_hour")
                    .header("anthropic-ratelimit-unified-reset", resets.as_str())
                    .header("anthropic-ratelimit-unified-5h-utilization", "0.82")
                    .header("anthropic-ratelimit-unified-5h-reset", resets.as_str())
                    .header("anthropic-ratelimit-unified-5h-status", "allowed_warning")
                    .header("anthropic-ratelimit-unified-7d-utilization", "0.4")
                    .header("anthropic-ratelimit-unified-7d-reset", week.as_str())
                    .header("anthropic-ratelimit-unified-7d-status", "allowed")
            };
            Scenario::new()
                .reply(headers(Reply::text("Within the limits.").when_prompt("ONE"), "allowed"))
                .reply(headers(
                    Reply {
                        when: Some(switchboard_testkit::When::PromptContains("TWO".into())),
                        ..Reply::http_error(429, "rate_limit_error", "Rate limited", 3)
                    },
                    "rejected",
                ))
        }
        // A running turn steered by a prompt sent with `priority: now`.
        "steer" => Scenario::new()
            .reply(Reply::text("one two three four five six").when_prompt("LONG").hold_after(2))
            .reply(Reply::text("Steered.").when_prompt("STEER")),
        // A Bash command run in the background, then stopped alone (`stop_task`).
        "background" => Scenario::new()
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "sleep 30", "description": "Wait a while", "run_in_background": true}),
                )
                .when_prompt("BG"),
            )
            .reply(Reply::text("It runs in the background.").when_tool_result()),
        // An MCP server asks the person (`elicitation`): the driver accepts with a colour.
        "elicitation" => Scenario::new()
            .reply(Reply::tool_use("mcp__probe__ask", json!({})).when_prompt("ASK"))
            .reply(Reply::text("Got the answer.").when_tool_result()),
        // The model's safeguards stop the answer (`stop_reason: refusal`). The newest CLIs
        // go on once on the same model, then retry on a fallback model, whose answer
        // supersedes the refused one; older ones end the turn with the refusal.
        "refusal" => Scenario::new()
            .reply(
                Reply::text("I will not")
                    .refused("cyber", "Looks like malware.")
                    .when_model("opus-5")
                    .times(2),
            )
            .reply(Reply::text("Here is a safe answer.").when_model("opus-4-8"))
            .reply(Reply::text("I will not").refused("cyber", "Looks like malware."))
            .fallback("Answered after the refusal."),
        _ => Scenario::new(),
    }
}

fn now_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// Runs one scenario and writes its transcript, whatever the outcome.
async fn run_scenario(program: &Path, scenario: &str, dir: &Path) -> Result<(), String> {
    let start = Instant::now();
    let mut transcript = vec![meta_line(0, json!({"scenario": scenario}))];
    let outcome = drive(program, scenario, start, &mut transcript).await;
    if let Err(error) = &outcome {
        let failed = json!({"failed": format!("{error:#}")});
        transcript.push(meta_line(start.elapsed().as_millis() as u64, failed));
    }
    let mut text = transcript.join("\n");
    text.push('\n');
    let path = dir.join(format!("{scenario}.ndjson"));
    if let Err(error) = std::fs::write(&path, text) {
        return Err(format!("cannot write {}: {error}", path.display()));
    }
    outcome.map_err(|error| format!("{error:#}"))
}

async fn drive(
    program: &Path,
    scenario: &str,
    start: Instant,
    transcript: &mut Vec<String>,
) -> anyhow::Result<()> {
    let sandbox = CliSandbox::new()?;
    std::fs::write(sandbox.file("hello.txt"), "hello world\n")?;
    let api = FakeApi::start(script(scenario, &sandbox.workdir())).await?;
    let mcp = vec![format!(
        "--mcp-config={}",
        json!({"mcpServers": {"probe": {"command": "node", "args": [MCP_SERVER]}}})
    )];
    let extra: &[String] = if scenario == "elicitation" { &mcp } else { &[] };
    let mut d = Driver::spawn(
        program,
        &sandbox,
        &api,
        extra,
        scenario == "rate_limit",
        std::mem::take(transcript),
        start,
    )
    .await?;
    let outcome = steps(&mut d, scenario, &api).await;
    let first_session = d.session_id.clone();
    *transcript = d.finish().await;
    outcome?;
    if scenario == "resume" {
        let session = first_session.context("the first run named no session")?;
        let extra = vec![format!("--resume={session}")];
        let mut d = Driver::spawn(
            program,
            &sandbox,
            &api,
            &extra,
            false,
            std::mem::take(transcript),
            start,
        )
        .await?;
        let outcome = async {
            d.initialize().await?;
            d.prompt("RECALL the word").await?;
            let result = d.until_result().await?;
            if result["result"] != "The word was heron." {
                bail!("the resumed session answered {}", result["result"]);
            }
            Ok(())
        }
        .await;
        *transcript = d.finish().await;
        outcome?;
    }
    if scenario == "permission_allow" && !sandbox.file("allowed.txt").exists() {
        bail!("the allowed Bash call did not run");
    }
    if scenario == "permission_deny" && sandbox.file("denied.txt").exists() {
        bail!("the denied Bash call ran");
    }
    Ok(())
}

async fn steps(d: &mut Driver, scenario: &str, api: &FakeApi) -> anyhow::Result<()> {
    d.initialize().await?;
    match scenario {
        "plain_text" | "thinking" | "api_retry" => {
            d.prompt("Say hello").await?;
            let result = d.until_result().await?;
            if result["is_error"] == true {
                bail!("the turn failed: {}", result["result"]);
            }
        }
        "clear" => {
            d.prompt("ONE").await?;
            d.until_result().await?;
            d.prompt("/clear").await?;
            d.until_result().await?;
            d.prompt("TWO").await?;
            let result = d.until_result().await?;
            if result["result"] != "After the clear." {
                bail!("the turn after the clear answered {}", result["result"]);
            }
        }
        "rate_limit" => {
            d.prompt("ONE").await?;
            d.until_result().await?;
            // Every try refused: the turn ends in an error result.
            d.prompt("TWO").await?;
            d.until_result().await?;
        }
        "permission_allow" | "permission_deny" | "safety_check" => {
            d.answer = if scenario == "permission_allow" { Answer::Allow } else { Answer::Deny };
            d.prompt("RUN the command").await?;
            d.until_result().await?;
        }
        "multi_turn" => {
            d.prompt("ONE").await?;
            d.until_result().await?;
            d.prompt("TWO").await?;
            let result = d.until_result().await?;
            if result["result"] != "second answer" {
                bail!("the second turn answered {}", result["result"]);
            }
        }
        "interrupt" => {
            d.prompt("LONG answer please").await?;
            d.until("the first streamed text", |line| {
                line["type"] == "stream_event" && line["event"]["type"] == "content_block_delta"
            })
            .await?;
            let id = d.control(json!({"subtype": "interrupt"})).await?;
            d.until_result().await?;
            api.release();
            let _ = id;
            d.prompt("NEXT").await?;
            d.until_result().await?;
        }
        "controls" => {
            let id =
                d.control(json!({"subtype": "set_permission_mode", "mode": "acceptEdits"})).await?;
            d.until("the answer to set_permission_mode", |line| response_to(line, &id)).await?;
            let id = d.control(json!({"subtype": "set_model", "model": "claude-opus-4-1"})).await?;
            d.until("the answer to set_model", |line| response_to(line, &id)).await?;
            d.prompt("Anything").await?;
            d.until_result().await?;
        }
        "subagent" => {
            d.prompt("WARM UP").await?;
            d.until_result().await?;
            // The tools the model is offered (the init line's list keeps the older name).
            let offered: Vec<String> = api
                .conversation_requests()
                .last()
                .and_then(|request| request.body["tools"].as_array().cloned())
                .unwrap_or_default()
                .iter()
                .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
                .collect();
            let word = if offered.iter().any(|tool| tool == "Agent") {
                "DELEGATE_AGENT"
            } else if offered.iter().any(|tool| tool == "Task") {
                "DELEGATE_TASK"
            } else {
                bail!("the model is offered neither Agent nor Task: {offered:?}");
            };
            d.meta(
                json!({"subagent_tool": if word == "DELEGATE_AGENT" { "Agent" } else { "Task" }}),
            );
            d.prompt(&format!("{word} the reading")).await?;
            let result = d.until_result().await?;
            if result["result"] != "Parent done." {
                bail!("the parent answered {}", result["result"]);
            }
        }
        "resume" => {
            d.prompt("REMEMBER the word heron").await?;
            d.until_result().await?;
        }
        "steer" => {
            d.prompt("LONG answer please").await?;
            d.until("the first streamed text", |line| {
                line["type"] == "stream_event" && line["event"]["type"] == "content_block_delta"
            })
            .await?;
            let uuid = uuid::Uuid::new_v4().to_string();
            d.send(
                json!({"type": "user", "message": {"role": "user", "content": "STEER this way"},
                "parent_tool_use_id": null, "session_id": "", "uuid": uuid, "priority": "now"}),
            )
            .await?;
            // A CLI that does not steer finishes the held turn first.
            api.release();
            d.until_result().await?;
            d.until_result().await?;
        }
        "background" => {
            d.answer = Answer::Allow;
            d.prompt("BG start it").await?;
            let mut task = None;
            loop {
                let line = d.next().await.context("waiting for the turn's result")?;
                if line["type"] == "system" && line["subtype"] == "task_started" {
                    task = line["task_id"].as_str().map(str::to_owned);
                }
                if line["type"] == "result" && line["parent_tool_use_id"].is_null() {
                    break;
                }
            }
            // CLIs that say what runs in the background stop it alone.
            if let Some(task_id) = task {
                let id = d.control(json!({"subtype": "stop_task", "task_id": task_id})).await?;
                d.until("the answer to stop_task", |line| response_to(line, &id)).await?;
            }
        }
        "elicitation" => {
            d.answer = Answer::Allow;
            d.prompt("ASK for a colour").await?;
            d.until_result().await?;
        }
        "refusal" => {
            d.prompt("Write the exploit").await?;
            d.until_result().await?;
        }
        other => bail!("no scenario {other:?}"),
    }
    Ok(())
}

// ----- analysis ---------------------------------------------------------------------------

/// What one line was made of, by the model.
#[derive(Default)]
struct Counts {
    lines: u64,
    typed: u64,
    unknown: u64,
    drift: u64,
    malformed: u64,
    mismatched: u64,
}

#[derive(Default)]
struct Analysis {
    /// Per version.
    counts: BTreeMap<String, Counts>,
    /// (version, scenario, kind, what) → how many lines.
    problems: BTreeMap<(String, String, &'static str, String), u64>,
    /// "type/subtype" → version → path → JSON kinds seen.
    shapes: BTreeMap<String, BTreeMap<String, BTreeMap<String, BTreeSet<&'static str>>>>,
}

fn analyse(out: &Path, runs: &[VersionRun]) -> anyhow::Result<Analysis> {
    let mut analysis = Analysis::default();
    for run in runs {
        let counts = analysis.counts.entry(run.version.clone()).or_default();
        for (scenario, _) in &run.outcomes {
            let path = out.join(&run.version).join(format!("{scenario}.ndjson"));
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            for entry in text.lines() {
                let Ok(entry) = serde_json::from_str::<Value>(entry) else { continue };
                if entry["dir"] != "in" {
                    continue;
                }
                counts.lines += 1;
                let raw = match (&entry.get("msg"), entry.get("raw")) {
                    (Some(msg), _) => msg.to_string(),
                    (None, Some(raw)) => raw.as_str().unwrap_or_default().to_owned(),
                    _ => continue,
                };
                let mut problem = |kind: &'static str, what: String| {
                    *analysis
                        .problems
                        .entry((run.version.clone(), scenario.clone(), kind, what))
                        .or_default() += 1;
                };
                let message = match Message::decode_str(&raw) {
                    Ok(message) => message,
                    Err(error) => {
                        counts.malformed += 1;
                        problem(
                            "malformed",
                            format!(
                                "{error}; starts {:?}",
                                switchboard_protocol::codec::preview(raw.as_bytes())
                            ),
                        );
                        continue;
                    }
                };
                let label = label(&message);
                match &message {
                    Message::Drift(drift) => {
                        counts.drift += 1;
                        problem("drift", format!("{label}: {}", drift.reason));
                    }
                    other if other.is_unknown() => {
                        counts.unknown += 1;
                        problem("unknown", label.clone());
                    }
                    _ => counts.typed += 1,
                }
                // As the decoder reads it: from its `{` (1.0.112 glues a terminal clear to
                // the line after a `/clear`).
                let read = switchboard_protocol::codec::without_terminal_escapes(&raw);
                let original: Value = serde_json::from_str(read).unwrap_or(Value::Null);
                let again: Value = serde_json::from_str(&message.encode()).unwrap_or(Value::Null);
                if original != again {
                    counts.mismatched += 1;
                    problem("roundtrip", label.clone());
                }
                let paths = analysis
                    .shapes
                    .entry(label)
                    .or_default()
                    .entry(run.version.clone())
                    .or_default();
                walk(&original, String::new(), 0, paths);
            }
        }
    }
    Ok(analysis)
}

/// `type/subtype` (`stream_event/content_block_delta` for stream events).
fn label(message: &Message) -> String {
    let kind = message.type_name().unwrap_or("?");
    let sub = match message.readable() {
        Message::StreamEvent(event) => event.event.tag().map(str::to_owned),
        other => other.subtype().map(str::to_owned),
    };
    match sub {
        Some(sub) => format!("{kind}/{sub}"),
        None => kind.to_owned(),
    }
}

/// Fields whose content is the tool's or the user's, not the protocol's.
const OPAQUE: &[&str] = &[
    "input",
    "tool_use_result",
    "structured_output",
    "patch",
    "content",
    "tool_input",
    "updatedInput",
];

/// Records every field path of `value` (arrays as `[]`) with its JSON kind, 4 levels deep.
fn walk(
    value: &Value,
    path: String,
    depth: usize,
    out: &mut BTreeMap<String, BTreeSet<&'static str>>,
) {
    if !path.is_empty() {
        out.entry(path.clone()).or_default().insert(kind(value));
    }
    if depth >= 4 {
        return;
    }
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                let next = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                if OPAQUE.contains(&key.as_str()) && depth > 0 {
                    out.entry(next).or_default().insert(kind(inner));
                    continue;
                }
                walk(inner, next, depth + 1, out);
            }
        }
        Value::Array(items) => {
            for item in items {
                walk(item, format!("{path}[]"), depth + 1, out);
            }
        }
        _ => {}
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(number) if number.is_f64() => "float",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

impl Analysis {
    fn clean(&self, runs: &[VersionRun]) -> bool {
        runs.iter().all(|run| run.outcomes.iter().all(|(_, outcome)| outcome.is_ok()))
            && self.problems.is_empty()
    }

    fn summary_json(&self, runs: &[VersionRun]) -> Value {
        let versions: Vec<Value> = runs
            .iter()
            .map(|run| {
                let counts = self.counts.get(&run.version);
                let count = |pick: fn(&Counts) -> u64| counts.map_or(0, pick);
                json!({
                    "version": run.version,
                    "program": run.program.display().to_string(),
                    "scenarios": run.outcomes.iter().map(|(name, outcome)| json!({
                        "name": name,
                        "ok": outcome.is_ok(),
                        "error": outcome.as_ref().err(),
                    })).collect::<Vec<_>>(),
                    "lines": count(|c| c.lines),
                    "typed": count(|c| c.typed),
                    "unknown": count(|c| c.unknown),
                    "drift": count(|c| c.drift),
                    "malformed": count(|c| c.malformed),
                    "roundtrip_mismatches": count(|c| c.mismatched),
                })
            })
            .collect();
        let problems: Vec<Value> = self
            .problems
            .iter()
            .map(|((version, scenario, kind, what), lines)| {
                json!({"version": version, "scenario": scenario, "kind": kind, "what": what, "lines": lines})
            })
            .collect();
        json!({"clean": self.clean(runs), "versions": versions, "problems": problems})
    }

    fn summary_text(&self, runs: &[VersionRun]) -> String {
        let mut text = String::new();
        for run in runs {
            let counts = self.counts.get(&run.version);
            let passed = run.outcomes.iter().filter(|(_, outcome)| outcome.is_ok()).count();
            let _ = writeln!(
                text,
                "{}: {passed}/{} scenarios, {} lines: {} typed, {} unknown, {} drift, {} malformed, {} roundtrip-mismatch",
                run.version,
                run.outcomes.len(),
                counts.map_or(0, |c| c.lines),
                counts.map_or(0, |c| c.typed),
                counts.map_or(0, |c| c.unknown),
                counts.map_or(0, |c| c.drift),
                counts.map_or(0, |c| c.malformed),
                counts.map_or(0, |c| c.mismatched),
            );
        }
        for ((version, scenario, kind, what), lines) in &self.problems {
            let _ = writeln!(text, "  {version} {scenario}: {kind}: {what} ({lines} lines)");
        }
        text
    }

    fn markdown(&self, runs: &[VersionRun]) -> String {
        let versions: Vec<&str> = runs.iter().map(|run| run.version.as_str()).collect();
        let mut md = String::new();
        let _ = writeln!(md, "# Claude Code CLI drift report\n");
        let _ = writeln!(
            md,
            "Written by `cli-matrix` (`scripts/cli-matrix.sh`): the capture scenarios ({}) run through each CLI against the test kit's fake API, every line the CLI wrote read by the protocol model.\n",
            SCENARIOS.join(", ")
        );
        let _ = writeln!(md, "## Summary\n");
        let _ = writeln!(md, "| version | scenarios passed | lines | typed | unknown type | drift | malformed | roundtrip mismatch |");
        let _ = writeln!(md, "|---|--:|--:|--:|--:|--:|--:|--:|");
        for run in runs {
            let c = self.counts.get(&run.version);
            let n = |pick: fn(&Counts) -> u64| c.map_or(0, pick);
            let passed = run.outcomes.iter().filter(|(_, outcome)| outcome.is_ok()).count();
            let _ = writeln!(
                md,
                "| {} | {passed}/{} | {} | {} | {} | {} | {} | {} |",
                run.version,
                run.outcomes.len(),
                n(|c| c.lines),
                n(|c| c.typed),
                n(|c| c.unknown),
                n(|c| c.drift),
                n(|c| c.malformed),
                n(|c| c.mismatched)
            );
        }
        let failures: Vec<_> = runs
            .iter()
            .flat_map(|run| {
                run.outcomes.iter().filter_map(move |(name, outcome)| {
                    outcome.as_ref().err().map(|error| (run.version.as_str(), name.as_str(), error))
                })
            })
            .collect();
        let _ = writeln!(md, "\n## Scenarios that failed\n");
        if failures.is_empty() {
            let _ = writeln!(md, "None.");
        }
        for (version, name, error) in failures {
            let _ = writeln!(md, "- {version} `{name}`: {}", error.replace('\n', " "));
        }
        let _ = writeln!(md, "\n## Lines the model did not read cleanly\n");
        if self.problems.is_empty() {
            let _ = writeln!(
                md,
                "None: every line of every version decoded to its type and re-encoded unchanged."
            );
        } else {
            let _ =
                writeln!(md, "| version | scenario | kind | what | lines |\n|---|---|---|---|--:|");
            for ((version, scenario, kind, what), lines) in &self.problems {
                let _ = writeln!(
                    md,
                    "| {version} | {scenario} | {kind} | {} | {lines} |",
                    what.replace('|', "\\|")
                );
            }
        }
        // Types and subtypes not every version writes.
        let _ = writeln!(md, "\n## Types and subtypes not every version writes\n");
        let mut rows = Vec::new();
        for (label, per_version) in &self.shapes {
            if versions.iter().all(|version| per_version.contains_key(*version)) {
                continue;
            }
            let cells: Vec<&str> = versions
                .iter()
                .map(|version| if per_version.contains_key(*version) { "✓" } else { "–" })
                .collect();
            rows.push(format!("| `{label}` | {} |", cells.join(" | ")));
        }
        table(&mut md, &versions, "type/subtype", &rows);
        // Fields not every version writes (among the versions that write the type).
        let _ = writeln!(md, "\n## Fields not every version writes\n");
        let _ = writeln!(
            md,
            "Among the versions that write the type at all; `[]` is every element of an array.\n"
        );
        let mut rows = Vec::new();
        for (label, per_version) in &self.shapes {
            let all_paths: BTreeSet<&String> =
                per_version.values().flat_map(BTreeMap::keys).collect();
            for path in all_paths {
                let writers: Vec<bool> = versions
                    .iter()
                    .map(|version| {
                        per_version.get(*version).is_some_and(|paths| paths.contains_key(path))
                    })
                    .collect();
                let typed_by: Vec<bool> =
                    versions.iter().map(|version| per_version.contains_key(*version)).collect();
                if writers.iter().zip(&typed_by).all(|(writes, has)| writes == has) {
                    continue;
                }
                let cells: Vec<&str> = writers
                    .iter()
                    .zip(&typed_by)
                    .map(|(writes, has)| match (has, writes) {
                        (false, _) => " ",
                        (true, true) => "✓",
                        (true, false) => "–",
                    })
                    .collect();
                rows.push(format!("| `{label}` `{path}` | {} |", cells.join(" | ")));
            }
        }
        table(&mut md, &versions, "field", &rows);
        // Shapes that differ.
        let _ = writeln!(md, "\n## Fields whose shape differs between versions\n");
        let mut rows = Vec::new();
        for (label, per_version) in &self.shapes {
            let all_paths: BTreeSet<&String> =
                per_version.values().flat_map(BTreeMap::keys).collect();
            for path in all_paths {
                let kinds: Vec<Option<&BTreeSet<&str>>> = versions
                    .iter()
                    .map(|version| per_version.get(*version).and_then(|paths| paths.get(path)))
                    .collect();
                let present: Vec<&BTreeSet<&str>> = kinds.iter().flatten().copied().collect();
                if present.windows(2).all(|pair| pair[0] == pair[1]) {
                    continue;
                }
                let cells: Vec<String> = kinds
                    .iter()
                    .map(|kinds| {
                        kinds
                            .map(|set| set.iter().copied().collect::<Vec<_>>().join(", "))
                            .unwrap_or_default()
                    })
                    .collect();
                rows.push(format!("| `{label}` `{path}` | {} |", cells.join(" | ")));
            }
        }
        table(&mut md, &versions, "field", &rows);
        md
    }
}

fn table(md: &mut String, versions: &[&str], first: &str, rows: &[String]) {
    if rows.is_empty() {
        let _ = writeln!(md, "None.");
        return;
    }
    let _ = writeln!(md, "| {first} | {} |", versions.join(" | "));
    let _ = writeln!(md, "|---|{}", versions.iter().map(|_| "---|").collect::<String>());
    for row in rows {
        let _ = writeln!(md, "{row}");
    }
}
