//! Named, scoped API tokens (`switchboard token create NAME --scope SCOPE`).
//!
//! A token's scope is what it may do, each scope allowing what the ones before it allow:
//!
//! - `read`: see sessions, their events and their pending requests;
//! - `approve`: also answer permission requests and questions;
//! - `operate`: also start, steer, stop and resume sessions;
//! - `admin`: also choose the CLI's program (`claude`), its environment (`env`) or MCP servers
//!   (`mcp_config`, which start programs), and manage tokens.
//!
//! The daemon's own token (the data directory's `token`, or `--token`) is `admin`, named
//! `admin`. Named tokens are kept as SHA-256 digests (never the token itself) in the data
//! directory's `tokens.json`, written whole and renamed over the old one; the token is shown
//! once, when it is made. A token is 32 random bytes, so one unsalted digest is enough: there
//! is nothing to guess from it. On a database several daemons share, the named tokens are its
//! shared `tokens` document instead ([`crate::shared`]): a token made through one node works
//! through every node, and a revoke holds on every node within [`crate::shared::REFRESH`].
//!
//! - The daemon's own token is compared in constant time; a change to the shared document
//!   through another node replaces the named ones here (a token gone is revoked).
//! - A [`Caller`] watches its token's revoked flag: a socket checks each frame against the
//!   token as it is now ([`Caller::require`]), and every socket and stream runs under
//!   [`until_revoked`], which ends it when the token is revoked (a socket's reading task ends
//!   with it: `socket::FrameReader` aborts on drop); the terminal's socket, whose end is
//!   recorded, ends through its own loop instead.
//! - [`check_create`] is the one place that says which create fields need `admin`. gRPC maps
//!   each method to a scope (`grpc::METHOD_SCOPES`; one not listed needs `admin`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;
use std::sync::Arc;
use tokio::sync::watch;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// What a token may do; each scope allows what the ones before it allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// See sessions, events and pending requests.
    Read,
    /// Also answer permission requests and questions.
    Approve,
    /// Also start, steer, stop and resume sessions.
    Operate,
    /// Also set a session's `claude`, `env` or `mcp_config`, and manage tokens.
    Admin,
}

impl Scope {
    /// Every scope, weakest first.
    pub const ALL: [Scope; 4] = [Scope::Read, Scope::Approve, Scope::Operate, Scope::Admin];

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Approve => "approve",
            Scope::Operate => "operate",
            Scope::Admin => "admin",
        }
    }

    /// The next weaker scope (`None` for `read`).
    pub fn below(self) -> Option<Scope> {
        match self {
            Scope::Read => None,
            Scope::Approve => Some(Scope::Read),
            Scope::Operate => Some(Scope::Approve),
            Scope::Admin => Some(Scope::Operate),
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Scope {
    type Err = String;

    fn from_str(text: &str) -> Result<Scope, String> {
        Scope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == text)
            .ok_or_else(|| format!("unknown scope {text:?}: read, approve, operate or admin"))
    }
}

/// Who made a request: the token's name and scope (`--no-auth`: `local`, admin).
#[derive(Debug, Clone)]
pub struct Caller {
    /// The token's name.
    pub name: Arc<str>,
    /// What it may do.
    pub scope: Scope,
    /// Whether a token names it (else [`Caller::unnamed`]).
    token: bool,
    /// The channel its requests come through when the request says so: `web UI` for the
    /// page's cookie, or a client's `x-switchboard-client` (`loop`).
    via: Option<String>,
    /// Turns true when the token is revoked: a socket opened with it takes no more frames,
    /// and one that streams ends.
    revoked: watch::Receiver<bool>,
    /// The policy that bounds what it starts and answers ([`crate::ceiling`]).
    ceiling: Option<crate::ceiling::TokenCeiling>,
}

impl Caller {
    /// A caller that no token names (`--no-auth`, a relay frontend from an allowed origin).
    pub fn unnamed(name: &str, scope: Scope) -> Caller {
        Caller {
            name: Arc::from(name),
            scope,
            token: false,
            via: None,
            // No sender: never revoked.
            revoked: watch::channel(false).1,
            ceiling: None,
        }
    }

    /// Its token's ceiling, if it has one.
    pub fn ceiling(&self) -> Option<&crate::ceiling::TokenCeiling> {
        self.ceiling.as_ref()
    }

    /// Who starts a session through `face`: its token and the token's ceiling.
    pub fn origin(&self, face: switchboard_store::Face) -> switchboard_store::Origin {
        switchboard_store::Origin {
            face,
            token: self.name.to_string(),
            ceiling: self.ceiling.as_ref().map(|ceiling| ceiling.text.to_string()),
        }
    }

    /// The named token's name: `None` for the daemon's own token and for an unnamed caller.
    pub fn token_name(&self) -> Option<&str> {
        (self.token && &*self.name != ADMIN_NAME).then_some(&*self.name)
    }

    /// The channel its requests say they come through (`web UI`, a client's name), if any.
    pub fn via(&self) -> Option<&str> {
        self.via.as_deref()
    }

    /// The same caller, its requests coming through `via` (see [`Caller::who`]).
    pub fn through(mut self, via: Option<String>) -> Caller {
        self.via = via;
        self
    }

    /// Whether it may do what `needed` allows: refused (403) with the scope it lacks, or
    /// because its token was revoked since the socket opened.
    pub fn require(&self, needed: Scope) -> Result<(), ScopeError> {
        if *self.revoked.borrow() {
            return Err(ScopeError::Revoked { name: self.name.clone() });
        }
        if self.scope < needed {
            return Err(ScopeError::Lacks { name: self.name.clone(), scope: self.scope, needed });
        }
        Ok(())
    }

    /// Returns once the token is revoked (never, for one that cannot be): a socket that
    /// streams ends then.
    pub async fn revoked(&self) {
        let mut revoked = self.revoked.clone();
        if revoked.wait_for(|revoked| *revoked).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// How a person's decision or message made with this token is recorded: `token NAME
    /// (CHANNEL)` (an unnamed caller's `NAME (CHANNEL)`), after the name a client gives
    /// (`by`), if any. The channel is the request's own when it said one (`web UI`, `loop`),
    /// else `channel`.
    pub fn who(&self, channel: &str, by: Option<String>) -> String {
        let channel = self.via.as_deref().unwrap_or(channel);
        let token = if self.token {
            format!("token {} ({channel})", self.name)
        } else {
            format!("{} ({channel})", self.name)
        };
        match by.filter(|by| !by.trim().is_empty()) {
            Some(by) => format!("{by}, {token}"),
            None => token,
        }
    }
}

impl Caller {
    /// Who a turn it starts through `channel` is from, as a policy's rules name it. The channel
    /// is the daemon's own word for the face the request came in by (`api`, `grpc`,
    /// `websocket`, `mcp`, `relay`, `transcript`), never the client's: an agent is an agent
    /// whatever it calls itself. A person is the page's cookie (the web UI) or an editor
    /// (`switchboard acp`, which names itself); any other program is `api:TOKEN`. The token is
    /// the credential: whoever holds it can present it either way (docs/policy.md).
    pub fn starter(&self, channel: &str) -> switchboard_session::TurnOrigin {
        use switchboard_session::TurnOrigin;
        match channel {
            "mcp" => TurnOrigin::Agent,
            "relay" => TurnOrigin::Relay,
            _ => match self.via.as_deref() {
                Some("web UI" | "acp") => TurnOrigin::Person,
                _ => TurnOrigin::Api { token: self.name.to_string() },
            },
        }
    }

    /// Who sends through `channel`: in words ([`Caller::who`], after the client's own name
    /// `by`) and as a rule names it ([`Caller::starter`]).
    pub fn sender(&self, channel: &str, by: Option<String>) -> switchboard_session::Sender {
        switchboard_session::Sender::new(self.who(channel, by), Some(self.starter(channel)))
    }
}

/// Runs `work` (a socket's or a stream's whole life) until it ends, or until `caller`'s token
/// is revoked: then it is dropped, which closes the socket or ends the stream.
pub async fn until_revoked(caller: &Caller, work: impl std::future::Future<Output = ()>) {
    tokio::select! {
        () = work => {}
        () = caller.revoked() => {
            tracing::info!(token = %caller.name, "a socket or stream ended: its token was revoked");
        }
    }
}

/// A caller may not do this.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ScopeError {
    /// Its scope is too weak.
    #[error("this needs a token with the {needed} scope; token {name} has {scope}")]
    Lacks {
        /// The token.
        name: Arc<str>,
        /// Its scope.
        scope: Scope,
        /// The scope needed.
        needed: Scope,
    },
    /// The request sets fields that only `admin` may set.
    #[error("setting {fields} needs a token with the admin scope; token {name} has {scope}")]
    Fields {
        /// The token.
        name: Arc<str>,
        /// Its scope.
        scope: Scope,
        /// The fields, comma-separated.
        fields: String,
    },
    /// The token's ceiling does not allow it.
    #[error("token {name} has a ceiling: {why}")]
    Ceiling {
        /// The token.
        name: Arc<str>,
        /// What it may not do, and why.
        why: String,
    },
    /// The token was revoked.
    #[error("token {name} was revoked")]
    Revoked {
        /// The token.
        name: Arc<str>,
    },
}

/// Whether `caller` may start a session as `request` asks: `claude`, `env` and `mcp_config`
/// (whose servers are programs) choose what the daemon runs, and `policy` replaces the
/// daemon's own (its deny rules included), so they need `admin`.
pub fn check_create(
    caller: &Caller,
    request: &crate::daemon::CreateSession,
) -> Result<(), ScopeError> {
    if caller.ceiling().is_some() && request.resume.is_some() && !request.fork {
        // Resumed in place, its turns would be another session's conversation's.
        return Err(ScopeError::Ceiling {
            name: caller.name.clone(),
            why: "it forks a conversation (`fork: true`), never resumes one in place".into(),
        });
    }
    // A ceiling bounds the policy a token gives (an inline one: never a file of its choosing).
    let bounded =
        |policy: &str| caller.ceiling().is_some() && crate::ceiling::policy_within_reach(policy);
    let fields: Vec<&str> = [
        ("claude", request.launch.claude.is_some()),
        ("env", !request.launch.env.is_empty()),
        ("mcp_config", !request.launch.mcp_config.is_empty()),
        ("policy", request.launch.policy.as_deref().is_some_and(|policy| !bounded(policy))),
    ]
    .into_iter()
    .filter_map(|(field, set)| set.then_some(field))
    .collect();
    let needed = if fields.is_empty() { Scope::Operate } else { Scope::Admin };
    caller.require(needed).map_err(|error| match error {
        ScopeError::Lacks { name, scope, .. } => {
            ScopeError::Fields { name, scope, fields: fields.join(", ") }
        }
        other => other,
    })
}

/// The longest token name.
pub const MAX_NAME_CHARS: usize = 64;

/// The most named tokens a daemon keeps.
pub const MAX_TOKENS: usize = 1000;

/// The daemon's own token's name.
pub const ADMIN_NAME: &str = "admin";

/// A named token as listed (never the token itself).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenInfo {
    /// Its name.
    pub name: String,
    /// What it may do.
    pub scope: Scope,
    /// When it was made (ms since the epoch; 0 for the daemon's own).
    pub created_ms: u64,
    /// When it was last presented, since the daemon started (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_ms: Option<u64>,
    /// The daemon's own token (the data directory's `token`, or `--token`): it cannot be
    /// revoked here.
    pub builtin: bool,
    /// Its ceiling, a policy's TOML ([`crate::ceiling`]), if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<String>,
}

/// A made token: its details and, this once, the token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewToken {
    /// Its details.
    #[serde(flatten)]
    pub info: TokenInfo,
    /// The token; it is not kept, so it cannot be shown again.
    pub token: String,
}

/// Why a token could not be made, revoked or kept.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Bad name or too many tokens.
    #[error("{0}")]
    Invalid(String),
    /// The name is taken.
    #[error("a token named {0} exists; revoke it first, or choose another name")]
    Exists(String),
    /// No token has that name.
    #[error("no token named {0}")]
    NotFound(String),
    /// The tokens file could not be read or written.
    #[error("{0}")]
    File(String),
}

/// The tokens file's shape (and the shared document's).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TokensFile {
    tokens: Vec<StoredToken>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredToken {
    name: String,
    scope: Scope,
    /// The token's SHA-256, hex.
    sha256: String,
    created_ms: u64,
    /// Its ceiling, a policy's TOML.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ceiling: Option<String>,
}

struct Entry {
    stored: StoredToken,
    last_used_ms: AtomicU64,
    revoked: watch::Sender<bool>,
    ceiling: Option<crate::ceiling::TokenCeiling>,
}

/// Where the named tokens are kept.
#[derive(Debug)]
enum Kept {
    /// In memory only (tests, `switchboard demo`).
    Memory,
    /// `tokens.json` in the data directory.
    File(PathBuf),
    /// The `tokens` document of a database the fleet shares.
    Shared(Arc<crate::shared::SharedDoc<TokensFile>>),
}

type Named = HashMap<[u8; 32], Arc<Entry>>;

/// The tokens a daemon accepts: its own (admin) and the named ones.
pub struct Tokens {
    admin: Arc<str>,
    admin_revoked: watch::Sender<bool>,
    admin_used_ms: AtomicU64,
    kept: Kept,
    named: Arc<RwLock<Named>>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the tokens.
        f.debug_struct("Tokens").field("kept", &self.kept).finish_non_exhaustive()
    }
}

impl Tokens {
    /// The daemon's own token and no named ones, kept in memory.
    pub fn new(admin: &str) -> Tokens {
        Tokens {
            admin: Arc::from(admin),
            admin_revoked: watch::channel(false).0,
            admin_used_ms: AtomicU64::new(0),
            kept: Kept::Memory,
            named: Arc::default(),
        }
    }

    /// The daemon's own token and the named ones kept in `file` (none if it does not exist).
    /// A file that cannot be read, or holds what it should not, is an error: the daemon does
    /// not start with tokens it cannot account for.
    pub fn load(admin: &str, file: PathBuf) -> Result<Tokens, TokenError> {
        let mut tokens = Tokens::new(admin);
        let stored = read_file(&file)?;
        *tokens.named.write() = named_of(stored, &HashMap::new())
            .map_err(|error| TokenError::File(format!("{}: {error}", file.display())))?;
        tokens.kept = Kept::File(file);
        Ok(tokens)
    }

    /// The daemon's own token and the named ones of the fleet's shared `tokens` document
    /// (where no node wrote it yet, this node's `file` becomes it), followed as other nodes
    /// change it: their new tokens work here, their revokes hold here.
    pub async fn shared(
        admin: &str,
        store: Arc<dyn switchboard_store::Documents>,
        file: PathBuf,
    ) -> Result<Tokens, TokenError> {
        let doc = crate::shared::SharedDoc::open(store, "tokens", || {
            read_file(&file).map_err(|error| error.to_string())
        })
        .await
        .map_err(TokenError::File)?;
        let mut tokens = Tokens::new(admin);
        *tokens.named.write() = named_of(doc.get(), &HashMap::new())
            .map_err(|error| TokenError::File(format!("the shared tokens: {error}")))?;
        // Each change, here or another node's, replaces the named tokens: a token kept keeps
        // its entry (its sockets, when it was last used), one that is gone is revoked.
        let named = Arc::downgrade(&tokens.named);
        let mut changes = doc.watch();
        tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                let Some(named) = named.upgrade() else { return };
                let file = changes.borrow_and_update().0.clone();
                sync(&named, file);
            }
        });
        doc.follow();
        tokens.kept = Kept::Shared(doc);
        Ok(tokens)
    }

    /// Who presents `token`, if anyone: the daemon's own token (compared in constant time),
    /// else a named token (by its digest, so nothing about the others leaks).
    pub fn caller(&self, token: &str) -> Option<Caller> {
        let now = now_ms();
        if bool::from(self.admin.as_bytes().ct_eq(token.as_bytes())) {
            self.admin_used_ms.store(now, Ordering::Relaxed);
            return Some(Caller {
                name: Arc::from(ADMIN_NAME),
                scope: Scope::Admin,
                token: true,
                via: None,
                revoked: self.admin_revoked.subscribe(),
                ceiling: None,
            });
        }
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let named = self.named.read();
        let entry = named.get(&digest)?;
        entry.last_used_ms.store(now, Ordering::Relaxed);
        Some(Caller {
            name: Arc::from(entry.stored.name.as_str()),
            scope: entry.stored.scope,
            token: true,
            via: None,
            revoked: entry.revoked.subscribe(),
            ceiling: entry.ceiling.clone(),
        })
    }

    /// Every token, the daemon's own first, then by name.
    pub fn list(&self) -> Vec<TokenInfo> {
        let used = self.admin_used_ms.load(Ordering::Relaxed);
        let mut list = vec![TokenInfo {
            name: ADMIN_NAME.to_owned(),
            scope: Scope::Admin,
            created_ms: 0,
            last_used_ms: (used != 0).then_some(used),
            builtin: true,
            ceiling: None,
        }];
        let named = self.named.read();
        let mut rest: Vec<TokenInfo> = named.values().map(|entry| entry.info()).collect();
        rest.sort_by(|a, b| a.name.cmp(&b.name));
        list.extend(rest);
        list
    }

    /// Makes a token named `name` with `scope`, kept before it is returned.
    pub async fn create(&self, name: &str, scope: Scope) -> Result<NewToken, TokenError> {
        self.create_with(name, scope, None).await
    }

    /// Makes a token named `name` with `scope` and, below `admin`, a `ceiling` (a policy's
    /// TOML) that bounds what it starts and answers; kept before it is returned.
    pub async fn create_with(
        &self,
        name: &str,
        scope: Scope,
        ceiling: Option<&str>,
    ) -> Result<NewToken, TokenError> {
        check_name(name)?;
        if name == ADMIN_NAME {
            return Err(TokenError::Exists(name.to_owned()));
        }
        if let Some(text) = ceiling {
            check_ceiling(name, scope, text)?;
        }
        let token = format!("sb_{}", switchboard_transport::random::random_hex(32));
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let stored = StoredToken {
            name: name.to_owned(),
            scope,
            sha256: hex::encode(digest),
            created_ms: now_ms(),
            ceiling: ceiling.map(str::to_owned),
        };
        let add = |file: &mut TokensFile| {
            if file.tokens.iter().any(|token| token.name == name) {
                return Err(TokenError::Exists(name.to_owned()));
            }
            if file.tokens.len() >= MAX_TOKENS {
                return Err(TokenError::Invalid(format!(
                    "a daemon keeps at most {MAX_TOKENS} named tokens; revoke some first"
                )));
            }
            file.tokens.push(stored.clone());
            Ok(())
        };
        self.change(add).await?;
        let named = self.named.read();
        let info = named.get(&digest).map(|entry| entry.info()).ok_or_else(|| {
            TokenError::File(format!("token {name} was kept but is not read back"))
        })?;
        Ok(NewToken { info, token })
    }

    /// Revokes the token named `name`: refused from now on, and sockets opened with it take
    /// no more frames. Kept before it returns.
    pub async fn revoke(&self, name: &str) -> Result<TokenInfo, TokenError> {
        if name == ADMIN_NAME {
            return Err(TokenError::Invalid(
                "the daemon's own token cannot be revoked; restart `switchboard serve` with a new --token, or delete the data directory's `token` file first".to_owned(),
            ));
        }
        let info = {
            let named = self.named.read();
            named.values().find(|entry| entry.stored.name == name).map(|entry| entry.info())
        };
        self.change(|file: &mut TokensFile| {
            let before = file.tokens.len();
            file.tokens.retain(|token| token.name != name);
            if file.tokens.len() == before {
                return Err(TokenError::NotFound(name.to_owned()));
            }
            Ok(())
        })
        .await?;
        info.ok_or_else(|| TokenError::NotFound(name.to_owned()))
    }

    /// Applies `change` to the named tokens where they are kept, then here: a token gone from
    /// them is revoked (its sockets told).
    async fn change(
        &self,
        mut change: impl FnMut(&mut TokensFile) -> Result<(), TokenError>,
    ) -> Result<(), TokenError> {
        let next = match &self.kept {
            Kept::Shared(doc) => {
                let mut refused = None;
                let kept = doc
                    .update(|file| {
                        change(file).map_err(|error| {
                            let text = error.to_string();
                            refused = Some(error);
                            text
                        })
                    })
                    .await;
                match (kept, refused) {
                    (Ok(()), _) => doc.get(),
                    (Err(_), Some(refused)) => return Err(refused),
                    (Err(error), None) => return Err(TokenError::File(error)),
                }
            }
            Kept::Memory | Kept::File(_) => {
                // One change at a time: the lock is held until the file is written.
                let mut named = self.named.write();
                let mut file = file_of(&named);
                change(&mut file)?;
                if let Kept::File(path) = &self.kept {
                    let text = serde_json::to_string_pretty(&file)
                        .map_err(|error| TokenError::File(error.to_string()))?;
                    crate::files::replace_private(path, &text).map_err(|error| {
                        TokenError::File(format!("cannot write {}: {error}", path.display()))
                    })?;
                }
                replace(&mut named, file);
                return Ok(());
            }
        };
        sync(&self.named, next);
        Ok(())
    }
}

/// The named tokens in `file` (none if it does not exist).
fn read_file(file: &std::path::Path) -> Result<TokensFile, TokenError> {
    match crate::files::read_bounded(file, MAX_TOKENS_FILE_BYTES) {
        Ok(text) => serde_json::from_str(&text).map_err(|error| {
            TokenError::File(format!("{} is unreadable: {error}", file.display()))
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(TokensFile::default()),
        Err(error) => Err(TokenError::File(format!("cannot read {}: {error}", file.display()))),
    }
}

/// The tokens of `file`, by digest; an entry of `old` is kept for a token still there.
fn named_of(file: TokensFile, old: &Named) -> Result<Named, String> {
    let mut named = Named::new();
    for token in file.tokens {
        let digest = parse_digest(&token.sha256)
            .ok_or_else(|| format!("token {} has no readable sha256", token.name))?;
        check_name(&token.name).map_err(|error| error.to_string())?;
        let taken = token.name == ADMIN_NAME
            || named.values().any(|entry: &Arc<Entry>| entry.stored.name == token.name);
        if taken {
            return Err(format!("the name {} is there twice (or is the daemon's own)", token.name));
        }
        let entry = match old.get(&digest) {
            Some(entry)
                if entry.stored.name == token.name
                    && entry.stored.scope == token.scope
                    && entry.stored.ceiling == token.ceiling =>
            {
                entry.clone()
            }
            _ => Arc::new(Entry::new(token)?),
        };
        named.insert(digest, entry);
    }
    Ok(named)
}

/// The file that keeps `named`, by name.
fn file_of(named: &Named) -> TokensFile {
    let mut tokens: Vec<StoredToken> = named.values().map(|entry| entry.stored.clone()).collect();
    tokens.sort_by(|a, b| a.name.cmp(&b.name));
    TokensFile { tokens }
}

/// Makes `named` what `file` says; a token no longer there is revoked. A file that does not
/// read (another node's bad write) changes nothing, and says so.
fn sync(named: &RwLock<Named>, file: TokensFile) {
    replace(&mut named.write(), file);
}

fn replace(named: &mut Named, file: TokensFile) {
    match named_of(file, named) {
        Ok(next) => {
            for (digest, entry) in named.iter() {
                if next.get(digest).is_none_or(|kept| !Arc::ptr_eq(kept, entry)) {
                    entry.revoked.send_replace(true);
                }
            }
            *named = next;
        }
        Err(error) => tracing::warn!("the named tokens were not changed: {error}"),
    }
}

impl Entry {
    fn new(stored: StoredToken) -> Result<Entry, String> {
        let ceiling = match &stored.ceiling {
            Some(text) => Some(crate::ceiling::TokenCeiling::new(&stored.name, text)?),
            None => None,
        };
        Ok(Entry {
            stored,
            last_used_ms: AtomicU64::new(0),
            revoked: watch::channel(false).0,
            ceiling,
        })
    }

    fn info(&self) -> TokenInfo {
        let used = self.last_used_ms.load(Ordering::Relaxed);
        TokenInfo {
            name: self.stored.name.clone(),
            scope: self.stored.scope,
            created_ms: self.stored.created_ms,
            last_used_ms: (used != 0).then_some(used),
            builtin: false,
            ceiling: self.stored.ceiling.clone(),
        }
    }
}

/// The largest tokens file read (a thousand tokens take about 150 KB).
const MAX_TOKENS_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// A name: 1–64 of letters, digits, `.`, `_`, `-`, starting with a letter or digit.
fn check_name(name: &str) -> Result<(), TokenError> {
    if crate::text::is_name(name) {
        Ok(())
    } else {
        Err(TokenError::Invalid(format!(
            "a token name is 1-{MAX_NAME_CHARS} letters, digits, '.', '_' or '-', starting with a letter or digit; not {:?}",
            name.chars().take(MAX_NAME_CHARS + 1).collect::<String>()
        )))
    }
}

/// A ceiling a token may carry: a policy, of bounded size, on a token below `admin`.
fn check_ceiling(name: &str, scope: Scope, text: &str) -> Result<(), TokenError> {
    if scope == Scope::Admin {
        return Err(TokenError::Invalid(
            "an admin token cannot have a ceiling: it makes tokens, so it would not hold; give the ceiling to an operate, approve or read token".into(),
        ));
    }
    if text.len() > crate::ceiling::MAX_CEILING_BYTES {
        return Err(TokenError::Invalid(format!(
            "the ceiling is {} bytes; at most {}",
            text.len(),
            crate::ceiling::MAX_CEILING_BYTES
        )));
    }
    crate::ceiling::TokenCeiling::new(name, text).map(drop).map_err(TokenError::Invalid)
}

fn parse_digest(text: &str) -> Option<[u8; 32]> {
    let mut digest = [0u8; 32];
    hex::decode_to_slice(text, &mut digest).ok()?;
    Some(digest)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_are_ordered_and_named() {
        assert!(Scope::Read < Scope::Approve && Scope::Approve < Scope::Operate);
        assert!(Scope::Operate < Scope::Admin);
        for scope in Scope::ALL {
            assert_eq!(scope.as_str().parse::<Scope>(), Ok(scope));
        }
        assert!("root".parse::<Scope>().unwrap_err().contains("read, approve, operate or admin"));
        assert_eq!(Scope::Read.below(), None);
        assert_eq!(Scope::Admin.below(), Some(Scope::Operate));
    }

    #[tokio::test]
    async fn named_tokens_are_kept_as_digests_and_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens.json");
        let tokens = Tokens::load("the-daemons-own-token", file.clone()).unwrap();
        let phone = tokens.create("phone", Scope::Approve).await.unwrap();
        assert!(phone.token.starts_with("sb_") && phone.token.len() == 67, "{}", phone.token);
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(!text.contains(&phone.token), "the token itself is not kept: {text}");
        assert!(text.contains(&hex::encode(Sha256::digest(phone.token.as_bytes()))));
        let mode = std::os::unix::fs::PermissionsExt::mode(&file.metadata().unwrap().permissions());
        assert_eq!(mode & 0o777, 0o600);

        let again = Tokens::load("the-daemons-own-token", file.clone()).unwrap();
        let caller = again.caller(&phone.token).expect("the token works after a restart");
        assert_eq!((&*caller.name, caller.scope), ("phone", Scope::Approve));
        // What budgets read back from a sender's record: the token, and nothing a client says.
        let who = caller.clone().through(Some("loop".into())).who("api", None);
        assert_eq!(crate::budget::token_of(&who), Some("phone"));
        let forged = caller.who("api", Some("token admin (x)".into()));
        assert_eq!(crate::budget::token_of(&forged), Some("phone"), "not the client's: {forged}");
        let forged =
            Caller::unnamed("local", Scope::Admin).who("api", Some("token admin (x)".into()));
        assert_eq!(crate::budget::token_of(&forged), None, "{forged}");
        assert_eq!(
            crate::budget::token_of(&Caller::unnamed("local", Scope::Admin).who("api", None)),
            None
        );
        let admin = again.caller("the-daemons-own-token").unwrap();
        assert_eq!((&*admin.name, admin.scope), (ADMIN_NAME, Scope::Admin));
        assert!(again.caller("sb_0000").is_none() && again.caller("").is_none());
        let names: Vec<String> = again.list().into_iter().map(|info| info.name).collect();
        assert_eq!(names, ["admin", "phone"]);

        again.revoke("phone").await.unwrap();
        assert!(again.caller(&phone.token).is_none());
        assert!(caller.require(Scope::Read).unwrap_err().to_string().contains("revoked"));
        let reloaded = Tokens::load("the-daemons-own-token", file).unwrap();
        assert!(reloaded.caller(&phone.token).is_none(), "the revocation was kept");
    }

    #[tokio::test]
    async fn names_are_checked_and_unique() {
        let tokens = Tokens::new("the-daemons-own-token");
        tokens.create("ci-bot.1", Scope::Operate).await.unwrap();
        assert!(matches!(tokens.create("ci-bot.1", Scope::Read).await, Err(TokenError::Exists(_))));
        assert!(matches!(tokens.create("admin", Scope::Read).await, Err(TokenError::Exists(_))));
        for bad in ["", "-x", "a b", "a/b", "é", &"x".repeat(MAX_NAME_CHARS + 1)] {
            assert!(
                matches!(tokens.create(bad, Scope::Read).await, Err(TokenError::Invalid(_))),
                "{bad}"
            );
        }
        assert!(matches!(tokens.revoke("nobody").await, Err(TokenError::NotFound(_))));
        assert!(matches!(tokens.revoke("admin").await, Err(TokenError::Invalid(_))));
    }

    #[test]
    fn a_bad_tokens_file_stops_the_daemon() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens.json");
        std::fs::write(&file, "{not json").unwrap();
        assert!(Tokens::load("t", file.clone()).unwrap_err().to_string().contains("unreadable"));
        std::fs::write(
            &file,
            r#"{"tokens":[{"name":"x","scope":"read","sha256":"zz","created_ms":0}]}"#,
        )
        .unwrap();
        assert!(Tokens::load("t", file).unwrap_err().to_string().contains("sha256"));
    }

    #[tokio::test]
    async fn scopes_are_required_and_decisions_name_the_token() {
        let tokens = Tokens::new("the-daemons-own-token");
        let made = tokens.create("phone", Scope::Approve).await.unwrap();
        let caller = tokens.caller(&made.token).unwrap();
        assert!(caller.require(Scope::Approve).is_ok() && caller.require(Scope::Read).is_ok());
        let refused = caller.require(Scope::Operate).unwrap_err().to_string();
        assert_eq!(refused, "this needs a token with the operate scope; token phone has approve");
        assert_eq!(caller.who("api", None), "token phone (api)");
        assert_eq!(caller.who("api", Some("alice".into())), "alice, token phone (api)");
        let frontend = Caller::unnamed("relay frontend", Scope::Operate);
        assert_eq!(frontend.who("relay", None), "relay frontend (relay)");
    }

    #[tokio::test]
    async fn shared_tokens_hold_on_every_node() {
        let store: Arc<dyn switchboard_store::Documents> =
            Arc::new(switchboard_store::MemoryStore::new());
        let dir = tempfile::tempdir().unwrap();
        // Node a's own file becomes the fleet's; node b's is not read once one is shared.
        let a_file = dir.path().join("a.json");
        Tokens::load("a-own", a_file.clone()).unwrap().create("old", Scope::Read).await.unwrap();
        let a = Tokens::shared("a-own", store.clone(), a_file).await.unwrap();
        let b_file = dir.path().join("b.json");
        let b_only = Tokens::load("b-own", b_file.clone()).unwrap();
        let lost = b_only.create("b-only", Scope::Read).await.unwrap();
        let b = Tokens::shared("b-own", store.clone(), b_file).await.unwrap();
        let names = |tokens: &Tokens| -> Vec<String> {
            tokens.list().into_iter().map(|info| info.name).collect()
        };
        assert_eq!(names(&b), ["admin", "old"]);
        assert!(b.caller(&lost.token).is_none());
        // Made through a: works through b once b reads again; revoked through b: a refuses it.
        let phone = a.create("phone", Scope::Approve).await.unwrap();
        assert!(a.caller(&phone.token).is_some(), "at once where it was made");
        let Kept::Shared(b_doc) = &b.kept else { panic!("shared") };
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while b.caller(&phone.token).is_none() {
                b_doc.refresh().await.unwrap();
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("b takes a's token");
        let on_a = a.caller(&phone.token).unwrap();
        assert!(matches!(b.create("phone", Scope::Read).await, Err(TokenError::Exists(_))));
        b.revoke("phone").await.unwrap();
        assert!(b.caller(&phone.token).is_none());
        let Kept::Shared(a_doc) = &a.kept else { panic!("shared") };
        a_doc.refresh().await.unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while a.caller(&phone.token).is_some() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("a refuses the token b revoked");
        assert!(on_a.require(Scope::Read).is_err(), "a's sockets with it are told");
        // Each node's own token stays its own.
        assert!(a.caller("b-own").is_none() && b.caller("b-own").is_some());
    }

    #[test]
    fn a_turns_origin_is_the_faces_and_the_cookies_never_a_clients_claim() {
        use switchboard_session::TurnOrigin;
        let caller = Caller::unnamed("planner", Scope::Operate);
        let api = TurnOrigin::Api { token: "planner".into() };
        assert_eq!(caller.starter("api"), api);
        assert_eq!(caller.starter("grpc"), api);
        assert_eq!(caller.clone().through(Some("loop".into())).starter("api"), api);
        // The page's cookie, and an editor: a person.
        let page = caller.clone().through(Some("web UI".into()));
        assert_eq!(page.starter("websocket"), TurnOrigin::Person);
        let editor = caller.clone().through(Some("acp".into()));
        assert_eq!(editor.starter("api"), TurnOrigin::Person);
        // An agent is an agent, and a relay frontend a relay's, whatever they call themselves.
        assert_eq!(editor.starter("mcp"), TurnOrigin::Agent);
        assert_eq!(page.starter("relay"), TurnOrigin::Relay);
        let sender = caller.sender("mcp", None);
        assert_eq!(
            (sender.who.as_str(), sender.origin),
            ("planner (mcp)", Some(TurnOrigin::Agent))
        );
    }
}
