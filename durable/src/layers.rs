//! The crate's shape, checked (issue 37): no import circle between the modules under
//! `src/` (`queue`, `read`, `leader`, `worker`, `cold`, `rdb`, the dashboard and the
//! small shared ones), no file over 600 lines, no `impl` block over 250.
//!
//! A module depends on another when its code (comments, test modules and `#[cfg(doc)]`
//! imports aside) names it by path: `crate::rdb::...`, `crate::{rdb, ...}`, a `super::`
//! chain that climbs to the crate root, or an item the crate root re-exports
//! (`crate::Queue` is `queue`'s). Read from the source text, so it needs no tool and runs
//! with the unit tests. It cannot see a method called through `self` on a type whose
//! `impl` blocks sit in several modules (`Queue`'s do): such a call is a dependency too,
//! so a method another role calls lives in that role's module or below it.

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

/// The module path of a file (`queue/merge.rs`: `queue::merge`, `queue/mod.rs`: `queue`);
/// empty for the crate root.
fn path_of(rel: &str) -> Vec<&str> {
    let mut path: Vec<&str> = rel.trim_end_matches(".rs").split('/').collect();
    if matches!(path.last(), Some(&"mod") | Some(&"lib")) {
        path.pop();
    }
    path
}

/// The top-level module a file belongs to (`queue/merge.rs`: `queue`); `None` for the
/// crate root and this check.
fn module_of(rel: &str) -> Option<&str> {
    path_of(rel).first().copied().filter(|top| *top != "layers")
}

/// The code of `text`: without comments, its `#[cfg(test)]` modules and `#[cfg(doc)]`
/// items (a doc link's import is no dependency of the code).
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if trimmed == "#[cfg(doc)]" {
            lines.next();
            continue;
        }
        if trimmed == "#[cfg(test)]" {
            // A test module: skip to its closing brace.
            let mut depth = 0i32;
            let mut opened = false;
            for line in lines.by_ref() {
                let code = line.split("//").next().unwrap();
                depth += code.matches('{').count() as i32 - code.matches('}').count() as i32;
                opened |= code.contains('{');
                if opened && depth <= 0 || !opened && code.trim_end().ends_with(';') {
                    break;
                }
            }
            continue;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        // A trailing comment (not a `//` inside a string: an even count of quotes before it).
        let code = match line.find(" //") {
            Some(at) if line[..at].matches('"').count() % 2 == 0 => &line[..at],
            _ => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The first identifier of `text` (`rdb::Rdb` -> `rdb`).
fn ident(text: &str) -> &str {
    let text = text.trim_start();
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The names a path continues with after a prefix: `rdb` for `rdb::x`, `a` and `b` for
/// `{a, b::c}` (a group's items, one level).
fn heads(rest: &str) -> Vec<&str> {
    let Some(group) = rest.trim_start().strip_prefix('{') else {
        return vec![ident(rest)];
    };
    let mut out = Vec::new();
    let mut depth = 0;
    let mut from = 0;
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                out.push(ident(&group[from..at]));
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(ident(&group[from..at]));
                from = at + 1;
            }
            _ => {}
        }
    }
    out
}

/// The top-level names `code` (of the file at module path `path`) reaches: through
/// `crate::`, and through `super::` chains that climb to the crate root.
fn named<'a>(code: &'a str, path: &[&str]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let starts_path = |at: usize| {
        // Not `$crate::`, `my_crate::` or the `super` of `a::super::`.
        !code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':')
    };
    for (at, _) in code
        .match_indices("crate::")
        .filter(|(at, _)| starts_path(*at))
    {
        out.extend(heads(&code[at + "crate::".len()..]));
    }
    for (at, _) in code
        .match_indices("super::")
        .filter(|(at, _)| starts_path(*at))
    {
        let mut rest = &code[at..];
        let mut up = 0;
        while let Some(next) = rest.strip_prefix("super::") {
            rest = next;
            up += 1;
        }
        if up == path.len() {
            out.extend(heads(rest));
        }
    }
    out.retain(|name| !name.is_empty() && *name != "self");
    out
}

/// What the crate root re-exports: item name -> its top-level module.
fn reexports(lib: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for statement in code(lib).split(';') {
        let Some(rest) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let module = ident(rest).to_string();
        let items = match rest.find('{') {
            Some(at) => &rest[at + 1..rest.rfind('}').unwrap_or(rest.len())],
            None => rest.rsplit("::").next().unwrap(),
        };
        for item in items.split(',') {
            let name = item.split(" as ").last().unwrap().trim();
            let name = name.rsplit("::").next().unwrap();
            if !name.is_empty() {
                out.insert(name.to_string(), module.clone());
            }
        }
    }
    out
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
        let targets = edges.entry(from.to_string()).or_default();
        for name in named(&code, &path_of(rel)) {
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
        (
            "lib.rs",
            "pub use a::Thing;\npub use d::{\n    One,\n    Two,\n};\n",
        ),
        (
            "a.rs",
            "use crate::b::x;\n// crate::c in a comment is no edge\n",
        ),
        ("b/mod.rs", "fn f() -> crate::Thing { make() }\n"),
        (
            "c.rs",
            "#[cfg(test)]\nmod tests {\n    use crate::a;\n}\nuse crate::{d::One, e};\n",
        ),
        (
            "d/mod.rs",
            "use super::e::X; // crate::a\n#[cfg(doc)]\nuse crate::c;\n",
        ),
        (
            "d/x.rs",
            "fn g() -> super::super::c::Y { h(\"//\", crate::Two) }\n",
        ),
        ("e.rs", "use crate::d::{self, One};\n"),
    ]
    .map(|(rel, text)| (rel.to_string(), text.to_string()));
    let edges = graph(&files);
    let set = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(edges["a"], set(&["b"]));
    assert_eq!(edges["b"], set(&["a"]));
    // After its tests module, as a group: `d` and `e`.
    assert_eq!(edges["c"], set(&["d", "e"]));
    // From a folder's mod.rs and two levels down; not the `#[cfg(doc)]` import, not a
    // trailing comment; `crate::Two` is `d`'s own (a wrapped re-export).
    assert_eq!(edges["d"], set(&["e", "c"]));
    assert_eq!(edges["e"], set(&["d"]));
    assert_eq!(
        circle(&edges),
        Some(vec!["a".to_string(), "b".to_string(), "a".to_string()])
    );
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
            if line.starts_with("impl") && !line.ends_with("{}") {
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
