//! Fuzzes the policy: a policy file's text, then a tool call (its name and its input as JSON)
//! and the folder it runs in, each after a NUL byte. Reading the policy and judging the call
//! must never panic, must give the same answer twice, and a bare `Tool` deny rule always wins
//! over whatever else the file says. A Bash command is split into its parts without panicking.
//!
//! Run: `scripts/fuzz.sh 60 policy`.

#![no_main]

use std::path::PathBuf;

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use switchboard_session::policy::{BashCommand, Behavior, MatchContext, Policy};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.split('\0');
    let file = parts.next().unwrap_or_default();
    let tool = parts.next().unwrap_or("Bash");
    let input = parts.next().unwrap_or_default();
    let cwd = parts.next().unwrap_or("/nonexistent/fuzz");
    let _ = BashCommand::parse(input);
    let Ok(mut policy) = Policy::from_toml(file) else { return };
    let input = serde_json::from_str::<Value>(input)
        .unwrap_or_else(|_| serde_json::json!({ "command": input }));
    let context = MatchContext {
        cwd: PathBuf::from("/").join(cwd),
        home: Some(PathBuf::from("/nonexistent/home")),
    };
    let first = policy.decide(tool, &input, &context);
    let second = policy.decide(tool, &input, &context);
    assert_eq!(first.behavior, second.behavior, "the same call judged twice");
    if tool.is_empty() || !tool.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return;
    }
    let denied = format!("[permissions]\ndeny = [\"{tool}\"]\n{}", strip_permissions(file));
    if let Ok(strict) = Policy::from_toml(&denied) {
        let decision = strict.decide(tool, &input, &context);
        assert_eq!(decision.behavior, Behavior::Deny, "a deny rule for {tool} did not win");
    }
    let _ = policy.add_allow(tool);
});

/// The file without a `[permissions]` table of its own (two would not parse).
fn strip_permissions(file: &str) -> String {
    let mut kept = String::new();
    let mut inside = false;
    for line in file.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            inside = trimmed.starts_with("[permissions]") || trimmed.starts_with("[permissions.");
        }
        if !inside {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept
}
