//! `switchboard pair`: a phone signed in by a glance. Asks the daemon for a one-time code
//! (`POST /api/pair`, an admin token's: the data directory's by default) and prints its link
//! as a QR code in the terminal; the phone's camera opens it, one tap signs the phone in with a
//! new `approve` token, and it lands on the web UI, where it turns on notifications and answers
//! requests. The code works once and expires in minutes.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;

use clap::Args;
use serde_json::json;
use switchboard_server::pairing::PairCode;

use crate::client::Connection;

/// `switchboard pair`
#[derive(Debug, Args)]
pub(crate) struct PairArgs {
    /// The name of the token the phone signs in with (new; it is listed and revoked like any
    /// other: `switchboard token revoke NAME`).
    #[arg(long, default_value = "phone")]
    name: String,
    /// How long the code works, in minutes (1 to 60).
    #[arg(long, value_name = "MINUTES", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=60))]
    minutes: u64,
    #[command(flatten)]
    connection: Connection,
}

pub(crate) async fn pair(args: PairArgs) -> ExitCode {
    let result = async {
        let client = args.connection.client()?.named("pair");
        let body = json!({"name": args.name, "expires_secs": args.minutes * 60});
        let answer = client.request(reqwest::Method::POST, "/api/pair", Some(body)).await?;
        if args.connection.json() {
            println!("{answer}");
            return Ok(());
        }
        let made: PairCode = serde_json::from_value(answer)
            .map_err(|error| format!("the daemon answered something else: {error}"))?;
        println!("{}", qr(&made.url)?);
        println!("Scan this with the phone's camera, and tap \"Sign in as {}\".", made.name);
        println!("{}", made.url);
        let minutes = args.minutes;
        println!(
            "The code works once, for {minutes} minute{}; the phone then answers requests as the approve token {}.",
            if minutes == 1 { "" } else { "s" },
            made.name
        );
        if made.url.contains("://127.0.0.1") || made.url.contains("://localhost") {
            eprintln!(
                "switchboard: the link names this machine's loopback address, which a phone cannot reach: serve with --public-url (an address the phone reaches)"
            );
        }
        Ok::<(), String>(())
    }
    .await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("switchboard: {message}");
            ExitCode::from(1)
        }
    }
}

/// `text` as a QR code drawn with half blocks (two rows a line), dark on light.
fn qr(text: &str) -> Result<String, String> {
    let code = qrcode::QrCode::new(text.as_bytes())
        .map_err(|error| format!("cannot draw the link as a QR code: {error}"))?;
    Ok(code
        .render::<qrcode::render::unicode::Dense1x2>()
        .dark_color(qrcode::render::unicode::Dense1x2::Light)
        .light_color(qrcode::render::unicode::Dense1x2::Dark)
        .quiet_zone(true)
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_is_drawn_as_a_square_of_half_blocks() {
        let drawn = qr("http://192.0.2.1:7777/pair/0123456789abcdef0123456789abcdef").unwrap();
        let lines: Vec<&str> = drawn.lines().collect();
        let width = lines[0].chars().count();
        assert!(width >= 25, "{drawn}");
        assert!(lines.iter().all(|line| line.chars().count() == width), "square: {drawn}");
        assert!(drawn.chars().any(|c| matches!(c, '█' | '▀' | '▄')));
    }
}
