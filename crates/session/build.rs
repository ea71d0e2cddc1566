//! Fingerprints the source a session's view is projected by (this crate's, the protocol
//! crate's, and the daemon's `Viewer` in `crates/server/src/view.rs`, which hands the
//! projector the stored events), so that a projector's state stored by one build is read back
//! only by a build of the same source: `SWITCHBOARD_PROJECTION_SOURCE`, read by
//! `projection::SOURCE_FINGERPRINT`.

use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let roots = [
        manifest.join("src"),
        manifest.join("../protocol/src"),
        manifest.join("../server/src/view.rs"),
    ];
    let mut files = Vec::new();
    for root in &roots {
        println!("cargo:rerun-if-changed={}", root.display());
        collect(root, &mut files);
    }
    files.sort();
    // FNV-1a, 64 bits, over each file's path (from its root) and bytes.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for byte in bytes {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for (name, path) in &files {
        feed(name.as_bytes());
        feed(&[0]);
        feed(&std::fs::read(path).unwrap_or_default());
        feed(&[0]);
    }
    println!("cargo:rustc-env=SWITCHBOARD_PROJECTION_SOURCE={hash:016x}");
}

/// Every `.rs` file under `dir`, with its path from the crate's `src` (`projection/update.rs`).
fn collect(dir: &Path, files: &mut Vec<(String, PathBuf)>) {
    if dir.is_file() {
        files.push(("server/view.rs".to_owned(), dir.to_path_buf()));
        return;
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let name = path.strip_prefix(dir).unwrap_or(&path).to_string_lossy().into_owned();
                let crate_name = dir.parent().and_then(Path::file_name).unwrap_or_default();
                files.push((format!("{}/{name}", crate_name.to_string_lossy()), path));
            }
        }
    }
}
