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

/// The code of one of the server's modules, without comments and without its trailing
/// `#[cfg(test)] mod tests`: `NAME.rs`, or every file of the folder `NAME/` (a module split into
/// parts of its own).
fn module_code(dir: &Path, module: &str) -> String {
    let file = dir.join(format!("{module}.rs"));
    let files: Vec<std::path::PathBuf> = if file.exists() {
        vec![file]
    } else {
        let mut parts: Vec<_> = std::fs::read_dir(dir.join(module))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
            .collect();
        parts.sort();
        parts
    };
    files
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
            code.lines()
                .filter(|line| !line.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules of `crates/server/src` (files, and folders of parts) another module of it names
/// in code (`crate::name` or `use crate::{name, …}`), outside its tests.
fn server_module_graph() -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../server/src");
    let modules: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|entry| {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.path().join("mod.rs").exists() {
                return Some(name);
            }
            name.strip_suffix(".rs").filter(|name| *name != "lib").map(str::to_owned)
        })
        .collect();
    let mut graph = std::collections::BTreeMap::new();
    for module in &modules {
        let code = module_code(&dir, module);
        let code = code.as_str();
        let uses: std::collections::BTreeSet<String> = modules
            .iter()
            .filter(|other| *other != module)
            .filter(|other| {
                code.contains(&format!("crate::{other}::"))
                    || code.contains(&format!("crate::{other};"))
                    || code.contains(&format!("use crate::{{{other}"))
                    || code.contains(&format!("crate::{{{other},"))
            })
            .cloned()
            .collect();
        graph.insert(module.clone(), uses);
    }
    graph
}

#[test]
fn the_servers_modules_depend_on_each_other_one_way() {
    let graph = server_module_graph();
    // Depth-first search for a cycle; the path is the error message.
    fn visit(
        module: &str,
        graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) {
        if let Some(at) = path.iter().position(|seen| seen == module) {
            panic!(
                "the server's modules import each other in a circle: {} → {module}",
                path[at..].join(" → ")
            );
        }
        if done.contains(module) {
            return;
        }
        path.push(module.to_owned());
        for next in &graph[module] {
            visit(next, graph, path, done);
        }
        path.pop();
        done.insert(module.to_owned());
    }
    let mut done = std::collections::BTreeSet::new();
    for module in graph.keys() {
        visit(module, &graph, &mut Vec::new(), &mut done);
    }
    assert!(graph["api"].contains("daemon"), "the graph is read at all: {graph:?}");
}
