//! The audit trail (docs/observability.md): what was decided and by whom, sessions started
//! and ended, tokens made and revoked, budgets changed; each record hash-chained to the one
//! before, so that a record altered or removed shows.
//!
//! The trail is a log of its own in the store, [`AUDIT_LOG`], beside the sessions' logs: the
//! same append-only, gap-free sequence (checked by compare-and-set in the store, so two nodes
//! of a fleet writing at once each get a place), never a session's (a session's id is a
//! UUID). Each record's `hash` is SHA-256 over the one before's hash and the record's own
//! fields as JSON ([`AuditRecord::body`]); the first follows [`GENESIS`]. [`verify`] walks a
//! run of records and names the first that does not follow.
//!
//! This file is the trail's meaning, shared by the daemon (`daemon::audit` writes and reads
//! it) and the CLI (`switchboard audit verify` checks an export offline).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use switchboard_session::DecidedBy;

/// The trail's log in the store: not a session's (theirs are UUIDs).
pub const AUDIT_LOG: &str = "audit";

/// What the first record follows.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What one record says happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AuditEntry {
    /// A permission request decided.
    Decision {
        /// The session that asked.
        session: String,
        /// Who started the turn that asked, when the session knew it (`person`, `agent`,
        /// `schedule`, `trigger`, `relay`, `api:TOKEN`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin: Option<String>,
        /// The tool.
        tool: String,
        /// The tool call, when known (its input is in the session's log under this id).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_use_id: Option<String>,
        /// `allow` or `deny`.
        decision: String,
        /// Who decided: a policy rule, a person (through which face and token), the CLI, a
        /// timeout.
        by: DecidedBy,
        /// The request.
        request_id: String,
    },
    /// A run of a session's CLI started (its first, or a resume).
    SessionStarted {
        /// The session.
        session: String,
        /// Its directory.
        cwd: String,
        /// The face and the token that started it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        started_by: Option<String>,
        /// Not its first run (a resume).
        #[serde(default)]
        resumed: bool,
        /// Its own budget as it started, US dollars.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_budget_usd: Option<f64>,
    },
    /// A session's CLI ended.
    SessionEnded {
        /// The session.
        session: String,
        /// `exited` or `crashed`.
        state: String,
        /// Why, when the CLI's own end does not say: the daemon stopped, its node was lost,
        /// or a relay CLI moved on to another session.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        why: Option<String>,
    },
    /// A named token made.
    TokenCreated {
        /// Its name.
        name: String,
        /// Its scope.
        scope: String,
        /// Whether it has a ceiling.
        ceiling: bool,
        /// Who made it.
        by: String,
    },
    /// A named token revoked.
    TokenRevoked {
        /// Its name.
        name: String,
        /// Who revoked it.
        by: String,
    },
    /// A budget changed: the daily one, or a session's own.
    BudgetChanged {
        /// The session, for its own budget.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<String>,
        /// What changed, as the request named it (`daily_usd`, `max_budget_usd`, …).
        limit: String,
        /// The new limit, US dollars (`None`: no limit).
        usd: Option<f64>,
        /// Who changed it.
        by: String,
    },
}

impl AuditEntry {
    /// The session it is about, if one.
    pub fn session(&self) -> Option<&str> {
        match self {
            AuditEntry::Decision { session, .. }
            | AuditEntry::SessionStarted { session, .. }
            | AuditEntry::SessionEnded { session, .. } => Some(session),
            AuditEntry::BudgetChanged { session, .. } => session.as_deref(),
            AuditEntry::TokenCreated { .. } | AuditEntry::TokenRevoked { .. } => None,
        }
    }

    /// Its kind, as the JSON's `kind` says.
    pub fn kind(&self) -> &'static str {
        match self {
            AuditEntry::Decision { .. } => "decision",
            AuditEntry::SessionStarted { .. } => "session_started",
            AuditEntry::SessionEnded { .. } => "session_ended",
            AuditEntry::TokenCreated { .. } => "token_created",
            AuditEntry::TokenRevoked { .. } => "token_revoked",
            AuditEntry::BudgetChanged { .. } => "budget_changed",
        }
    }
}

/// One record of the trail, chained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Its place in the trail, from 1, without a gap.
    pub seq: u64,
    /// When it was written (Unix ms).
    pub at_ms: u64,
    /// The node that wrote it, in a fleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// What happened.
    pub entry: AuditEntry,
    /// The hash of the record before ([`GENESIS`] for the first).
    pub prev: String,
    /// SHA-256 over `prev` and [`AuditRecord::body`], hex.
    pub hash: String,
}

/// What a record's hash covers besides the one before's hash.
#[derive(Serialize)]
struct Body<'a> {
    seq: u64,
    at_ms: u64,
    node: &'a Option<String>,
    entry: &'a AuditEntry,
}

impl AuditRecord {
    /// The record after `prev` (`seq` and its hash), chained.
    pub fn new(
        seq: u64,
        at_ms: u64,
        node: Option<String>,
        entry: AuditEntry,
        prev: String,
    ) -> AuditRecord {
        let mut record = AuditRecord { seq, at_ms, node, entry, prev, hash: String::new() };
        record.hash = record.digest();
        record
    }

    /// The JSON its hash covers: its fields but `prev` and `hash`, in their order.
    pub fn body(&self) -> String {
        let body = Body { seq: self.seq, at_ms: self.at_ms, node: &self.node, entry: &self.entry };
        serde_json::to_string(&body).unwrap_or_default()
    }

    /// What its hash should be.
    fn digest(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update(self.prev.as_bytes());
        hasher.update(b"\n");
        hasher.update(self.body().as_bytes());
        hex::encode(hasher.finalize())
    }
}

/// Where a run of records stops following: the record and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Broken {
    /// The first record that does not follow (the one expected, when one is missing).
    pub seq: u64,
    /// What is wrong with it.
    pub problem: String,
}

/// What [`verify`] found of a run that holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verified {
    /// The records checked.
    pub records: u64,
    /// The last record's place and hash (`0` and [`GENESIS`] for none).
    pub head_seq: u64,
    /// Its hash.
    pub head_hash: String,
}

/// Checks a run of records, in order: each in its place (a gap is a record removed), each
/// following the one before (`prev` its hash), each hash its own (a changed field shows). A
/// run from record 1 must follow [`GENESIS`]; a run from later (an export `--since`) is taken
/// as following whatever its first record says.
pub fn verify<'a>(records: impl IntoIterator<Item = &'a AuditRecord>) -> Result<Verified, Broken> {
    let mut chain = Chain::default();
    for record in records {
        chain.follow(record)?;
    }
    Ok(chain.verified())
}

/// [`verify`] a record at a time, for a run too long to hold (an export read line by line).
#[derive(Debug, Default)]
pub struct Chain {
    head: Option<(u64, String)>,
    count: u64,
    /// The run must start at record 1 (a whole trail, not an export `--since`).
    whole: bool,
}

impl Chain {
    /// A chain for a whole trail: its first record must be record 1, following [`GENESIS`]
    /// (records removed from the start show).
    pub fn whole() -> Chain {
        Chain { whole: true, ..Chain::default() }
    }

    /// Checks that `record` follows the records before it.
    pub fn follow(&mut self, record: &AuditRecord) -> Result<(), Broken> {
        match &self.head {
            None if self.whole && record.seq != 1 => {
                return Err(Broken {
                    seq: 1,
                    problem: format!("records 1 to {} are missing", record.seq.saturating_sub(1)),
                });
            }
            None if record.seq == 1 && record.prev != GENESIS => {
                return Err(Broken { seq: 1, problem: "the first record follows nothing".into() });
            }
            None => {}
            Some((seq, _)) if record.seq != seq + 1 => {
                let problem = if record.seq > seq + 1 {
                    format!("records {} to {} are missing", seq + 1, record.seq - 1)
                } else {
                    format!("record {} comes again, or out of order, after {seq}", record.seq)
                };
                return Err(Broken { seq: seq + 1, problem });
            }
            Some((seq, hash)) if &record.prev != hash => {
                return Err(Broken {
                    seq: record.seq,
                    problem: format!(
                        "it does not follow record {seq} (whose hash is not its prev)"
                    ),
                });
            }
            Some(_) => {}
        }
        if record.hash != record.digest() {
            return Err(Broken {
                seq: record.seq,
                problem: "its fields are not those its hash was made of: it was altered".into(),
            });
        }
        self.head = Some((record.seq, record.hash.clone()));
        self.count += 1;
        Ok(())
    }

    /// What the records so far make.
    pub fn verified(&self) -> Verified {
        let (head_seq, head_hash) = self.head.clone().unwrap_or((0, GENESIS.to_owned()));
        Verified { records: self.count, head_seq, head_hash }
    }
}

/// The CSV header [`csv_row`] writes under.
pub const CSV_HEADER: &str = "seq,at_ms,node,kind,session,detail,prev,hash";

/// One record as a CSV row (the detail is the entry's JSON; a field with a comma, a quote or a
/// line break is quoted, its quotes doubled). CSV is for reading; only JSON lines verify.
pub fn csv_row(record: &AuditRecord) -> String {
    let quote = |field: &str| {
        if field.contains([',', '"', '\n', '\r']) {
            format!("\"{}\"", field.replace('"', "\"\""))
        } else {
            field.to_owned()
        }
    };
    let detail = serde_json::to_string(&record.entry).unwrap_or_default();
    [
        record.seq.to_string(),
        record.at_ms.to_string(),
        quote(record.node.as_deref().unwrap_or("")),
        record.entry.kind().to_owned(),
        quote(record.entry.session().unwrap_or("")),
        quote(&detail),
        record.prev.clone(),
        record.hash.clone(),
    ]
    .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trail(n: u64) -> Vec<AuditRecord> {
        let mut prev = GENESIS.to_owned();
        (1..=n)
            .map(|seq| {
                let entry = AuditEntry::TokenCreated {
                    name: format!("t{seq}"),
                    scope: "read".into(),
                    ceiling: false,
                    by: "admin".into(),
                };
                let record = AuditRecord::new(seq, 1000 + seq, None, entry, prev.clone());
                prev = record.hash.clone();
                record
            })
            .collect()
    }

    #[test]
    fn a_whole_trail_verifies_and_says_its_head() {
        let records = trail(5);
        let verified = verify(&records).unwrap();
        assert_eq!((verified.records, verified.head_seq), (5, 5));
        assert_eq!(verified.head_hash, records[4].hash);
        assert_eq!(verify(&records[2..]).unwrap().records, 3, "a run from later");
        assert_eq!(verify(&[]).unwrap().head_hash, GENESIS);
    }

    #[test]
    fn an_altered_record_shows() {
        let mut records = trail(5);
        let AuditEntry::TokenCreated { scope, .. } = &mut records[2].entry else { panic!() };
        *scope = "admin".into();
        let broken = verify(&records).unwrap_err();
        assert_eq!(broken.seq, 3);
        assert!(broken.problem.contains("altered"), "{broken:?}");
        // Rehashing it does not help: the next no longer follows it.
        records[2].hash = records[2].digest();
        let broken = verify(&records).unwrap_err();
        assert_eq!(broken.seq, 4);
        assert!(broken.problem.contains("does not follow record 3"), "{broken:?}");
    }

    #[test]
    fn a_removed_record_shows() {
        let mut records = trail(5);
        records.remove(1);
        let broken = verify(&records).unwrap_err();
        assert_eq!(broken.seq, 2);
        assert!(broken.problem.contains("records 2 to 2 are missing"), "{broken:?}");
        // Renumbered to hide the gap: the chain still breaks.
        let mut records = trail(5);
        records.remove(1);
        for record in &mut records[1..] {
            record.seq -= 1;
            record.hash = record.digest();
        }
        assert_eq!(verify(&records).unwrap_err().seq, 2);
        // The first removed.
        assert_eq!(verify(&trail(3)[1..]).unwrap().records, 2, "a run from later stands");
        let mut first = trail(1);
        first[0].prev = "f".repeat(64);
        first[0].hash = first[0].digest();
        assert_eq!(verify(&first).unwrap_err().seq, 1);
    }

    #[test]
    fn a_whole_trail_starts_at_its_first_record() {
        let records = trail(4);
        let mut whole = Chain::whole();
        let broken = records[1..].iter().try_for_each(|record| whole.follow(record)).unwrap_err();
        assert_eq!((broken.seq, broken.problem.as_str()), (1, "records 1 to 1 are missing"));
        let mut whole = Chain::whole();
        records.iter().try_for_each(|record| whole.follow(record)).unwrap();
        assert_eq!(whole.verified().records, 4);
    }

    #[test]
    fn a_record_reads_back_as_written_and_as_csv() {
        let entry = AuditEntry::BudgetChanged {
            session: Some("s, \"1\"".into()),
            limit: "max_budget_usd".into(),
            usd: Some(0.1 + 0.2),
            by: "token ops (rest)".into(),
        };
        let record = AuditRecord::new(1, 5, Some("n1".into()), entry, GENESIS.into());
        let text = serde_json::to_string(&record).unwrap();
        let back: AuditRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, record);
        assert!(verify([&back]).is_ok());
        let row = csv_row(&record);
        assert!(row.starts_with("1,5,n1,budget_changed,\"s, \"\"1\"\"\","), "{row}");
    }
}
