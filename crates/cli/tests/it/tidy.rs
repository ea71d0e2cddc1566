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

/// A lock a panic poisons is either skipped in silence or made into an error at every call; the
/// daemon and the sessions use parking_lot's, which a panic releases. The stores that answer with
/// an error (the journal, the memory store) keep std's and say so.
#[test]
fn no_std_lock_outside_the_stores_that_report_a_poisoned_one() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for krate in ["server", "session", "transport", "store", "protocol", "cli"] {
        rust_files(&root.join("crates").join(krate).join("src"), &mut files);
    }
    let reporting = ["store/src/journal.rs", "store/src/memory.rs"];
    let found: Vec<String> = files
        .iter()
        .filter(|file| !reporting.iter().any(|allowed| file.ends_with(allowed)))
        .filter(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            text.contains("std::sync::Mutex")
                || text.contains("std::sync::RwLock")
                || text.lines().any(|line| {
                    line.trim_start().starts_with("use std::sync::{")
                        && (line.contains("Mutex") || line.contains("RwLock"))
                })
        })
        .map(|file| file.display().to_string())
        .collect();
    assert!(files.len() > 10);
    assert!(found.is_empty(), "std locks (use parking_lot's):\n{}", found.join("\n"));
}

#[test]
fn the_example_policy_parses() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policy.toml");
    let policy = switchboard_session::Policy::from_file(&path).unwrap();
    assert_eq!(policy.default, switchboard_session::Behavior::Ask);
}

/// The code of one of the server's modules, without comments and without its trailing
/// `#[cfg(test)] mod tests`: `NAME.rs`, or every file of the folder `NAME/` (a module split into
/// parts of its own) but its `tests.rs` (its tests, in a file of their own).
fn module_code(dir: &Path, module: &str) -> String {
    let file = dir.join(format!("{module}.rs"));
    let files: Vec<std::path::PathBuf> = if file.exists() {
        vec![file]
    } else {
        let mut parts: Vec<_> = std::fs::read_dir(dir.join(module))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
            .filter(|path| !path.ends_with("tests.rs"))
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

/// The first segment of every path that starts `crate::` in `code`: `crate::a::b` and
/// `crate::{a::b, c}` name `a` (and `c`).
fn crate_paths(code: &str) -> Vec<String> {
    fn word(text: &str) -> String {
        text.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
    }
    let mut names = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The group, to its matching brace; each item's first segment at depth 0.
            let (mut depth, mut item_start) = (0usize, true);
            for (index, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && (c.is_alphanumeric() || c == '_') => {
                        names.push(word(&group[index..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            names.push(word(rest));
        }
    }
    names
}

/// The names `lib.rs` re-exports, each with the module it comes from (`crate::Daemon` is the
/// `daemon` module's).
fn reexports(dir: &Path) -> std::collections::BTreeMap<String, String> {
    let lib = std::fs::read_to_string(dir.join("lib.rs")).unwrap();
    let code: String = lib
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut names = std::collections::BTreeMap::new();
    for statement in code.split(';') {
        let Some(rest) = statement.trim().strip_prefix("pub use ") else { continue };
        let Some((module, items)) = rest.split_once("::") else { continue };
        let items = items.trim().trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let name = item.rsplit(" as ").next().unwrap_or("").trim();
            if !name.is_empty() {
                names.insert(name.to_owned(), module.trim().to_owned());
            }
        }
    }
    names
}

/// The modules of `crates/server/src` (files, and folders of parts) another module of it names
/// in code (`crate::name`, `use crate::{name, …}`, or a name `lib.rs` re-exports from it),
/// outside its tests.
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
    let reexported = reexports(&dir);
    let mut graph = std::collections::BTreeMap::new();
    for module in &modules {
        let code = module_code(&dir, module);
        let uses: std::collections::BTreeSet<String> = crate_paths(&code)
            .into_iter()
            .filter_map(|name| {
                if modules.contains(&name) {
                    Some(name)
                } else {
                    reexported.get(&name).cloned()
                }
            })
            .filter(|other| other != module)
            .collect();
        graph.insert(module.clone(), uses);
    }
    graph
}

/// The levels ARCHITECTURE.md gives the server's modules ("Its modules depend on each other
/// one way …"): each `→` a level down, a parenthesized group one level.
fn documented_levels() -> Vec<Vec<String>> {
    let map = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../ARCHITECTURE.md"),
    )
    .unwrap();
    let start = map.find("Its modules depend on each other one way").expect("the order is stated");
    let rest = &map[start..];
    let first = rest.find("`serve`").expect("it starts at serve");
    let end = rest.find("; a module may skip levels").expect("the order ends so");
    rest[first..end]
        .split('→')
        .map(|level| level.split('`').skip(1).step_by(2).map(str::to_owned).collect::<Vec<_>>())
        .collect()
}

#[test]
fn the_servers_modules_follow_the_order_architecture_md_states() {
    let graph = server_module_graph();
    let levels = documented_levels();
    let level_of = |module: &str| levels.iter().position(|level| level.iter().any(|m| m == module));
    for module in graph.keys() {
        assert!(
            level_of(module).is_some(),
            "module {module} has no place in ARCHITECTURE.md's order of the server's modules"
        );
    }
    for level in &levels {
        for module in level {
            assert!(graph.contains_key(module), "ARCHITECTURE.md orders {module}, which is gone");
        }
    }
    let mut wrong = Vec::new();
    for (module, uses) in &graph {
        for used in uses {
            if level_of(used) < level_of(module) {
                wrong.push(format!("{module} → {used}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "these go back up ARCHITECTURE.md's order (move the code, or the order, and say why): {}",
        wrong.join(", ")
    );
    // Seen through lib.rs: `crate::Daemon` is the daemon module's.
    assert!(
        reexports(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../server/src"))["Daemon"]
            == "daemon"
    );
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

/// The web UI's modules (ARCHITECTURE.md, "The web UI"): each opens with a comment saying what it
/// shows, none imports `app.js` (the entry), and their imports close no circle.
#[test]
fn the_web_uis_modules_import_one_way() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../server/ui");
    let mut graph = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.ends_with(".js") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("//"), "{name} does not open with a comment saying what it is");
        let imports: Vec<String> = text
            .lines()
            .filter(|line| line.starts_with("import "))
            .filter_map(|line| line.split("from './").nth(1))
            .filter(|target| !target.starts_with("vendor/"))
            .map(|target| target.trim_end_matches(['\'', ';']).to_owned())
            .collect();
        assert!(!imports.iter().any(|target| target == "app.js"), "{name} imports app.js");
        graph.insert(name, imports);
    }
    assert!(graph.len() > 10, "{graph:?}");
    for target in graph.values().flatten() {
        assert!(graph.contains_key(target), "an import of a module that is not there: {target}");
    }
    // Kahn's algorithm: every module is placed once all it imports is.
    let mut placed = std::collections::BTreeSet::new();
    while placed.len() < graph.len() {
        let next: Vec<&String> = graph
            .iter()
            .filter(|(name, imports)| {
                !placed.contains(*name) && imports.iter().all(|target| placed.contains(target))
            })
            .map(|(name, _)| name)
            .collect();
        assert!(
            !next.is_empty(),
            "the UI's imports close a circle among: {:?}",
            graph.keys().filter(|name| !placed.contains(*name)).collect::<Vec<_>>()
        );
        placed.extend(next.into_iter().cloned());
    }
}
