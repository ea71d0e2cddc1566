//! Files the daemon keeps private: written owner-only, replaced whole, read within a bound.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// Writes `contents` whole to a new file beside `path`, readable by the owner only, then renames
/// it over `path`: a crash leaves the old file or the new one, never half of either.
pub(crate) fn replace_private(path: &Path, contents: &str) -> std::io::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".new");
    let temporary = PathBuf::from(temporary);
    write_private(&temporary, contents).and_then(|()| std::fs::rename(&temporary, path))
}

/// Writes `contents` to `path`, readable by the owner only.
pub(crate) fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(contents.as_bytes())?;
    // On the disk before anything renames it over an older file.
    file.sync_all()?;
    // An older file may have had wider permissions.
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
}

/// A file's text, refused when it is larger than `limit` bytes (the error says so).
pub(crate) fn read_bounded(path: &Path, limit: u64) -> std::io::Result<String> {
    let mut text = String::new();
    std::fs::File::open(path)?.take(limit + 1).read_to_string(&mut text)?;
    if text.len() as u64 > limit {
        return Err(std::io::Error::other(format!("it is larger than {} KiB", limit / 1024)));
    }
    Ok(text)
}
