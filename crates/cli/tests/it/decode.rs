//! `switchboard decode` over the capture corpus and over broken input.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Output, Stdio};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../protocol/tests/fixtures")
}

/// Runs the binary with `args`, feeding `stdin`.
#[allow(clippy::disallowed_methods)] // tests run our own binary, not `claude`
fn switchboard(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn last_line(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).lines().last().unwrap_or_default().to_owned()
}

#[test]
fn the_whole_corpus_decodes_with_only_the_deliberate_unknowns() {
    let mut files: Vec<String> = Vec::new();
    for dir in std::fs::read_dir(fixtures()).unwrap() {
        let dir = dir.unwrap().path();
        if dir.is_dir() {
            for file in std::fs::read_dir(dir).unwrap() {
                files.push(file.unwrap().path().display().to_string());
            }
        }
    }
    let mut args = vec!["decode", "--capture", "--roundtrip"];
    args.extend(files.iter().map(String::as_str));
    let output = switchboard(&args, b"");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    // bogus_type and the frobnicate control subtype, sent on purpose by three captures each.
    assert_eq!(
        last_line(&output),
        "4848 lines, 4842 decoded, 6 unknown, 0 malformed, 0 roundtrip-mismatch"
    );
    // --strict fails on those unknowns.
    args.insert(1, "--strict");
    assert_eq!(switchboard(&args, b"").status.code(), Some(1));
}

#[test]
fn stdin_lines_are_reported_one_per_line() {
    let input = concat!(
        "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"hi\"},\"parent_tool_use_id\":null,\"session_id\":\"\"}\n",
        "\n",
        "{\"type\":\"control_request\",\"request_id\":\"r\",\"request\":{\"subtype\":\"can_use_tool\",\"tool_name\":\"Bash\",\"input\":{}}}\r\n",
        "not json\n",
        "{\"type\":\"mystery\"}",
    );
    let output = switchboard(&["decode"], input.as_bytes());
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        stdout,
        "1\tto_cli\tuser\t-\n3\tfrom_cli\tcontrol_request\tcan_use_tool\n4\t-\tmalformed\t-\n5\teither\tmystery\t-\n4 lines, 2 decoded, 1 unknown, 1 malformed, 0 roundtrip-mismatch\n"
    );
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("<stdin>: line 4 (byte"), "{stderr}");
    assert!(stderr.contains("\"not json\""), "{stderr}");
    assert_eq!(switchboard(&["decode", "--strict"], input.as_bytes()).status.code(), Some(1));
}

#[test]
fn a_missing_file_is_a_clear_error_with_status_2() {
    let output = switchboard(&["decode", "/no/such/file.ndjson"], b"");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("cannot open /no/such/file.ndjson"), "{stderr}");
}
