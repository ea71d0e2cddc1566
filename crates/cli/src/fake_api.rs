//! `switchboard fake-api`: the scripted fake Anthropic Messages API that Switchboard's own
//! tests and `switchboard demo` use, served for users' integration tests.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use switchboard_fake_api::{FakeApi, Scenario};

/// The largest script read.
const MAX_SCRIPT_BYTES: u64 = 16 * 1024 * 1024;

/// Arguments of `switchboard fake-api`.
#[derive(Debug, Args)]
pub(crate) struct FakeApiArgs {
    /// The script: a JSON file of replies (see docs/fake-api.md).
    #[arg(long, value_name = "FILE")]
    script: PathBuf,
    /// Address to listen on (default: a free port on loopback). Loopback only: the fake serves
    /// every request it recorded (the prompts included) to whoever asks.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Print the address as one JSON object (`{"url": …}`) instead of an environment line.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn fake_api(args: FakeApiArgs) -> ExitCode {
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, message)) => {
            eprintln!("switchboard fake-api: {message}");
            ExitCode::from(code)
        }
    }
}

async fn run(args: FakeApiArgs) -> Result<(), (u8, String)> {
    if !args.listen.ip().is_loopback() {
        return Err((
            2,
            format!(
                "--listen {} is not a loopback address: the fake answers anyone and shows them \
                 the prompts it recorded",
                args.listen
            ),
        ));
    }
    let shown = args.script.display();
    let file = std::fs::File::open(&args.script)
        .map_err(|error| (2, format!("cannot open {shown}: {error}")))?;
    let mut text = String::new();
    file.take(MAX_SCRIPT_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|error| (2, format!("cannot read {shown}: {error}")))?;
    if text.len() as u64 > MAX_SCRIPT_BYTES {
        return Err((2, format!("{shown} is over {} MiB", MAX_SCRIPT_BYTES / 1024 / 1024)));
    }
    let scenario = Scenario::from_json(&text)
        .map_err(|error| (2, format!("{shown} is not a script: {error}")))?;
    let replies = scenario.replies.len();
    let api = FakeApi::start_on(args.listen, scenario)
        .await
        .map_err(|error| (1, format!("cannot listen on {}: {error}", args.listen)))?;
    let url = api.base_url();
    if args.json {
        println!("{}", serde_json::json!({"url": url, "replies": replies}));
    } else {
        println!("ANTHROPIC_BASE_URL={url}");
    }
    let _ = std::io::stdout().flush();
    eprintln!(
        "switchboard fake-api: {replies} scripted replies at {url}. Run the CLI with \
         ANTHROPIC_BASE_URL={url} ANTHROPIC_API_KEY=anything \
         CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 (and a scratch HOME). Requests so far: \
         GET {url}/_fake/requests; let held streams go on: POST {url}/_fake/release. Ctrl-C \
         stops it."
    );
    crate::serve::shutdown_signal().await;
    let unused = api.unused_replies();
    if unused > 0 {
        eprintln!("switchboard fake-api: {unused} scripted replies were never used");
    }
    Ok(())
}
