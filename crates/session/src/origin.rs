//! Who started a turn, typed: a person (the web UI, an editor, a terminal), an agent (through
//! MCP), a schedule, a trigger, a relay CLI's frontend, or a program with a named token. The
//! words a policy rule names it by (`person`, `agent`, `schedule`, `trigger`, `relay`,
//! `api:TOKEN`) are its text on the wire.
//!
//! Every permission request records who started its turn as a sentence (`started_by`: `token ci
//! (api)`, `schedule nightly, token admin (api)`, `alice, token phone (web UI)`); [`TurnOrigin::
//! of_started_by`] reads that sentence, the one place that does, for what was recorded before
//! the origin was kept typed.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Who started a turn.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TurnOrigin {
    /// A person: the web UI, an editor (ACP), a terminal, a transcript taken over.
    Person,
    /// An agent, through the MCP server.
    Agent,
    /// A schedule's run.
    Schedule,
    /// A trigger's run, or feedback it routed.
    Trigger,
    /// A frontend of the agents-ui relay protocol.
    Relay,
    /// A program, with the named token (`admin` for the daemon's own).
    Api {
        /// The token's name.
        token: String,
    },
}

/// The longest token name an origin carries (a token's own limit).
pub const MAX_TOKEN_CHARS: usize = 64;

impl TurnOrigin {
    /// The origin a rule or the wire names: `person`, `agent`, `schedule`, `trigger`, `relay`,
    /// or `api:TOKEN`.
    pub fn parse(text: &str) -> Result<TurnOrigin, String> {
        Ok(match text {
            "person" => TurnOrigin::Person,
            "agent" => TurnOrigin::Agent,
            "schedule" => TurnOrigin::Schedule,
            "trigger" => TurnOrigin::Trigger,
            "relay" => TurnOrigin::Relay,
            _ => match text.strip_prefix("api:") {
                Some(token) if is_token_name(token) => TurnOrigin::Api { token: token.to_owned() },
                _ => {
                    return Err(format!(
                    "{:?} is not an origin: person, agent, schedule, trigger, relay or api:TOKEN",
                    text.chars().take(80).collect::<String>()
                ))
                }
            },
        })
    }

    /// Who started a turn, read from the sentence a request recorded (`started_by`); `None`
    /// when the sentence names no face this release knows.
    pub fn of_started_by(started_by: &str) -> Option<TurnOrigin> {
        let text = started_by.trim();
        if text.starts_with("schedule ") {
            return Some(TurnOrigin::Schedule);
        }
        if text.starts_with("trigger ") {
            return Some(TurnOrigin::Trigger);
        }
        // `…(CHANNEL)` or `…(CHANNEL via NODE)`, the channel's first word(s) before ` via `.
        let (head, channel) = text.strip_suffix(')')?.rsplit_once(" (")?;
        let channel = channel.split(" via ").next()?;
        let token =
            head.rsplit_once("token ").map(|(_, name)| name).filter(|name| is_token_name(name));
        Some(match channel {
            // As `Caller::starter` reads the faces: a transcript taken over from the page says
            // `web UI`; through a program, `transcript`.
            "web UI" | "acp" | "terminal" => TurnOrigin::Person,
            "mcp" => TurnOrigin::Agent,
            "relay" => TurnOrigin::Relay,
            "api" | "grpc" | "websocket" | "transcript" => {
                TurnOrigin::Api { token: token?.to_owned() }
            }
            _ => return None,
        })
    }
}

impl fmt::Display for TurnOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TurnOrigin::Person => f.write_str("person"),
            TurnOrigin::Agent => f.write_str("agent"),
            TurnOrigin::Schedule => f.write_str("schedule"),
            TurnOrigin::Trigger => f.write_str("trigger"),
            TurnOrigin::Relay => f.write_str("relay"),
            TurnOrigin::Api { token } => write!(f, "api:{token}"),
        }
    }
}

impl Serialize for TurnOrigin {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TurnOrigin {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        TurnOrigin::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Who sent a prompt: in words, as every request records it (`started_by`: `token ci (api)`),
/// and typed, as a rule names it. The origin is `None` where the face cannot vouch for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sender {
    /// In words.
    pub who: String,
    /// Typed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<TurnOrigin>,
}

impl Sender {
    /// `who`, of `origin`.
    pub fn new(who: impl Into<String>, origin: Option<TurnOrigin>) -> Sender {
        Sender { who: who.into(), origin }
    }
}

/// The most distinct origins [`OpenTurns`] tells apart; more are mixed.
const MAX_OPEN_ORIGINS: usize = 8;

/// The origins of the prompts sent since the session was last idle. A tool call belongs to
/// one of their turns, and only the CLI knows which (a prompt sent during a turn may be taken
/// into it): while they differ, a call's origin is unknown, so a rule on origin can be
/// trusted only when every open turn has the same one.
#[derive(Debug, Clone, Default)]
pub struct OpenTurns {
    origins: Vec<Option<TurnOrigin>>,
}

impl OpenTurns {
    /// A prompt from `origin` was sent.
    pub fn sent(&mut self, origin: Option<TurnOrigin>) {
        if self.origins.contains(&origin) {
            return;
        }
        if self.origins.len() >= MAX_OPEN_ORIGINS {
            // Too many to tell apart: unknown until the session is idle again.
            self.origins.truncate(1);
            self.origins.push(None);
            return;
        }
        self.origins.push(origin);
    }

    /// Every turn has ended.
    pub fn idle(&mut self) {
        self.origins.clear();
    }

    /// The origin every open turn shares, if they share one and it is known.
    pub fn origin(&self) -> Option<&TurnOrigin> {
        match self.origins.as_slice() {
            [Some(origin)] => Some(origin),
            _ => None,
        }
    }
}

/// A token's name: 1 to 64 letters, digits, `.`, `_` or `-`.
fn is_token_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TOKEN_CHARS
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_reads_back_as_written_and_a_bad_one_is_named() {
        for text in ["person", "agent", "schedule", "trigger", "relay", "api:ci", "api:admin"] {
            let origin = TurnOrigin::parse(text).unwrap();
            assert_eq!(origin.to_string(), text);
            let json = serde_json::to_string(&origin).unwrap();
            assert_eq!(serde_json::from_str::<TurnOrigin>(&json).unwrap(), origin);
        }
        for bad in ["", "people", "api:", "api:a b", "API:ci", &format!("api:{}", "x".repeat(65))] {
            let error = TurnOrigin::parse(bad).unwrap_err();
            assert!(error.contains("is not an origin"), "{bad}: {error}");
        }
        assert!(serde_json::from_str::<TurnOrigin>("\"robot\"").is_err());
    }

    #[test]
    fn a_calls_origin_is_known_only_while_every_open_turn_shares_it() {
        let person = Some(TurnOrigin::Person);
        let agent = Some(TurnOrigin::Agent);
        let mut open = OpenTurns::default();
        assert_eq!(open.origin(), None, "no prompt of ours: a turn the CLI began itself");
        open.sent(person.clone());
        open.sent(person.clone());
        assert_eq!(open.origin(), person.as_ref());
        open.sent(agent.clone());
        assert_eq!(open.origin(), None, "an agent's prompt may be taken into the person's turn");
        open.idle();
        open.sent(agent.clone());
        assert_eq!(open.origin(), agent.as_ref());
        open.idle();
        open.sent(None);
        assert_eq!(open.origin(), None, "a sender no face vouches for");
        open.idle();
        for n in 0..20 {
            open.sent(Some(TurnOrigin::Api { token: format!("t{n}") }));
        }
        assert_eq!(open.origin(), None);
        assert!(open.origins.len() <= MAX_OPEN_ORIGINS + 1);
    }

    #[test]
    fn the_recorded_sentence_of_every_face_is_read() {
        let cases = [
            ("token ci (api)", Some(TurnOrigin::Api { token: "ci".into() })),
            ("token admin (grpc)", Some(TurnOrigin::Api { token: "admin".into() })),
            ("alice, token phone (websocket)", Some(TurnOrigin::Api { token: "phone".into() })),
            ("token phone (api via beta)", Some(TurnOrigin::Api { token: "phone".into() })),
            ("alice, token phone (web UI)", Some(TurnOrigin::Person)),
            ("editor, token admin (acp)", Some(TurnOrigin::Person)),
            ("token planner (mcp)", Some(TurnOrigin::Agent)),
            ("token admin (relay)", Some(TurnOrigin::Relay)),
            ("token admin (transcript)", Some(TurnOrigin::Api { token: "admin".into() })),
            ("schedule nightly, token admin (api)", Some(TurnOrigin::Schedule)),
            ("trigger ci, token admin (api)", Some(TurnOrigin::Trigger)),
            // A channel this release does not know, or a sentence of no face: not guessed.
            ("token x (carrier pigeon)", None),
            ("someone", None),
            ("local (api)", None),
        ];
        for (sentence, expected) in cases {
            assert_eq!(TurnOrigin::of_started_by(sentence), expected, "{sentence}");
        }
    }
}
