//! `switchboard claude`: the interactive CLI in a PTY, driven from a PTY of the test's own, as
//! a person's terminal would.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use switchboard_testkit::{real_cli, CliSandbox, CliVersion, FakeApi, Reply, Scenario};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::serve::{http, session_events, session_with_transport, start_daemon};

/// A person's terminal: a PTY running `switchboard claude`, everything it shows kept.
struct Terminal {
    child: tokio::process::Child,
    writer: pty_process::OwnedWritePty,
    screen: Arc<Mutex<Vec<u8>>>,
    master: std::os::fd::OwnedFd,
}

impl Terminal {
    /// Runs `switchboard claude --url … --token …` in `cwd` with `env`, in a 30×100 PTY.
    fn start(
        url: &str,
        token: &str,
        cwd: &Path,
        env: Vec<(String, String)>,
        claude: &Path,
    ) -> Self {
        let args = ["claude", "--url", url, "--token", token];
        Self::spawn(Path::new(env!("CARGO_BIN_EXE_switchboard")), &args, cwd, env, claude)
    }

    /// Runs `program ARGS` in `cwd` with `env` (and `claude` as `SWITCHBOARD_CLAUDE`), in a
    /// 30×100 PTY.
    fn spawn(
        program: &Path,
        args: &[&str],
        cwd: &Path,
        env: Vec<(String, String)>,
        claude: &Path,
    ) -> Self {
        let (pty, pts) = pty_process::open().unwrap();
        pty.resize(pty_process::Size::new(30, 100)).unwrap();
        let master = rustix::io::dup(&pty).unwrap();
        let child = pty_process::Command::new(program)
            .args(args)
            .current_dir(cwd)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("TERM", "xterm-256color")
            .envs(env)
            .env("SWITCHBOARD_CLAUDE", claude)
            .kill_on_drop(true)
            .spawn(pts)
            .unwrap();
        let (mut reader, writer) = pty.into_split();
        let screen = Arc::new(Mutex::new(Vec::new()));
        let shown = screen.clone();
        tokio::spawn(async move {
            let mut buffer = vec![0u8; 8192];
            while let Ok(read) = reader.read(&mut buffer).await {
                if read == 0 {
                    break;
                }
                shown.lock().unwrap().extend_from_slice(&buffer[..read]);
            }
        });
        Terminal { child, writer, screen, master }
    }

    /// What the terminal showed so far, without escape sequences or white space (a TUI moves
    /// its cursor instead of writing spaces).
    fn text(&self) -> String {
        let bytes = self.screen.lock().unwrap().clone();
        let text = String::from_utf8_lossy(&strip_ansi_escapes::strip(bytes)).into_owned();
        text.split_whitespace().collect()
    }

    /// Waits (bounded) until the screen shows `text` (white space aside).
    async fn shows(&self, text: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let text: String = text.split_whitespace().collect();
        while !self.text().contains(&text) {
            assert!(
                std::time::Instant::now() < deadline,
                "the terminal never showed {text:?}:\n{}",
                self.text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits (bounded) until the screen shows `text` after the last `mark` (white space aside).
    async fn shows_after(&self, mark: &str, text: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let shown = self.text();
            if shown.rfind(mark).is_some_and(|at| shown[at..].contains(text)) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "never {text:?} after {mark:?}:\n{shown}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Types `bytes` until the screen shows `text` after the last `mark`, a second apart (a
    /// program may not take keys at once), for a minute at most.
    async fn press_until(&mut self, bytes: &[u8], mark: &str, text: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            self.keys(bytes).await;
            let pressed = std::time::Instant::now();
            while pressed.elapsed() < Duration::from_secs(1) {
                let shown = self.text();
                if shown.rfind(mark).is_some_and(|at| shown[at..].contains(text)) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(std::time::Instant::now() < deadline, "never {text:?} after {mark:?}");
        }
    }

    /// Types `bytes` as the person would.
    async fn keys(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).await.unwrap();
        self.writer.flush().await.unwrap();
    }

    /// The terminal's local modes now (as the program in it set them).
    fn local_modes(&self) -> rustix::termios::LocalModes {
        rustix::termios::tcgetattr(&self.master).unwrap().local_modes
    }

    async fn exit_code(&mut self) -> Option<i32> {
        tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .expect("switchboard claude ends")
            .unwrap()
            .code()
    }
}

/// The one terminal session of the daemon at `url`, once it shows.
async fn terminal_session(url: &str, token: &str) -> Value {
    session_with_transport(url, token, "terminal").await
}

/// Posts a one-tap link's form, as its page's buttons do: the status and the page.
async fn form(link: &str, body: &str) -> (u16, String) {
    let response = crate::http_client()
        .post(link)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// The decision on the call whose command is `command`, once the session's log has it.
async fn decision_on(url: &str, token: &str, id: &str, command: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let events = session_events(url, token, id).await;
        let events = events.as_array().cloned().unwrap_or_default();
        let call = events.iter().find_map(|event| {
            let line = &event["event"]["line"];
            let blocks = line["message"]["content"].as_array()?;
            blocks
                .iter()
                .find(|block| block["type"] == "tool_use" && block["input"]["command"] == command)
                .map(|block| block["id"].clone())
        });
        let decision = call.and_then(|call| {
            events
                .iter()
                .map(|event| &event["event"])
                .find(|event| {
                    event["event"] == "permission_decided" && event["tool_use_id"] == call
                })
                .cloned()
        });
        if let Some(decision) = decision {
            return decision;
        }
        assert!(std::time::Instant::now() < deadline, "no decision on {command:?}: {events:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (bounded) until the session's view holds an update that `predicate` accepts.
async fn view_has(url: &str, token: &str, id: &str, predicate: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let view =
            http(url, token, reqwest::Method::GET, &format!("/api/sessions/{id}/view"), None).await;
        if let Some(update) =
            view["updates"].as_array().into_iter().flatten().find(|u| predicate(u))
        {
            return update.clone();
        }
        assert!(std::time::Instant::now() < deadline, "the view never had it: {view}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A stand-in for the interactive CLI that shows what it gets: its terminal's size after each
/// line it reads (in the cooked mode a new terminal starts in), the token's variable, then an
/// exit status of its own.
fn stand_in(sandbox: &CliSandbox) -> std::path::PathBuf {
    let program = sandbox.file("fake-interactive");
    std::fs::write(
        &program,
        "#!/bin/sh\nstty size\nwhile read line; do\n  echo \"got:$line\"; stty size\n  [ \"$line\" = env ] && echo \"token:${SWITCHBOARD_TOKEN:-none}\"\n  [ \"$line\" = quit ] && exit 7\ndone\n",
    )
    .unwrap();
    std::fs::set_permissions(&program, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .unwrap();
    program
}

/// POSTs `body` to the daemon's `path`: the status and the answer.
async fn post(url: &str, token: &str, path: &str, body: Value) -> (u16, Value) {
    let response = crate::http_client()
        .post(format!("{url}{path}"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

/// Sends a message to session `id` as the API would.
async fn say(url: &str, token: &str, id: &str, text: &str) -> (u16, Value) {
    post(url, token, &format!("/api/sessions/{id}/messages"), json!({ "content": text })).await
}

/// A daemon with its token, and the stand-in CLI ([`stand_in`]) in a sandbox.
struct StandIn {
    api: FakeApi,
    sandbox: CliSandbox,
    _data: tempfile::TempDir,
    daemon: crate::serve::Daemon,
    token: String,
    program: std::path::PathBuf,
}

impl StandIn {
    async fn start() -> StandIn {
        let api = FakeApi::start(Scenario::new()).await.unwrap();
        let sandbox = CliSandbox::new().unwrap();
        let data = tempfile::tempdir().unwrap();
        let daemon = start_daemon(data.path(), &api, &sandbox, &[]).await;
        let token = token(data.path());
        let program = stand_in(&sandbox);
        StandIn { api, sandbox, _data: data, daemon, token, program }
    }
}

fn token(data_dir: &Path) -> String {
    std::fs::read_to_string(data_dir.join("token")).unwrap().trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_interactive_cli_runs_in_a_pty_and_the_api_can_type_into_it_and_interrupt_it() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::text("typed answer").when_prompt("TYPED"))
            .reply(Reply::text("api answer").when_prompt("FROM THE API"))
            .reply(Reply::text("held-back reply goes on").when_prompt("SLOW").hold_after(1))
            .reply(Reply::text("queued answer").when_prompt("QUEUED"))
            .reply(Reply::text("a fresh start").when_prompt("AFTER CLEAR")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    sandbox.prepare_interactive().unwrap();
    let data = tempfile::tempdir().unwrap();
    let daemon = start_daemon(data.path(), &api, &sandbox, &[]).await;
    let token = token(data.path());
    let env: Vec<(String, String)> = sandbox.env(&api.base_url()).into_iter().collect();
    let claude = real_cli(CliVersion::V2_1_330);
    let mut terminal = Terminal::start(&daemon.url, &token, &sandbox.workdir(), env, &claude);

    // The session shows as soon as the CLI runs, and the terminal is in raw mode.
    let session = terminal_session(&daemon.url, &token).await;
    let id = session["id"].as_str().unwrap().to_owned();
    let claude_session = session["claude_session_id"].as_str().unwrap().to_owned();
    terminal.shows("Claude Code v2.1.330").await;
    let modes = terminal.local_modes();
    assert!(!modes.contains(rustix::termios::LocalModes::ICANON), "raw mode: {modes:?}");
    assert!(!modes.contains(rustix::termios::LocalModes::ECHO), "raw mode: {modes:?}");

    // The person types a prompt: the session's history is the transcript, followed live.
    terminal.keys(b"TYPED hello").await;
    terminal.shows("TYPED hello").await;
    terminal.keys(b"\r").await;
    view_has(&daemon.url, &token, &id, |u| u["update"] == "prompt" && u["text"] == "TYPED hello")
        .await;
    view_has(&daemon.url, &token, &id, |u| {
        u["update"] == "block" && u["block"]["text"] == "typed answer"
    })
    .await;
    view_has(&daemon.url, &token, &id, |u| u["update"] == "turn_ended").await;

    // The API sends a message: typed into the CLI (a new line of it as a new line), answered,
    // shown in the terminal, and written to the same transcript.
    let sent = say(&daemon.url, &token, &id, "FROM THE API\nsecond line").await.1;
    assert_eq!(sent["queued"], true, "{sent}");
    view_has(&daemon.url, &token, &id, |u| {
        u["update"] == "prompt" && u["text"] == "FROM THE API\nsecond line"
    })
    .await;
    view_has(&daemon.url, &token, &id, |u| {
        u["update"] == "block" && u["block"]["text"] == "api answer"
    })
    .await;
    terminal.shows("api answer").await;
    let prompts = api.conversation_requests();
    assert!(
        prompts.iter().any(|request| request.last_user_text() == "FROM THE API\nsecond line"),
        "the model got the message as one prompt"
    );
    let transcript = sandbox
        .home()
        .join(".claude/projects")
        .read_dir()
        .unwrap()
        .flatten()
        .map(|project| project.path().join(format!("{claude_session}.jsonl")))
        .find(|path| path.exists())
        .expect("the CLI wrote the transcript the session follows");
    assert!(std::fs::read_to_string(transcript).unwrap().contains("FROM THE API"));

    // What a terminal cannot type is refused at once, by name.
    let refused = say(&daemon.url, &token, &id, "escape \u{1b}[A").await;
    assert_eq!(refused.0, 400);
    assert!(refused.1.to_string().contains("U+001B"), "{}", refused.1);
    let command = say(&daemon.url, &token, &id, "/clear").await;
    assert_eq!(command.0, 400, "a slash command is not a prompt");
    let mode =
        post(&daemon.url, &token, &format!("/api/sessions/{id}/model"), json!({"model": "opus"}))
            .await;
    assert!(mode.1.to_string().contains("terminal"), "{}", mode.1);

    // An interrupt from the API presses Esc: the turn ends, interrupted.
    assert_eq!(say(&daemon.url, &token, &id, "SLOW please").await.0, 202);
    // The CLI took it (its transcript says so) and waits on the model's held stream (the
    // interactive CLI shows no text of a block until the block is done).
    view_has(&daemon.url, &token, &id, |u| u["update"] == "prompt" && u["text"] == "SLOW please")
        .await;
    api.wait_for(|request| request.last_user_text().contains("SLOW")).await;
    // Sent while the CLI works: typed once it is idle again (keys typed now could land in a
    // dialog of the CLI's), here after the interrupt.
    assert_eq!(say(&daemon.url, &token, &id, "QUEUED while busy").await.0, 202);
    http(
        &daemon.url,
        &token,
        reqwest::Method::POST,
        &format!("/api/sessions/{id}/interrupt"),
        None,
    )
    .await;
    let interrupted = view_has(&daemon.url, &token, &id, |u| {
        u["update"] == "turn_ended" && u["interrupted"] == true
    })
    .await;
    api.release();
    let queued = view_has(&daemon.url, &token, &id, |u| {
        u["update"] == "prompt" && u["text"] == "QUEUED while busy"
    })
    .await;
    assert!(queued["seq"].as_u64() > interrupted["seq"].as_u64(), "{queued} after {interrupted}");
    view_has(&daemon.url, &token, &id, |u| {
        u["update"] == "block" && u["block"]["text"] == "queued answer"
    })
    .await;
    view_has(&daemon.url, &token, &id, |u| {
        u["update"] == "turn_ended" && u["seq"].as_u64() > queued["seq"].as_u64()
    })
    .await;

    // The person starts over (`/clear`): the CLI moves to another Claude session, and the
    // session follows it there.
    terminal.keys(b"/clear").await;
    terminal.shows("/clear").await;
    terminal.keys(b"\r").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let now =
            http(&daemon.url, &token, reqwest::Method::GET, &format!("/api/sessions/{id}"), None)
                .await;
        let moved = now["claude_session_id"].as_str().is_some_and(|new| new != claude_session);
        if moved {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never followed the new session: {now}\n{}",
            terminal.text()
        );
        // (The new transcript is written once the new conversation has a line.)
        if terminal.text().contains("AFTERCLEAR") {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        terminal.keys(b"AFTER CLEAR").await;
        terminal.shows("AFTER CLEAR").await;
        terminal.keys(b"\r").await;
    }
    view_has(&daemon.url, &token, &id, |u| {
        u["update"] == "block" && u["block"]["text"] == "a fresh start"
    })
    .await;

    // The person quits (Ctrl-C twice): the CLI's exit status is switchboard's, the terminal is
    // as it was, and the session has ended.
    terminal.keys(b"\x03").await;
    terminal.shows("again to exit").await;
    terminal.keys(b"\x03").await;
    assert_eq!(terminal.exit_code().await, Some(0));
    let modes = terminal.local_modes();
    assert!(modes.contains(rustix::termios::LocalModes::ICANON), "restored: {modes:?}");
    // The terminal's end reaches the daemon as its socket closes: the session ends soon after
    // the process exits, not at the same instant.
    let ended =
        crate::serve::wait_session(&daemon.url, &token, &id, |s| s["running"] == false).await;
    assert_eq!(ended["state"], "exited", "{ended}");
    assert_eq!(ended["title"], "TYPED hello");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resizes_and_the_exit_status_pass_through_and_the_clis_tools_never_see_the_token() {
    let StandIn { api, sandbox, _data, daemon, token, program } = StandIn::start().await;
    let mut env: Vec<(String, String)> = sandbox.env(&api.base_url()).into_iter().collect();
    env.push(("SWITCHBOARD_TOKEN".into(), token.clone()));
    let mut terminal = Terminal::start(&daemon.url, &token, &sandbox.workdir(), env, &program);
    terminal.shows("30 100").await;
    let session = terminal_session(&daemon.url, &token).await;
    let id = session["id"].as_str().unwrap().to_owned();
    // A CLI that never says it is ready (this one announces nothing, and no turn of its ever
    // ends) is never typed into: a message waits, and is reported undelivered at its exit.
    let sent = say(&daemon.url, &token, &id, "never typed").await.1;
    assert_eq!(sent["queued"], true, "{sent}");

    terminal.keys(b"env\r").await;
    terminal.shows("token:none").await;

    // The person's terminal grows: the program's does too (the next line it reads says so).
    let (pty_rows, pty_cols) = (40, 120);
    rustix::termios::tcsetwinsize(
        &terminal.master,
        rustix::termios::Winsize { ws_row: pty_rows, ws_col: pty_cols, ws_xpixel: 0, ws_ypixel: 0 },
    )
    .unwrap();
    // (The resize and the next keys take separate ways through switchboard: a line may come
    // first, and the next one then tells.)
    for tries in 1.. {
        assert!(tries < 200, "the size never passed through:\n{}", terminal.text());
        let line = format!("size{tries}");
        terminal.keys(format!("{line}\r").as_bytes()).await;
        terminal.shows(&format!("got:{line}")).await;
        let after = format!("got:{line}");
        let text = terminal.text();
        let rest = &text[text.find(&after).unwrap() + after.len()..];
        if rest.starts_with("40120") {
            break;
        }
    }

    terminal.keys(b"quit\r").await;
    assert_eq!(terminal.exit_code().await, Some(7));
    assert!(!terminal.text().contains("nevertyped"), "typed into a CLI not known ready");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let events = session_events(&daemon.url, &token, &id).await;
        let undelivered = events
            .as_array()
            .into_iter()
            .flatten()
            .any(|event| event["event"]["event"] == "undelivered");
        if undelivered {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no undelivered: {events}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_z_hands_the_terminal_back_to_the_shell_and_fg_brings_the_cli_back() {
    let StandIn { api, sandbox, _data, daemon, token, program } = StandIn::start().await;
    // A shell with job control, as a person has.
    let mut env: Vec<(String, String)> = sandbox.env(&api.base_url()).into_iter().collect();
    env.push(("PS1".into(), "shell$ ".into()));
    let bash = Path::new("/bin/bash");
    let args = ["--norc", "--noprofile", "-i"];
    let mut terminal = Terminal::spawn(bash, &args, &sandbox.workdir(), env, &program);
    terminal.shows("shell$").await;
    let command = format!(
        "{} claude --url {} --token {token}\r",
        env!("CARGO_BIN_EXE_switchboard"),
        daemon.url
    );
    terminal.keys(command.as_bytes()).await;
    terminal.shows("30 100").await;
    terminal.keys(b"\x1a").await;
    terminal.shows("Stopped").await;
    terminal.keys(b"fg\r").await;
    terminal.keys(b"after\r").await;
    terminal.shows("got:after").await;
    terminal.keys(b"quit\r").await;
    // Back at the shell's prompt (keys typed before would go to the command still running).
    terminal.shows_after("got:quit", "shell$").await;
    terminal.keys(b"echo status:$?\r").await;
    terminal.shows("status:7").await;
    terminal.keys(b"exit\r").await;
    terminal.exit_code().await;
}

/// A person's terminal under the session's policy, with the real 2.1.330 (its settings from an
/// inherited descriptor) and 2.1.250 (from a private file): the CLI's tool calls
/// reach the daemon through its `PreToolUse` hook. A call an ask rule names waits for a person
/// (here, the API approves it) and then runs; one a deny rule names never runs, and the model
/// is told why. The hook's address refuses a missing or forged key before it reads a byte. With
/// the daemon gone, a call is blocked, not run unasked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminals_tool_calls_go_through_the_policy_and_wait_for_a_person_afar() {
    for version in ["2.1.330", "2.1.250"] {
        policy_in_a_terminal(version).await;
    }
}

async fn policy_in_a_terminal(version: &str) {
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch approved.txt", "description": "Make a file"}),
                )
                .when_prompt("ASK"),
            )
            // (Each reply answers once, the first that fits.)
            .reply(Reply::text("Made it.").when_tool_result())
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch kept.txt", "description": "Make a file"}),
                )
                .when_prompt("KEEP"),
            )
            // The next prompt after a refusal comes with the refusal's result.
            .reply(
                Reply::text("Kept nothing.").when_tool_result_contains("doesn't want to proceed"),
            )
            .reply(
                Reply::tool_use("Bash", json!({"command": "rm -rf gone", "description": "Remove"}))
                    .when_prompt("REMOVE"),
            )
            .reply(Reply::text("Left it.").when_tool_result_contains("denied by policy rule"))
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch offline.txt", "description": "Make a file"}),
                )
                .when_prompt("OFFLINE"),
            )
            .reply(Reply::text("Could not.").when_tool_result())
            .fallback("Nothing to say."),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    sandbox.prepare_interactive().unwrap();
    std::fs::create_dir(sandbox.file("gone")).unwrap();
    let policy = sandbox.file("policy.toml");
    std::fs::write(
        &policy,
        "[permissions]\ndefault = \"ask\"\nask = [\"Bash(touch:*)\"]\ndeny = [\"Bash(rm:*)\"]\n",
    )
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    let policy_arg = policy.display().to_string();
    // Notices of requests go to a webhook on loopback, with their one-tap links.
    let webhook = crate::serve::Webhook::default();
    let notify = sandbox.file("notify.toml");
    std::fs::write(
        &notify,
        format!(
            "[[channel]]\nname = \"phone\"\nkind = \"webhook\"\nurl = \"{}\"\nsecret = \"a-webhook-secret-0123456789\"\nallow_private = true\nevents = [\"permission_requested\"]\n",
            webhook.start().await
        ),
    )
    .unwrap();
    let notify = notify.display().to_string();
    let daemon =
        start_daemon(data.path(), &api, &sandbox, &["--policy", &policy_arg, "--notify", &notify])
            .await;
    let token = token(data.path());
    let env: Vec<(String, String)> = sandbox.env(&api.base_url()).into_iter().collect();
    let claude = switchboard_testkit::sandbox::real_cli_of(version);
    let mut terminal = Terminal::start(&daemon.url, &token, &sandbox.workdir(), env, &claude);
    let session = terminal_session(&daemon.url, &token).await;
    let id = session["id"].as_str().unwrap().to_owned();
    terminal.shows(&format!("Claude Code v{version}")).await;

    // Asked about: the CLI shows its own dialog, and the request waits in Switchboard too.
    // Approved through the notice's one-tap link, it runs, and the dialog is gone.
    terminal.keys(b"ASK for a file").await;
    terminal.shows("ASK for a file").await;
    terminal.keys(b"\r").await;
    terminal.shows("Do you want to proceed?").await;
    let waiting = crate::serve::wait_session(&daemon.url, &token, &id, |s| {
        !s["pending_permissions"].as_array().unwrap().is_empty()
    })
    .await;
    let asked = &waiting["pending_permissions"][0];
    assert_eq!(asked["tool_name"], "Bash", "{asked}");
    assert_eq!(asked["input"]["command"], "touch approved.txt");
    assert!(!sandbox.file("approved.txt").exists(), "nothing ran before the answer");
    let link = webhook.link(1).await;
    let (status, page) = form(&link, "decision=allow").await;
    assert_eq!(status, 200, "{page}");
    view_has(&daemon.url, &token, &id, |u| {
        u["update"] == "block" && u["block"]["text"] == "Made it."
    })
    .await;
    assert!(sandbox.file("approved.txt").exists(), "the approved call ran");
    let decided = decision_on(&daemon.url, &token, &id, "touch approved.txt").await;
    assert_eq!(decided["behavior"], "allow", "{decided}");
    assert_eq!(decided["by"]["kind"], "person", "{decided}");
    assert!(decided["by"]["who"].as_str().unwrap().starts_with("link"), "{decided}");

    // Asked again, and refused in the terminal (Esc, in its dialog) while the notice is out:
    // it never runs, the log says the terminal denied it, and the link says so.
    terminal.keys(b"KEEP a file").await;
    terminal.shows("KEEP a file").await;
    terminal.keys(b"\r").await;
    terminal.shows_after("KEEPafile", "Doyouwanttoproceed?").await;
    let link = webhook.link(2).await;
    // (A dialog that has just shown may not take keys yet: Esc again until it has.)
    terminal.press_until(b"\x1b", "KEEPafile", "Interrupted").await;
    let decided = decision_on(&daemon.url, &token, &id, "touch kept.txt").await;
    assert_eq!(decided["behavior"], "deny", "{decided}");
    assert_eq!(decided["by"]["kind"], "terminal", "{decided}");
    assert!(!sandbox.file("kept.txt").exists(), "the refused call never ran");
    let response = crate::http_client().get(&link).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 410);
    let page = response.text().await.unwrap();
    assert!(page.contains("Answered in the terminal"), "{page}");
    let (status, page) = form(&link, "decision=allow").await;
    assert_eq!(status, 410, "too late to approve: {page}");
    assert!(!sandbox.file("kept.txt").exists());
    let session = crate::serve::wait_session(&daemon.url, &token, &id, |s| {
        s["pending_permissions"].as_array().unwrap().is_empty()
    })
    .await;
    assert_eq!(session["pending_permissions"], json!([]));
    terminal.keys(b"THANKS").await;
    terminal.shows_after("KEEPafile", "THANKS").await;
    terminal.keys(b"\r").await;
    view_has(&daemon.url, &token, &id, |u| {
        u["update"] == "block" && u["block"]["text"] == "Kept nothing."
    })
    .await;

    // Denied by the policy: it never runs, and the model reads why.
    terminal.keys(b"REMOVE the folder").await;
    terminal.shows("REMOVE the folder").await;
    terminal.keys(b"\r").await;
    view_has(&daemon.url, &token, &id, |u| {
        u["update"] == "block" && u["block"]["text"] == "Left it."
    })
    .await;
    assert!(sandbox.file("gone").exists(), "the denied call never ran");
    let tool_results = api
        .conversation_requests()
        .iter()
        .map(|request| request.body.to_string())
        .filter(|body| body.contains("denied by policy rule Bash(rm:*)"))
        .count();
    assert!(tool_results > 0, "the model was told the policy's reason");

    // The hooks' addresses: no key, or another, is refused.
    for (path, event) in
        [("pre-tool-use", "PreToolUse"), ("permission-request", "PermissionRequest")]
    {
        for key in [None, Some("forged")] {
            let mut request = crate::http_client()
                .post(format!("{}/hooks/{path}", daemon.url))
                .json(&json!({"hook_event_name": event, "tool_name": "Bash", "tool_input": {}}));
            if let Some(key) = key {
                request = request.bearer_auth(key);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status().as_u16(), 401, "{path} {key:?}");
        }
    }

    // The daemon gone: the hook cannot reach it, and the call is blocked (2.1.250 does not
    // block: it asks in its terminal, as docs/api.md says).
    if version != "2.1.330" {
        terminal.keys(b"\x03\x03").await;
        terminal.exit_code().await;
        return;
    }
    let mut daemon = daemon;
    daemon.child.kill().await.unwrap();
    terminal.keys(b"OFFLINE make it").await;
    terminal.shows("OFFLINE make it").await;
    terminal.keys(b"\r").await;
    terminal.shows("Could not.").await;
    assert!(!sandbox.file("offline.txt").exists(), "nothing ran unasked");
    terminal.keys(b"\x03\x03").await;
    terminal.exit_code().await;
}
