//! The SQLite store's journal: the hot end of the event log.
//!
//! An append is checked (each session's events continue its sequence), copied into the
//! current journal segment, and kept in memory until the writer thread folds it into SQLite.
//! A record under 4 KiB (most of them: a line or a few) is copied through a shared memory map
//! of a window of the file whose space is reserved first (`fallocate`): the copy lands in the
//! kernel's page cache for the file, as a `write` would, without a system call (a `write` of a
//! few hundred bytes cost twice the copy; see docs/benchmarks.md). Only on file systems that
//! write a reserved range in place (ext4, XFS, tmpfs; see `maps_in_place`). A larger record,
//! any record elsewhere, and one whose window cannot be had is one `pwrite` at the records'
//! end (a map's page faults cost more than a `write` of whole pages). Either way `append` returns once the bytes
//! are the kernel's: from then on the events survive the process being killed at any point,
//! which is the same promise SQLite's `synchronous = NORMAL` WAL commit makes; like it, only
//! an OS crash or power loss can take back the last appends, and a torn record at the end is
//! detected by its checksum and dropped whole (an append is one record, so it is all there or
//! not at all). The reserved space past the last record reads as zeros: the segment's end.
//!
//! Why: committing every append to SQLite as it came cost a commit (several 4 KiB WAL pages,
//! two thread switches) per handful of lines. Folding the journal every second commits
//! thousands of lines at once, each session's as a few chunks (`chunks.rs`) instead of a row
//! per line, and an append no longer waits for another thread at all.
//!
//! Readers see folded events in SQLite and unfolded ones here; [`Journal::pending_after`] is
//! always read before SQLite, so an event folded in between is found in one or both, never in
//! neither. The fold's transaction records how far into the journal it went
//! ([`Position`]); opening the store folds whatever a killed process left after that point.
//!
//! Segment format: the 8 bytes `SBJRNL01`, then records: a little-endian `u32` body length, a
//! CRC-32 of the body, and the body: `1` (an append: a `u32` count of events, each the session
//! id, `u64` seq, `u64` ts_ms, dir, kind and payload, strings as a `u32` length and UTF-8), or
//! `2` (a session deleted: its id).
//!
//! - Segments are `<db>.log-NNNNNN`. Records are contiguous from the segment's start, and the
//!   zeros after the last one are its end. The mapped window is
//!   1 MiB, moved when a record does not fit.
//! - What waits in memory (per session, `Tail`) is the record as written, shared by its events
//!   (`Held`), not the caller's `EventRecord`s: the writer frees one block per append once
//!   folded, and a fold copies an event's bytes into its chunk as they are.
//! - `last_seq` comes from here for every session appended to lately; a session with no
//!   append for 64 folds and nothing waiting is forgotten, and its next append reads its last
//!   seq from SQLite again. `events_after` answers from memory alone when the waiting events
//!   start right after `after`, so live subscribers catching up never touch SQLite.
//! - `<db>.lock` (an `flock`) keeps a second process from opening the same database, whose
//!   recovery would fold and remove this one's journal.

use crate::encoding::{put_str, Decoder};
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::{EventRecord, StoreError};

/// The first bytes of every segment.
pub(crate) const MAGIC: &[u8; 8] = b"SBJRNL01";
/// Record body tags.
const TAG_APPEND: u8 = 1;
const TAG_DELETE: u8 = 2;
/// A record header: body length and CRC-32.
const HEADER: usize = 8;
/// No record is larger (a guard against reading a garbage length as a huge allocation).
const MAX_RECORD: usize = 1 << 30;

/// How much of a segment is mapped (and reserved on disk) at a time: the daemon's memory
/// holds at most this much of the journal's pages, however large a segment grows.
const WINDOW: u64 = 1 << 20;

/// Where windows start: a multiple of every page size Linux uses (4, 16 and 64 KiB).
const WINDOW_ALIGN: u64 = 64 * 1024;

/// Records smaller than this are copied into the map; larger ones are written with `pwrite`
/// (into the same page cache). A copy saves a system call, but each new page of a map costs a
/// page fault, which a `write` of whole pages does not: a few hundred bytes cost half as much
/// by map, several KiB more (docs/benchmarks.md).
const MAPPED_BELOW: usize = 4096;

/// When this many events, or [`FOLD_BYTES`] of them, wait to be folded, an append asks the
/// writer to fold now rather than at the next interval.
pub const FOLD_EVENTS: usize = 8192;

/// See [`FOLD_EVENTS`].
pub const FOLD_BYTES: usize = 8 * 1024 * 1024;

/// When this many events, or [`MAX_UNFOLDED_BYTES`] of them, wait to be folded (the database
/// has fallen behind), appends wait for a fold: memory stays bounded.
pub const MAX_UNFOLDED: usize = 262_144;

/// See [`MAX_UNFOLDED`].
pub const MAX_UNFOLDED_BYTES: usize = 64 * 1024 * 1024;

/// An event waiting in memory to be folded: its place in the record its append was written
/// as, a copy of which its events share (held whole until the last of them is folded, as a
/// fold takes every waiting event at once). A fold then frees one block per append: with each
/// event held as the caller's [`EventRecord`] (three allocations made on the daemon's
/// threads), the writer thread freed three blocks an event, each under the allocator's lock of
/// the thread that made it (about 5% of the daemon's CPU with one CLI streaming flat out;
/// docs/benchmarks.md). The event's bytes after its session id are laid out as a database
/// chunk's body holds an event, so a fold copies them as they are. The cost: a line is in
/// memory twice while a live subscriber's buffer also holds its record (both bounded), and the
/// events of a session deleted meanwhile stay in their record, uncounted, until the fold
/// frees it with the rest of an append that held other sessions' events too.
#[derive(Clone)]
pub(crate) struct Held {
    record: Arc<[u8]>,
    /// Where the event starts in `record` (its session id's length), and where it ends.
    at: u32,
    end: u32,
}

impl Held {
    /// The session id's length and where its bytes start.
    fn id_span(&self) -> (usize, usize) {
        let at = self.at as usize;
        let length = u32::from_le_bytes([
            self.record[at],
            self.record[at + 1],
            self.record[at + 2],
            self.record[at + 3],
        ]);
        (at + 4, length as usize)
    }

    pub(crate) fn session_id(&self) -> &str {
        let (start, length) = self.id_span();
        // Written from a `str` by `encode_append`.
        std::str::from_utf8(&self.record[start..start + length]).unwrap_or_default()
    }

    /// The event after its session id: seq, ts_ms, dir, kind and payload.
    pub(crate) fn encoded(&self) -> &[u8] {
        let (start, length) = self.id_span();
        &self.record[start + length..self.end as usize]
    }

    pub(crate) fn seq(&self) -> u64 {
        let encoded = self.encoded();
        u64::from_le_bytes([
            encoded[0], encoded[1], encoded[2], encoded[3], encoded[4], encoded[5], encoded[6],
            encoded[7],
        ])
    }

    /// What this event is counted as in memory (its share of the record, and its place in
    /// the queue and its session's tail).
    fn bytes(&self) -> usize {
        (self.end - self.at) as usize + 64
    }

    /// The event itself (a read of what waits; a fold copies [`Held::encoded`] instead).
    fn record(&self) -> Result<EventRecord, StoreError> {
        let mut decoder = Decoder { bytes: &self.record[self.at as usize..self.end as usize] };
        decode_event(&mut decoder).map_err(|error| {
            StoreError::Database(format!("an event held by the journal does not decode: {error}"))
        })
    }
}

impl crate::chunks::Insertable for Held {
    fn session_id(&self) -> &str {
        Held::session_id(self)
    }

    fn seq(&self) -> u64 {
        Held::seq(self)
    }

    fn add_to(&self, chunker: &mut crate::chunks::Chunker<'_>, key: i64) -> rusqlite::Result<()> {
        chunker.add_encoded(key, Held::seq(self), self.encoded())
    }
}

/// A place in the journal: segment number and byte offset.
pub(crate) type Position = (u64, u64);

/// One record read back.
pub(crate) enum Entry {
    Append(Vec<EventRecord>),
    Delete(String),
}

/// A segment's path: `<database>.log-000042`.
pub(crate) fn segment_path(database: &Path, segment: u64) -> PathBuf {
    let mut name = database.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".log-{segment:06}"));
    database.with_file_name(name)
}

/// The segment numbers next to `database`, in order.
pub(crate) fn segments(database: &Path) -> Result<Vec<u64>, StoreError> {
    let prefix = format!("{}.log-", database.file_name().unwrap_or_default().to_string_lossy());
    let dir = database.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let entries = std::fs::read_dir(dir).map_err(|error| io_error("cannot list", dir, error))?;
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if let Some(number) = name.to_str().and_then(|name| name.strip_prefix(&prefix)) {
            if let Ok(number) = number.parse::<u64>() {
                found.push(number);
            }
        }
    }
    found.sort_unstable();
    Ok(found)
}

/// Removes a segment whose records are all in the database (one already gone is fine).
pub(crate) fn remove_segment(database: &Path, segment: u64) {
    let path = segment_path(database, segment);
    if let Err(error) = std::fs::remove_file(&path) {
        if error.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(segment = %path.display(), %error, "cannot remove a folded journal segment");
        }
    }
}

fn io_error(what: &str, path: &Path, error: std::io::Error) -> StoreError {
    StoreError::Database(format!("{what} {}: {error}", path.display()))
}

/// Reads a segment's records from `from` (0: its start), calling `each` for every complete
/// one. Stops at the first record that is incomplete or fails its checksum (what a write cut
/// short by a crash leaves), and logs what it dropped. Returns where the good records end.
pub(crate) fn read_segment(
    path: &Path,
    from: u64,
    mut each: impl FnMut(Entry) -> Result<(), StoreError>,
) -> Result<u64, StoreError> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut file| file.read_to_end(&mut bytes))
        .map_err(|error| io_error("cannot read the journal", path, error))?;
    if bytes.len() < MAGIC.len() {
        // Created, and killed before its first bytes landed.
        return Ok(0);
    }
    if &bytes[..MAGIC.len()] != MAGIC {
        return Err(StoreError::Database(format!(
            "{} is not a Switchboard journal segment (it does not start with {:?})",
            path.display(),
            std::str::from_utf8(MAGIC).unwrap_or_default()
        )));
    }
    let mut at = (from as usize).max(MAGIC.len());
    while at < bytes.len() {
        let Some(body) = record_at(&bytes, at) else {
            if bytes[at..].iter().all(|byte| *byte == 0) {
                // Space reserved for records that never came (see the module's documentation).
                break;
            }
            tracing::warn!(
                segment = %path.display(),
                offset = at,
                dropped_bytes = bytes.len() - at,
                "the journal ends with an incomplete or damaged record (a write cut short); it is dropped"
            );
            break;
        };
        each(decode(body).map_err(|error| {
            StoreError::Database(format!(
                "{} at byte {at}: a record with a good checksum does not decode: {error}",
                path.display()
            ))
        })?)?;
        at += HEADER + body.len();
    }
    Ok(at.min(bytes.len()) as u64)
}

/// The body of the record at `at`, if it is complete and its checksum matches.
fn record_at(bytes: &[u8], at: usize) -> Option<&[u8]> {
    let header = bytes.get(at..at + HEADER)?;
    let length = u32::from_le_bytes(header[..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[4..].try_into().ok()?);
    // No record is empty (a body starts with its tag): zeros at the end of a file (space the
    // file system extended but never wrote) are a torn end, not a record.
    if length == 0 || length > MAX_RECORD {
        return None;
    }
    let body = bytes.get(at + HEADER..at + HEADER + length)?;
    (crc32fast::hash(body) == crc).then_some(body)
}

/// The bytes `encode_append` writes for `event`.
fn encoded_size(event: &EventRecord) -> usize {
    4 + event.session_id.len()
        + 8
        + 8
        + 4
        + event.dir.len()
        + 4
        + event.kind.len()
        + 4
        + event.payload.len()
}

/// Where the first event of an append record starts (after its header, tag and count).
const FIRST_EVENT: usize = HEADER + 1 + 4;

/// Appends one record holding `events` to `out`.
pub(crate) fn encode_append(
    out: &mut Vec<u8>,
    events: &[Arc<EventRecord>],
) -> Result<(), StoreError> {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER]);
    out.push(TAG_APPEND);
    out.extend_from_slice(&(events.len() as u32).to_le_bytes());
    for event in events {
        put_str(out, &event.session_id);
        out.extend_from_slice(&event.seq.to_le_bytes());
        out.extend_from_slice(&event.ts_ms.to_le_bytes());
        put_str(out, &event.dir);
        put_str(out, &event.kind);
        put_str(out, &event.payload);
    }
    seal(out, start)
}

/// Appends one record saying `session_id` was deleted to `out`.
pub(crate) fn encode_delete(out: &mut Vec<u8>, session_id: &str) -> Result<(), StoreError> {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER]);
    out.push(TAG_DELETE);
    put_str(out, session_id);
    seal(out, start)
}

/// Fills in the header of the record that starts at `start`.
fn seal(out: &mut [u8], start: usize) -> Result<(), StoreError> {
    let body = &out[start + HEADER..];
    if body.len() > MAX_RECORD {
        return Err(StoreError::Database(format!(
            "an append of {} bytes is larger than the journal takes in one record ({MAX_RECORD})",
            body.len()
        )));
    }
    let length = (body.len() as u32).to_le_bytes();
    let crc = crc32fast::hash(body).to_le_bytes();
    out[start..start + 4].copy_from_slice(&length);
    out[start + 4..start + HEADER].copy_from_slice(&crc);
    Ok(())
}

/// One event of an append record.
fn decode_event(decoder: &mut Decoder<'_>) -> Result<EventRecord, String> {
    Ok(EventRecord {
        session_id: decoder.string()?,
        seq: decoder.u64()?,
        ts_ms: decoder.u64()?,
        dir: decoder.word()?,
        kind: decoder.word()?,
        payload: decoder.string()?,
    })
}

fn decode(body: &[u8]) -> Result<Entry, String> {
    let mut decoder = Decoder { bytes: body };
    let entry = match decoder.take(1)?[0] {
        TAG_APPEND => {
            let count = decoder.u32()? as usize;
            let mut events = Vec::with_capacity(count.min(body.len() / 32));
            for _ in 0..count {
                events.push(decode_event(&mut decoder)?);
            }
            Entry::Append(events)
        }
        TAG_DELETE => Entry::Delete(decoder.string()?),
        tag => return Err(format!("unknown record tag {tag}")),
    };
    if !decoder.bytes.is_empty() {
        return Err(format!("{} bytes after the record's end", decoder.bytes.len()));
    }
    Ok(entry)
}

/// The mode of every file the store creates: the log holds prompts, tool output and a session's
/// environment, for its owner only.
pub(crate) const PRIVATE: u32 = 0o600;

/// Creates segment `segment` (its magic bytes written), open for appending (read too: a
/// shared map that writes needs both).
fn create_segment(database: &Path, segment: u64) -> Result<File, StoreError> {
    let path = segment_path(database, segment);
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .mode(PRIVATE)
        .open(&path)
        .map_err(|error| io_error("cannot create the journal segment", &path, error))?;
    file.write_all(MAGIC).map_err(|error| io_error("cannot write", &path, error))?;
    Ok(file)
}

/// The mapped part of a segment: bytes `start..start + map.len()` of the file, reserved.
struct Window {
    map: memmap2::MmapMut,
    start: u64,
}

impl Window {
    /// The `len` bytes at `at` of the segment `file`, mapped. When they are not in `window`,
    /// it moves: the space from `at` (at least [`WINDOW`] of it) is reserved in the file first,
    /// so a copy into the map can never find the disk full.
    fn place<'w>(
        file: &File,
        window: &'w mut Option<Window>,
        at: u64,
        len: usize,
    ) -> std::io::Result<&'w mut [u8]> {
        let end = at + len as u64;
        let fits =
            |window: &Window| window.start <= at && end <= window.start + window.map.len() as u64;
        if !window.as_ref().is_some_and(fits) {
            *window = None;
            let start = at - at % WINDOW_ALIGN;
            let size = (end - start).max(WINDOW).next_multiple_of(WINDOW_ALIGN);
            let too_large =
                || std::io::Error::other("a journal window does not fit this platform's sizes");
            let (offset, length) = (
                i64::try_from(start).map_err(|_| too_large())?,
                i64::try_from(size).map_err(|_| too_large())?,
            );
            nix::fcntl::fallocate(file, nix::fcntl::FallocateFlags::empty(), offset, length)
                .map_err(std::io::Error::from)?;
            let length = usize::try_from(size).map_err(|_| too_large())?;
            *window = Some(Window { map: map_window(file, start, length)?, start });
        }
        match window {
            Some(window) => {
                let from = (at - window.start) as usize;
                Ok(&mut window.map[from..from + len])
            }
            None => Err(std::io::Error::other("no journal window")),
        }
    }
}

/// Maps `length` bytes of `file` from `offset`, shared (writes go to the file's page cache).
#[allow(unsafe_code)] // `MmapMut::map_mut`; see the SAFETY note
fn map_window(file: &File, offset: u64, length: usize) -> std::io::Result<memmap2::MmapMut> {
    // SAFETY: the map is undefined behaviour only if the file changes under it other than
    // through it: truncated (reads and writes past the new end fault) or written by someone
    // else. The segment is this process's own: created by it with mode 0600, next to a
    // database that `lock_database` keeps any other Switchboard from opening, and never
    // truncated while mapped (`close` and a failed `pwrite`'s cut drop the window first; a
    // `pwrite` of this process writes through the same page cache the map shows). The range
    // was reserved with `fallocate` just before, on a file system that writes it in place
    // (`maps_in_place`), so a write into it never meets a full disk. A person who truncates a
    // live segment by hand can crash the daemon (SIGBUS), as they could corrupt the log by
    // writing to it.
    unsafe { memmap2::MmapOptions::new().offset(offset).len(length).map_mut(file) }
}

/// Whether the file system of `file` writes a range that `fallocate` reserved in place, so
/// that a copy into a shared map of it can never need space the disk does not have: ext4, XFS
/// and tmpfs. One that copies on write (btrfs, ZFS) may need new space when a mapped page is
/// written back or first written, which a map can only report by losing the page or by a
/// signal that ends the process; those, and file systems not known here, get `pwrite`.
fn maps_in_place(file: &File) -> bool {
    use nix::sys::statfs::{fstatfs, EXT4_SUPER_MAGIC, TMPFS_MAGIC, XFS_SUPER_MAGIC};
    fstatfs(file).is_ok_and(|stat| {
        [EXT4_SUPER_MAGIC, XFS_SUPER_MAGIC, TMPFS_MAGIC].contains(&stat.filesystem_type())
    })
}

/// Whether `error` says the file system cannot reserve space or map files (then `write`).
fn unsupported(error: &std::io::Error) -> bool {
    use nix::errno::Errno;
    let errno = error.raw_os_error().map(Errno::from_raw);
    matches!(errno, Some(Errno::EOPNOTSUPP | Errno::ENOSYS | Errno::ENODEV))
}

/// What an append found.
pub(crate) enum Appended {
    /// Written. `fold_now`: enough is waiting that the writer should fold now.
    Written { fold_now: bool },
    /// Not written: [`MAX_UNFOLDED`] events wait to be folded (fold, then append again).
    Full,
    /// These sessions' last seq must be read from the database first (then call
    /// [`Journal::learn`] with the generation given here and append again).
    Unknown(Vec<String>, u64),
}

/// What a fold takes from the journal and, once committed, gives back to
/// [`Journal::folded`].
pub(crate) struct Fold {
    /// Sessions deleted, to delete from the database before the events go in.
    pub(crate) deletes: Vec<String>,
    /// Every event waiting, in the order they were appended.
    pub(crate) events: Vec<Held>,
    /// [`State::generation`] when they were taken: a session's tail made later (after a
    /// delete) holds none of them.
    generation: u64,
    /// Where the journal stood when the fold took everything.
    pub(crate) position: Position,
}

/// A session's events not yet in the database, and its last seq.
struct Tail {
    last: u64,
    /// Which [`State::generation`] created it (a session deleted and appended to again gets a
    /// new tail, which a fold that started before must not touch).
    generation: u64,
    events: VecDeque<Held>,
    /// Appended to since the last sweep (see [`SWEEP_EVERY`]).
    used: bool,
}

/// Every this many folds (whether or not they found anything to fold), the tails of sessions
/// that had no append since the previous sweep and have nothing waiting are forgotten: a
/// daemon that runs for months keeps no entry per session it ever ran. A forgotten session's
/// next append reads its last seq from the database again (all its events are there).
pub(crate) const SWEEP_EVERY: u64 = 64;

struct State {
    /// `None` once closed, or once a failed write could not be undone.
    file: Option<File>,
    /// The mapped part of the current segment, if any yet.
    window: Option<Window>,
    /// Whether appends go through a map; `false` once this file system refused (then each is
    /// a `write` at the file's position, which is the segment's length).
    mapping: bool,
    broken: Option<String>,
    segment: u64,
    length: u64,
    /// The oldest segment file still on disk.
    oldest: u64,
    /// Every session appended to since the store opened.
    tails: foldhash::HashMap<String, Tail>,
    /// The events not yet taken by a fold, in the order they were appended (each also in its
    /// session's tail until folded). A fold takes the whole vector at once: the writer holds
    /// the lock for moments only, as it runs at a lower priority and could be descheduled
    /// while holding it.
    queue: Vec<Held>,
    unfolded: usize,
    /// What the unfolded events take, as [`Held::bytes`] counts.
    unfolded_bytes: usize,
    deletes: Vec<String>,
    /// Bumped by every delete.
    generation: u64,
    /// An append already asked the writer to fold.
    fold_asked: bool,
    /// Calls of [`Journal::take`], for [`SWEEP_EVERY`].
    takes: u64,
    buffer: Vec<u8>,
}

/// The journal (see the module's documentation).
pub(crate) struct Journal {
    database: PathBuf,
    state: Mutex<State>,
    /// Held while the store is open (see [`lock_database`]); let go by [`Journal::release`].
    database_lock: Mutex<Option<File>>,
}

/// Locks `<database>.lock` for this process, or says that another holds it: a second process
/// opening the same database would fold and remove the journal this one writes.
pub(crate) fn lock_database(database: &Path) -> Result<File, StoreError> {
    let mut name = database.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    let path = database.with_file_name(name);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(PRIVATE)
        .open(&path)
        .map_err(|error| io_error("cannot open the lock file", &path, error))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::Database(format!(
            "the database {} is in use by another Switchboard (its lock file {} is held); stop that one first",
            database.display(),
            path.display()
        ))),
        Err(std::fs::TryLockError::Error(error)) => Err(io_error("cannot lock", &path, error)),
    }
}

impl Journal {
    /// Starts segment `segment` (every older one has been folded and removed).
    pub(crate) fn create(database: &Path, segment: u64, lock: File) -> Result<Journal, StoreError> {
        let file = create_segment(database, segment)?;
        let mapping = maps_in_place(&file);
        Ok(Journal {
            database: database.to_owned(),
            state: Mutex::new(State {
                file: Some(file),
                window: None,
                mapping,
                broken: None,
                segment,
                length: MAGIC.len() as u64,
                oldest: segment,
                tails: foldhash::HashMap::default(),
                queue: Vec::new(),
                unfolded: 0,
                unfolded_bytes: 0,
                deletes: Vec::new(),
                generation: 0,
                fold_asked: false,
                takes: 0,
                buffer: Vec::new(),
            }),
            database_lock: Mutex::new(Some(lock)),
        })
    }

    fn state(&self) -> Result<MutexGuard<'_, State>, StoreError> {
        self.state.lock().map_err(|_| StoreError::Database("the journal's lock is poisoned".into()))
    }

    /// Whether there is a file to write, or why not.
    fn writable(state: &State) -> Result<(), StoreError> {
        match state.file {
            Some(_) => Ok(()),
            None => Err(Journal::not_writable(&state.broken)),
        }
    }

    /// Why there is no file to write: a write that could not be undone, or the store closed.
    fn not_writable(broken: &Option<String>) -> StoreError {
        match broken {
            Some(reason) => StoreError::Database(reason.clone()),
            None => StoreError::Closed,
        }
    }

    /// Writes the record in `state.buffer` where the segment's records end: a small one into
    /// the map, a larger one with `pwrite` (see [`MAPPED_BELOW`]). On failure, cuts the segment
    /// back to where it was (or, if even that fails, refuses every later write: the segment's
    /// end is unknown).
    fn write_buffer(&self, state: &mut State) -> Result<(), StoreError> {
        let path = || segment_path(&self.database, state.segment);
        let State { file, window, mapping, buffer, length, broken, .. } = state;
        let Some(writing) = file.as_ref() else { return Err(Journal::not_writable(broken)) };
        if *mapping && buffer.len() < MAPPED_BELOW {
            match Window::place(writing, window, *length, buffer.len()) {
                Ok(place) => {
                    place.copy_from_slice(buffer);
                    *length += buffer.len() as u64;
                    return Ok(());
                }
                // Nothing was written; the record is written as a larger one is (with less
                // than a window's room left on the disk, say, the record may still fit).
                Err(error) => {
                    if unsupported(&error) {
                        tracing::info!(segment = %path().display(), %error, "the journal's file system does not map files or reserve space; writing each append instead");
                        Journal::stop_mapping(mapping, window);
                    }
                }
            }
        }
        if let Err(error) = writing.write_all_at(buffer, *length) {
            let message = format!("cannot write the journal {}: {error}", path().display());
            // Cut back what part of the record landed (a window past the new end would fault:
            // it goes first; the next small append reserves and maps again).
            *window = None;
            if let Err(undo) = writing.set_len(*length) {
                *file = None;
                *broken = Some(format!(
                    "{message}; nor cut it back to its last record ({undo}): restart Switchboard"
                ));
            }
            return Err(StoreError::Database(message));
        }
        *length += buffer.len() as u64;
        Ok(())
    }

    /// Every append is a `pwrite` at the records' end from now on (this file system cannot
    /// reserve space or map files).
    fn stop_mapping(mapping: &mut bool, window: &mut Option<Window>) {
        *mapping = false;
        *window = None;
    }

    /// Appends `events` atomically (see [`crate::Store::append`]).
    pub(crate) fn append(&self, events: &[Arc<EventRecord>]) -> Result<Appended, StoreError> {
        let mut guard = self.state()?;
        let state = &mut *guard;
        Journal::writable(state)?;
        if state.unfolded >= MAX_UNFOLDED || state.unfolded_bytes >= MAX_UNFOLDED_BYTES {
            return Ok(Appended::Full);
        }
        // Check every session's sequence before writing anything: a bad batch writes nothing.
        let mut next: Vec<(&str, u64)> = Vec::new();
        let mut unknown = Vec::new();
        for event in events {
            let last = match next.iter().rev().find(|(id, _)| *id == event.session_id) {
                Some((_, last)) => *last,
                None => match state.tails.get(&event.session_id) {
                    Some(tail) => tail.last,
                    None => {
                        if !unknown.contains(&event.session_id) {
                            unknown.push(event.session_id.clone());
                        }
                        continue;
                    }
                },
            };
            if event.seq != last + 1 {
                return Err(StoreError::OutOfSequence {
                    session_id: event.session_id.clone(),
                    seq: event.seq,
                    last,
                });
            }
            next.push((&event.session_id, event.seq));
        }
        if !unknown.is_empty() {
            return Ok(Appended::Unknown(unknown, state.generation));
        }
        state.buffer.clear();
        encode_append(&mut state.buffer, events)?;
        self.write_buffer(state)?;
        // Held as written (see `Held`); `seal` refused a record too long for `u32` offsets.
        let record: Arc<[u8]> = Arc::from(state.buffer.as_slice());
        let mut at = FIRST_EVENT;
        for event in events {
            let end = at + encoded_size(event);
            let held = Held { record: record.clone(), at: at as u32, end: end as u32 };
            at = end;
            // Every session is known here (unknown ones returned above).
            if let Some(tail) = state.tails.get_mut(&event.session_id) {
                tail.used = true;
                tail.last = event.seq;
                state.unfolded_bytes += held.bytes();
                tail.events.push_back(held.clone());
            }
            state.queue.push(held);
        }
        debug_assert_eq!(at, state.buffer.len(), "every event of the record is held");
        state.unfolded += events.len();
        if state.buffer.capacity() > 1 << 20 {
            state.buffer = Vec::new();
        }
        let fold_now = (state.unfolded >= FOLD_EVENTS || state.unfolded_bytes >= FOLD_BYTES)
            && !state.fold_asked;
        state.fold_asked |= fold_now;
        Ok(Appended::Written { fold_now })
    }

    /// Records a session's last seq as read from the database, unless a delete happened since
    /// the read began (`generation`) or the session is known by now.
    pub(crate) fn learn(
        &self,
        session_id: &str,
        last: u64,
        generation: u64,
    ) -> Result<(), StoreError> {
        let mut state = self.state()?;
        if state.generation == generation && !state.tails.contains_key(session_id) {
            let generation = state.generation;
            state.tails.insert(
                session_id.to_owned(),
                Tail { last, generation, events: VecDeque::new(), used: true },
            );
        }
        Ok(())
    }

    /// Journals a session's deletion: its waiting events are dropped, and the next fold
    /// deletes it from the database.
    pub(crate) fn delete(&self, session_id: &str) -> Result<(), StoreError> {
        let mut guard = self.state()?;
        let state = &mut *guard;
        state.buffer.clear();
        encode_delete(&mut state.buffer, session_id)?;
        self.write_buffer(state)?;
        if let Some(tail) = state.tails.remove(session_id) {
            state.unfolded -= tail.events.len();
            state.unfolded_bytes -= tail.events.iter().map(Held::bytes).sum::<usize>();
        }
        state.queue.retain(|held| held.session_id() != session_id);
        state.deletes.push(session_id.to_owned());
        state.generation += 1;
        Ok(())
    }

    /// Everything waiting to be folded, or `None` when nothing is. Starts a new segment first
    /// when the current one holds `segment_bytes` (the old one is removed once this fold is
    /// committed).
    pub(crate) fn take(&self, segment_bytes: u64) -> Result<Option<Fold>, StoreError> {
        let mut guard = self.state()?;
        let state = &mut *guard;
        state.fold_asked = false;
        state.takes += 1;
        if state.takes % SWEEP_EVERY == 0 {
            state.tails.retain(|_, tail| std::mem::take(&mut tail.used) || !tail.events.is_empty());
        }
        if state.length >= segment_bytes && state.file.is_some() {
            let file = create_segment(&self.database, state.segment + 1)?;
            state.file = Some(file);
            state.window = None;
            state.segment += 1;
            state.length = MAGIC.len() as u64;
        }
        if state.queue.is_empty() && state.deletes.is_empty() && state.oldest == state.segment {
            return Ok(None);
        }
        Ok(Some(Fold {
            deletes: state.deletes.clone(),
            events: std::mem::take(&mut state.queue),
            generation: state.generation,
            position: (state.segment, state.length),
        }))
    }

    /// A fold was committed: its events leave memory, and the segments before its position
    /// leave the disk.
    pub(crate) fn folded(&self, fold: Fold) {
        // Each session's last seq in the fold, worked out before taking the lock (hashed once
        // per run of one session's events: a session streaming alone is one run).
        let mut upto: foldhash::HashMap<&str, u64> = foldhash::HashMap::default();
        let mut run: Option<(&str, u64)> = None;
        for held in &fold.events {
            let (session_id, held_seq) = (held.session_id(), held.seq());
            match &mut run {
                Some((id, seq)) if *id == session_id => *seq = held_seq,
                _ => {
                    if let Some((id, seq)) = run.replace((session_id, held_seq)) {
                        upto.insert(id, seq);
                    }
                }
            }
        }
        if let Some((id, seq)) = run {
            upto.insert(id, seq);
        }
        let mut released = Vec::with_capacity(fold.events.len());
        let removable = {
            let Ok(mut guard) = self.state() else { return };
            let state = &mut *guard;
            state.deletes.drain(..fold.deletes.len().min(state.deletes.len()));
            for (id, upto) in &upto {
                let Some(tail) = state.tails.get_mut(*id) else { continue };
                if tail.generation > fold.generation {
                    continue;
                }
                while tail.events.front().is_some_and(|held| held.seq() <= *upto) {
                    if let Some(held) = tail.events.pop_front() {
                        state.unfolded -= 1;
                        state.unfolded_bytes -= held.bytes();
                        released.push(held);
                    }
                }
                if tail.events.is_empty() {
                    // A burst's worth of slots is not kept for an idle session.
                    tail.events.shrink_to(8);
                }
            }
            let removable = state.oldest..fold.position.0.max(state.oldest);
            state.oldest = removable.end;
            removable
        };
        // Freed and removed outside the lock.
        drop(released);
        drop(fold);
        for segment in removable {
            remove_segment(&self.database, segment);
        }
    }

    /// A fold failed: its events wait again, ahead of those appended since (but not those of
    /// a session deleted meanwhile).
    pub(crate) fn restore(&self, fold: Fold) {
        let Ok(mut guard) = self.state() else { return };
        let state = &mut *guard;
        let mut events: Vec<Held> = fold
            .events
            .into_iter()
            .filter(|held| {
                state
                    .tails
                    .get(held.session_id())
                    .is_some_and(|tail| tail.generation <= fold.generation)
            })
            .collect();
        events.append(&mut state.queue);
        state.queue = events;
    }

    /// A session's last seq, if the journal knows it.
    pub(crate) fn last(&self, session_id: &str) -> Result<Option<u64>, StoreError> {
        Ok(self.state()?.tails.get(session_id).map(|tail| tail.last))
    }

    /// The session's waiting events with `seq > after`, at most `limit`.
    pub(crate) fn pending_after(
        &self,
        session_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let state = self.state()?;
        let Some(tail) = state.tails.get(session_id) else { return Ok(Vec::new()) };
        let start = tail.events.partition_point(|held| held.seq() <= after);
        tail.events.range(start..).take(limit).map(Held::record).collect()
    }

    /// The session's last `limit` waiting events with `seq < before`, in order.
    pub(crate) fn pending_before(
        &self,
        session_id: &str,
        before: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let state = self.state()?;
        let Some(tail) = state.tails.get(session_id) else { return Ok(Vec::new()) };
        let end = tail.events.partition_point(|held| held.seq() < before);
        let start = end.saturating_sub(limit);
        tail.events.range(start..end).map(Held::record).collect()
    }

    /// Lets another store open the database (once the last fold is done).
    pub(crate) fn release(&self) {
        if let Ok(mut lock) = self.database_lock.lock() {
            lock.take();
        }
    }

    /// Refuses every later append and delete (what is waiting is still folded).
    pub(crate) fn close(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.window = None;
            if let Some(file) = state.file.take() {
                // The space reserved past the last record is not needed (it reads as the end).
                let _ = file.set_len(state.length);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(session_id: &str, seq: u64) -> Arc<EventRecord> {
        Arc::new(EventRecord {
            session_id: session_id.into(),
            seq,
            ts_ms: 0,
            dir: "switchboard".into(),
            kind: "k".into(),
            payload: "{}".into(),
        })
    }

    fn journal(dir: &Path) -> Journal {
        let database = dir.join("db");
        let journal = Journal::create(&database, 1, lock_database(&database).unwrap()).unwrap();
        for session in ["a", "b"] {
            journal.learn(session, 0, 0).unwrap();
        }
        journal
    }

    fn seqs(events: &[Held]) -> Vec<(String, u64)> {
        events.iter().map(|held| (held.session_id().to_owned(), held.seq())).collect()
    }

    /// A failed fold gives its events back, ahead of later ones; a session deleted meanwhile
    /// does not get its old events back.
    #[test]
    fn a_failed_fold_is_taken_again() {
        let dir = tempfile::tempdir().unwrap();
        let journal = journal(dir.path());
        journal.append(&[event("a", 1), event("b", 1)]).unwrap();
        let fold = journal.take(u64::MAX).unwrap().unwrap();
        assert_eq!(seqs(&fold.events), [("a".into(), 1), ("b".into(), 1)]);
        journal.append(&[event("a", 2)]).unwrap();
        journal.delete("b").unwrap();
        journal.restore(fold);
        let fold = journal.take(u64::MAX).unwrap().unwrap();
        assert_eq!(seqs(&fold.events), [("a".into(), 1), ("a".into(), 2)]);
        assert_eq!(fold.deletes, ["b"]);
        // Committed: the events leave memory; reads no longer find them here.
        journal.folded(fold);
        assert!(journal.pending_after("a", 0, 10).unwrap().is_empty());
        assert_eq!(journal.last("a").unwrap(), Some(2));
        assert!(journal.take(u64::MAX).unwrap().is_none(), "nothing left to fold");
    }

    /// What waits is read back exactly as appended (several sessions in one append, text
    /// that is not ASCII, an empty payload, one larger than a map's copy), and each held
    /// event's bytes after its session id are what a chunk's body holds for it (a fold copies
    /// them as they are).
    #[test]
    fn held_events_read_back_exactly_and_are_laid_out_as_chunks_hold_them() {
        let dir = tempfile::tempdir().unwrap();
        let journal = journal(dir.path());
        let made =
            |session_id: &str, seq, dir: &'static str, kind: &'static str, payload: String| {
                Arc::new(EventRecord {
                    session_id: session_id.into(),
                    seq,
                    ts_ms: 1_700_000_000_000 + seq,
                    dir: dir.into(),
                    kind: kind.into(),
                    payload,
                })
            };
        let events = vec![
            made("a", 1, "from_cli", "line", r#"{"text":"héllo ✓"}"#.into()),
            made("b", 1, "switchboard", "state", String::new()),
            made("a", 2, "to_cli", "line", "x".repeat(MAPPED_BELOW + 10)),
        ];
        journal.append(&events).unwrap();
        let owned = |indexes: &[usize]| -> Vec<EventRecord> {
            indexes.iter().map(|index| EventRecord::clone(&events[*index])).collect()
        };
        assert_eq!(journal.pending_after("a", 0, 10).unwrap(), owned(&[0, 2]));
        assert_eq!(journal.pending_after("a", 1, 10).unwrap(), owned(&[2]));
        assert_eq!(journal.pending_before("a", 2, 10).unwrap(), owned(&[0]));
        assert_eq!(journal.pending_before("b", 9, 10).unwrap(), owned(&[1]));
        let fold = journal.take(u64::MAX).unwrap().unwrap();
        assert_eq!(fold.events.len(), events.len());
        for (held, event) in fold.events.iter().zip(&events) {
            assert_eq!((held.session_id(), held.seq()), (event.session_id.as_str(), event.seq));
            let mut chunked = Vec::new();
            chunked.extend_from_slice(&event.seq.to_le_bytes());
            chunked.extend_from_slice(&event.ts_ms.to_le_bytes());
            put_str(&mut chunked, &event.dir);
            put_str(&mut chunked, &event.kind);
            put_str(&mut chunked, &event.payload);
            assert_eq!(held.encoded(), chunked.as_slice());
        }
        journal.folded(fold);
        assert!(journal.pending_after("a", 0, 10).unwrap().is_empty());
        let state = journal.state().unwrap();
        assert_eq!((state.unfolded, state.unfolded_bytes), (0, 0), "counted out as counted in");
    }

    /// A session with no append for a sweep's worth of folds and nothing waiting is forgotten;
    /// its next append asks for its last seq again.
    #[test]
    fn idle_sessions_are_forgotten_and_learned_again() {
        let dir = tempfile::tempdir().unwrap();
        let journal = journal(dir.path());
        journal.append(&[event("a", 1)]).unwrap();
        journal.append(&[event("b", 1)]).unwrap();
        let fold = journal.take(u64::MAX).unwrap().unwrap();
        journal.folded(fold);
        // "b" keeps appending; "a" does not.
        for round in 0..2 * SWEEP_EVERY {
            journal.append(&[event("b", round + 2)]).unwrap();
            if let Some(fold) = journal.take(u64::MAX).unwrap() {
                journal.folded(fold);
            }
        }
        assert_eq!(journal.last("a").unwrap(), None, "forgotten");
        assert_eq!(journal.last("b").unwrap(), Some(2 * SWEEP_EVERY + 1));
        assert!(matches!(journal.append(&[event("a", 2)]), Ok(Appended::Unknown(..))));
        journal.learn("a", 1, 0).unwrap();
        assert!(matches!(journal.append(&[event("a", 2)]), Ok(Appended::Written { .. })));
    }

    fn sized(session_id: &str, seq: u64, bytes: usize) -> Arc<EventRecord> {
        let mut event = EventRecord::clone(&event(session_id, seq));
        event.payload = "x".repeat(bytes);
        Arc::new(event)
    }

    /// Every append in the segment, as `(session, seq, payload length)`, and where they end.
    fn read_back(database: &Path, segment: u64) -> (Vec<(String, u64, usize)>, u64) {
        let mut read = Vec::new();
        let end = read_segment(&segment_path(database, segment), 0, |entry| {
            if let Entry::Append(events) = entry {
                read.extend(events.into_iter().map(|e| (e.session_id, e.seq, e.payload.len())));
            }
            Ok(())
        })
        .unwrap();
        (read, end)
    }

    /// Small appends go through a map of a reserved window that moves along the segment
    /// (records across a window's end included), large ones between them by `pwrite` (one
    /// larger than a window included); the reserved space past the last record reads as the
    /// segment's end.
    #[test]
    fn appends_are_copied_into_a_moving_window_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let journal = journal(dir.path());
        let mut sizes = vec![10, 300_000, 700_000, 1_500_000, 20, 900_000];
        // About 2.5 MiB of records of about 700 bytes: windows end inside some of them.
        sizes.extend((0..3600).map(|n| 650 + n % 97));
        for (seq, &size) in (1..).zip(&sizes) {
            journal.append(&[sized("a", seq, size), sized("b", seq, 5)]).unwrap();
        }
        let state = journal.state().unwrap();
        let file_length = std::fs::metadata(segment_path(&journal.database, 1)).unwrap().len();
        let segment = File::open(segment_path(&journal.database, 1)).unwrap();
        if maps_in_place(&segment) {
            assert!(state.mapping && state.window.is_some(), "mapped");
            assert!(file_length > state.length, "space reserved past the records");
        } else {
            assert!(!state.mapping, "written");
        }
        let (read, end) = read_back(&journal.database, 1);
        let wanted: Vec<(String, u64, usize)> = (1..)
            .zip(sizes.iter().copied())
            .flat_map(|(seq, size)| [("a".into(), seq, size), ("b".into(), seq, 5)])
            .collect();
        assert_eq!(read, wanted);
        assert_eq!(end, state.length);
        drop(state);
        // A new segment gets a window of its own: a small append lands in it, not in the old
        // segment's map (whose window here is past the new one's first bytes).
        journal.take(0).unwrap();
        let next = sizes.len() as u64 + 1;
        journal.append(&[sized("a", next, 10)]).unwrap();
        assert_eq!(read_back(&journal.database, 2).0, [("a".into(), next, 10)]);
        assert_eq!(read_back(&journal.database, 1), (wanted, end));
        // Closed, the segment is cut back to its records.
        journal.close();
        let (_, end) = read_back(&journal.database, 2);
        let file_length = std::fs::metadata(segment_path(&journal.database, 2)).unwrap().len();
        assert_eq!(file_length, end);
    }

    /// A small segment's window covers the next segment's first bytes too: the next segment
    /// still gets its own.
    #[test]
    fn a_new_segment_is_never_written_through_the_old_ones_map() {
        let dir = tempfile::tempdir().unwrap();
        let journal = journal(dir.path());
        journal.append(&[event("a", 1)]).unwrap();
        journal.take(0).unwrap();
        journal.append(&[event("a", 2)]).unwrap();
        journal.append(&[event("b", 1)]).unwrap();
        let seqs = |segment| {
            let read = read_back(&journal.database, segment).0;
            read.into_iter().map(|(id, seq, _)| (id, seq)).collect::<Vec<_>>()
        };
        assert_eq!(seqs(1), [("a".to_owned(), 1)]);
        assert_eq!(seqs(2), [("a".to_owned(), 2), ("b".to_owned(), 1)]);
    }

    /// Giving up the map (a file system that refuses) writes the next records right after
    /// the last one, not after the space a window reserved: every record reads back.
    #[test]
    fn appends_written_after_the_map_is_given_up_follow_the_last_record() {
        let dir = tempfile::tempdir().unwrap();
        let journal = journal(dir.path());
        journal.append(&[event("a", 1)]).unwrap();
        journal.append(&[event("a", 2), event("b", 1)]).unwrap();
        {
            let mut guard = journal.state().unwrap();
            let state = &mut *guard;
            Journal::stop_mapping(&mut state.mapping, &mut state.window);
        }
        journal.append(&[event("b", 2)]).unwrap();
        journal.append(&[event("a", 3)]).unwrap();
        let (read, end) = read_back(&journal.database, 1);
        let seqs: Vec<(&str, u64)> = read.iter().map(|(id, seq, _)| (id.as_str(), *seq)).collect();
        assert_eq!(seqs, [("a", 1), ("a", 2), ("b", 1), ("b", 2), ("a", 3)]);
        assert_eq!(end, journal.state().unwrap().length);
        // A new segment is written the same way.
        journal.take(0).unwrap();
        journal.append(&[event("a", 4)]).unwrap();
        assert_eq!(read_back(&journal.database, 2).0, [("a".into(), 4, 2)]);
    }

    /// Events appended while a fold is committed stay for the next one.
    #[test]
    fn events_appended_during_a_fold_wait_for_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let journal = journal(dir.path());
        journal.append(&[event("a", 1)]).unwrap();
        let fold = journal.take(u64::MAX).unwrap().unwrap();
        journal.append(&[event("a", 2)]).unwrap();
        journal.folded(fold);
        let pending: Vec<u64> =
            journal.pending_after("a", 0, 10).unwrap().iter().map(|e| e.seq).collect();
        assert_eq!(pending, [2]);
        let fold = journal.take(u64::MAX).unwrap().unwrap();
        assert_eq!(seqs(&fold.events), [("a".into(), 2)]);
    }
}
