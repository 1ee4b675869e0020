//! coord-core's layers look down only: shared types (`types/` and the files at the root),
//! then the backend contract (`raw`), then the engine, then the client, then the
//! primitives over it. This reads every `crate::` path in the crate's code (doc comments
//! and test modules aside) and fails on any that reaches a layer above its own file's
//! ([`no_import_runs_up`]), and on files that import each other, directly or in a ring
//! ([`no_files_import_each_other`]), with re-exports followed to the file that defines
//! the item.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
fn no_import_runs_up() {
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
        upward.is_empty(),
        "{} imports run up to a higher layer; move the shared type down (to `types/`) or \
         the code up:\n{}",
        upward.len(),
        upward.join("\n")
    );
}

/// The top-level paths of a use tree at `text` (just after `crate::`): `a::b::C`,
/// `a::{B, c::D}` → `a::B`, `a::c::D`; an item renamed with `as` keeps its own path.
fn use_paths(text: &str) -> Vec<Vec<String>> {
    fn tree(chars: &[char], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let mut path = prefix.to_vec();
        loop {
            let start = *i;
            while *i < chars.len() && (chars[*i].is_alphanumeric() || chars[*i] == '_') {
                *i += 1;
            }
            let seg: String = chars[start..*i].iter().collect();
            if !seg.is_empty() && seg != "self" {
                path.push(seg);
            }
            if chars.get(*i) == Some(&':') && chars.get(*i + 1) == Some(&':') {
                *i += 2;
                if chars.get(*i) == Some(&'{') {
                    *i += 1;
                    loop {
                        while chars.get(*i).is_some_and(|c| c.is_whitespace() || *c == ',') {
                            *i += 1;
                        }
                        match chars.get(*i) {
                            Some('}') => {
                                *i += 1;
                                return;
                            }
                            None => return,
                            _ => {}
                        }
                        let before = *i;
                        tree(chars, i, &path, out);
                        // Skip ` as Name` and anything else up to the next item.
                        while chars.get(*i).is_some_and(|c| *c != ',' && *c != '}') {
                            *i += 1;
                        }
                        if *i == before {
                            *i += 1;
                        }
                    }
                }
                continue;
            }
            out.push(path);
            return;
        }
    }
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    tree(&chars, &mut 0, &[], &mut out);
    out
}

/// The crate's module files by module path (`raw::queue` → `raw/queue.rs`; the root is
/// `lib.rs`).
fn modules(src: &Path, files: &[PathBuf]) -> BTreeMap<Vec<String>, PathBuf> {
    files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(src).expect("under src");
            let mut path: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().trim_end_matches(".rs").to_owned())
                .collect();
            if path.last().is_some_and(|l| l == "mod" || l == "lib") {
                path.pop();
            }
            (path, f.clone())
        })
        .collect()
}

/// The `pub use` re-exports of a module file: item name → the full path it names.
fn reexports(module: &[String], text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for stmt in code(text).split(';') {
        let Some(rest) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        let (rest, base) = match rest.strip_prefix("crate::") {
            Some(r) => (r, Vec::new()),
            None => (rest, module.to_vec()),
        };
        let renamed: BTreeMap<String, String> = rest
            .split([',', '{', '}'])
            .filter_map(|item| item.split_once(" as "))
            .map(|(from, to)| {
                let from = from.trim().rsplit("::").next().unwrap_or_default().to_owned();
                (from, to.trim().to_owned())
            })
            .collect();
        for path in use_paths(rest) {
            let Some(last) = path.last().cloned() else {
                continue;
            };
            let name = renamed.get(&last).cloned().unwrap_or(last);
            let mut full = base.clone();
            full.extend(path);
            out.insert(name, full);
        }
    }
    out
}

/// The file that defines what `path` (segments after `crate::`) names, following
/// re-exports (at most a few hops).
fn resolve(
    path: &[String],
    mods: &BTreeMap<Vec<String>, PathBuf>,
    exports: &BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
    depth: usize,
) -> Option<PathBuf> {
    let mut module: Vec<String> = Vec::new();
    for seg in path {
        let mut deeper = module.clone();
        deeper.push(seg.clone());
        if mods.contains_key(&deeper) {
            module = deeper;
            continue;
        }
        if let Some(target) = exports.get(&module).and_then(|e| e.get(seg))
            && depth < 8
        {
            return resolve(target, mods, exports, depth + 1);
        }
        break;
    }
    mods.get(&module).cloned()
}

#[test]
fn no_files_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mods = modules(&src, &files);
    let texts: BTreeMap<PathBuf, String> = files
        .iter()
        .map(|f| (f.clone(), std::fs::read_to_string(f).expect("read")))
        .collect();
    let exports: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>> = mods
        .iter()
        .map(|(m, f)| (m.clone(), reexports(m, &texts[f])))
        .collect();
    // Each file's imports, re-exports aside (they are followed instead).
    let mut edges: BTreeMap<PathBuf, std::collections::BTreeSet<PathBuf>> = BTreeMap::new();
    for file in &files {
        let text: String = code(&texts[file])
            .split(';')
            .filter(|stmt| !stmt.trim().starts_with("pub use "))
            .collect::<Vec<_>>()
            .join(";");
        let out = edges.entry(file.clone()).or_default();
        for (i, _) in text.match_indices("crate::") {
            for path in use_paths(&text[i + "crate::".len()..]) {
                if let Some(target) = resolve(&path, &mods, &exports, 0)
                    && target != *file
                    && !target.ends_with("lib.rs")
                {
                    out.insert(target);
                }
            }
        }
    }
    // Rings: strongly connected sets of more than one file (Tarjan).
    struct Scc<'a> {
        edges: &'a BTreeMap<PathBuf, std::collections::BTreeSet<PathBuf>>,
        index: BTreeMap<PathBuf, usize>,
        low: BTreeMap<PathBuf, usize>,
        stack: Vec<PathBuf>,
        on_stack: std::collections::BTreeSet<PathBuf>,
        rings: Vec<Vec<PathBuf>>,
    }
    impl Scc<'_> {
        fn visit(&mut self, v: &PathBuf) {
            let n = self.index.len();
            self.index.insert(v.clone(), n);
            self.low.insert(v.clone(), n);
            self.stack.push(v.clone());
            self.on_stack.insert(v.clone());
            let next: Vec<PathBuf> = self.edges.get(v).into_iter().flatten().cloned().collect();
            for w in &next {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v.clone(), low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v.clone(), low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut ring = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(&w);
                    let done = w == *v;
                    ring.push(w);
                    if done {
                        break;
                    }
                }
                if ring.len() > 1 {
                    self.rings.push(ring);
                }
            }
        }
    }
    let mut scc = Scc {
        edges: &edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: Default::default(),
        rings: Vec::new(),
    };
    for file in &files {
        if !scc.index.contains_key(file) {
            scc.visit(file);
        }
    }
    let rings: Vec<String> = scc
        .rings
        .iter()
        .map(|ring| {
            ring.iter()
                .map(|f| f.strip_prefix(&src).expect("under src").display().to_string())
                .collect::<Vec<_>>()
                .join(" <-> ")
        })
        .collect();
    assert!(
        rings.is_empty(),
        "files that import each other, directly or in a ring (move what both need into one \
         file below them):\n{}",
        rings.join("\n")
    );
    // The check reads something: the engine's contender imports the contract's queue.
    let contender = src.join("engine/contender.rs");
    assert!(
        edges[&contender].contains(&src.join("raw/queue.rs")),
        "the import graph misses engine/contender.rs -> raw/queue.rs: the reader is broken"
    );
}
