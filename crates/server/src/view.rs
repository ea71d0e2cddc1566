//! A session's view: its stored events, read back and projected by the session crate's one
//! [`Projector`](switchboard_session::Projector), plus the daemon's own notes (a run started,
//! the CLI moved to another session, events were lost). The web UI and every API client that
//! wants meaning rather than lines read this (`GET …/view`, `…/subscribe?view=true`, one frame
//! per event). The daemon's notes are `run`, `rotated` and `lost`. A page is projected silently
//! up to where it begins, from the nearest checkpoint of the view (`checkpoints.rs`) or the
//! log's start.

use serde::{Deserialize, Serialize};
use switchboard_session::projection::settle;
use switchboard_session::{Projector, SessionEvent, Update};
use switchboard_store::EventRecord;

/// What the daemon itself says in a session's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "update", rename_all = "snake_case")]
pub enum DaemonUpdate {
    /// A run of the session's CLI begins (`resumed`: not its first).
    Run {
        /// Whether this run resumes the conversation.
        resumed: bool,
    },
    /// The CLI moved on to another Claude session; Switchboard follows it there.
    Rotated {
        /// The Switchboard session that continues it.
        to: String,
    },
    /// Events the store refused; they are missing here.
    Lost {
        /// How many.
        count: u64,
        /// Why.
        reason: String,
    },
    /// A tool call the last run left unsettled (its CLI ended while it ran) was settled before
    /// the session ran again.
    CallSettled {
        /// The call.
        tool_use_id: String,
        /// Its tool.
        tool_name: String,
        /// `interrupted` or `done`.
        settle: switchboard_session::unsettled::Settle,
        /// What the person noted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
        /// Who settled it.
        by: String,
    },
    /// A stored event that could not be read back.
    Unreadable {
        /// Why.
        reason: String,
    },
}

/// One update of a session's view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ViewUpdate {
    /// What the session's lines and events mean.
    Session(Update),
    /// What the daemon says.
    Daemon(DaemonUpdate),
}

/// An update with the event it came from (`GET …/view`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViewItem {
    /// The event's sequence number (several updates may share one).
    pub seq: u64,
    /// When the event was stored (Unix milliseconds).
    pub ts: u64,
    /// The update, flattened: `{"seq", "ts", "update": "text_delta", ...}`.
    #[serde(flatten)]
    pub update: ViewUpdate,
}

/// A subscriber's frame: one event's updates, together (`…/subscribe?view=true`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViewFrame {
    /// Always `view`.
    #[serde(rename = "type")]
    pub kind: ViewFrameKind,
    /// The event's sequence number.
    pub seq: u64,
    /// When the event was stored (Unix milliseconds).
    pub ts: u64,
    /// Its updates, in order.
    pub updates: Vec<ViewUpdate>,
}

/// A view frame's `type`: always `view`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ViewFrameKind {
    /// `view`.
    View,
}

/// Projects a session's stored events, in order.
#[derive(Default, Clone)]
pub struct Viewer {
    projector: Projector,
}

impl std::fmt::Debug for Viewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Viewer").finish_non_exhaustive()
    }
}

impl Viewer {
    /// A viewer at the start of a session's log.
    pub fn new() -> Self {
        Self::default()
    }

    /// About how many bytes it holds ([`Projector::approximate_bytes`]).
    pub fn approximate_bytes(&self) -> usize {
        self.projector.approximate_bytes()
    }

    /// Projects one stored event; its updates go to `emit`.
    pub fn apply(&mut self, record: &EventRecord, emit: &mut impl FnMut(ViewUpdate)) {
        if record.dir == "switchboard" && record.kind == "parked_answered" {
            // An answer a resumed run starts with: its decision comes when the CLI hears it.
            return;
        }
        if record.dir == "switchboard" && record.kind == "call_settled" {
            #[derive(Deserialize)]
            struct Settled {
                tool_use_id: String,
                tool_name: String,
                settle: switchboard_session::unsettled::Settle,
                #[serde(default)]
                note: Option<String>,
                by: String,
            }
            match serde_json::from_str::<Settled>(&record.payload) {
                Ok(s) => emit(ViewUpdate::Daemon(DaemonUpdate::CallSettled {
                    tool_use_id: s.tool_use_id,
                    tool_name: s.tool_name,
                    settle: s.settle,
                    note: s.note,
                    by: s.by,
                })),
                Err(error) => emit(ViewUpdate::Daemon(DaemonUpdate::Unreadable {
                    reason: format!("call_settled: {error}"),
                })),
            }
            return;
        }
        let mut daemon = |update| emit(ViewUpdate::Daemon(update));
        if record.dir == "switchboard" && matches!(&*record.kind, "started" | "rotated" | "lost") {
            let value: serde_json::Value =
                serde_json::from_str(&record.payload).unwrap_or_default();
            let text = |key: &str| value.get(key).and_then(|v| v.as_str()).unwrap_or("").to_owned();
            daemon(match &*record.kind {
                "started" => {
                    self.projector.new_run();
                    if value.get("transcript").and_then(|v| v.as_bool()) == Some(true) {
                        self.projector.set_transcript();
                    }
                    DaemonUpdate::Run {
                        resumed: value.get("resumed").and_then(|v| v.as_bool()).unwrap_or(false),
                    }
                }
                "rotated" => DaemonUpdate::Rotated { to: text("to") },
                _ => DaemonUpdate::Lost {
                    count: value.get("count").and_then(|v| v.as_u64()).unwrap_or(0),
                    reason: text("reason"),
                },
            });
            return;
        }
        match SessionEvent::from_stored(&record.kind, &record.payload) {
            Ok(event) => {
                self.projector.apply(&event, &mut |update| emit(ViewUpdate::Session(update)))
            }
            Err(error) => daemon(DaemonUpdate::Unreadable { reason: error.to_string() }),
        }
    }

    /// Projects one stored event into a subscriber's frame; `None` when it has no update.
    pub fn frame(&mut self, record: &EventRecord) -> Option<String> {
        let mut updates = Vec::new();
        self.apply(record, &mut |update| updates.push(update));
        if updates.is_empty() {
            return None;
        }
        let frame =
            ViewFrame { kind: ViewFrameKind::View, seq: record.seq, ts: record.ts_ms, updates };
        serde_json::to_string(&frame).ok()
    }

    /// The session as the events so far leave it.
    pub fn view(&self) -> &switchboard_session::View {
        self.projector.view()
    }

    /// Its state, to store beside the log in [`STATE_FORMAT`] ([`Viewer::from_state`] reads
    /// it back).
    pub fn to_state(&self) -> Vec<u8> {
        serde_json::to_vec(&self.projector).unwrap_or_default()
    }

    /// A viewer as [`Viewer::to_state`] of this build wrote it; `None` for a state it cannot
    /// read, which a reader replaces by replaying the log.
    pub fn from_state(state: &[u8]) -> Option<Viewer> {
        Some(Viewer { projector: serde_json::from_slice(state).ok()? })
    }
}

/// The format of a [`Viewer::to_state`]: the projection's source fingerprint
/// ([`switchboard_session::projection::SOURCE_FINGERPRINT`]). A state stored by a build of
/// other source is not read (its place is written again as a read or a catch-up passes it).
pub const STATE_FORMAT: &str = switchboard_session::projection::SOURCE_FINGERPRINT;

/// History settles: streamed pieces whose whole block is in the same stretch are dropped.
pub fn settle_history(items: &mut Vec<ViewItem>) {
    settle(items, |item| match &item.update {
        ViewUpdate::Session(update) => Some(update),
        // Never a streamed piece, never a block.
        ViewUpdate::Daemon(_) => None,
    });
}
