//! The wire's JSON schema (docs/architecture.md, "The wire"): the checked-in
//! `docs/schema/wire.json` is what the types derive, and the Python package's result classes
//! and exception codes name exactly what the schema does. A field or code added on one side
//! and not the other fails here.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

fn schema() -> Value {
    serde_json::from_str(&read("docs/schema/wire.json")).expect("docs/schema/wire.json is JSON")
}

#[test]
fn the_checked_in_schema_is_what_the_wire_types_derive() {
    let derived = revl_core::wire::schema::text();
    let checked_in = read("docs/schema/wire.json");
    assert!(
        derived == checked_in,
        "docs/schema/wire.json differs from the wire types' schema: regenerate it with \
         `cargo run -p revl-core --example wire-schema > docs/schema/wire.json`"
    );
}

/// The camelCase properties a definition can print (every variant of an untagged enum,
/// flattened members included), resolving `$ref`s.
fn properties(schema: &Value, def: &Value, out: &mut BTreeSet<String>) {
    if let Some(r) = def.get("$ref").and_then(Value::as_str) {
        let name = r.trim_start_matches("#/$defs/");
        return properties(schema, &schema["$defs"][name], out);
    }
    if let Some(p) = def.get("properties").and_then(Value::as_object) {
        out.extend(p.keys().cloned());
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        for sub in def.get(key).and_then(Value::as_array).into_iter().flatten() {
            properties(schema, sub, out);
        }
    }
}

fn snake(camel: &str) -> String {
    let mut s = String::new();
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            s.push('_');
            s.push(c.to_ascii_lowercase());
        } else {
            s.push(c);
        }
    }
    s
}

/// `class NAME(BASES):` → its annotated fields (`    name: type`), bases resolved.
fn python_classes(src: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut own: BTreeMap<String, (Vec<String>, BTreeSet<String>)> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut in_doc = false;
    for line in src.lines() {
        // Docstrings are prose, not fields.
        if line.matches("\"\"\"").count() % 2 == 1 {
            in_doc = !in_doc;
            continue;
        }
        if in_doc {
            continue;
        }
        if let Some(rest) = line.strip_prefix("class ") {
            let (name, bases) = rest
                .split_once('(')
                .unwrap_or((rest.trim_end_matches(':'), ""));
            let bases = bases
                .trim_end_matches("):")
                .split(',')
                .map(|b| b.trim().split('[').next().unwrap_or("").to_string())
                .filter(|b| !b.is_empty())
                .collect();
            own.insert(name.to_string(), (bases, BTreeSet::new()));
            current = Some(name.to_string());
        } else if let (Some(c), Some(field)) = (&current, line.strip_prefix("    ")) {
            if let Some((name, _)) = field.split_once(": ") {
                if !name.is_empty()
                    && name
                        .chars()
                        .all(|ch| ch.is_ascii_lowercase() || ch == '_' || ch.is_ascii_digit())
                {
                    own.get_mut(c)
                        .expect("the current class")
                        .1
                        .insert(name.to_string());
                }
            }
        } else if !line.is_empty() && !line.starts_with(' ') {
            current = None;
        }
    }
    fn all(own: &BTreeMap<String, (Vec<String>, BTreeSet<String>)>, c: &str) -> BTreeSet<String> {
        let Some((bases, fields)) = own.get(c) else {
            return BTreeSet::new();
        };
        let mut f = fields.clone();
        for b in bases {
            f.extend(all(own, b));
        }
        f
    }
    own.keys().map(|c| (c.clone(), all(&own, c))).collect()
}

/// Each Python result class and the wire documents it wraps.
const PAIRS: &[(&str, &[&str])] = &[
    ("Stepped", &["Stepped"]),
    ("ExecResult", &["ExecReport"]),
    ("CallResult", &["CallResult"]),
    ("Timeline", &["Timeline"]),
    ("Inspect", &["Inspect"]),
    ("Status", &["Status"]),
    ("Verify", &["Verify"]),
    ("ForkReport", &["ForkReport"]),
    ("StepBackReport", &["StepBackReport"]),
    ("AbortReport", &["AbortReport"]),
    ("CommitPlan", &["CommitPlan"]),
    ("CommitResult", &["CommitResult"]),
    ("Resent", &["Resent"]),
    ("ModelNote", &["ModelNote"]),
    ("Listing", &["Listing"]),
    ("FileRead", &["FileRead", "ReadAt"]),
    ("Created", &["Created"]),
    ("Sessions", &["Sessions"]),
];

#[test]
fn python_result_classes_name_the_fields_of_the_schema() {
    let schema = schema();
    let classes = python_classes(&read("python/pysrc/revl/results.py"));
    let mut wrong = Vec::new();
    for (py, defs) in PAIRS {
        let mut props = BTreeSet::new();
        for def in *defs {
            let before = props.len();
            properties(&schema, &schema["$defs"][*def], &mut props);
            assert!(props.len() > before, "the schema defines {def}");
        }
        let want: BTreeSet<String> = props.iter().map(|p| snake(p)).collect();
        let mut have = classes
            .get(*py)
            .unwrap_or_else(|| panic!("results.py defines {py}"))
            .clone();
        // Every result: what attaching repaired (docs/python.md), not a verb's own field.
        have.remove("repaired");
        let missing: Vec<_> = want.difference(&have).collect();
        let extra: Vec<_> = have.difference(&want).collect();
        if !missing.is_empty() || !extra.is_empty() {
            wrong.push(format!(
                "{py} ({defs:?}): not in the class {missing:?}; not in the schema {extra:?}"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "results.py and docs/schema/wire.json disagree:\n{}",
        wrong.join("\n")
    );
}

/// `"x": Y` entries of errors.py's `_BY_CODE`, and each class's `code = "x"`.
fn python_codes(src: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let quoted = |l: &str| l.split('"').nth(1).map(str::to_string);
    let table = src
        .split("_BY_CODE")
        .nth(1)
        .and_then(|t| t.split('}').next())
        .expect("errors.py has _BY_CODE");
    let by_code = table
        .lines()
        .filter(|l| l.contains("\":"))
        .filter_map(quoted)
        .collect();
    let classes = src
        .lines()
        .filter(|l| l.trim_start().starts_with("code = \""))
        .filter_map(quoted)
        .collect();
    (by_code, classes)
}

#[test]
fn python_exceptions_are_the_schema_codes_and_refusals() {
    let schema = schema();
    let strings = |def: &str| -> BTreeSet<String> {
        schema["$defs"][def]["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("{def} is an enumeration"))
            .iter()
            .map(|v| v.as_str().expect("a code is a string").to_string())
            .collect()
    };
    let codes = strings("Code");
    let refusals = strings("RefusalKind");
    assert_eq!(codes.len(), revl_core::Code::ALL.len());
    let (by_code, classes) = python_codes(&read("python/pysrc/revl/errors.py"));
    assert_eq!(
        by_code, codes,
        "errors.py's _BY_CODE maps exactly the error codes"
    );
    let mut want: BTreeSet<String> = codes.union(&refusals).cloned().collect();
    // Raised by the Python package itself: `fork(clean=True)` over a tail that crossed.
    want.insert("fork-not-clean".into());
    assert_eq!(
        classes, want,
        "errors.py has one class per code and refusal"
    );
}
