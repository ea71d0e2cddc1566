//! Fuzzes what a trigger's webhook reads from a stranger: a GitHub event's payload read for
//! feedback (never a panic, whatever the bytes and event name), a prompt template read and
//! filled from a payload (never a panic; a filled prompt within its bound), and a signature
//! header checked (none verifies but the body's own).
//!
//! Run: `scripts/fuzz.sh 60 webhook`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use switchboard_server::schedules::template::{Template, MAX_PROMPT_CHARS};
use switchboard_server::schedules::{feedback, signature};

const EVENTS: [&str; 6] = [
    "check_run",
    "workflow_run",
    "pull_request_review",
    "pull_request_review_comment",
    "pull_request",
    "push",
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    // The input: template, a NUL, then the payload.
    let (template, payload) = match rest.iter().position(|byte| *byte == 0) {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (&rest[..0], rest),
    };
    let event = EVENTS[usize::from(pick) % EVENTS.len()];
    if let Ok(Some(found)) = feedback::read(event, payload) {
        assert!(!found.branch.trim().is_empty(), "feedback for no branch");
        assert!(
            found.text.chars().count() <= feedback::MAX_FEEDBACK_CHARS,
            "feedback past its bound"
        );
    }
    if let Ok(template) = Template::parse(&String::from_utf8_lossy(template)) {
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(payload) {
            if let Ok(prompt) = template.fill(&value) {
                assert!(prompt.chars().count() <= MAX_PROMPT_CHARS, "a prompt past its bound");
            }
        }
    }
    let secret = "fuzzing-secret-0123456789";
    let header = String::from_utf8_lossy(template);
    if signature::check(secret, payload, Some(&header)).is_ok() {
        assert_eq!(
            header.trim(),
            signature::sign(secret, payload),
            "a header verified that is not the body's signature"
        );
    }
    assert!(signature::check(secret, payload, Some(&signature::sign(secret, payload))).is_ok());
});
