//! `switchboard audit export|verify`: the daemon's audit trail (`GET /api/audit`,
//! docs/observability.md) written out as JSON lines or CSV, and checked: the daemon's whole
//! trail, or an export's chain offline.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{BufRead, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::Value;
use switchboard_server::audit::{csv_row, AuditRecord, Broken, Chain, Verified, CSV_HEADER};

use crate::client::{query_escape, typed, Connection};

/// The longest line of an export `verify` reads.
const MAX_LINE_BYTES: usize = 1024 * 1024;

/// `switchboard audit …`
#[derive(Debug, Args)]
pub(crate) struct AuditArgs {
    #[command(subcommand)]
    command: AuditCommand,
    #[command(flatten)]
    connection: Connection,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// One record a line, as the daemon keeps it (what `verify FILE` checks).
    Jsonl,
    /// A header and a row a record, the entry as JSON in `detail` (for reading; not verified).
    Csv,
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// Write the audit trail: every decision (who asked, what, the rule or person that
    /// answered, through which face and token), every session's start and end, every token
    /// made or revoked, every budget changed; each record chained by its hash to the one
    /// before. Needs an admin token.
    Export {
        /// Only records since this time (RFC 3339) or age (7d, 24h).
        #[arg(long, value_name = "T")]
        since: Option<String>,
        /// jsonl (default) or csv.
        #[arg(long, value_enum, default_value_t = Format::Jsonl)]
        format: Format,
        /// Write to FILE (default: standard output).
        #[arg(long, short, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Check a trail: the daemon's, whole (without FILE), or a JSON-lines export (FILE, `-`
    /// for standard input), offline. Each record must be in its place, follow the one before
    /// and be what its hash was made of: an altered or a removed record shows, and which.
    /// (An export `--since` is checked from its first record on.)
    ///
    /// Exit status: 0 it holds; 1 it does not, or it could not be read.
    Verify {
        /// An export (JSON lines).
        file: Option<PathBuf>,
    },
}

/// `switchboard audit`
pub(crate) async fn audit(args: AuditArgs) -> ExitCode {
    let outcome = match args.command {
        AuditCommand::Export { since, format, out } => {
            export(&args.connection, since, format, out).await
        }
        AuditCommand::Verify { file: Some(file) } => verify_file(&file, args.connection.json),
        AuditCommand::Verify { file: None } => verify_daemon(&args.connection).await,
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("switchboard audit: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn export(
    connection: &Connection,
    since: Option<String>,
    format: Format,
    out: Option<PathBuf>,
) -> Result<bool, String> {
    let client = connection.client()?;
    let mut sink: Box<dyn Write> = match &out {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .map_err(|error| format!("cannot write {}: {error}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let write_error = |error: std::io::Error| format!("cannot write the export: {error}");
    if format == Format::Csv {
        writeln!(sink, "{CSV_HEADER}").map_err(write_error)?;
    }
    let live = out.is_some() && std::io::stderr().is_terminal();
    let mut after = 0u64;
    let mut written = 0u64;
    loop {
        let mut path = format!("/api/audit?after={after}");
        // `since` finds where the export starts; the pages after it follow on from there.
        if let (Some(since), 0) = (&since, written) {
            path.push_str("&since=");
            path.push_str(&query_escape(since));
        }
        let page = client.request(reqwest::Method::GET, &path, None).await?;
        let records: Vec<AuditRecord> = typed(page["records"].clone())?;
        for record in &records {
            let line = match format {
                Format::Jsonl => serde_json::to_string(record).map_err(|e| e.to_string())?,
                Format::Csv => csv_row(record),
            };
            writeln!(sink, "{line}").map_err(write_error)?;
            written += 1;
        }
        if live {
            eprint!("\rexported {written} records");
        }
        let last = page["last_seq"].as_u64().unwrap_or(after);
        if page["more"] != Value::Bool(true) || last <= after {
            break;
        }
        after = last;
    }
    sink.flush().map_err(write_error)?;
    if live {
        eprintln!();
    }
    if let Some(path) = out {
        eprintln!("{written} records written to {}", path.display());
    }
    Ok(true)
}

fn verify_file(file: &std::path::Path, json: bool) -> Result<bool, String> {
    let reader: Box<dyn BufRead> = if file.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(file)
                .map_err(|error| format!("cannot read {}: {error}", file.display()))?,
        ))
    };
    let mut reader = reader;
    let mut chain = Chain::default();
    let mut first = None;
    let mut line = Vec::new();
    for index in 0.. {
        line.clear();
        // At most a line's bound read into memory, whatever the file holds.
        let read = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|error| format!("cannot read {}: {error}", file.display()))?;
        if read == 0 {
            break;
        }
        if line.len() > MAX_LINE_BYTES {
            return Err(format!("line {} is longer than {MAX_LINE_BYTES} bytes", index + 1));
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let record: AuditRecord = serde_json::from_slice(&line).map_err(|error| {
            format!(
                "line {} is not an audit record (JSON lines, as `audit export` writes): {error}",
                index + 1
            )
        })?;
        first.get_or_insert(record.seq);
        if let Err(broken) = chain.follow(&record) {
            return Ok(said_broken(&broken, json));
        }
    }
    Ok(said_verified(&chain.verified(), first, json))
}

async fn verify_daemon(connection: &Connection) -> Result<bool, String> {
    let client = connection.client()?;
    let answer = client.request(reqwest::Method::GET, "/api/audit/verify", None).await?;
    if answer["ok"] == Value::Bool(true) {
        let verified: Verified = typed(answer)?;
        Ok(said_verified(&verified, (verified.records > 0).then_some(1), connection.json))
    } else {
        let broken: Broken = typed(answer)?;
        Ok(said_broken(&broken, connection.json))
    }
}

fn said_verified(verified: &Verified, first: Option<u64>, json: bool) -> bool {
    if json {
        println!(
            "{}",
            serde_json::json!({"ok": true, "records": verified.records, "first_seq": first, "head_seq": verified.head_seq, "head_hash": verified.head_hash})
        );
    } else if verified.records == 0 {
        println!("no records: nothing to check");
    } else {
        println!(
            "{} records, {} to {}, each in its place and following the one before; the last's hash is {}",
            verified.records,
            first.unwrap_or(1),
            verified.head_seq,
            verified.head_hash
        );
    }
    true
}

fn said_broken(broken: &Broken, json: bool) -> bool {
    if json {
        println!(
            "{}",
            serde_json::json!({"ok": false, "seq": broken.seq, "problem": broken.problem})
        );
    } else {
        println!("the trail does not hold at record {}: {}", broken.seq, broken.problem);
    }
    false
}
