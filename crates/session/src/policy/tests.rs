//! Table-driven tests of rule matching and decisions.

use serde_json::json;

use super::*;

fn policy(text: &str) -> Policy {
    Policy::from_toml(text).unwrap()
}

fn context() -> MatchContext {
    MatchContext { cwd: PathBuf::from("/work/project"), home: Some(PathBuf::from("/home/me")) }
}

fn bash(policy: &Policy, command: &str) -> Behavior {
    policy.decide("Bash", &json!({"command": command}), &context()).behavior
}

const EXAMPLE: &str = r#"
[permissions]
allow = ["Read", "Grep", "Bash(git status:*)", "Bash(ls:*)", "Edit(src/**)", "WebFetch(domain:docs.rs)"]
deny  = ["Bash(rm:*)", "WebFetch(domain:evil.example)", "Read(~/.ssh/**)"]
ask   = ["Bash(git push:*)"]
default = "ask"
ask_timeout_secs = 30
on_timeout = "deny"
"#;

#[test]
fn bash_commands_table() {
    let policy = policy(EXAMPLE);
    let table = [
        ("git status", Behavior::Allow),
        ("git status --short", Behavior::Allow),
        ("git statusx", Behavior::Ask),
        ("git status && ls -la", Behavior::Allow),
        ("git status && rm -rf x", Behavior::Deny),
        ("rm -rf /", Behavior::Deny),
        ("FOO=1 rm -rf x", Behavior::Deny),
        ("ls; rm x", Behavior::Deny),
        ("ls | rm x", Behavior::Deny),
        ("ls || rm x", Behavior::Deny),
        ("ls & rm x", Behavior::Deny),
        ("ls\nrm x", Behavior::Deny),
        ("echo 'a && rm x'", Behavior::Ask), // quoted: one command, `echo`, not allowed
        ("ls 'a; rm x'", Behavior::Allow),   // quoted separator: one `ls` command
        ("git push origin main", Behavior::Ask),
        ("git status && git push", Behavior::Ask),
        ("ls $(rm x)", Behavior::Deny), // substitutions are checked against deny rules
        ("ls `rm x`", Behavior::Deny),
        ("ls $(echo $(rm x))", Behavior::Deny),
        ("ls $(date)", Behavior::Ask), // and never allowed by a prefix rule
        ("ls `whoami`", Behavior::Ask),
        ("ls 2>&1", Behavior::Allow),
        ("ls &> out.txt", Behavior::Allow),
        ("touch x && ls", Behavior::Ask),
    ];
    for (command, expected) in table {
        assert_eq!(bash(&policy, command), expected, "{command:?}");
    }
}

#[test]
fn splitting_table() {
    let table: [(&str, &[&str], bool); 6] = [
        ("a && b", &["a", "b"], false),
        ("a;b;;c", &["a", "b", "c"], false),
        ("X=1 Y=2 make test", &["make test"], false),
        ("echo \"x | y\" | wc -l", &["echo \"x | y\"", "wc -l"], false),
        ("echo $(date)", &["echo $(date)"], true),
        ("diff <(ls a) <(ls b)", &["diff <(ls a) <(ls b)"], true),
    ];
    for (command, parts, whole) in table {
        let parsed = BashCommand::parse(command);
        assert_eq!(parsed.parts, parts, "{command:?}");
        assert_eq!(parsed.needs_whole_match, whole, "{command:?}");
    }
}

#[test]
fn file_rules_table() {
    let policy = policy(EXAMPLE);
    let edit = |path: &str| policy.decide("Edit", &json!({"file_path": path}), &context()).behavior;
    let write = |path: &str| {
        policy.decide("Write", &json!({"file_path": path, "content": ""}), &context()).behavior
    };
    let read = |path: &str| policy.decide("Read", &json!({"file_path": path}), &context()).behavior;
    assert_eq!(edit("/work/project/src/main.rs"), Behavior::Allow);
    assert_eq!(edit("src/deep/er/lib.rs"), Behavior::Allow, "relative to cwd");
    assert_eq!(
        edit("/work/project/src/../secrets.txt"),
        Behavior::Ask,
        "`..` does not escape the rule"
    );
    assert_eq!(edit("/work/project/README.md"), Behavior::Ask);
    assert_eq!(write("/work/project/src/new.rs"), Behavior::Allow, "Edit rules cover Write");
    assert_eq!(read("/work/project/anything"), Behavior::Allow);
    assert_eq!(read("/home/me/.ssh/id_ed25519"), Behavior::Deny, "deny beats allow");
}

#[test]
fn other_tools_table() {
    let policy = policy(EXAMPLE);
    let decide =
        |tool: &str, input: serde_json::Value| policy.decide(tool, &input, &context()).behavior;
    assert_eq!(decide("Grep", json!({"pattern": "x"})), Behavior::Allow);
    assert_eq!(decide("WebFetch", json!({"url": "https://docs.rs/serde"})), Behavior::Allow);
    assert_eq!(
        decide("WebFetch", json!({"url": "https://api.docs.rs/x"})),
        Behavior::Allow,
        "subdomain"
    );
    assert_eq!(decide("WebFetch", json!({"url": "https://notdocs.rs/x"})), Behavior::Ask);
    assert_eq!(
        decide("WebFetch", json!({"url": "http://user@evil.example:8080/"})),
        Behavior::Deny
    );
    assert_eq!(decide("Task", json!({})), Behavior::Ask, "default");
    assert_eq!(decide("AskUserQuestion", json!({"questions": []})), Behavior::Ask);
}

#[test]
fn mcp_rules_cover_their_server() {
    let policy = policy(
        "[permissions]\nallow = [\"mcp__github\"]\ndeny = [\"mcp__shell__*\"]\ndefault = \"deny\"",
    );
    let decide = |tool: &str| policy.decide(tool, &json!({}), &context()).behavior;
    assert_eq!(decide("mcp__github__create_issue"), Behavior::Allow);
    assert_eq!(decide("mcp__githubx__create_issue"), Behavior::Deny);
    assert_eq!(decide("mcp__shell__run"), Behavior::Deny);
}

#[test]
fn decisions_name_their_rule() {
    let policy = policy(EXAMPLE);
    let decision = policy.decide("Bash", &json!({"command": "git status && rm -rf /"}), &context());
    assert_eq!(decision.rule.as_deref(), Some("Bash(rm:*)"));
    assert!(decision.reason.contains("Bash(rm:*)"));
    let decision = policy.decide("Bash", &json!({"command": "git status && ls"}), &context());
    assert_eq!(decision.rule.as_deref(), Some("Bash(git status:*), Bash(ls:*)"));
    let decision = policy.decide("Bash", &json!({"command": "make"}), &context());
    assert_eq!(decision.rule, None);
}

#[test]
fn defaults_and_timeouts() {
    let policy = policy(EXAMPLE);
    assert_eq!(policy.ask_timeout, Duration::from_secs(30));
    assert_eq!(policy.on_timeout, Behavior::Deny);
    let empty = Policy::from_toml("").unwrap();
    assert_eq!(empty.default, Behavior::Ask);
    assert_eq!(empty.ask_timeout, DEFAULT_ASK_TIMEOUT);
    assert_eq!(bash(&Policy::allow_all(), "rm -rf /"), Behavior::Allow);
}

#[test]
fn bad_policies_are_clear_errors() {
    let table = [
        ("[permissions]\nallow = [\"Bash(ls\"]", "must end with ')'"),
        ("[permissions]\nallow = [\"Bash()\"]", "empty parentheses"),
        ("[permissions]\nallow = [\"Task(x)\"]", "take no parentheses"),
        ("[permissions]\nallow = [\"WebFetch(example.com)\"]", "domain:"),
        ("[permissions]\nalow = []", "unknown field `alow`"),
        ("[permissions]\ndefault = \"maybe\"", "unknown variant `maybe`"),
        ("[permissions]\non_timeout = \"allow\"", "fail closed"),
        ("[permissions]\npark_after_secs = 0", "park_after_secs must be at least 1"),
        ("[permissions]\npark_expires_secs = 60", "beside park_after_secs"),
        ("[permissions]\npark_after_secs = 5\npark_expires_secs = 0", "at least 1"),
    ];
    for (text, expected) in table {
        let error = Policy::from_toml(text).unwrap_err().to_string();
        assert!(error.contains(expected), "{text:?}: {error}");
    }
}

#[test]
fn session_allow_rules_are_added_once() {
    let mut policy = Policy::default();
    policy.add_allow("Bash(touch:*)").unwrap();
    policy.add_allow("Bash(touch:*)").unwrap();
    assert_eq!(policy.allow_rules().collect::<Vec<_>>(), ["Bash(touch:*)"]);
    assert_eq!(bash(&policy, "touch x"), Behavior::Allow);
}

#[test]
fn directory_searches_in_a_denied_directory_are_denied() {
    let policy = policy(
        "[permissions]\ndeny = [\"Read(./secrets/**)\", \"Read(./.env)\"]\ndefault = \"allow\"",
    );
    let decide =
        |tool: &str, input: serde_json::Value| policy.decide(tool, &input, &context()).behavior;
    // The denied directory itself, a directory inside it, relative or absolute.
    assert_eq!(decide("Grep", json!({"pattern": "x", "path": "secrets"})), Behavior::Deny);
    assert_eq!(
        decide("Grep", json!({"pattern": "x", "path": "/work/project/secrets/a"})),
        Behavior::Deny
    );
    assert_eq!(
        decide("Glob", json!({"pattern": "*", "path": "/work/project/secrets"})),
        Behavior::Deny
    );
    assert_eq!(decide("LS", json!({"path": "/work/project/secrets"})), Behavior::Deny);
    // A file search by exact file.
    assert_eq!(decide("Grep", json!({"pattern": "x", "path": ".env"})), Behavior::Deny);
    // Elsewhere, and the whole project (which only contains a denied file), are not.
    assert_eq!(decide("Grep", json!({"pattern": "x", "path": "src"})), Behavior::Allow);
    assert_eq!(decide("Grep", json!({"pattern": "x"})), Behavior::Allow);
    assert_eq!(decide("Glob", json!({"pattern": "**/*.rs"})), Behavior::Allow);
    // Deny rules are listed as written (the CLI gets them as --disallowedTools).
    assert_eq!(policy.deny_rules().collect::<Vec<_>>(), ["Read(./secrets/**)", "Read(./.env)"]);
}

#[test]
fn a_notify_table_names_channels_and_a_chain() {
    let read = policy(
        "[notify]\nchannels = [\"phone\", \"lead\"]\n\n[[notify.escalate]]\nchannel = \"phone\"\n\n\
         [[notify.escalate]]\nchannel = \"lead\"\nafter_secs = 300\n",
    );
    assert_eq!(read.notify.channels.as_deref(), Some(&["phone".to_owned(), "lead".to_owned()][..]));
    let steps: Vec<(&str, u64)> =
        read.notify.escalate.iter().map(|step| (step.channel.as_str(), step.after_secs)).collect();
    assert_eq!(steps, [("phone", 0), ("lead", 300)]);
    assert_eq!(policy("").notify, NotifyRoute::default(), "none: every channel");
    for (bad, says) in [
        ("[notify]\nchannels = [\"a b\"]\n", "not a channel name"),
        ("[notify]\nchannels = []\n", "names no channel"),
        ("[[notify.escalate]]\nchannel = \"x\"\nafter_secs = 99999999\n", "more than a week"),
        ("[notify]\nchannels = [\"a\"]\n[[notify.escalate]]\nchannel = \"b\"\n", "reach nobody"),
        ("[notify]\nchanels = [\"a\"]\n", "unknown field"),
    ] {
        let error = Policy::from_toml(bad).unwrap_err().to_string();
        assert!(error.contains(says), "{bad}: {error}");
    }
}
