//! The one builder of test manifests (`revl.toml`): each test names its tools and their
//! classes, scopes, runners and inverses; the builder writes the TOML.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One `[[tool]]` of a manifest.
#[derive(Debug, Clone)]
pub struct Tool {
    name: String,
    class: &'static str,
    lines: Vec<String>,
}

/// A tool named `name` of class `class` (`effect`, `emission`, `deferred`, `opaque`,
/// `inverse`).
pub fn tool(name: &str, class: &'static str) -> Tool {
    Tool {
        name: name.into(),
        class,
        lines: Vec::new(),
    }
}

fn quoted(s: &str) -> String {
    serde_json::to_string(s).expect("a string")
}

impl Tool {
    fn line(mut self, key: &str, value: String) -> Self {
        self.lines.push(format!("{key} = {value}"));
        self
    }

    pub fn service(self, s: &str) -> Self {
        self.line("service", quoted(s))
    }

    pub fn method(self, m: &str) -> Self {
        self.line("method", quoted(m))
    }

    /// `scope = [tokens]`.
    pub fn scope(self, tokens: &[&str]) -> Self {
        let list: Vec<String> = tokens.iter().map(|t| quoted(t)).collect();
        self.line("scope", format!("[{}]", list.join(", ")))
    }

    /// `scope = { ... }`, given as the TOML inline table's body (`caps = [], confined = true`).
    pub fn scope_table(self, body: &str) -> Self {
        self.line("scope", format!("{{ {body} }}"))
    }

    /// `http = { method = "POST", url = URL }`.
    pub fn post(self, url: &str) -> Self {
        self.line(
            "http",
            format!("{{ method = \"POST\", url = {} }}", quoted(url)),
        )
    }

    /// `http = { url = URL }` (the method defaults).
    pub fn http(self, url: &str) -> Self {
        self.line("http", format!("{{ url = {} }}", quoted(url)))
    }

    /// `run = [argv]`.
    pub fn run(self, argv: &[&str]) -> Self {
        let list: Vec<String> = argv.iter().map(|a| quoted(a)).collect();
        self.line("run", format!("[{}]", list.join(", ")))
    }

    pub fn undo(self, inverse: &str) -> Self {
        self.line("undo", quoted(inverse))
    }

    pub fn undo_idempotent(self, yes: bool) -> Self {
        self.line("undo_idempotent", yes.to_string())
    }

    pub fn compensate(self, inverse: &str) -> Self {
        self.line("compensate", quoted(inverse))
    }

    /// `approval = "none"` (an emission that needs no approval).
    pub fn no_approval(self) -> Self {
        self.line("approval", quoted("none"))
    }

    pub fn timeout(self, seconds: u64) -> Self {
        self.line("timeout_seconds", seconds.to_string())
    }
}

/// The TOML text of a manifest.
pub fn text(tools: &[Tool]) -> String {
    let mut out = String::new();
    for t in tools {
        let _ = writeln!(
            out,
            "[[tool]]\nname = {}\nclass = {}",
            quoted(&t.name),
            quoted(t.class)
        );
        for l in &t.lines {
            let _ = writeln!(out, "{l}");
        }
        out.push('\n');
    }
    out
}

/// Write the manifest to `dir/revl.toml`; its path.
pub fn write(dir: &Path, tools: &[Tool]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join("revl.toml");
    std::fs::write(&p, text(tools)).unwrap();
    p
}
