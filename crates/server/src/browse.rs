//! A session's directory, read-only: one folder's entries and one file's text, for the web
//! UI's Files view (`GET /api/sessions/{id}/files`, `…/file`).
//!
//! Every path is the client's, so hostile. It is relative to the session's directory, with no
//! `..`, and is opened with `openat2` beneath the directory's own descriptor: the kernel
//! refuses any link on the way (`RESOLVE_NO_SYMLINKS`: a link is listed, never followed, so a
//! folder swapped for a link between a check and a read changes nothing), any step out of it,
//! and any other file system (`RESOLVE_NO_XDEV`: not `/proc` from `/`). git's `.git` is never
//! shown, and the daemon refuses more by its own rule (its data directory; what the session's
//! policy denies to `Read`), checked on the real path (there is no link in it). Reads are
//! bounded: at most [`MAX_ENTRIES`] entries of a folder and [`MAX_FILE_BYTES`] of a file. A file
//! with a NUL byte or that is not UTF-8 is binary: its size is told, not its bytes. These run on
//! the blocking threads, at most [`MAX_READERS`] at once, each within a time limit.

use std::io::Read as _;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use serde::Serialize;

/// The most directory reads at once: a hung file system holds a blocking thread each.
pub const MAX_READERS: usize = 4;

/// Held by each read of a session's directory.
pub static READERS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_READERS);

/// The most entries of one folder listed (`truncated` says when there were more; of a folder
/// of more than four times as many, those the file system gave first).
pub const MAX_ENTRIES: usize = 1000;

/// The most bytes of a file shown (`truncated` says when there are more).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The longest path accepted.
const MAX_PATH_BYTES: usize = 4096;

/// Folders never listed: git's own.
const HIDDEN: [&str; 1] = [".git"];

/// One entry of a folder.
#[derive(Debug, Serialize)]
pub struct Entry {
    /// Its name.
    pub name: String,
    /// Its path from the session's directory.
    pub path: String,
    /// `dir`, `file`, `link` or `other`.
    pub kind: &'static str,
    /// A file's size in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The session's tools changed it (a folder: something in it).
    pub touched: bool,
}

/// A folder's entries: folders first, then by name.
#[derive(Debug, Serialize)]
pub struct Listing {
    /// The folder, from the session's directory (`""` for the directory itself).
    pub path: String,
    /// Its entries.
    pub entries: Vec<Entry>,
    /// More entries than [`MAX_ENTRIES`] (or names that are not UTF-8) were left out.
    pub truncated: bool,
}

/// A file, as the Files view shows it.
#[derive(Debug, Serialize)]
pub struct FileView {
    /// The file, from the session's directory.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// Not text: no `text`.
    pub binary: bool,
    /// Its text (the first [`MAX_FILE_BYTES`], cut at a character).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Only its start is in `text`.
    pub truncated: bool,
    /// The session's tools changed it.
    pub touched: bool,
}

/// Why a path cannot be shown: the message says which (and never shows more of the disk).
#[derive(Debug, thiserror::Error)]
pub enum BrowseError {
    /// The path is not one the view takes.
    #[error("{0}")]
    Invalid(String),
    /// Nothing there (or outside the directory, which is the same to the client).
    #[error("{0} is not in the session's directory")]
    NotFound(String),
}

/// The client's `path` as a relative path with no `..`, or why not.
fn relative(path: &str) -> Result<PathBuf, BrowseError> {
    if path.len() > MAX_PATH_BYTES || path.contains('\0') {
        return Err(BrowseError::Invalid(format!(
            "a path is at most {MAX_PATH_BYTES} bytes, without NUL"
        )));
    }
    let mut relative = PathBuf::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(part) => relative.push(part),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(BrowseError::Invalid(
                    "path is relative to the session's directory, without ..".to_owned(),
                ))
            }
        }
    }
    Ok(relative)
}

/// What the daemon refuses to show beyond the kernel's rules: called with the real absolute
/// path of a folder or file (no link in it) and, once it is open, its device, inode and
/// number of names (a hard link to a refused file has another path but the same inode);
/// `true` to refuse.
pub type Refuse<'a> = &'a (dyn Fn(&Path, Option<(u64, u64, u64)>) -> bool + Sync);

/// A descriptor's device, inode and number of names (links).
fn identity(fd: &OwnedFd) -> Option<(u64, u64, u64)> {
    let stat = nix::sys::stat::fstat(fd).ok()?;
    // `st_nlink` is a u64 on x86-64 and a u32 on some other targets.
    #[allow(clippy::useless_conversion)]
    let names = u64::from(stat.st_nlink);
    Some((stat.st_dev, stat.st_ino, names))
}

/// Opens `relative` beneath the directory `root` as the module's rules say.
fn open_beneath(root: &OwnedFd, relative: &Path, directory: bool) -> nix::Result<OwnedFd> {
    let mut flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK;
    if directory {
        flags |= OFlag::O_DIRECTORY;
    }
    let how = OpenHow::new().flags(flags).resolve(
        ResolveFlag::RESOLVE_BENEATH
            | ResolveFlag::RESOLVE_NO_SYMLINKS
            | ResolveFlag::RESOLVE_NO_MAGICLINKS
            | ResolveFlag::RESOLVE_NO_XDEV,
    );
    let path = if relative.as_os_str().is_empty() { Path::new(".") } else { relative };
    nix::fcntl::openat2(root, path, how)
}

/// The client's `path`, checked, opened beneath `root`: the descriptor, the real absolute
/// path, and the path from `root`.
fn open(
    root: &Path,
    path: &str,
    directory: bool,
    refuse: Refuse<'_>,
) -> Result<(OwnedFd, PathBuf, PathBuf), BrowseError> {
    let relative = relative(path)?;
    let missing =
        || BrowseError::NotFound(if path.is_empty() { ".".to_owned() } else { path.to_owned() });
    if relative.components().any(|part| HIDDEN.iter().any(|hidden| part.as_os_str() == *hidden)) {
        return Err(missing());
    }
    let root = root.canonicalize().map_err(|_| missing())?;
    // Its real path, opened with no link on the way: a folder swapped for a link since it was
    // resolved is refused, not followed.
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let root_fd = nix::fcntl::openat2(nix::fcntl::AT_FDCWD, &root, how).map_err(|_| missing())?;
    let full = root.join(&relative);
    if refuse(&full, None) {
        return Err(missing());
    }
    match open_beneath(&root_fd, &relative, directory) {
        Ok(fd) if refuse(&full, identity(&fd)) => Err(missing()),
        Ok(fd) => Ok((fd, full, relative)),
        Err(nix::errno::Errno::ENOTDIR) if directory => {
            Err(BrowseError::Invalid(format!("{path} is not a folder")))
        }
        Err(nix::errno::Errno::ENOSYS) => Err(BrowseError::Invalid(
            "the Files view needs Linux 5.6 or newer (openat2)".to_owned(),
        )),
        Err(_) => Err(missing()),
    }
}

/// The touched files under `root`, as paths from it.
fn touched_under(root: &Path, touched: &[String]) -> Vec<PathBuf> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    touched
        .iter()
        .filter_map(|path| {
            let path = Path::new(path);
            // As the tools named them (absolute, maybe through a link), or already relative.
            let absolute = if path.is_absolute() { path.to_path_buf() } else { root.join(path) };
            let absolute = absolute.canonicalize().unwrap_or(absolute);
            absolute.strip_prefix(&root).ok().map(Path::to_path_buf)
        })
        .collect()
}

fn shown(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// The entries of the folder `path` of `root`.
pub fn list(
    root: &Path,
    path: &str,
    touched: &[String],
    refuse: Refuse<'_>,
) -> Result<Listing, BrowseError> {
    let (fd, full, relative) = open(root, path, true, refuse)?;
    let touched = touched_under(root, touched);
    let stat_fd = fd
        .try_clone()
        .map_err(|error| BrowseError::Invalid(format!("cannot read {path}: {error}")))?;
    let mut dir = nix::dir::Dir::from_fd(fd)
        .map_err(|error| BrowseError::Invalid(format!("cannot read {path}: {error}")))?;
    let mut names = Vec::new();
    let mut truncated = false;
    for entry in dir.iter().flatten() {
        let Ok(name) = entry.file_name().to_str() else {
            truncated = true;
            continue;
        };
        // What may not be shown is not listed either (its name and size tell of it).
        if name == "." || name == ".." || HIDDEN.contains(&name) || refuse(&full.join(name), None) {
            continue;
        }
        names.push(name.to_owned());
        // Bounded even for a folder of millions: a few past the limit tell it is cut.
        if names.len() > 4 * MAX_ENTRIES {
            truncated = true;
            break;
        }
    }
    let mut entries: Vec<Entry> = names
        .into_iter()
        .map(|name| {
            use nix::sys::stat::SFlag;
            let stat = nix::sys::stat::fstatat(
                &stat_fd,
                name.as_str(),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            );
            let (kind, size) = match stat {
                Ok(stat) => match SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT {
                    SFlag::S_IFDIR => ("dir", None),
                    SFlag::S_IFREG => ("file", Some(u64::try_from(stat.st_size).unwrap_or(0))),
                    SFlag::S_IFLNK => ("link", None),
                    _ => ("other", None),
                },
                Err(_) => ("other", None),
            };
            let path = relative.join(&name);
            let touched = touched.iter().any(|touched| touched.starts_with(&path));
            Entry { path: shown(&path), name, kind, size, touched }
        })
        .collect();
    entries.sort_by(|a, b| (a.kind != "dir", &a.name).cmp(&(b.kind != "dir", &b.name)));
    if entries.len() > MAX_ENTRIES {
        entries.truncate(MAX_ENTRIES);
        truncated = true;
    }
    Ok(Listing { path: shown(&relative), entries, truncated })
}

/// The file `path` of `root`: its text, or that it is binary.
pub fn read(
    root: &Path,
    path: &str,
    touched: &[String],
    refuse: Refuse<'_>,
) -> Result<FileView, BrowseError> {
    let (fd, _, relative) = open(root, path, false, refuse)?;
    let touched = touched_under(root, touched).contains(&relative);
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(|_| BrowseError::NotFound(path.to_owned()))?;
    if !meta.is_file() {
        return Err(BrowseError::Invalid(format!("{path} is not a file")));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|error| BrowseError::Invalid(format!("cannot read {path}: {error}")))?;
    let truncated = meta.len() > bytes.len() as u64;
    let text = if bytes.contains(&0) {
        None
    } else {
        match String::from_utf8(bytes) {
            Ok(text) => Some(text),
            // Cut inside a character by the limit: the whole characters before it.
            Err(error) if truncated && error.utf8_error().error_len().is_none() => {
                let valid = error.utf8_error().valid_up_to();
                let mut bytes = error.into_bytes();
                bytes.truncate(valid);
                String::from_utf8(bytes).ok()
            }
            Err(_) => None,
        }
    };
    Ok(FileView {
        path: shown(&relative),
        size: meta.len(),
        binary: text.is_none(),
        text,
        truncated,
        touched,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/deep")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join("src/main.rs"), "fn main() {}\n").unwrap();
        std::fs::write(root.join("src/deep/x.rs"), "x").unwrap();
        std::fs::write(root.join("README.md"), "# hi\n").unwrap();
        std::fs::write(root.join("logo.png"), b"\x89PNG\r\n\x1a\n\0\0").unwrap();
        std::fs::write(root.join(".git/config"), "secret").unwrap();
        dir
    }

    const NONE: Refuse<'static> = &|_: &Path, _: Option<(u64, u64, u64)>| false;

    #[test]
    fn a_folder_lists_folders_first_hides_git_and_marks_what_was_touched() {
        let dir = tree();
        let touched = vec![dir.path().join("src/deep/x.rs").display().to_string()];
        let listing = list(dir.path(), "", &touched, NONE).unwrap();
        let names: Vec<(&str, &str, bool)> =
            listing.entries.iter().map(|e| (e.name.as_str(), e.kind, e.touched)).collect();
        assert_eq!(
            names,
            [("src", "dir", true), ("README.md", "file", false), ("logo.png", "file", false)]
        );
        let listing = list(dir.path(), "src/deep", &touched, NONE).unwrap();
        assert_eq!(listing.entries[0].path, "src/deep/x.rs");
        assert!(listing.entries[0].touched);
        assert_eq!(listing.entries[0].size, Some(1));
    }

    #[test]
    fn a_file_is_text_or_binary_and_bounded() {
        let dir = tree();
        let file = read(dir.path(), "./src/main.rs", &[], NONE).unwrap();
        assert_eq!(file.text.as_deref(), Some("fn main() {}\n"));
        assert!(!file.binary && !file.truncated);
        let png = read(dir.path(), "logo.png", &[], NONE).unwrap();
        assert!(png.binary && png.text.is_none());
        assert_eq!(png.size, 10);
        // Over the limit, with a character cut by it: the whole characters before.
        let mut big = "a".repeat(MAX_FILE_BYTES as usize - 1);
        big.push('é');
        std::fs::write(dir.path().join("big.txt"), &big).unwrap();
        let file = read(dir.path(), "big.txt", &[], NONE).unwrap();
        assert!(file.truncated && !file.binary);
        assert_eq!(file.text.unwrap().len(), MAX_FILE_BYTES as usize - 1);
    }

    #[test]
    fn nothing_outside_the_directory_nor_through_a_link_is_shown() {
        let dir = tree();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        let link = |target: &Path, name: &str| {
            std::os::unix::fs::symlink(target, dir.path().join(name)).unwrap()
        };
        link(outside.path(), "escape");
        link(&outside.path().join("secret"), "s");
        // Links inside the directory are not followed either: one to .git would show it.
        link(&dir.path().join(".git"), "g");
        link(&dir.path().join("README.md"), "readme");
        link(&dir.path().join("src"), "source");
        for path in [
            "../x",
            "/etc/passwd",
            "src/../../x",
            "escape/secret",
            "s",
            ".git/config",
            "src/../.git/config",
            "g/config",
            "readme",
            "source/main.rs",
            "a\0b",
        ] {
            let listed = list(dir.path(), path, &[], NONE).map(|_| ());
            let read = read(dir.path(), path, &[], NONE).map(|_| ());
            assert!(listed.is_err() && read.is_err(), "{path}");
        }
        // Listed as links, never opened.
        let listing = list(dir.path(), "", &[], NONE).unwrap();
        let g = listing.entries.iter().find(|entry| entry.name == "g").unwrap();
        assert_eq!(g.kind, "link");
        assert!(matches!(read(dir.path(), "src", &[], NONE), Err(BrowseError::Invalid(_))));
        assert!(matches!(list(dir.path(), "README.md", &[], NONE), Err(BrowseError::Invalid(_))));
        // The daemon's own refusals (its data directory, the policy's Read denials).
        let refuse = |path: &Path, _: Option<(u64, u64, u64)>| path.ends_with("src/main.rs");
        assert!(matches!(
            read(dir.path(), "src/main.rs", &[], &refuse),
            Err(BrowseError::NotFound(_))
        ));
        assert!(read(dir.path(), "README.md", &[], &refuse).is_ok());
        let listing = list(dir.path(), "src", &[], &refuse).unwrap();
        assert!(listing.entries.iter().all(|entry| entry.name != "main.rs"), "not even listed");
        // A hard link to a refused file is the same file.
        let secret = outside.path().join("secret");
        let (dev, ino) = {
            use std::os::unix::fs::MetadataExt as _;
            let meta = std::fs::metadata(&secret).unwrap();
            (meta.dev(), meta.ino())
        };
        if std::fs::hard_link(&secret, dir.path().join("hard")).is_ok() {
            let by_inode = move |_: &Path, id: Option<(u64, u64, u64)>| {
                id.map(|(dev, ino, _)| (dev, ino)) == Some((dev, ino))
            };
            assert!(matches!(
                read(dir.path(), "hard", &[], &by_inode),
                Err(BrowseError::NotFound(_))
            ));
        }
    }
}
