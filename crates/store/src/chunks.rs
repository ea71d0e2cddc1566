//! Events in the SQLite database: each session's events in **chunks**, rows of up to
//! [`CHUNK_EVENTS`] consecutive events (or [`CHUNK_BYTES`] of them) in one blob.
//!
//! Why: a fold (see `journal.rs`) used to insert one row per event into a table in append order,
//! plus its entry in a (session, seq) index: about 2.6 µs of the writer's CPU per event, a third
//! of everything the daemon spent per line when one CLI streamed flat out. A fold now writes
//! each session's waiting events as one chunk, or more of up to [`CHUNK_EVENTS`]: the row and
//! index work is paid once per chunk, and what is left per event is copying its bytes into the
//! chunk's body. (A session that writes a few lines a second gets a chunk of a few lines per
//! fold; chunks are not merged later.) Reads are by page (`events_after`, `events_before`) and
//! read the chunks the page covers, skipping what is outside it; live readers are served from
//! the journal's memory and never reach them.
//!
//! Bodies are compressed (LZ4 blocks, `lz4_flex`) when that makes them smaller: a session's
//! lines repeat their keys, ids and framing, and every byte that reaches SQLite is written
//! twice more (its WAL, then the database file at a checkpoint), so the bytes saved cost less
//! than the compression. A body under [`MIN_COMPRESSED`] bytes is stored as it is, and a
//! fold's chunks share one compressor table.
//!
//! Table `chunks`: `session` (the key from `session_keys`), `first_seq`, `last_seq`, `count`,
//! `codec` (0: the body as it is, 1: an LZ4 block), `size` (the body's bytes before any
//! compression) and `body`, found through a unique index on (session, first_seq). A session's
//! chunks never overlap: a fold writes only events past the session's last chunk. The body
//! (uncompressed) holds each event as its `u64` seq, `u64` ts_ms, then dir, kind and payload
//! (each a `u32` length and UTF-8), little-endian, one after the other.
//!
//! - A chunk that does not decode, or whose events do not match its row (seqs, count), is an
//!   error naming the session and seq, not a panic; sizes are checked before anything is
//!   allocated. (Like SQLite's own pages, bodies carry no checksum.)
//! - Every read is one statement: a session's key, which a delete can free for another
//!   session, is looked up inside it. A page's chunks must follow one another (each starts
//!   past the last one's end).
//! - The writer remembers each session's key and last stored seq (read as at least its newest
//!   chunk's first seq, so a damaged row cannot make a new chunk collide with an old one),
//!   forgets them every 64 folds, and starts from the database again.

use rusqlite::{params, CachedStatement, Connection, OptionalExtension};

use crate::encoding::{put_str, Decoder};
use crate::{EventRecord, StoreError};

/// A chunk holds at most this many events (a fold writes at least one chunk for each session
/// with events waiting, so a session that writes a few lines a second has chunks of a few).
pub const CHUNK_EVENTS: usize = 256;

/// A chunk's body holds at most this many bytes: an event that would take it past closes it
/// first, and an event larger than that is a chunk of its own.
pub const CHUNK_BYTES: usize = 64 * 1024;

/// `codec` of a body stored as it is.
const PLAIN: i64 = 0;
/// `codec` of a body stored as an LZ4 block.
const LZ4: i64 = 1;

/// A body smaller than this is stored as it is: compressing it costs more (a hash table
/// cleared, its output buffer sized) than the few bytes it could save.
const MIN_COMPRESSED: usize = 512;

/// No chunk is larger than this before compression (the journal's largest record): a damaged
/// `size` is refused before anything is allocated for it.
const MAX_SIZE: usize = 1 << 30;

/// What the writer knows of a session it has written: its key, and the last seq in the
/// database.
pub(crate) struct Known {
    key: i64,
    last: u64,
}

/// Sessions the writer has written, by id.
pub(crate) type Keys = foldhash::HashMap<String, Known>;

/// A session's key, if it has one.
fn key_of(connection: &Connection, session_id: &str) -> rusqlite::Result<Option<i64>> {
    connection
        .prepare_cached("SELECT key FROM session_keys WHERE id = ?1")?
        .query_row(params![session_id], |row| row.get(0))
        .optional()
}

/// Session `session_id`'s last seq in the database (0 for none), in one statement (see
/// [`events_after`]). Never below its newest chunk's first seq, even where that chunk's row is
/// damaged: the writer goes on after it, and a chunk it writes never collides with one there.
pub(crate) fn last_seq_of(connection: &Connection, session_id: &str) -> rusqlite::Result<u64> {
    let last: Option<i64> = connection
        .prepare_cached(
            "SELECT MAX(first_seq, CAST(last_seq AS INTEGER)) FROM chunks
             WHERE session = (SELECT key FROM session_keys WHERE id = ?1)
             ORDER BY first_seq DESC LIMIT 1",
        )?
        .query_row(params![session_id], |row| row.get(0))
        .optional()?;
    Ok(last.map_or(0, |last| last.max(0) as u64))
}

/// What the writer knows of `session_id`, its key created on its first event.
fn known<'k>(
    connection: &Connection,
    keys: &'k mut Keys,
    session_id: &str,
) -> rusqlite::Result<&'k mut Known> {
    if !keys.contains_key(session_id) {
        let known = match key_of(connection, session_id)? {
            Some(key) => Known { key, last: last_seq_of(connection, session_id)? },
            None => {
                connection
                    .prepare_cached("INSERT INTO session_keys (id) VALUES (?1)")?
                    .execute(params![session_id])?;
                Known { key: connection.last_insert_rowid(), last: 0 }
            }
        };
        keys.insert(session_id.to_owned(), known);
    }
    Ok(keys.get_mut(session_id).expect("inserted above"))
}

/// Builds chunks of one session's consecutive events and inserts each as it closes.
pub(crate) struct Chunker<'c> {
    insert: CachedStatement<'c>,
    key: i64,
    first: u64,
    last: u64,
    count: usize,
    body: Vec<u8>,
    /// The body compressed.
    packed: Vec<u8>,
    /// The compressor's hash table, made once a chunker (a fold), not once a chunk: a fold
    /// of many sessions' few lines each closes a chunk for each.
    table: lz4_flex::block::CompressTable,
}

impl<'c> Chunker<'c> {
    pub(crate) fn new(connection: &'c Connection) -> rusqlite::Result<Chunker<'c>> {
        Ok(Chunker {
            insert: connection.prepare_cached(
                "INSERT INTO chunks (session, first_seq, last_seq, count, codec, size, body)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?,
            key: 0,
            first: 0,
            last: 0,
            count: 0,
            body: Vec::new(),
            packed: Vec::new(),
            table: lz4_flex::block::CompressTable::default(),
        })
    }

    /// Adds session `key`'s next event (in seq order; a chunk closes when the session
    /// changes, or when it is full or this event would take it past [`CHUNK_BYTES`]).
    pub(crate) fn add(
        &mut self,
        key: i64,
        seq: u64,
        ts_ms: u64,
        dir: &str,
        kind: &str,
        payload: &str,
    ) -> rusqlite::Result<()> {
        self.make_room(key, seq, 8 + 8 + 12 + dir.len() + kind.len() + payload.len())?;
        self.body.extend_from_slice(&seq.to_le_bytes());
        self.body.extend_from_slice(&ts_ms.to_le_bytes());
        put_str(&mut self.body, dir);
        put_str(&mut self.body, kind);
        put_str(&mut self.body, payload);
        Ok(())
    }

    /// As [`Chunker::add`], for an event already laid out as a body holds it (`encoded`:
    /// seq, ts_ms, dir, kind, payload; the journal writes its events so).
    pub(crate) fn add_encoded(
        &mut self,
        key: i64,
        seq: u64,
        encoded: &[u8],
    ) -> rusqlite::Result<()> {
        self.make_room(key, seq, encoded.len())?;
        self.body.extend_from_slice(encoded);
        Ok(())
    }

    /// Closes the chunk being built if session `key`'s event `seq` (`size` bytes in a body)
    /// does not belong in it, and counts that event in.
    fn make_room(&mut self, key: i64, seq: u64, size: usize) -> rusqlite::Result<()> {
        if self.count > 0
            && (key != self.key
                || self.count >= CHUNK_EVENTS
                || self.body.len() + size > CHUNK_BYTES)
        {
            self.finish()?;
        }
        if self.count == 0 {
            self.key = key;
            self.first = seq;
        }
        self.count += 1;
        self.last = seq;
        Ok(())
    }

    /// Inserts the chunk being built, if any.
    pub(crate) fn finish(&mut self) -> rusqlite::Result<()> {
        if self.count == 0 {
            return Ok(());
        }
        let (codec, stored) = if self.body.len() < MIN_COMPRESSED {
            (PLAIN, &self.body[..])
        } else {
            self.packed.resize(lz4_flex::block::get_maximum_output_size(self.body.len()), 0);
            match lz4_flex::block::compress_into_with_table(
                &self.body,
                &mut self.packed,
                &mut self.table,
            ) {
                Ok(packed) if packed < self.body.len() => (LZ4, &self.packed[..packed]),
                _ => (PLAIN, &self.body[..]),
            }
        };
        self.insert.execute(params![
            self.key,
            self.first as i64,
            self.last as i64,
            self.count as i64,
            codec,
            self.body.len() as i64,
            stored
        ])?;
        self.count = 0;
        self.body.clear();
        if self.body.capacity() > 4 * CHUNK_BYTES {
            // After an event larger than a chunk: not kept for the next.
            self.body = Vec::new();
            self.packed = Vec::new();
        }
        Ok(())
    }
}

/// An event a fold or a recovery inserts: an [`EventRecord`], or one the journal holds as
/// it wrote it.
pub(crate) trait Insertable {
    fn session_id(&self) -> &str;
    fn seq(&self) -> u64;
    /// Adds the event to `chunker` as session `key`'s.
    fn add_to(&self, chunker: &mut Chunker<'_>, key: i64) -> rusqlite::Result<()>;
}

impl Insertable for EventRecord {
    fn session_id(&self) -> &str {
        &self.session_id
    }

    fn seq(&self) -> u64 {
        self.seq
    }

    fn add_to(&self, chunker: &mut Chunker<'_>, key: i64) -> rusqlite::Result<()> {
        chunker.add(key, self.seq, self.ts_ms, &self.dir, &self.kind, &self.payload)
    }
}

/// Inserts events of any sessions, in any order, each session's in chunks after what the
/// database has: an event at or before a session's last seq in the database (from a journal
/// read twice), or held twice, is skipped (the first appended is kept).
pub(crate) fn insert<'e, E: Insertable + 'e>(
    connection: &Connection,
    keys: &mut Keys,
    events: impl IntoIterator<Item = &'e E>,
) -> rusqlite::Result<()> {
    let mut keyed = Vec::new();
    // The previous event's session and key: a run of one session's events is looked up once.
    let mut previous: Option<(&str, i64)> = None;
    for event in events {
        let session_id = event.session_id();
        let key = match previous {
            Some((id, key)) if id == session_id => key,
            _ => known(connection, keys, session_id)?.key,
        };
        previous = Some((session_id, key));
        keyed.push((key, event.seq(), session_id, event));
    }
    // Stable: of an event held twice, the first appended comes first.
    keyed.sort_by_key(|(key, seq, ..)| (*key, *seq));
    let mut chunker = Chunker::new(connection)?;
    // The session being added (its key and id) and its last seq so far.
    let mut run: Option<(i64, &str, u64)> = None;
    for (key, seq, session_id, event) in keyed {
        let last = match &mut run {
            Some((current, _, last)) if *current == key => last,
            _ => {
                if let Some((_, id, last)) = run.take() {
                    known(connection, keys, id)?.last = last;
                }
                let last = known(connection, keys, session_id)?.last;
                &mut run.insert((key, session_id, last)).2
            }
        };
        if seq <= *last {
            continue;
        }
        *last = seq;
        event.add_to(&mut chunker, key)?;
    }
    chunker.finish()?;
    if let Some((_, id, last)) = run {
        known(connection, keys, id)?.last = last;
    }
    Ok(())
}

/// A chunk as read: its row's claims, and its body uncompressed.
struct Chunk<'r> {
    first: u64,
    last: u64,
    count: u64,
    body: &'r [u8],
}

/// Decodes a chunk's body into `out` (events of `session_id`): those whose seq `keep` accepts,
/// until `out` holds `limit`. The events must match the row: seqs rising from `first` within
/// `last`, and, when the body is read to its end, `count` of them ending at `last`.
fn decode(
    chunk: &Chunk<'_>,
    session_id: &str,
    keep: impl Fn(u64) -> bool,
    out: &mut Vec<EventRecord>,
    limit: usize,
) -> Result<(), String> {
    let mut decoder = Decoder { bytes: chunk.body };
    let (mut previous, mut read) = (None, 0u64);
    while !decoder.bytes.is_empty() && out.len() < limit {
        let seq = decoder.u64()?;
        let ts_ms = decoder.u64()?;
        let expected = match previous {
            None => seq == chunk.first,
            Some(previous) => seq > previous && seq <= chunk.last,
        };
        if !expected {
            return Err(format!(
                "seq {seq} after {previous:?} in a chunk of seqs {} to {}",
                chunk.first, chunk.last
            ));
        }
        previous = Some(seq);
        read += 1;
        if !keep(seq) {
            for _ in 0..3 {
                decoder.sized()?;
            }
            continue;
        }
        out.push(EventRecord {
            session_id: session_id.to_owned(),
            seq,
            ts_ms,
            dir: decoder.word()?,
            kind: decoder.word()?,
            payload: decoder.string()?,
        });
    }
    if decoder.bytes.is_empty() && (read != chunk.count || previous != Some(chunk.last)) {
        return Err(format!(
            "{read} events ending at seq {previous:?} where the chunk says {} ending at {}",
            chunk.count, chunk.last
        ));
    }
    Ok(())
}

/// A chunk the database gave back that does not decode, or does not match its row.
fn damaged(session_id: &str, first: i64, error: &str) -> StoreError {
    StoreError::Database(format!(
        "the stored events of session {session_id} from seq {first} are damaged: {error}"
    ))
}

/// The columns [`chunk_row`] reads.
const CHUNK_COLUMNS: &str = "first_seq, last_seq, count, codec, size, body";

/// A chunk row ([`CHUNK_COLUMNS`]), its body uncompressed into `scratch` if it was compressed.
fn chunk_row<'r>(
    row: &'r rusqlite::Row<'_>,
    session_id: &str,
    scratch: &'r mut Vec<u8>,
) -> Result<Chunk<'r>, StoreError> {
    let first: i64 = row.get(0)?;
    let last: i64 = row.get(1)?;
    let count: i64 = row.get(2)?;
    let codec: i64 = row.get(3)?;
    let size: i64 = row.get(4)?;
    let fail = |what: &str| damaged(session_id, first, what);
    let body = match row.get_ref(5)? {
        rusqlite::types::ValueRef::Blob(body) => body,
        other => return Err(fail(&format!("a body of type {}", other.data_type()))),
    };
    let chunk = |body| Chunk {
        first: first.max(0) as u64,
        last: last.max(0) as u64,
        count: count.max(0) as u64,
        body,
    };
    // A chunk of several events is never past CHUNK_BYTES (the writer closes it first), and an
    // LZ4 block grows at most 255 times when uncompressed: a larger size is damage, refused
    // before anything is allocated for it.
    let most = if count > 1 { CHUNK_BYTES } else { MAX_SIZE };
    let size = usize::try_from(size)
        .ok()
        .filter(|size| *size <= most && *size <= body.len().saturating_mul(255) + 16);
    match (codec, size) {
        (PLAIN, Some(size)) if size == body.len() => Ok(chunk(body)),
        (LZ4, Some(size)) => {
            scratch.clear();
            if scratch.try_reserve_exact(size).is_err() {
                return Err(fail(&format!("{size} bytes uncompressed do not fit in memory")));
            }
            scratch.resize(size, 0);
            match lz4_flex::block::decompress_into(body, scratch) {
                Ok(length) if length == size => Ok(chunk(&scratch[..])),
                Ok(length) => Err(fail(&format!("{length} bytes uncompressed, {size} expected"))),
                Err(error) => Err(fail(&error.to_string())),
            }
        }
        _ => Err(fail(&format!("codec {codec}, size {size:?}, a body of {} bytes", body.len()))),
    }
}

/// A chunk read after one that ended at `previous`: refused (as damage) unless it starts past
/// it. Each chunk is checked against its own row when decoded; this keeps two rows that were
/// each changed consistently from giving a page its seqs twice or out of order.
fn follows(previous: Option<u64>, first: u64, session_id: &str) -> Result<(), StoreError> {
    match previous {
        Some(previous) if first <= previous => Err(damaged(
            session_id,
            first as i64,
            &format!("it starts at or before the end of the chunk before it (seq {previous})"),
        )),
        _ => Ok(()),
    }
}

/// Session `session_id`'s first `limit` events with `seq > after`, in order.
///
/// Each read is one statement (the session's key looked up inside it): two statements could
/// see two states of the database, and a key freed by a delete can be given to a new session.
pub(crate) fn events_after(
    connection: &Connection,
    session_id: &str,
    after: u64,
    limit: usize,
) -> Result<Vec<EventRecord>, StoreError> {
    let mut events = Vec::new();
    // SQLite integers are signed, and no seq is past i64::MAX: nothing comes after that.
    let Ok(from) = i64::try_from(after.saturating_add(1)) else { return Ok(events) };
    if limit == 0 {
        return Ok(events);
    }
    // The chunk holding `after + 1` (the last to start at or before it) and every later one.
    let mut statement = connection.prepare_cached(&format!(
        "WITH session AS (SELECT key FROM session_keys WHERE id = ?1)
         SELECT {CHUNK_COLUMNS} FROM chunks WHERE session = (SELECT key FROM session) AND first_seq >=
             COALESCE((SELECT MAX(first_seq) FROM chunks
                       WHERE session = (SELECT key FROM session) AND first_seq <= ?2), 0)
         ORDER BY first_seq"
    ))?;
    let mut rows = statement.query(params![session_id, from])?;
    let mut scratch = Vec::new();
    let mut previous: Option<u64> = None;
    while events.len() < limit {
        let Some(row) = rows.next()? else { break };
        let chunk = chunk_row(row, session_id, &mut scratch)?;
        follows(previous, chunk.first, session_id)?;
        previous = Some(chunk.last);
        decode(&chunk, session_id, |seq| seq > after, &mut events, limit)
            .map_err(|error| damaged(session_id, chunk.first as i64, &error))?;
    }
    Ok(events)
}

/// Session `session_id`'s last `limit` events with `seq < before`, in order.
pub(crate) fn events_before(
    connection: &Connection,
    session_id: &str,
    before: u64,
    limit: usize,
) -> Result<Vec<EventRecord>, StoreError> {
    // SQLite integers are signed: a `before` past i64::MAX means "the end".
    let below = i64::try_from(before).unwrap_or(i64::MAX);
    let mut statement = connection.prepare_cached(&format!(
        "SELECT {CHUNK_COLUMNS} FROM chunks
         WHERE session = (SELECT key FROM session_keys WHERE id = ?1) AND first_seq < ?2
         ORDER BY first_seq DESC"
    ))?;
    let mut rows = statement.query(params![session_id, below])?;
    // Chunks from the newest back, each's wanted events in order.
    let mut pages: Vec<Vec<EventRecord>> = Vec::new();
    let mut found = 0;
    let mut scratch = Vec::new();
    // The first seq of the chunk read before (the next one in seq order).
    let mut next: Option<u64> = None;
    while found < limit {
        let Some(row) = rows.next()? else { break };
        let chunk = chunk_row(row, session_id, &mut scratch)?;
        if let Some(next) = next {
            follows(Some(chunk.last), next, session_id)?;
        }
        next = Some(chunk.first);
        let mut page = Vec::new();
        decode(&chunk, session_id, |seq| seq < before, &mut page, usize::MAX)
            .map_err(|error| damaged(session_id, chunk.first as i64, &error))?;
        let wanted = limit - found;
        if page.len() > wanted {
            page.drain(..page.len() - wanted);
        }
        found += page.len();
        pages.push(page);
    }
    Ok(pages.into_iter().rev().flatten().collect())
}

/// Migration: the `events` table (one row per event) into chunks, then dropped.
pub(crate) fn from_events_table(connection: &Connection) -> rusqlite::Result<()> {
    let events: i64 = connection.query_row("SELECT COUNT(*) FROM events", [], |row| row.get(0))?;
    let started = std::time::Instant::now();
    if events > 0 {
        tracing::info!(events, "converting the stored events to chunks (once, for this version)");
    }
    let mut select = connection.prepare(
        "SELECT session, seq, ts_ms, dir, kind, payload FROM events ORDER BY session, seq",
    )?;
    let mut rows = select.query([])?;
    let mut chunker = Chunker::new(connection)?;
    while let Some(row) = rows.next()? {
        let (key, seq): (i64, i64) = (row.get(0)?, row.get(1)?);
        // Text that is not UTF-8 (a damaged row) fails the migration, and the daemon's start,
        // naming the event: nothing is converted or dropped until it is mended.
        let text = |column: usize| {
            row.get_ref(column)?.as_str().map_err(|error| {
                let what = format!("the stored event {seq} of session key {key}: {error}");
                rusqlite::Error::FromSqlConversionFailure(
                    column,
                    rusqlite::types::Type::Text,
                    what.into(),
                )
            })
        };
        chunker.add(key, seq as u64, row.get::<_, i64>(2)? as u64, text(3)?, text(4)?, text(5)?)?;
    }
    chunker.finish()?;
    drop(rows);
    drop(select);
    connection.execute_batch("DROP TABLE events;")?;
    if events > 0 {
        tracing::info!(
            events,
            took_ms = started.elapsed().as_millis() as u64,
            "stored events converted to chunks"
        );
    }
    Ok(())
}
