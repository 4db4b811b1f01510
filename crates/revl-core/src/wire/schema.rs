//! The JSON schema of the wire, derived from its types: one document whose `$defs` hold each
//! verb's result by its type's name, the error document, every error code (with its exit
//! status) and the refusals' codes. `docs/schema/wire.json` is this, checked in; a test
//! fails when the two differ (regenerate it with
//! `cargo run -p revl-core --example wire-schema > docs/schema/wire.json`).

use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{json, Map, Value};

fn def<T: JsonSchema>(gen: &mut SchemaGenerator, docs: &mut Map<String, Value>) {
    let name = T::schema_name().to_string();
    let reference = gen.subschema_for::<T>();
    docs.insert(name, reference.to_value());
}

/// The schema, as JSON (keys sorted).
pub fn json() -> Value {
    use crate::wire::report::*;
    let mut gen = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let mut docs = Map::new();
    def::<Stepped>(&mut gen, &mut docs);
    def::<ExecReport>(&mut gen, &mut docs);
    def::<CallResult>(&mut gen, &mut docs);
    def::<Timeline>(&mut gen, &mut docs);
    def::<Inspect>(&mut gen, &mut docs);
    def::<Status>(&mut gen, &mut docs);
    def::<Verify>(&mut gen, &mut docs);
    def::<ForkReport>(&mut gen, &mut docs);
    def::<StepBackReport>(&mut gen, &mut docs);
    def::<AbortReport>(&mut gen, &mut docs);
    def::<CommitPlan>(&mut gen, &mut docs);
    def::<CommitResult>(&mut gen, &mut docs);
    def::<Resent>(&mut gen, &mut docs);
    def::<ModelNote>(&mut gen, &mut docs);
    def::<Listing>(&mut gen, &mut docs);
    def::<FileRead>(&mut gen, &mut docs);
    def::<ReadAt>(&mut gen, &mut docs);
    def::<Sessions>(&mut gen, &mut docs);
    def::<Approval>(&mut gen, &mut docs);
    def::<crate::api::Created>(&mut gen, &mut docs);
    def::<crate::wire::ErrorDoc>(&mut gen, &mut docs);
    def::<crate::error::Code>(&mut gen, &mut docs);
    def::<crate::api::RefusalKind>(&mut gen, &mut docs);
    // Every document type is named: its `$ref` points into the definitions.
    let defs: Map<String, Value> = gen.take_definitions(true).into_iter().collect();
    let documents: Vec<&String> = docs.keys().collect();
    let doc = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "revl wire documents",
        "description": "Each verb's JSON result (the CLI's --json, the MCP server's tool result, the Python result's to_dict()), the error document, the error codes and the refusals' codes, derived from the revl-core wire types (docs/architecture.md, \"The wire\"). Properties are camelCase as printed; a property not in `required` is left out when it has no value.",
        "x-documents": documents,
        "$defs": defs,
    });
    // Through a string: `Value`'s maps sort their keys.
    serde_json::from_str(&doc.to_string()).expect("the schema is JSON")
}

/// The schema as `docs/schema/wire.json` holds it (pretty, one trailing newline).
pub fn text() -> String {
    let mut t = serde_json::to_string_pretty(&json()).expect("the schema serialises");
    t.push('\n');
    t
}
