//! The backend contract stays small: the traits a backend implements (`raw/`) have at
//! most [`MAX_REQUIRED`] required methods between them. Everything else is provided —
//! forwards from the one state accessor, optional operations that default to
//! `Unsupported` behind `Capabilities` — so a new backend implements only what its
//! server alone can do.

use std::path::Path;

/// The most required methods the contract may have.
const MAX_REQUIRED: usize = 20;

/// The traits a backend implements.
const CONTRACT: &[&str] = &[
    "Stateful",
    "Backend",
    "KvStore",
    "ContenderQueue",
    "InstanceStore",
    "RegistryStore",
];

/// The required methods of trait `name` in `text` (methods whose signature ends with `;`).
fn required(text: &str, name: &str) -> Option<Vec<String>> {
    let start = text.find(&format!("pub trait {name}"))?;
    let body_start = start + text[start..].find('{')?;
    // The trait body: up to the matching brace.
    let mut depth = 0usize;
    let mut end = body_start;
    for (i, c) in text[body_start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    end = body_start + i;
                    break;
                }
            }
            _ => {}
        }
    }
    let body = &text[body_start + 1..end];
    let mut out = Vec::new();
    let mut rest = body;
    while let Some(i) = rest.find("fn ") {
        let item = &rest[i..];
        // Only items at the trait's own level (four spaces in), not in provided bodies.
        let line_start = rest[..i].rfind('\n').map_or(0, |n| n + 1);
        let indent = &rest[line_start..i];
        let at_top = matches!(indent.trim(), "" | "async")
            && indent.starts_with("    ")
            && !indent.starts_with("     ");
        let sig_end = item.find(['{', ';']).unwrap_or(item.len());
        if at_top && item[sig_end..].starts_with(';') {
            let name: String = item[3..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push(name);
        }
        rest = &item[3..];
    }
    Some(out)
}

#[test]
fn the_contract_has_at_most_twenty_required_methods() {
    let raw = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/raw");
    let mut texts = String::new();
    for entry in std::fs::read_dir(&raw).expect("raw/") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            texts.push_str(&std::fs::read_to_string(&path).expect("read"));
        }
    }
    let mut all = Vec::new();
    for name in CONTRACT {
        let methods = required(&texts, name).unwrap_or_else(|| panic!("no trait {name} in raw/"));
        assert!(
            !methods.is_empty() || *name == "RegistryStore" || *name == "Stateful",
            "{name}: none read"
        );
        println!("{name}: {}", methods.join(", "));
        all.extend(methods.into_iter().map(|m| format!("{name}::{m}")));
    }
    println!("{} required methods", all.len());
    assert!(
        all.len() <= MAX_REQUIRED,
        "the backend contract has {} required methods (at most {MAX_REQUIRED}): provide a \
         forward from `Stateful::state`, or make the operation optional behind \
         `Capabilities`:\n{}",
        all.len(),
        all.join("\n")
    );
    // The reader reads: the queue's join is required.
    assert!(
        all.iter().any(|m| m == "ContenderQueue::join"),
        "the reader missed ContenderQueue::join"
    );
}
