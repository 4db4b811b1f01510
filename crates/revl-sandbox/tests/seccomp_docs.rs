//! docs/security.md's list of the calls the seccomp filter refuses is the filter's own
//! tables: a call added to (or dropped from) one and not the other fails here.

use revl_sandbox::seccomp::{DENY, ENOSYS, FILTERED};
use std::collections::BTreeSet;

/// The "8. **Seccomp**" item of docs/security.md, up to the next item.
fn seccomp_item() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/security.md");
    let doc = std::fs::read_to_string(path).expect("docs/security.md");
    let start = doc.find("8. **Seccomp**").expect("the Seccomp item");
    let rest = &doc[start..];
    let end = rest.find("\n9. ").expect("the item after Seccomp");
    rest[..end].to_string()
}

/// Every backticked call name in `text`: `name` or `name(ARG)`, lower case.
fn call_names(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|t| t.split('(').next().unwrap_or(t).to_string())
        .filter(|t| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        })
        // The crate that builds the filter, not a call.
        .filter(|t| t != "seccompiler")
        .collect()
}

#[test]
fn the_documented_calls_are_the_filters_calls() {
    let item = seccomp_item();
    let documented = call_names(&item);
    let mut filtered: BTreeSet<String> = DENY
        .iter()
        .chain(FILTERED)
        .chain(ENOSYS)
        .map(|(name, _)| name.to_string())
        .collect();
    // `iopl` and `ioperm` exist on x86-64 only; the docs name them for every machine.
    if !cfg!(target_arch = "x86_64") {
        filtered.extend(["iopl".to_string(), "ioperm".to_string()]);
    }
    let only_docs: Vec<_> = documented.difference(&filtered).collect();
    let only_code: Vec<_> = filtered.difference(&documented).collect();
    assert!(
        only_docs.is_empty() && only_code.is_empty(),
        "docs/security.md's seccomp list and the filter differ: only in the docs {only_docs:?}, only in the filter {only_code:?}"
    );
    assert!(filtered.len() > 40, "the tables hold the whole list");
}

#[test]
fn the_calls_that_fail_with_enosys_are_documented_as_such() {
    let item = seccomp_item()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for (name, _) in ENOSYS {
        assert!(
            item.contains(&format!("`{name}` fails with `ENOSYS`")),
            "docs/security.md does not say `{name}` fails with ENOSYS"
        );
    }
    assert!(!ENOSYS.is_empty());
}

#[test]
fn the_filter_builds_from_the_tables() {
    let progs = revl_sandbox::seccomp::programs().expect("seccompiler knows this machine");
    assert!(progs.len() >= 2, "the EPERM filter and the ENOSYS filter");
    // Every table entry is a distinct call.
    let all: Vec<_> = DENY.iter().chain(FILTERED).chain(ENOSYS).collect();
    let numbers: BTreeSet<_> = all.iter().map(|(_, nr)| *nr).collect();
    assert_eq!(numbers.len(), all.len(), "a call is listed twice");
}
