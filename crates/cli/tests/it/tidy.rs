//! Repository hygiene: every Rust source file opens with a `//!` doc comment saying what it is
//! for, and no module is named after a non-noun (utils, helpers, manager, service).

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            if !matches!(
                name.as_str(),
                "target" | "fixtures" | "snapshots" | "node_modules" | ".git"
            ) {
                rust_files(&path, files);
            }
        } else if name.ends_with(".rs") {
            files.push(path);
        }
    }
}

#[test]
fn every_rust_file_has_a_module_doc() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    if root.join("fuzz").is_dir() {
        rust_files(&root.join("fuzz"), &mut files);
    }
    assert!(files.len() > 10);
    let missing: Vec<String> = files
        .iter()
        .filter(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            !text.trim_start().starts_with("//!")
        })
        .map(|file| file.display().to_string())
        .collect();
    assert!(missing.is_empty(), "files without a //! doc comment:\n{}", missing.join("\n"));
    let vague: Vec<String> = files
        .iter()
        .filter(|file| {
            let stem = file.file_stem().unwrap().to_string_lossy();
            matches!(stem.as_ref(), "utils" | "util" | "helpers" | "helper" | "manager" | "service")
        })
        .map(|file| file.display().to_string())
        .collect();
    assert!(vague.is_empty(), "vague module names: {vague:?}");
}

#[test]
fn the_example_policy_parses() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policy.toml");
    let policy = switchboard_session::Policy::from_file(&path).unwrap();
    assert_eq!(policy.default, switchboard_session::Behavior::Ask);
}
