//! Print the wire's JSON schema (`docs/schema/wire.json`):
//! `cargo run -p revl-core --example wire-schema > docs/schema/wire.json`.

fn main() {
    print!("{}", revl_core::wire::schema::text());
}
