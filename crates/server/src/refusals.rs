//! What the Files view never shows of a session's directory ([`crate::browse`]), by path and
//! by file identity: the daemon's data directory, the kernel's trees, and what the session's
//! policy denies to `Read`, under any of a file's names.

use std::path::PathBuf;

use serde_json::json;
use switchboard_session::Policy;

/// What the Files view never shows of a session's directory ([`crate::browse`]): the daemon's
/// data directory (by path, and its files by inode, so a hard link to its token is refused
/// too), the kernel's trees, and what the session's policy denies to `Read`. The policy is
/// asked of the real path with the real directory and home, and of the same file under the
/// directory as the session names it: `Read(./.env)` holds whether the session's `cwd` was
/// given through a link or with `./` in it.
pub(crate) struct Refusals {
    private: Option<PathBuf>,
    /// Files refused by identity: the data directory's, and those the policy denies that have
    /// another name.
    inodes: std::collections::HashSet<(u64, u64)>,
    policy: Policy,
    real: switchboard_session::MatchContext,
    named: switchboard_session::MatchContext,
    /// The denied folders were too large to walk: every file with another name is refused.
    hard_links_refused: bool,
}

/// The most entries walked to find the hard-linked files a policy denies (see
/// `Refusals::note_denied_hard_links`).
const MAX_DENIED_WALK: usize = 20_000;

impl Refusals {
    /// Blocking: resolves paths and reads the data directory's entries.
    pub(crate) fn new(
        root: &std::path::Path,
        private: Option<&std::path::Path>,
        policy: Policy,
    ) -> Self {
        use std::os::unix::fs::MetadataExt as _;
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let real_of =
            |path: &std::path::Path| path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        let private = private.map(real_of);
        let mut inodes = std::collections::HashSet::new();
        if let Some(dir) = &private {
            if let Ok(meta) = std::fs::metadata(dir) {
                inodes.insert((meta.dev(), meta.ino()));
            }
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten().take(1000) {
                if let Ok(meta) = entry.metadata() {
                    inodes.insert((meta.dev(), meta.ino()));
                }
            }
        }
        let mut refusals = Refusals {
            private,
            inodes,
            policy,
            real: switchboard_session::MatchContext {
                cwd: real_of(root),
                home: home.as_deref().map(real_of),
            },
            named: switchboard_session::MatchContext { cwd: root.to_path_buf(), home },
            hard_links_refused: false,
        };
        refusals.note_denied_hard_links();
        refusals
    }

    /// Notes the identity of every file the policy denies to `Read` that has another name (a
    /// hard link, which a path check would not know): the folders each `Read` deny rule names
    /// are walked, at most [`MAX_DENIED_WALK`] entries in all. Past that, every file with more
    /// than one name is refused (fails closed).
    fn note_denied_hard_links(&mut self) {
        use std::os::unix::fs::MetadataExt as _;
        let mut bases: Vec<PathBuf> = Vec::new();
        for rule in self.policy.deny_rules() {
            let Some(pattern) =
                rule.trim().strip_prefix("Read(").and_then(|rest| rest.strip_suffix(')'))
            else {
                continue;
            };
            // The part before the first wildcard, as a folder (or a file) to walk, resolved as
            // the policy resolves a rule's path: `//abs` absolute, `~/x` under the home, `/x`,
            // `./x` and `x` under the session's directory.
            let literal: String =
                pattern.chars().take_while(|c| !matches!(c, '*' | '?' | '[' | '{')).collect();
            let base = if let Some(rest) = literal.strip_prefix("//") {
                Some(PathBuf::from(format!("/{rest}")))
            } else if let Some(rest) = literal.strip_prefix("~/") {
                self.real.home.as_ref().map(|home| home.join(rest))
            } else {
                let relative = literal.strip_prefix("./").unwrap_or(&literal);
                Some(self.real.cwd.join(relative.trim_start_matches('/')))
            };
            // A rule with no folder of its own (`Read(**/.env)`) covers the whole directory,
            // which is not walked on every request: every file with more than one name is
            // refused instead (fails closed).
            if literal.trim_start_matches("./").trim_start_matches('/').is_empty() {
                self.hard_links_refused = true;
                return;
            }
            bases.extend(base);
        }
        let mut seen = 0usize;
        let mut stack = bases;
        while let Some(path) = stack.pop() {
            seen += 1;
            if seen > MAX_DENIED_WALK {
                self.hard_links_refused = true;
                return;
            }
            let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
            if meta.is_dir() {
                for entry in std::fs::read_dir(&path).into_iter().flatten().flatten() {
                    stack.push(entry.path());
                }
            } else if meta.is_file() && meta.nlink() > 1 && self.denied(&path) {
                self.inodes.insert((meta.dev(), meta.ino()));
            }
        }
    }

    /// Whether the policy denies reading `path` (by the real path, or as the session names it).
    fn denied(&self, path: &std::path::Path) -> bool {
        let denied = |path: &std::path::Path, context: &switchboard_session::MatchContext| {
            self.policy.decide("Read", &json!({"file_path": path}), context).behavior
                == switchboard_session::Behavior::Deny
        };
        let named =
            path.strip_prefix(&self.real.cwd).ok().map(|inside| self.named.cwd.join(inside));
        denied(path, &self.real) || named.is_some_and(|named| denied(&named, &self.named))
    }

    /// `id`: the opened file's device, inode and number of names.
    pub(crate) fn refuses(&self, path: &std::path::Path, id: Option<(u64, u64, u64)>) -> bool {
        self.private.as_ref().is_some_and(|dir| path.starts_with(dir))
            || id.is_some_and(|(dev, ino, names)| {
                self.inodes.contains(&(dev, ino)) || (self.hard_links_refused && names > 1)
            })
            || ["/proc", "/sys", "/dev"].iter().any(|kernel| path.starts_with(kernel))
            || self.denied(path)
    }
}
