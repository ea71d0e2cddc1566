//! Fuzzes the notify file's reader: any text must read as a configuration or give an error that
//! names the problem, without panicking and without repeating a secret: a value written after
//! `secret`, `token`, `key` or `password` (one that looks like a secret) never appears in it.
//!
//! Run: `scripts/fuzz.sh 60 notify`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use switchboard_server::notify::NotifyConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Err(error) = NotifyConfig::from_toml(text) else { return };
    assert!(!error.is_empty(), "an error says something");
    for line in text.lines() {
        let Some((name, value)) = line.split_once('=') else { continue };
        let name = name.trim().to_ascii_lowercase();
        if !["secret", "token", "key", "password"].iter().any(|word| name.contains(word)) {
            continue;
        }
        let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
        // A value like a secret: no blanks, and digits that no message of the reader's has.
        let digits = value.chars().filter(char::is_ascii_digit).count();
        if value.len() >= 8 && digits >= 3 && !value.contains(char::is_whitespace) {
            assert!(!error.contains(value), "the error repeats a secret: {error}");
        }
    }
});
