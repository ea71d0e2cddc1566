//! `switchboard decode`: run lines through the protocol model and report what it makes of
//! them.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use switchboard_protocol::codec::{LineError, LineSplitter, RawLine};
use switchboard_protocol::Message;

/// Arguments of `switchboard decode`.
#[derive(Debug, Args)]
pub(crate) struct DecodeArgs {
    /// Exit 1 when any line is of an unknown type or subtype, does not fit the model of its
    /// type (a drift: the reason goes to stderr), or is malformed.
    #[arg(long)]
    strict: bool,
    /// Check that each line's typed view re-encodes to the same JSON value (nothing lost or
    /// altered by the model); exit 1 on any mismatch.
    #[arg(long)]
    roundtrip: bool,
    /// Read Switchboard capture transcripts (`{"dir":..,"msg":{..}}` lines, as in
    /// tests/fixtures) instead of bare protocol lines; `meta` and `raw` lines are skipped.
    #[arg(long)]
    capture: bool,
    /// Files to read; standard input when none is given.
    files: Vec<PathBuf>,
}

/// What the run counted.
#[derive(Debug, Default)]
struct Tally {
    lines: u64,
    decoded: u64,
    unknown: u64,
    malformed: u64,
    mismatched: u64,
}

/// How big a read is.
const READ_CHUNK_BYTES: usize = 256 * 1024;

pub(crate) fn run(args: &DecodeArgs) -> ExitCode {
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut tally = Tally::default();
    let sources: Vec<Option<&PathBuf>> =
        if args.files.is_empty() { vec![None] } else { args.files.iter().map(Some).collect() };
    let label_files = sources.len() > 1;
    for source in sources {
        let name =
            source.map(|path| path.display().to_string()).unwrap_or_else(|| "<stdin>".to_owned());
        let reader: Box<dyn Read> = match source {
            None => Box::new(io::stdin().lock()),
            Some(path) => match File::open(path) {
                Ok(file) => Box::new(file),
                Err(error) => {
                    let _ = out.flush();
                    eprintln!("switchboard decode: cannot open {}: {error}", path.display());
                    return ExitCode::from(2);
                }
            },
        };
        let prefix = if label_files { format!("{name}:") } else { String::new() };
        if let Err(error) = decode_stream(reader, &name, &prefix, args, &mut tally, &mut out) {
            let _ = out.flush();
            eprintln!("switchboard decode: cannot read {name}: {error}");
            return ExitCode::from(2);
        }
    }
    let summary = format!(
        "{} lines, {} decoded, {} unknown, {} malformed, {} roundtrip-mismatch",
        tally.lines, tally.decoded, tally.unknown, tally.malformed, tally.mismatched
    );
    if writeln!(out, "{summary}").and_then(|()| out.flush()).is_err() {
        return ExitCode::from(2);
    }
    let failed = (args.strict && (tally.unknown > 0 || tally.malformed > 0))
        || (args.roundtrip && tally.mismatched > 0);
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn decode_stream(
    mut reader: impl Read,
    name: &str,
    prefix: &str,
    args: &DecodeArgs,
    tally: &mut Tally,
    out: &mut impl Write,
) -> io::Result<()> {
    let mut splitter = LineSplitter::default();
    let mut chunk = vec![0; READ_CHUNK_BYTES];
    loop {
        let read = reader.read(&mut chunk)?;
        if read == 0 {
            break;
        }
        splitter.push(&chunk[..read]);
        while let Some(line) = splitter.next_line() {
            handle_line(line, name, prefix, args, tally, out)?;
        }
    }
    while let Some(line) = splitter.finish() {
        handle_line(line, name, prefix, args, tally, out)?;
    }
    Ok(())
}

/// One line of a capture transcript.
#[derive(Deserialize)]
struct CaptureLine<'a> {
    #[serde(borrow)]
    msg: Option<&'a RawValue>,
}

fn handle_line(
    line: Result<RawLine, LineError>,
    name: &str,
    prefix: &str,
    args: &DecodeArgs,
    tally: &mut Tally,
    out: &mut impl Write,
) -> io::Result<()> {
    let line = match line {
        Ok(line) => line,
        Err(error) => {
            tally.lines += 1;
            tally.malformed += 1;
            writeln!(out, "{prefix}{}\t-\tmalformed\t-", error.position.line)?;
            eprintln!("{name}: {error}");
            return Ok(());
        }
    };
    let number = line.position.line;
    let bytes: &[u8] = if args.capture {
        match serde_json::from_slice::<CaptureLine<'_>>(&line.bytes) {
            Ok(CaptureLine { msg: Some(msg) }) => msg.get().as_bytes(),
            Ok(CaptureLine { msg: None }) => return Ok(()),
            Err(error) => {
                tally.lines += 1;
                tally.malformed += 1;
                writeln!(out, "{prefix}{number}\t-\tmalformed\t-")?;
                eprintln!("{name}: {}: not a capture line: {error}", line.position);
                return Ok(());
            }
        }
    } else {
        &line.bytes
    };
    tally.lines += 1;
    let message = match Message::decode(bytes) {
        Ok(message) => message,
        Err(error) => {
            tally.malformed += 1;
            writeln!(out, "{prefix}{number}\t-\tmalformed\t-")?;
            eprintln!(
                "{name}: {}: {error}; starts {:?}",
                line.position,
                switchboard_protocol::codec::preview(bytes)
            );
            return Ok(());
        }
    };
    if let Message::Drift(drift) = &message {
        // A known type whose fields do not fit: unknown, with the reason.
        let read = if drift.salvaged.is_some() {
            format!("; read without `{}`", drift.left_out)
        } else {
            String::new()
        };
        eprintln!(
            "{name}: {}: {} does not fit the model: {}{read}",
            line.position,
            message.type_name().unwrap_or("-"),
            drift.reason
        );
    }
    if message.is_unknown() {
        tally.unknown += 1;
    } else {
        tally.decoded += 1;
    }
    writeln!(
        out,
        "{prefix}{number}\t{}\t{}\t{}",
        message.direction().as_str(),
        message.type_name().unwrap_or("-"),
        message.subtype().unwrap_or("-")
    )?;
    if args.roundtrip {
        let original: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
        let typed: Value = serde_json::from_str(&message.encode()).unwrap_or(Value::Null);
        if original != typed {
            tally.mismatched += 1;
            eprintln!(
                "{name}: {}: the typed view does not re-encode to the same value",
                line.position
            );
        }
    }
    Ok(())
}
