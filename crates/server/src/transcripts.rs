//! Claude Code's own session transcripts (`~/.claude/projects/<encoded cwd>/<session>.jsonl`),
//! so sessions started outside Switchboard are visible too.
//!
//! Files are read incrementally: a [`TranscriptTail`] remembers its offset and a partial last
//! line, reads at most [`READ_CHUNK_BYTES`] at a time, and never holds the whole file. Changes
//! are noticed through file-system notifications ([`watch_file`]), not polling.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;
use switchboard_protocol::codec::LineSplitter;
use tokio::sync::mpsc;

/// How much of a transcript one read takes.
pub const READ_CHUNK_BYTES: usize = 256 * 1024;

/// The longest transcript line accepted (a transcript holds whole tool inputs and outputs).
pub const MAX_TRANSCRIPT_LINE_BYTES: usize = switchboard_protocol::MAX_LINE_BYTES;

/// How many leading lines are read to find a transcript's working directory and first prompt.
const HEADER_LINES: usize = 64;

/// One transcript file.
#[derive(Debug, Clone, Serialize)]
pub struct TranscriptInfo {
    /// The Claude session id (the file name).
    pub id: String,
    /// The working directory, from the transcript's lines (else decoded from the folder name,
    /// which is lossy).
    pub cwd: Option<String>,
    /// The project folder's name (`-home-me-project`).
    pub project: String,
    /// The file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// Last change (Unix milliseconds).
    pub modified_ms: u64,
    /// The first user prompt, shortened.
    pub title: Option<String>,
}

/// The transcripts under one Claude config directory.
#[derive(Debug, Clone)]
pub struct Transcripts {
    /// `~/.claude/projects`.
    root: PathBuf,
}

impl Transcripts {
    /// Transcripts under `claude_home/projects` (`claude_home` is usually `~/.claude`).
    pub fn new(claude_home: impl AsRef<Path>) -> Self {
        Transcripts { root: claude_home.as_ref().join("projects") }
    }

    /// The default: `$CLAUDE_CONFIG_DIR`, else `$HOME/.claude`.
    pub fn from_env() -> Self {
        let home = std::env::var_os("CLAUDE_CONFIG_DIR").map(PathBuf::from).unwrap_or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("."))
                .join(".claude")
        });
        Transcripts::new(home)
    }

    /// The Claude directory (`~/.claude`) whose `projects` these are.
    pub fn claude_home(&self) -> &Path {
        self.root.parent().unwrap_or(&self.root)
    }

    /// Whether `path` names Claude session `id`'s transcript here: an absolute path with no
    /// `.` or `..` in it, `projects/<a folder>/<id>.jsonl` under this Claude directory. (The
    /// file need not exist yet: the CLI writes it with its first message.)
    pub fn names(&self, path: &Path, id: &str) -> bool {
        use std::path::Component;
        let plain =
            path.components().all(|part| matches!(part, Component::RootDir | Component::Normal(_)));
        let file = format!("{id}.jsonl");
        plain
            && path.is_absolute()
            && path.file_name().is_some_and(|name| name == file.as_str())
            && path.parent().and_then(Path::parent) == Some(self.root.as_path())
    }

    /// Every transcript, most recently changed first.
    pub fn list(&self) -> std::io::Result<Vec<TranscriptInfo>> {
        let mut found = Vec::new();
        let projects = match std::fs::read_dir(&self.root) {
            Ok(projects) => projects,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(found),
            Err(error) => return Err(error),
        };
        for project in projects.flatten() {
            let Ok(files) = std::fs::read_dir(project.path()) else { continue };
            for file in files.flatten() {
                let path = file.path();
                if path.extension().is_some_and(|ext| ext == "jsonl") {
                    if let Some(info) = info_of(&path) {
                        found.push(info);
                    }
                }
            }
        }
        found.sort_by(|a, b| b.modified_ms.cmp(&a.modified_ms).then_with(|| a.id.cmp(&b.id)));
        Ok(found)
    }

    /// One transcript by its session id.
    pub fn find(&self, id: &str) -> Option<TranscriptInfo> {
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return None;
        }
        let projects = std::fs::read_dir(&self.root).ok()?;
        projects.flatten().find_map(|project| {
            let path = project.path().join(format!("{id}.jsonl"));
            path.is_file().then(|| info_of(&path)).flatten()
        })
    }
}

fn info_of(path: &Path) -> Option<TranscriptInfo> {
    let metadata = std::fs::metadata(path).ok()?;
    let id = path.file_stem()?.to_string_lossy().into_owned();
    let project = path.parent()?.file_name()?.to_string_lossy().into_owned();
    let modified_ms = metadata
        .modified()
        .ok()
        .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|elapsed| elapsed.as_millis() as u64)
        .unwrap_or(0);
    let (cwd, title) = header(path);
    Some(TranscriptInfo {
        id,
        cwd,
        project,
        path: path.to_owned(),
        size: metadata.len(),
        modified_ms,
        title,
    })
}

/// The working directory and first prompt, from the first lines.
fn header(path: &Path) -> (Option<String>, Option<String>) {
    let mut tail = TranscriptTail::new(path);
    let mut cwd = None;
    let mut title = None;
    let mut seen = 0;
    while seen < HEADER_LINES && (cwd.is_none() || title.is_none()) {
        let lines = tail.read_available(HEADER_LINES);
        if lines.is_empty() {
            break;
        }
        for line in lines {
            seen += 1;
            let Ok(value) = serde_json::from_str::<Value>(&line) else { continue };
            if cwd.is_none() {
                cwd = value.get("cwd").and_then(Value::as_str).map(str::to_owned);
            }
            if title.is_none() && value.get("type").and_then(Value::as_str) == Some("user") {
                if let Some(text) = value.pointer("/message/content").and_then(Value::as_str) {
                    title = Some(text.lines().next().unwrap_or("").chars().take(80).collect());
                }
            }
        }
    }
    (cwd, title)
}

/// Reads a growing transcript a piece at a time.
#[derive(Debug)]
pub struct TranscriptTail {
    path: PathBuf,
    /// Bytes already read.
    offset: u64,
    lines: LineSplitter,
}

impl TranscriptTail {
    /// A reader at the start of `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        TranscriptTail {
            path: path.into(),
            offset: 0,
            lines: LineSplitter::new(MAX_TRANSCRIPT_LINE_BYTES),
        }
    }

    /// Complete lines appended since the last call, at most `max_lines` (call again for more).
    /// A line still being written stays buffered until its newline arrives; a file that
    /// shrank (rewritten) is read again from the start.
    pub fn read_available(&mut self, max_lines: usize) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            while out.len() < max_lines {
                match self.lines.next_line() {
                    Some(Ok(line)) => out.push(String::from_utf8_lossy(&line.bytes).into_owned()),
                    Some(Err(error)) => {
                        tracing::warn!(path = %self.path.display(), %error, "skipping a transcript line")
                    }
                    None => break,
                }
            }
            if out.len() >= max_lines {
                return out;
            }
            match self.read_chunk() {
                Ok(0) | Err(_) => return out,
                Ok(_) => {}
            }
        }
    }

    fn read_chunk(&mut self) -> std::io::Result<usize> {
        let mut file = std::fs::File::open(&self.path)?;
        let size = file.metadata()?.len();
        if size < self.offset {
            // Rewritten: start over.
            self.offset = 0;
            self.lines = LineSplitter::new(MAX_TRANSCRIPT_LINE_BYTES);
        }
        file.seek(SeekFrom::Start(self.offset))?;
        let mut chunk = vec![0u8; READ_CHUNK_BYTES.min((size - self.offset) as usize)];
        let read = file.read(&mut chunk)?;
        self.offset += read as u64;
        self.lines.push(&chunk[..read]);
        Ok(read)
    }

    /// Bytes read so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes read and not yet handed out as lines (at most about one read chunk).
    pub fn buffered(&self) -> usize {
        self.lines.buffered()
    }
}

/// Whether a file-system event changes the file. Not a read: opening and closing the file to
/// read it are events too, and a reader woken by its own reads would never rest.
fn is_change(kind: &notify::EventKind) -> bool {
    use notify::event::ModifyKind;
    // (A read changes the access time, a metadata change, on a `strictatime` mount.)
    !matches!(
        kind,
        notify::EventKind::Access(_) | notify::EventKind::Modify(ModifyKind::Metadata(_))
    )
}

/// Notifications that `path` changed. The watcher lives as long as the returned value.
pub fn watch_file(path: &Path) -> notify::Result<(notify::RecommendedWatcher, mpsc::Receiver<()>)> {
    use notify::Watcher;
    let (tx, rx) = mpsc::channel(1);
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|event| is_change(&event.kind)) {
            // A full channel already says "changed": coalesce.
            let _ = tx.try_send(());
        }
    })?;
    watcher.watch(path, notify::RecursiveMode::NonRecursive)?;
    Ok((watcher, rx))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn a_read_of_the_file_is_no_change() {
        use notify::event::{AccessKind, AccessMode, CreateKind, DataChange, ModifyKind};
        assert!(!is_change(&notify::EventKind::Access(AccessKind::Open(AccessMode::Read))));
        assert!(!is_change(&notify::EventKind::Access(AccessKind::Close(AccessMode::Read))));
        assert!(is_change(&notify::EventKind::Modify(ModifyKind::Data(DataChange::Any))));
        assert!(is_change(&notify::EventKind::Create(CreateKind::File)));
        let touched = ModifyKind::Metadata(notify::event::MetadataKind::AccessTime);
        assert!(!is_change(&notify::EventKind::Modify(touched)));
    }

    #[test]
    fn a_transcripts_path_is_one_of_this_directorys() {
        let transcripts = Transcripts::new("/h/.claude");
        let named = |path: &str| transcripts.names(Path::new(path), "abc");
        assert!(named("/h/.claude/projects/-w/abc.jsonl"));
        assert!(!named("/h/.claude/projects/-w/abd.jsonl"), "another session's");
        assert!(!named("/h/.claude/projects/abc.jsonl"), "not in a project's folder");
        assert!(!named("/h/.claude/projects/-w/x/abc.jsonl"), "too deep");
        assert!(!named("/h/.claude/projects/../projects/-w/abc.jsonl"), "..");
        assert!(!named("/etc/projects/-w/abc.jsonl"), "elsewhere");
        assert!(!named("h/.claude/projects/-w/abc.jsonl"), "relative");
    }

    #[test]
    fn reads_incrementally_and_holds_a_partial_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        std::fs::write(&path, "{\"a\":1}\n{\"b\":").unwrap();
        let mut tail = TranscriptTail::new(&path);
        assert_eq!(tail.read_available(10), ["{\"a\":1}"]);
        assert!(tail.read_available(10).is_empty(), "the partial line waits");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"2}\n{\"c\":3}\n")
            .unwrap();
        assert_eq!(tail.read_available(1), ["{\"b\":2}"]);
        assert_eq!(tail.read_available(10), ["{\"c\":3}"]);
        // Rewritten shorter: read again from the start.
        std::fs::write(&path, "{\"z\":0}\n").unwrap();
        assert_eq!(tail.read_available(10), ["{\"z\":0}"]);
    }

    #[test]
    fn lists_and_finds_the_fixture_transcripts() {
        let transcripts = Transcripts::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures"));
        let list = transcripts.list().unwrap();
        assert_eq!(list.len(), 2);
        let first = transcripts.find("1a83d793-5068-4412-a68e-6fd74b1ae308").unwrap();
        assert_eq!(first.cwd.as_deref(), Some("/workspace/demo"));
        assert_eq!(first.title.as_deref(), Some("FIRST turn"));
        assert!(transcripts.find("../etc/passwd").is_none(), "ids are names, not paths");
        assert!(transcripts.find("nope").is_none());
    }
}
