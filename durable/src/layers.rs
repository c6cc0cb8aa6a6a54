//! The crate's shape, checked (issue 37): no import circle between the modules under
//! `src/` (`queue`, `read`, `leader`, `worker`, `cold`, `rdb`, the dashboard and the
//! small shared ones), no file over 600 lines, no `impl` block over 250.
//!
//! A module depends on another when its code (comments and its `tests` module aside)
//! names it: `crate::rdb::...`, `super::rdb::...` from a file at the top, or an item the
//! crate root re-exports (`crate::Queue` is `queue`'s). Read from the source text, so it
//! needs no tool and runs with the unit tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 600;
const MAX_IMPL_LINES: usize = 250;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `src/` but the binary's, with its path relative to `src/`.
fn files() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![src()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            let rel = path
                .strip_prefix(src())
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if path.is_dir() && rel != "bin" {
                dirs.push(path);
            } else if rel.ends_with(".rs") {
                out.push((rel, std::fs::read_to_string(&path).expect("a source file")));
            }
        }
    }
    out.sort();
    out
}

/// The top-level module a file belongs to (`queue/merge.rs`: `queue`); `None` for the
/// crate root and this check.
fn module_of(rel: &str) -> Option<&str> {
    let top = rel.split('/').next().unwrap().trim_end_matches(".rs");
    (top != "lib" && top != "layers").then_some(top)
}

/// The code of `text`: without comment lines and without its `tests` module.
fn code(text: &str) -> String {
    let body = text
        .find("#[cfg(test)]\nmod tests")
        .map_or(text, |at| &text[..at]);
    body.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What the crate root re-exports: item name -> its top-level module.
fn reexports(lib: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in code(lib).lines() {
        let Some(rest) = line.trim().strip_prefix("pub use ") else {
            continue;
        };
        let module = rest.split("::").next().unwrap().to_string();
        let items = rest.trim_end_matches(';');
        let items = items.rsplit("::").next().unwrap();
        for item in items.trim_matches(['{', '}']).split(',') {
            let name = item.split(" as ").last().unwrap().trim();
            if !name.is_empty() {
                out.insert(name.to_string(), module.clone());
            }
        }
    }
    out
}

/// The identifiers that follow `prefix` in `code` (`crate::` then `rdb`).
fn after<'a>(code: &'a str, prefix: &str) -> Vec<&'a str> {
    code.match_indices(prefix)
        .filter(|(at, _)| {
            // `crate::` and not `$crate::` or `my_crate::`.
            !code[..*at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$')
        })
        .map(|(at, _)| {
            let rest = &code[at + prefix.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

/// Module -> the modules it depends on.
fn graph(files: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeSet<&str> = files.iter().filter_map(|(rel, _)| module_of(rel)).collect();
    let lib = &files.iter().find(|(rel, _)| rel == "lib.rs").unwrap().1;
    let items = reexports(lib);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, text) in files {
        let Some(from) = module_of(rel) else {
            continue;
        };
        let code = code(text);
        let mut named = after(&code, "crate::");
        if !rel.contains('/') {
            named.extend(after(&code, "super::"));
        }
        let targets = edges.entry(from.to_string()).or_default();
        for name in named {
            let to = if modules.contains(name) {
                Some(name)
            } else {
                items.get(name).map(String::as_str)
            };
            if let Some(to) = to.filter(|to| *to != from) {
                targets.insert(to.to_string());
            }
        }
    }
    edges
}

/// A circle in `edges`, as the modules along it, if there is one.
fn circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, edges, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let edges = graph(&files());
    // The check sees what it must: the front uses the layer, the layer not the front.
    assert!(edges["queue"].contains("rdb"), "{edges:?}");
    assert!(edges["leader"].contains("queue"), "{edges:?}");
    if let Some(found) = circle(&edges) {
        panic!(
            "an import circle: {} (every edge: {edges:#?})",
            found.join(" -> ")
        );
    }
}

#[test]
fn a_circle_is_found() {
    let files = [
        ("lib.rs", "pub use a::Thing;\n"),
        (
            "a.rs",
            "use crate::b::x;\n// crate::c in a comment is no edge\n",
        ),
        ("b/mod.rs", "fn f() -> crate::Thing { make() }\n"),
        ("c.rs", "#[cfg(test)]\nmod tests { use crate::a; }\n"),
    ]
    .map(|(rel, text)| (rel.to_string(), text.to_string()));
    let edges = graph(&files);
    assert_eq!(
        circle(&edges),
        Some(vec!["a".to_string(), "b".to_string(), "a".to_string()])
    );
    assert!(edges["c"].is_empty(), "{edges:?}");
}

#[test]
fn files_and_impl_blocks_stay_short() {
    let mut long = Vec::new();
    for (rel, text) in files() {
        let lines: Vec<&str> = text.lines().collect();
        if lines.len() > MAX_FILE_LINES {
            long.push(format!("{rel}: {} lines", lines.len()));
        }
        for (at, line) in lines.iter().enumerate() {
            if line.starts_with("impl") && line.ends_with('{') {
                let len = lines[at..]
                    .iter()
                    .position(|l| *l == "}")
                    .map_or(0, |n| n + 1);
                if len > MAX_IMPL_LINES {
                    long.push(format!("{rel}:{}: `{line}` is {len} lines", at + 1));
                }
            }
        }
    }
    assert!(
        long.is_empty(),
        "over {MAX_FILE_LINES} lines a file or {MAX_IMPL_LINES} an impl block: {long:#?}"
    );
}
