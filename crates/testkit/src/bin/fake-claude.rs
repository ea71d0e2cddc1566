//! `fake-claude`: a stand-in for the Claude Code CLI that speaks the stdio protocol from a
//! script, for the failure paths the real CLI cannot be made to produce on demand (a crash
//! mid-turn, garbage on stdout, a hang, a huge line) and for load tests.
//!
//! It accepts (and ignores) every `claude` flag. The script is a JSON array of steps in the file
//! named by `FAKE_CLAUDE_SCRIPT`:
//!
//! - `{"expect": "user"}`: wait for an input line of that `type` (`control_request` waits for
//!   one; add `"subtype"` to be specific). End of input ends the script with exit 0.
//! - `{"reply": {...}}`: answer the last control request: a success with this payload.
//! - `{"emit": {...}}`: write a line; `"$SESSION"` and `"$REQUEST_ID"` are replaced.
//! - `{"emit_raw": "text"}`: write bytes as they are (no newline added).
//! - `{"emit_big": N}`: write an assistant line whose text is N bytes.
//! - `{"turn": "text"}`: a whole turn: system/init, assistant text, result.
//! - `{"stderr": "text"}`: write to stderr.
//! - `{"stream_lines": {"rate": R, "count": N}}`: a `message_start` and a text block's start,
//!   then N `stream_event` text deltas at R lines per second, each text `t=<unix nanoseconds when written>` (for latency measurements); with
//!   `"ask_every": K`, a `can_use_tool` request after every K lines whose `request_id` is
//!   `t=<unix nanoseconds>` too.
//! - `{"wait_eof": true}`: wait until stdin closes, then exit 0.
//! - `{"sleep_ms": N}`, `{"exit": CODE}`, `{"crash": true}` (abort),
//!   `{"hang_ignoring_term": true}` (become a shell that ignores SIGTERM and never exits).
//!
//! With no script: answer `initialize`, then answer every user message with a one-line turn,
//! until stdin closes.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{BufRead, Write};
use std::os::unix::process::CommandExt;
use std::sync::mpsc;

use serde_json::{json, Value};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|arg| arg == "--version") {
        println!("0.0.0-fake (Claude Code)");
        return;
    }
    let script: Vec<Value> = match std::env::var("FAKE_CLAUDE_SCRIPT") {
        Ok(path) => {
            let text = std::fs::read_to_string(&path).unwrap_or_else(|error| {
                eprintln!("fake-claude: cannot read script {path}: {error}");
                std::process::exit(2)
            });
            serde_json::from_str(&text).unwrap_or_else(|error| {
                eprintln!("fake-claude: bad script {path}: {error}");
                std::process::exit(2)
            })
        }
        Err(_) => Vec::new(),
    };

    let (tx, rx) = mpsc::channel::<Value>();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Value>(&line) {
                Ok(value) => {
                    if tx.send(value).is_err() {
                        break;
                    }
                }
                Err(error) => {
                    eprintln!("Error parsing streaming input line: {line}: {error}");
                    std::process::exit(1);
                }
            }
        }
    });

    let mut fake = Fake {
        session: format!("fake-{}", std::process::id()),
        last_request_id: String::new(),
        turns: 0,
    };
    if script.is_empty() {
        fake.echo_loop(&rx);
        return;
    }
    for step in &script {
        fake.run(step, &rx);
    }
}

struct Fake {
    session: String,
    last_request_id: String,
    turns: u64,
}

impl Fake {
    fn write(&self, value: &Value) {
        let text = value
            .to_string()
            .replace("$SESSION", &self.session)
            .replace("$REQUEST_ID", &self.last_request_id);
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.write_all(b"\n");
        let _ = out.flush();
    }

    fn wait(&mut self, rx: &mpsc::Receiver<Value>, kind: &str, subtype: Option<&str>) -> Value {
        loop {
            let Ok(message) = rx.recv() else { std::process::exit(0) };
            if message["type"] == "control_request" {
                self.last_request_id = message["request_id"].as_str().unwrap_or("").to_owned();
            }
            let matches_subtype =
                subtype.is_none_or(|subtype| message["request"]["subtype"] == subtype);
            if message["type"] == kind && matches_subtype {
                return message;
            }
        }
    }

    fn reply(&self, payload: &Value) {
        self.write(&json!({"type": "control_response", "response": {
            "subtype": "success", "request_id": self.last_request_id, "response": payload}}));
    }

    fn turn(&mut self, text: &str) {
        self.turns += 1;
        self.write(&json!({"type": "system", "subtype": "init", "cwd": std::env::current_dir().unwrap_or_default(),
            "session_id": self.session, "tools": ["Bash"], "mcp_servers": [], "model": "fake-model",
            "permissionMode": "default", "slash_commands": [], "apiKeySource": "none",
            "claude_code_version": "0.0.0-fake", "output_style": "default", "uuid": uuid::Uuid::new_v4().to_string()}));
        self.write(&json!({"type": "assistant", "message": {"id": format!("msg_{}", self.turns), "type": "message",
            "role": "assistant", "model": "fake-model", "content": [{"type": "text", "text": text}],
            "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 1, "output_tokens": 1}},
            "parent_tool_use_id": null, "session_id": self.session, "uuid": uuid::Uuid::new_v4().to_string()}));
        self.write(&json!({"type": "result", "subtype": "success", "is_error": false, "duration_ms": 1,
            "duration_api_ms": 1, "num_turns": 1, "result": text, "stop_reason": "end_turn",
            "session_id": self.session, "total_cost_usd": 0.001 * self.turns as f64,
            "usage": {"input_tokens": 1, "output_tokens": 1}, "modelUsage": {}, "permission_denials": [],
            "uuid": uuid::Uuid::new_v4().to_string()}));
    }

    fn echo_loop(&mut self, rx: &mpsc::Receiver<Value>) {
        while let Ok(message) = rx.recv() {
            match message["type"].as_str() {
                Some("control_request") => {
                    self.last_request_id = message["request_id"].as_str().unwrap_or("").to_owned();
                    match message["request"]["subtype"].as_str() {
                        Some("initialize") => self.reply(&json!({"commands": [], "models": []})),
                        Some(
                            "interrupt"
                            | "set_model"
                            | "set_permission_mode"
                            | "set_max_thinking_tokens",
                        ) => self.reply(&json!({})),
                        Some(other) => {
                            self.write(&json!({"type": "control_response", "response": {
                            "subtype": "error", "request_id": self.last_request_id,
                            "error": format!("Unsupported control request subtype: {other}")}}))
                        }
                        None => {}
                    }
                }
                Some("user") => {
                    let text =
                        message["message"]["content"].as_str().unwrap_or("blocks").to_owned();
                    self.turn(&format!("echo: {text}"));
                }
                _ => {}
            }
        }
    }

    #[allow(clippy::disallowed_methods)] // the fake becomes a shell; it never starts `claude`
    fn run(&mut self, step: &Value, rx: &mpsc::Receiver<Value>) {
        if let Some(kind) = step.get("expect").and_then(Value::as_str) {
            self.wait(rx, kind, step.get("subtype").and_then(Value::as_str));
        } else if let Some(payload) = step.get("reply") {
            self.reply(payload);
        } else if let Some(value) = step.get("emit") {
            self.write(value);
        } else if let Some(raw) = step.get("emit_raw").and_then(Value::as_str) {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(raw.as_bytes());
            let _ = out.flush();
        } else if let Some(size) = step.get("emit_big").and_then(Value::as_u64) {
            let text = "x".repeat(size as usize);
            self.write(&json!({"type": "assistant", "message": {"id": "msg_big", "type": "message", "role": "assistant",
                "model": "fake-model", "content": [{"type": "text", "text": text}], "stop_reason": null},
                "parent_tool_use_id": null, "session_id": self.session}));
        } else if let Some(stream) = step.get("stream_lines") {
            let rate = stream.get("rate").and_then(Value::as_f64).unwrap_or(50.0).max(0.001);
            let count = stream.get("count").and_then(Value::as_u64).unwrap_or(100);
            // Every this many lines, a permission request (`can_use_tool`) whose id is the
            // time it was sent: what a daemon decides about it can be timed too.
            let ask_every = stream.get("ask_every").and_then(Value::as_u64).unwrap_or(0);
            let interval = std::time::Duration::from_secs_f64(1.0 / rate);
            // The message and its text block open first, as the API streams them: the deltas
            // belong to a message a projection knows.
            for event in [
                json!({"type": "message_start", "message": {"id": "msg_stream", "type": "message",
                    "role": "assistant", "model": "fake-model", "content": [], "stop_reason": null,
                    "usage": {"input_tokens": 1, "output_tokens": 1}}}),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ] {
                self.write(
                    &json!({"type": "stream_event", "event": event, "session_id": self.session,
                    "parent_tool_use_id": null, "uuid": uuid::Uuid::new_v4().to_string()}),
                );
            }
            let start = std::time::Instant::now();
            for index in 0..count {
                // Pace against the start, so a slow write does not slow the whole stream.
                let due = start + interval.mul_f64(index as f64);
                if let Some(wait) = due.checked_duration_since(std::time::Instant::now()) {
                    std::thread::sleep(wait);
                }
                let sent = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|elapsed| elapsed.as_nanos())
                    .unwrap_or(0);
                self.write(&json!({"type": "stream_event", "event": {"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": format!("t={sent}")}},
                    "session_id": self.session, "parent_tool_use_id": null,
                    "uuid": uuid::Uuid::new_v4().to_string()}));
                // Each process asks at its own phase: many fake CLIs started together do not
                // all ask at the same moment.
                if ask_every > 0 && (index + u64::from(std::process::id())) % ask_every == 0 {
                    self.write(&json!({"type": "control_request", "request_id": format!("t={sent}"),
                        "request": {"subtype": "can_use_tool", "tool_name": "Bash",
                            "input": {"command": "true"}, "tool_use_id": format!("toolu_{index}")}}));
                }
            }
        } else if step.get("wait_eof").is_some() {
            while rx.recv().is_ok() {}
            std::process::exit(0);
        } else if let Some(text) = step.get("turn").and_then(Value::as_str) {
            self.turn(text);
        } else if let Some(text) = step.get("stderr").and_then(Value::as_str) {
            eprint!("{text}");
        } else if let Some(ms) = step.get("sleep_ms").and_then(Value::as_u64) {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        } else if let Some(code) = step.get("exit").and_then(Value::as_i64) {
            std::process::exit(code as i32);
        } else if step.get("crash").is_some() {
            std::process::abort();
        } else if step.get("hang_ignoring_term").is_some() {
            let error = std::process::Command::new("sh")
                .args(["-c", "trap '' TERM; while :; do sleep 1; done"])
                .exec();
            eprintln!("fake-claude: cannot exec sh: {error}");
            std::process::exit(2);
        } else {
            eprintln!("fake-claude: unknown step {step}");
            std::process::exit(2);
        }
    }
}
