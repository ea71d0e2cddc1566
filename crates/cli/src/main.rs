//! `switchboard`: a control plane for Claude Code.
//!
//! A thin binary over the library crates: argument parsing, output formatting and exit codes
//! live here; everything else lives in the crates it calls.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod decode;

/// Run, watch, steer and audit Claude Code sessions.
#[derive(Debug, Parser)]
#[command(name = "switchboard", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check NDJSON protocol lines against Switchboard's model of the protocol.
    ///
    /// Prints one line per input line: `LINE<TAB>direction<TAB>type<TAB>subtype-or-dash`
    /// (direction is a guess from the content: from_cli, to_cli, either), then a summary line
    /// `N lines, N decoded, N unknown, N malformed, N roundtrip-mismatch`. Details of
    /// malformed lines and mismatches go to stderr. Run it on a new CLI's output to see what
    /// changed.
    ///
    /// Exit status: 0 when the checks asked for pass; 1 when --strict finds an unknown or
    /// malformed line, or --roundtrip finds a mismatch; 2 when an input cannot be read.
    Decode(decode::DecodeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Decode(args) => decode::run(&args),
    }
}
