//! coord-core's layers look down only: shared types, then the backend contract (`raw`),
//! then the engine, then the client, then the primitives over it. This reads every `crate::`
//! path in the crate's code (doc comments and test modules aside) and counts those that
//! reach a layer above their own file's. The count may only fall: issue #34 takes it to
//! zero; until then [`BUDGET`] is today's count, so no new import runs up.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Imports running up today; lower it as they go, never raise it.
const BUDGET: usize = 15;

/// The layer of a module, by the first segment of its path: 0 shared types, 1 `raw`
/// (the backend contract), 2 `engine`, 3 `client` (the handle every primitive extends),
/// 4 `primitives`.
fn layer(first: &str) -> usize {
    match first {
        "raw" => 1,
        "engine" => 2,
        "client" => 3,
        "primitives" => 4,
        _ => 0,
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without its doc comments, comments and `#[cfg(test)]` module.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segments a `crate::` path names at `rest` (just after `crate::`): one, or
/// each top-level item of a `{…}` group.
fn first_segments(rest: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    if let Some(group) = rest.strip_prefix('{') {
        let (mut depth, mut items, mut current) = (0usize, Vec::new(), String::new());
        for c in group.chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => items.push(std::mem::take(&mut current)),
                _ => {}
            }
            // Only the top level names items; a nested group belongs to the item before it.
            if depth == 0 && c != ',' && c != '}' {
                current.push(c);
            }
        }
        items.push(current);
        return items
            .iter()
            .map(|i| ident(i.trim()))
            .filter(|i| !i.is_empty())
            .collect();
    }
    vec![ident(rest)]
}

/// The root re-exports of lib.rs: item name → the module it comes from.
fn root_items(lib: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let lib = code(lib);
    for stmt in lib.split(';') {
        let stmt = stmt.trim();
        let Some(path) = stmt.strip_prefix("pub use ") else {
            continue;
        };
        let module = path.split("::").next().unwrap_or_default().trim().to_owned();
        let items = match path.find('{') {
            Some(i) => path[i + 1..].trim_end_matches('}').to_owned(),
            None => path.rsplit("::").next().unwrap_or_default().to_owned(),
        };
        for item in items.split(',') {
            let name = item.split(" as ").last().unwrap_or_default().trim();
            if !name.is_empty() {
                out.insert(name.to_owned(), module.clone());
            }
        }
    }
    out
}

#[test]
fn no_new_import_runs_up() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    let roots = root_items(&lib);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut upward = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src");
        if rel == Path::new("lib.rs") {
            continue;
        }
        let own = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .unwrap_or_default()
            .trim_end_matches(".rs")
            .to_owned();
        let text = code(&std::fs::read_to_string(file).expect("read"));
        let mut seen = std::collections::BTreeSet::new();
        for (i, _) in text.match_indices("crate::") {
            let rest = &text[i + "crate::".len()..];
            for first in first_segments(rest) {
                let target = roots.get(&first).cloned().unwrap_or_else(|| first.clone());
                if layer(&target) <= layer(&own) {
                    continue;
                }
                // The file reached: `primitives::lock`, not just `primitives`.
                let dir = matches!(target.as_str(), "raw" | "engine" | "primitives");
                let file = rest
                    .strip_prefix(&format!("{first}::"))
                    .filter(|_| dir)
                    .map(|r| {
                        r.chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect::<String>()
                    })
                    .filter(|f| !f.is_empty() && f.chars().next().is_some_and(char::is_lowercase))
                    .map_or(target.clone(), |f| format!("{target}::{f}"));
                if seen.insert(file.clone()) {
                    upward.push(format!("{} -> {file}", rel.display()));
                }
            }
        }
    }
    for u in &upward {
        println!("runs up: {u}");
    }
    assert!(
        upward.len() <= BUDGET,
        "{} imports run up to a higher layer (budget {BUDGET}); a new one was added:\n{}",
        upward.len(),
        upward.join("\n")
    );
    if upward.len() < BUDGET {
        println!(
            "{} imports run up, below the budget of {BUDGET}: lower BUDGET",
            upward.len()
        );
    }
}
