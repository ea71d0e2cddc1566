//! What the index keeps of a session, read from its projection's updates: a [`Finder`] per
//! session turns each update into [`SearchEntry`]s (a prompt, an answer's text, a tool call
//! with the files it touched, a decision, a turn's end and its cost). The daemon feeds it the
//! updates its pump projects as it stores them, and a rebuild feeds it the updates of the
//! stored log read again: one reading of a line, the projection's.

use std::collections::VecDeque;
use std::path::{Component, Path, PathBuf};

use serde_json::Value;
use switchboard_session::projection::Block;
use switchboard_session::{DecidedBy, Update};
use switchboard_store::search::{cut, MAX_TEXT_BYTES, MAX_WRITTEN_BYTES};
use switchboard_store::{EntryKind, SearchEntry, SessionRecord, Touched};

/// Tool calls a finder remembers, for the decisions on them.
const REMEMBERED_CALLS: usize = 64;

/// What a session is, for each of its entries.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// The session.
    pub session_id: String,
    /// Its directory: relative paths are resolved against it.
    pub cwd: String,
    /// The face it was started through, or how it came.
    pub origin: Option<String>,
    /// The token that started it.
    pub token: Option<String>,
    /// The schedule or trigger run it is (`schedule:nightly`).
    pub run: Option<String>,
    /// The repository of a worktree session, else its directory.
    pub project: String,
    /// The node that runs it.
    pub node: Option<String>,
    /// A worktree session's folder and the repository it was made from: what it touched in
    /// its folder it touched in the repository too, once its branch is merged.
    pub worktree: Option<(PathBuf, PathBuf)>,
}

impl Facts {
    /// A session's facts, from its record.
    pub fn of(record: &SessionRecord) -> Facts {
        let launch = &record.launch;
        // The face it was started through; a session nobody started through one (a relay
        // CLI, a terminal's, one followed through its hooks) by how it came.
        let origin = match (&launch.origin, launch.transport) {
            (Some(origin), _) => Some(origin.face.as_str().to_owned()),
            (None, Some(transport)) => Some(transport.as_str().to_owned()),
            (None, None) => None,
        };
        Facts {
            session_id: record.id.clone(),
            cwd: record.cwd.clone(),
            origin,
            token: launch.origin.as_ref().map(|origin| origin.token.clone()),
            run: launch.run.as_ref().map(|run| {
                let kind = match run.kind {
                    switchboard_store::RunKind::Schedule => "schedule",
                    switchboard_store::RunKind::Trigger => "trigger",
                };
                format!("{kind}:{}", run.name)
            }),
            project: launch
                .worktree
                .as_ref()
                .map_or_else(|| record.cwd.clone(), |tree| tree.repo.display().to_string()),
            node: record.node.clone(),
            worktree: launch.worktree.as_ref().map(|tree| (tree.path.clone(), tree.repo.clone())),
        }
    }
}

impl Facts {
    /// Completes entries a [`Finder`] made: the session's facts in each, and each path
    /// resolved against its directory (and in a worktree session, the same path in the
    /// repository too).
    pub fn apply(&self, entries: &mut [SearchEntry]) {
        // No NUL reaches a database (PostgreSQL's text cannot hold one): the CLI's own output
        // is hostile input too.
        let clean = |text: &mut String| {
            if text.contains('\0') {
                *text = text.replace('\0', "");
            }
        };
        for entry in entries {
            clean(&mut entry.text);
            for text in
                [&mut entry.written, &mut entry.command, &mut entry.who].into_iter().flatten()
            {
                clean(text);
            }
            entry.session_id.clone_from(&self.session_id);
            entry.origin.clone_from(&self.origin);
            entry.token.clone_from(&self.token);
            entry.run.clone_from(&self.run);
            entry.project.clone_from(&self.project);
            entry.node.clone_from(&self.node);
            entry.worktree = self.worktree.is_some();
            let mut paths = Vec::with_capacity(entry.paths.len());
            for touched in std::mem::take(&mut entry.paths) {
                if touched.path.contains('\0') {
                    continue;
                }
                for path in resolved(self, &touched.path) {
                    touch(&mut paths, path, touched.wrote);
                }
            }
            entry.paths = paths;
        }
    }
}

/// A call remembered for the decisions on it.
#[derive(Debug, Clone)]
struct Call {
    tool_use_id: String,
    paths: Vec<Touched>,
    command: Option<String>,
}

/// One session's reader of updates (see the module's notes).
#[derive(Debug, Default)]
pub struct Finder {
    /// The main conversation's model now.
    model: Option<String>,
    /// The last calls seen.
    calls: VecDeque<Call>,
}

impl Finder {
    /// A finder for a session that starts with `model`.
    pub fn new(model: Option<String>) -> Finder {
        Finder { model, calls: VecDeque::new() }
    }

    /// Gives `found` (a decision, or a request) the files and command of the call it is
    /// about, when that call is among those remembered.
    fn with_call(&self, tool_use_id: Option<&str>, found: &mut SearchEntry) {
        let Some(id) = tool_use_id else { return };
        if let Some(call) = self.calls.iter().rev().find(|call| call.tool_use_id == id) {
            found.paths.clone_from(&call.paths);
            found.command.clone_from(&call.command);
        }
    }

    /// Reads `update`, of the event `seq` stored at `ts_ms`; its entries go to `out` (placed
    /// after those of the same event already there), their paths as the call gave them and
    /// nothing of the session in them yet: [`Facts::apply`] adds that.
    pub fn note(&mut self, seq: u64, ts_ms: u64, update: &Update, out: &mut Vec<SearchEntry>) {
        let place = out.iter().rev().take_while(|entry| entry.seq == seq).count() as u32;
        let entry = |kind: EntryKind, text: &str| SearchEntry {
            place,
            model: self.model.clone(),
            ..SearchEntry::new(kind, seq, ts_ms, cut(text, MAX_TEXT_BYTES).to_owned())
        };
        let found = match update {
            Update::Started { model: Some(model), .. } | Update::Model { model } => {
                self.model = Some(model.clone());
                None
            }
            Update::MessageStarted { parent_tool_use_id: None, model: Some(model), .. } => {
                self.model = Some(model.clone());
                None
            }
            Update::Prompt { text, .. } => Some(entry(EntryKind::Prompt, text)),
            Update::Block { block: Block::Text { text }, .. } => {
                Some(entry(EntryKind::Answer, text))
            }
            Update::Block {
                block: Block::ToolUse { tool_use_id, name, input, rebuilt: false },
                ..
            } => {
                let call = read_call(name, input);
                let mut found = entry(EntryKind::ToolCall, &call.text);
                found.tool = Some(name.clone());
                found.tool_use_id = Some(tool_use_id.clone());
                found.paths.clone_from(&call.paths);
                found.command.clone_from(&call.command);
                found.written = call.written.map(|text| cut(&text, MAX_WRITTEN_BYTES).to_owned());
                if self.calls.len() == REMEMBERED_CALLS {
                    self.calls.pop_front();
                }
                self.calls.push_back(Call {
                    tool_use_id: tool_use_id.clone(),
                    paths: call.paths,
                    command: call.command,
                });
                Some(found)
            }
            // A person was asked (whatever the answer): `decision:ask`.
            Update::PermissionAsked(pending) => {
                let mut found = entry(EntryKind::Decision, &pending.reason);
                found.tool = Some(pending.tool_name.clone());
                found.tool_use_id.clone_from(&pending.tool_use_id);
                found.decision = Some("ask".into());
                self.with_call(pending.tool_use_id.as_deref(), &mut found);
                Some(found)
            }
            Update::PermissionDecided { tool_name, behavior, by, message, tool_use_id, .. } => {
                let mut found = entry(EntryKind::Decision, message);
                found.tool = Some(tool_name.clone());
                found.tool_use_id.clone_from(tool_use_id);
                found.decision = Some(behavior.as_str().to_owned());
                found.decided_by = Some(by.kind().to_owned());
                found.who = match by {
                    DecidedBy::Person { who } => Some(who.clone()),
                    DecidedBy::Policy { rule } => rule.clone(),
                    _ => None,
                };
                self.with_call(tool_use_id.as_deref(), &mut found);
                Some(found)
            }
            Update::TurnEnded { cost_usd, failed, result, .. } => {
                let text = if *failed { result.as_deref().unwrap_or_default() } else { "" };
                let mut found = entry(EntryKind::Turn, text);
                found.cost_usd =
                    if cost_usd.is_finite() && *cost_usd > 0.0 { *cost_usd } else { 0.0 };
                Some(found)
            }
            _ => None,
        };
        out.extend(found);
    }
}

/// Adds `path` to `paths`, once (written if any mention of it wrote it).
fn touch(paths: &mut Vec<Touched>, path: String, wrote: bool) {
    match paths.iter_mut().find(|touched| touched.path == path) {
        Some(touched) => touched.wrote |= wrote,
        None => paths.push(Touched { path, wrote }),
    }
}

/// What a call's input says.
#[derive(Debug, Default, PartialEq)]
struct ReadCall {
    /// Its words: paths, a command, a pattern, a description.
    text: String,
    paths: Vec<Touched>,
    command: Option<String>,
    written: Option<String>,
}

/// Reads a tool call's input: the files it touches (and writes), a shell command, what it
/// writes.
fn read_call(tool: &str, input: &Value) -> ReadCall {
    let field = |name: &str| input.get(name).and_then(Value::as_str);
    let mut call = ReadCall::default();
    let mut words: Vec<&str> = Vec::new();
    let mention = |call: &mut ReadCall, path: &str, wrote: bool| {
        touch(&mut call.paths, path.to_owned(), wrote);
    };
    let writes = matches!(tool, "Write" | "Edit" | "MultiEdit" | "NotebookEdit");
    for name in ["file_path", "notebook_path", "path"] {
        if let Some(path) = field(name) {
            mention(&mut call, path, writes);
            words.push(path);
        }
    }
    call.written = match tool {
        "Write" => field("content").map(str::to_owned),
        "Edit" => field("new_string").map(str::to_owned),
        "NotebookEdit" => field("new_source").map(str::to_owned),
        "MultiEdit" => input.get("edits").and_then(Value::as_array).map(|edits| {
            edits
                .iter()
                .filter_map(|edit| edit.get("new_string").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        }),
        _ => None,
    };
    if let Some(command) = field("command") {
        let shell = read_shell(command);
        for (path, wrote) in &shell {
            mention(&mut call, path, *wrote);
        }
        if shell.iter().any(|(_, wrote)| *wrote) {
            call.written = Some(command.to_owned());
        }
        call.command = Some(cut(command, MAX_TEXT_BYTES).to_owned());
        words.push(command);
    }
    for name in ["pattern", "glob", "description", "url", "query", "prompt"] {
        words.extend(field(name));
    }
    call.text = words.join("\n");
    call
}

/// The paths a shell command names, and whether it writes each (a redirect's target, `tee`'s
/// files). Read from its words as a shell splits them (up to a here-document's body, which is
/// text, not words); a command that does not split (an open quote) is split at spaces.
fn read_shell(command: &str) -> Vec<(String, bool)> {
    let head = match command.find("<<") {
        Some(at) => command[..at].to_owned() + command[at..].lines().next().unwrap_or_default(),
        None => command.to_owned(),
    };
    let words = shell_words::split(&head)
        .unwrap_or_else(|_| head.split_whitespace().map(str::to_owned).collect());
    let mut found: Vec<(String, bool)> = Vec::new();
    let mut writing_next = false;
    let mut in_tee = false;
    for word in &words {
        if matches!(word.as_str(), "|" | "||" | "&&" | ";" | "&") {
            in_tee = false;
            writing_next = false;
            continue;
        }
        if word == "tee" {
            in_tee = true;
            continue;
        }
        // `>`, `>>`, `1>`, `2>>`, `&>`, alone or with their target joined.
        let redirect = word.trim_start_matches(['0', '1', '2', '&']);
        if let Some(target) = redirect.strip_prefix(">>").or_else(|| redirect.strip_prefix('>')) {
            let target = target.trim_start_matches('|');
            if target.is_empty() {
                writing_next = true;
            } else if !target.starts_with('&') {
                found.push((target.to_owned(), true));
            }
            continue;
        }
        if writing_next {
            writing_next = false;
            found.push((word.clone(), true));
            continue;
        }
        if word.starts_with('-') || word.contains("://") || word.contains('=') {
            continue;
        }
        if in_tee {
            found.push((word.clone(), true));
        } else if looks_like_a_path(word) {
            found.push((word.clone(), false));
        }
    }
    found.retain(|(path, _)| path != "/dev/null" && !path.is_empty());
    found
}

/// Whether a shell word names a file: it has a `/`, or a name and an extension (`deploy.sh`).
fn looks_like_a_path(word: &str) -> bool {
    if word.contains(['$', '`', '*', '?', '{', '(', '<', '>', '|', ';']) {
        return false;
    }
    if word.contains('/') {
        return true;
    }
    match word.rsplit_once('.') {
        Some((name, extension)) => {
            !name.is_empty()
                && !extension.is_empty()
                && extension.chars().all(|c| c.is_ascii_alphanumeric())
                && !name.chars().all(|c| c.is_ascii_digit())
        }
        None => false,
    }
}

/// A path as the session touched it, absolute (resolved against its directory, `.` and `..`
/// taken out), and in a worktree session the same path in the repository too.
fn resolved(facts: &Facts, path: &str) -> Vec<String> {
    if path.is_empty() || path.starts_with('~') {
        return Vec::new();
    }
    let joined = Path::new(&facts.cwd).join(path);
    let mut clean = PathBuf::new();
    for part in joined.components() {
        match part {
            Component::ParentDir => {
                clean.pop();
            }
            Component::CurDir => {}
            other => clean.push(other),
        }
    }
    let mut paths = vec![clean.display().to_string()];
    if let Some((tree, repo)) = &facts.worktree {
        if let Ok(inside) = clean.strip_prefix(tree) {
            paths.push(repo.join(inside).display().to_string());
        }
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn facts() -> Facts {
        Facts {
            session_id: "s".into(),
            cwd: "/tree/app".into(),
            project: "/repo".into(),
            worktree: Some(("/tree/app".into(), "/repo".into())),
            ..Facts::default()
        }
    }

    fn call(id: &str, tool: &str, input: Value) -> Update {
        Update::Block {
            message_id: "m".into(),
            index: 0,
            parent_tool_use_id: None,
            uuid: None,
            block: Block::ToolUse {
                tool_use_id: id.into(),
                name: tool.into(),
                input,
                rebuilt: false,
            },
        }
    }

    /// The entry a call makes, completed with [`facts`].
    fn entry_of(tool: &str, input: Value) -> SearchEntry {
        let mut out = Vec::new();
        Finder::default().note(1, 1, &call("t", tool, input), &mut out);
        facts().apply(&mut out);
        out.pop().unwrap()
    }

    fn touched(entry: &SearchEntry) -> Vec<(&str, bool)> {
        entry.paths.iter().map(|touched| (touched.path.as_str(), touched.wrote)).collect()
    }

    #[test]
    fn edits_and_writes_touch_their_file_in_the_worktree_and_the_repository() {
        let edit = entry_of(
            "Edit",
            json!({"file_path": "/tree/app/src/main.rs", "old_string": "a", "new_string": "b"}),
        );
        assert_eq!(touched(&edit), [("/tree/app/src/main.rs", true), ("/repo/src/main.rs", true)]);
        assert_eq!(edit.written.as_deref(), Some("b"));
        assert_eq!(
            (edit.session_id.as_str(), edit.project.as_str(), edit.worktree),
            ("s", "/repo", true)
        );
        let read = entry_of("Read", json!({"file_path": "../other/x.txt"}));
        assert_eq!(touched(&read), [("/tree/other/x.txt", false)]);
        assert_eq!(read.written, None);
        let multi = entry_of(
            "MultiEdit",
            json!({"file_path": "a.rs", "edits": [{"new_string": "one"}, {"new_string": "two"}]}),
        );
        assert_eq!(multi.written.as_deref(), Some("one\ntwo"));
    }

    #[test]
    fn a_shell_command_touches_its_paths_and_writes_its_redirects() {
        let words = |command: &str| read_shell(command);
        assert_eq!(
            words("cat deploy.sh | tee out/log.txt >> all.log 2>/dev/null"),
            [
                ("deploy.sh".to_owned(), false),
                ("out/log.txt".to_owned(), true),
                ("all.log".to_owned(), true)
            ]
        );
        assert_eq!(words("echo 'v = 1.5' >notes.md"), [("notes.md".to_owned(), true)]);
        assert_eq!(words("rm -rf build/ && ls"), [("build/".to_owned(), false)]);
        assert_eq!(
            words("cat > gen.py <<'EOF'\nimport os.path\nEOF"),
            [("gen.py".to_owned(), true)],
            "a here-document's body is not words"
        );
        assert_eq!(words("echo \"open quote > x.txt"), [("x.txt".to_owned(), true)]);
        assert!(words("curl https://example.com/a.json -o=x 1.5 $HOME/x *.rs").is_empty());
        let shell = entry_of("Bash", json!({"command": "printf 'hi\\n' > greeting.txt"}));
        assert_eq!(
            touched(&shell),
            [("/tree/app/greeting.txt", true), ("/repo/greeting.txt", true)]
        );
        assert_eq!(shell.written.as_deref(), Some("printf 'hi\\n' > greeting.txt"));
        assert_eq!(shell.command.as_deref(), Some("printf 'hi\\n' > greeting.txt"));
        let reading = entry_of("Bash", json!({"command": "wc -l src/lib.rs"}));
        assert_eq!(reading.written, None, "a command that writes no file wrote nothing");
        assert_eq!(
            touched(&reading),
            [("/tree/app/src/lib.rs", false), ("/repo/src/lib.rs", false)]
        );
    }

    #[test]
    fn decisions_carry_their_calls_files() {
        let mut finder = Finder::new(Some("claude-a".into()));
        let mut out = Vec::new();
        finder.note(4, 10, &call("t", "Bash", json!({"command": "rm deploy.sh"})), &mut out);
        let decided = Update::PermissionDecided {
            request_id: "r".into(),
            tool_name: "Bash".into(),
            behavior: switchboard_session::Behavior::Deny,
            by: DecidedBy::Person { who: "ana".into() },
            message: "not that".into(),
            tool_use_id: Some("t".into()),
            decided_at_ms: 11,
            origin: None,
        };
        finder.note(5, 11, &decided, &mut out);
        finder.note(5, 11, &decided, &mut out);
        facts().apply(&mut out);
        assert_eq!(out.len(), 3);
        assert_eq!((out[1].place, out[2].place), (0, 1), "two of one event are placed apart");
        let decision = &out[1];
        assert_eq!(decision.kind, EntryKind::Decision);
        assert_eq!(
            (decision.decision.as_deref(), decision.decided_by.as_deref()),
            (Some("deny"), Some("person"))
        );
        assert_eq!(decision.who.as_deref(), Some("ana"));
        assert_eq!(decision.command.as_deref(), Some("rm deploy.sh"));
        assert_eq!(decision.paths, out[0].paths);
        assert_eq!(decision.model.as_deref(), Some("claude-a"));
        assert!(decision.worktree);
    }
}
