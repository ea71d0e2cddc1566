//! Decode, routing and encode throughput over the real-CLI capture corpus, side by side with
//! `serde_json::Value` on the same bytes in the same run. Prints a Markdown table.
//!
//! `cargo bench -p switchboard-protocol` (set `BENCH_SECONDS` to change the time per row).

#![allow(clippy::print_stdout, missing_docs)]

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use switchboard_protocol::{Envelope, Message, Received};

#[derive(Deserialize)]
struct CaptureLine<'a> {
    #[serde(borrow)]
    msg: Option<&'a RawValue>,
}

fn corpus() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut lines = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .flat_map(|dir| std::fs::read_dir(dir.unwrap().path()).into_iter().flatten())
        .map(|file| file.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "ndjson"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        for line in text.lines() {
            let capture: CaptureLine<'_> = serde_json::from_str(line).unwrap();
            if let Some(msg) = capture.msg {
                lines.push(msg.get().to_owned());
            }
        }
    }
    lines
}

struct Row {
    name: &'static str,
    /// The row this one is compared with.
    baseline: usize,
    bytes_per_second: f64,
    lines_per_second: f64,
}

fn measure(
    name: &'static str,
    lines: &[String],
    budget: Duration,
    mut work: impl FnMut(&str),
) -> Row {
    let bytes: usize = lines.iter().map(String::len).sum();
    // Warm up once.
    for line in lines {
        work(line);
    }
    let start = Instant::now();
    let mut rounds = 0u64;
    while start.elapsed() < budget {
        for line in lines {
            work(line);
        }
        rounds += 1;
    }
    let seconds = start.elapsed().as_secs_f64();
    Row {
        name,
        baseline: 0,
        bytes_per_second: bytes as f64 * rounds as f64 / seconds,
        lines_per_second: lines.len() as f64 * rounds as f64 / seconds,
    }
}

fn main() {
    let budget = Duration::from_secs_f64(
        std::env::var("BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(2.0),
    );
    let lines = corpus();
    let bytes: usize = lines.iter().map(String::len).sum();
    let decoded: Vec<Message> =
        lines.iter().map(|line| Message::decode(line.as_bytes()).unwrap()).collect();
    let values: Vec<Value> = lines.iter().map(|line| serde_json::from_str(line).unwrap()).collect();

    let mut rows = vec![
        measure("serde_json::Value parse (baseline)", &lines, budget, |line| {
            black_box(serde_json::from_slice::<Value>(line.as_bytes()).unwrap());
        }),
        measure("Envelope::parse (routing fields)", &lines, budget, |line| {
            black_box(Envelope::parse(line.as_bytes()).unwrap());
        }),
        measure("Message::decode (full typed)", &lines, budget, |line| {
            black_box(Message::decode(line.as_bytes()).unwrap());
        }),
    ];
    // The relay's common line: a `stream_event` (nested tagged objects: `event`, `delta`).
    let streamed: Vec<String> = lines
        .iter()
        .filter(|line| line.starts_with(r#"{"type":"stream_event""#))
        .cloned()
        .collect();
    let stream_rows = [
        measure(
            "serde_json::Value parse, stream_event lines (baseline)",
            &streamed,
            budget,
            |line| {
                black_box(serde_json::from_slice::<Value>(line.as_bytes()).unwrap());
            },
        ),
        measure("Message::decode, stream_event lines", &streamed, budget, |line| {
            black_box(Message::decode(line.as_bytes()).unwrap());
        }),
    ];
    let stream_baseline = rows.len();
    for mut row in stream_rows {
        row.baseline = stream_baseline;
        rows.push(row);
    }
    let encode_baseline = rows.len();
    let mut index = 0;
    rows.push(measure("serde_json::Value encode (baseline)", &lines, budget, |_| {
        black_box(serde_json::to_string(&values[index % values.len()]).unwrap());
        index += 1;
    }));
    let mut index = 0;
    rows.push(measure("Message::encode (typed)", &lines, budget, |_| {
        black_box(decoded[index % decoded.len()].encode());
        index += 1;
    }));
    let received: Vec<Received> =
        lines.iter().map(|line| Received::decode(line.as_bytes()).unwrap()).collect();
    let mut index = 0;
    rows.push(measure("Received::encode (unchanged, raw bytes)", &lines, budget, |_| {
        black_box(received[index % received.len()].encode());
        index += 1;
    }));

    for row in &mut rows[encode_baseline..] {
        row.baseline = encode_baseline;
    }
    println!(
        "corpus: {} lines ({} of them stream_event), {:.1} MB (every `msg` of tests/fixtures); {:.1} s per row\n",
        lines.len(),
        streamed.len(),
        bytes as f64 / 1e6,
        budget.as_secs_f64()
    );
    println!("| operation | MB/s | lines/s | vs Value |");
    println!("|---|---:|---:|---:|");
    for row in &rows {
        let baseline = rows[row.baseline].bytes_per_second;
        println!(
            "| {} | {:.0} | {:.0} | {:.2}x |",
            row.name,
            row.bytes_per_second / 1e6,
            row.lines_per_second,
            row.bytes_per_second / baseline
        );
    }
}
