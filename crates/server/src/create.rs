//! What `POST /api/sessions` takes ([`CreateSession`]): how to launch the CLI (the store's
//! [`Launch`], which the session's record keeps) and what applies to the create alone, read and
//! written as one flat object whose unknown or repeated keys are refused, naming them. Below the
//! daemon, so that what starts sessions besides a request (a schedule's task) holds one.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use switchboard_store::Launch;

/// What `POST /api/sessions` takes: how to launch the CLI ([`Launch`], which its record keeps)
/// and what applies to the create alone. On the wire it is one flat object; a key neither
/// knows is refused, naming it.
#[derive(Debug, Clone, Default)]
pub struct CreateSession {
    /// How its CLI is launched (`cwd` required).
    pub launch: Launch,
    /// A first prompt.
    pub prompt: Option<String>,
    /// Resume this Claude session id.
    pub resume: Option<String>,
    /// With `resume`: fork into a new session id.
    pub fork: bool,
    /// With `resume`: start from this message (its `uuid`) instead of the end
    /// (`--resume-session-at`); with `fork`, forks the conversation at that message.
    pub resume_at: Option<String>,
    /// Run in a git worktree of its own, on a new branch from the repository's HEAD
    /// ([`crate::worktree`]); the record keeps the worktree made ([`Launch::worktree`]).
    pub worktree: bool,
    /// The node to run it on, where several daemons share a database and a bus (`None`: the
    /// least loaded node that can, see [`Daemon::create`]).
    pub node: Option<String>,
    /// Who asks (set by the daemon from the request's token, never from its body): the first
    /// prompt's permission requests record it as who started the turn.
    pub started_by: Option<switchboard_session::Sender>,
    /// Which face and token start it, with the token's ceiling (set by the daemon from the
    /// request's token, never from its body); its record keeps it ([`Launch::origin`]).
    pub origin: Option<switchboard_store::Origin>,
}

impl CreateSession {
    /// A request for a session in `cwd`, launched as the daemon launches by default.
    pub fn new(cwd: impl Into<PathBuf>) -> CreateSession {
        CreateSession {
            launch: Launch { cwd: cwd.into(), ..Launch::default() },
            ..CreateSession::default()
        }
    }
}

/// The create request's own keys, beside the launch's.
#[derive(Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct CreateOnly {
    prompt: Option<String>,
    resume: Option<String>,
    fork: bool,
    resume_at: Option<String>,
    worktree: bool,
    node: Option<String>,
}

/// The keys a [`Launch`] reads: every one it writes, and `cli_version`, written when set.
fn launch_keys() -> &'static std::collections::BTreeSet<String> {
    static KEYS: std::sync::OnceLock<std::collections::BTreeSet<String>> =
        std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        let written = serde_json::to_value(Launch::default()).unwrap_or_default();
        let mut keys: std::collections::BTreeSet<String> =
            written.as_object().map(|map| map.keys().cloned().collect()).unwrap_or_default();
        keys.insert("cli_version".into());
        keys
    })
}

impl Serialize for CreateSession {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error as _;
        let mut map = match serde_json::to_value(&self.launch).map_err(S::Error::custom)? {
            Value::Object(map) => map,
            _ => return Err(S::Error::custom("a launch is an object")),
        };
        // The worktree asked for, not one made: a create names no worktree of its own.
        map.remove("worktree");
        // The daemon's to set, from the token and the schedule or trigger.
        map.remove("origin");
        map.remove("run");
        // What is unset is left out (a create reads it as its default): a daemon of an older
        // release, which refuses a key it does not know, still takes what a newer one sends
        // when the newer key is not used.
        map.retain(|_, value| !is_unset(value));
        let own = CreateOnly {
            prompt: self.prompt.clone(),
            resume: self.resume.clone(),
            fork: self.fork,
            resume_at: self.resume_at.clone(),
            worktree: self.worktree,
            node: self.node.clone(),
        };
        if let Value::Object(own) = serde_json::to_value(own).map_err(S::Error::custom)? {
            map.extend(own.into_iter().filter(|(_, value)| !is_unset(value)));
        }
        map.serialize(serializer)
    }
}

/// A value a create request reads as its default: null, false, an empty list or object.
fn is_unset(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    }
}

/// A JSON object read whole, refusing a key given twice (which of two values wins is not a
/// question a request should leave open).
struct Object(serde_json::Map<String, Value>);

impl<'de> Deserialize<'de> for Object {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = Object;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Object, A::Error> {
                use serde::de::Error as _;
                let mut object = serde_json::Map::new();
                while let Some((key, value)) = map.next_entry::<String, Value>()? {
                    if object.contains_key(&key) {
                        return Err(A::Error::custom(format!("duplicate field `{key}`")));
                    }
                    object.insert(key, value);
                }
                Ok(Object(object))
            }
        }
        deserializer.deserialize_map(Keys)
    }
}

impl<'de> Deserialize<'de> for CreateSession {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let Object(mut map) = Object::deserialize(deserializer)?;
        // The two a create may ask for; `relay` and `terminal` are how other sessions came.
        match map.get("transport") {
            None | Some(Value::Null) => {}
            Some(Value::String(kind)) if kind == "stdio" || kind == "sdk-url" => {}
            Some(other) => {
                return Err(D::Error::custom(format!(
                    "unknown transport {other} (stdio or sdk-url)"
                )));
            }
        }
        let mut own = serde_json::Map::new();
        for key in ["prompt", "resume", "fork", "resume_at", "worktree", "node"] {
            if let Some(value) = map.remove(key) {
                own.insert(key.to_owned(), value);
            }
        }
        if map.contains_key("origin") {
            return Err(D::Error::custom(
                "`origin` is set by the daemon from the request's token, never by a request",
            ));
        }
        if map.contains_key("run") {
            return Err(D::Error::custom(
                "`run` is set by the daemon for a schedule's or trigger's run, never by a request",
            ));
        }
        if let Some(unknown) = map.keys().find(|key| !launch_keys().contains(*key)) {
            return Err(D::Error::custom(format!("unknown field `{unknown}`")));
        }
        if !map.contains_key("cwd") {
            return Err(D::Error::missing_field("cwd"));
        }
        let launch: Launch =
            serde_json::from_value(Value::Object(map)).map_err(D::Error::custom)?;
        let own: CreateOnly =
            serde_json::from_value(Value::Object(own)).map_err(D::Error::custom)?;
        Ok(CreateSession {
            launch,
            prompt: own.prompt,
            resume: own.resume,
            fork: own.fork,
            resume_at: own.resume_at,
            worktree: own.worktree,
            node: own.node,
            started_by: None,
            origin: None,
        })
    }
}

/// A cap on a usage window's share (`max_window_utilization`) is above 0 and at most 1.
pub fn check_window_cap(cap: f64) -> Result<(), String> {
    if cap > 0.0 && cap <= 1.0 {
        Ok(())
    } else {
        Err(format!(
            "max_window_utilization is a share above 0 and at most 1 (0.5 is half a window), not {cap}"
        ))
    }
}
