//! The manifest (`revl.toml`, docs/user-guide.md §1) and running declared tools: argv
//! (never through a shell) or HTTP (JSON body). A manifest is validated completely at
//! `new`, copied into the blob store under its blake3 digest, and the session always uses
//! that copy.

use crate::error::{Code, Error, Result};
use serde_json::{json, Map, Value};
use std::path::Path;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Effect,
    Emission,
    Deferred,
    Opaque,
    Inverse,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Effect => "effect",
            Class::Emission => "emission",
            Class::Deferred => "deferred",
            Class::Opaque => "opaque",
            Class::Inverse => "inverse",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Runner {
    Argv(Vec<String>),
    Http {
        method: String,
        url: String,
    },
    /// A Python function, `module:qualname` (docs/python.md): declared through the Python package
    /// only, and run only by a process that holds it (a [`ToolHost`]).
    Python(String),
}

#[derive(Debug, Clone)]
pub struct Tool {
    pub name: String,
    pub class: Class,
    pub service: String,
    pub method: String,
    /// Normalised to `{"caps": [...], "confined"?, "sandbox"?}`; `None` only for opaque tools.
    pub scope: Option<Value>,
    pub runner: Runner,
    pub undo: Option<String>,
    pub undo_idempotent: Option<bool>,
    pub compensate: Option<String>,
    pub approval_none: bool,
    pub timeout: Duration,
}

#[derive(Debug, Clone, Default)]
pub struct Manifest {
    pub tools: Vec<Tool>,
    /// The `[exec]` table: how sandboxed commands run.
    pub exec: ExecSection,
}

/// `[exec]` (docs/security.md): `hide = ["/abs/path", "~/rel", ...]`, paths the sandbox masks (an
/// empty read-only tmpfs over a directory, an empty file over a file), so that a command
/// cannot read them. `~/` is the home directory of whoever runs `exec`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExecSection {
    pub hide: Vec<String>,
    /// `net = ["pypi.org:443", "*.pythonhosted.org:443", "127.0.0.1:8080"]`
    /// (docs/user-guide.md §8): the destinations a command may reach through revl's proxy,
    /// when it asks (`--net`).
    pub net: Vec<String>,
}

impl ExecSection {
    /// The hidden paths, `~/` expanded with `home`; `Err(entry)`: an entry under `~/` with
    /// no home to expand it (it cannot be hidden: docs/security.md).
    pub fn hide_paths(
        &self,
        home: Option<&Path>,
    ) -> std::result::Result<Vec<std::path::PathBuf>, String> {
        self.hide
            .iter()
            .map(|h| match h.strip_prefix("~/") {
                Some(rest) => home.map(|d| d.join(rest)).ok_or_else(|| h.clone()),
                None => Ok(std::path::PathBuf::from(h)),
            })
            .collect()
    }

    fn parse(v: &toml::Value, file: &str) -> Result<ExecSection> {
        let bad = |field: &str, why: &str| {
            Error::new(
                Code::BadManifest,
                format!("{file}: [exec], field `{field}`: {why}"),
                "fix the manifest (see docs/user-guide.md, \"The manifest\") and create the session again",
            )
        };
        let Some(t) = v.as_table() else {
            return Err(bad("exec", "must be a table ([exec])"));
        };
        let mut out = ExecSection::default();
        for (k, v) in t {
            match k.as_str() {
                "hide" => {
                    let Some(list) = v.as_array() else {
                        return Err(bad("hide", "must be an array of paths"));
                    };
                    for p in list {
                        match p.as_str() {
                            Some(s) if s.starts_with('/') || s.starts_with("~/") => {
                                if s.split('/').any(|c| c == "..") {
                                    return Err(bad("hide", &format!("{s:?} holds `..`")));
                                }
                                out.hide.push(s.to_string())
                            }
                            _ => {
                                return Err(bad(
                                    "hide",
                                    &format!(
                                        "{p:?} is not an absolute path or one starting with ~/"
                                    ),
                                ))
                            }
                        }
                    }
                }
                "net" => {
                    let Some(list) = v.as_array() else {
                        return Err(bad(
                            "net",
                            "must be an array of destinations, e.g. [\"pypi.org:443\"]",
                        ));
                    };
                    for d in list {
                        let Some(s) = d.as_str() else {
                            return Err(bad(
                                "net",
                                &format!("{d:?} is not a string (write \"host:port\")"),
                            ));
                        };
                        crate::egress::Dest::parse(s).map_err(|e| bad("net", &e))?;
                        out.net.push(s.to_string());
                    }
                }
                _ => return Err(bad(k, "unknown key (only `hide` and `net`)")),
            }
        }
        Ok(out)
    }
}

const TOOL_KEYS: &[&str] = &[
    "name",
    "class",
    "service",
    "method",
    "scope",
    "run",
    "http",
    "python",
    "undo",
    "undo_idempotent",
    "compensate",
    "approval",
    "timeout_seconds",
];

/// Where a manifest's text comes from: a user's file, where a `python` tool is refused (a
/// Python function is declared through the Python package, which also holds it), or the
/// copy in the store, which records such tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    File,
    Stored,
}

impl Manifest {
    /// Parse and validate a manifest file. `file` names the manifest in errors.
    pub fn parse(text: &str, file: &str) -> Result<Manifest> {
        Manifest::parse_from(text, file, Source::File)
    }

    /// Parse and validate; `python` tools only from [`Source::Stored`].
    pub fn parse_from(text: &str, file: &str, source: Source) -> Result<Manifest> {
        let bad = |tool: &str, field: &str, why: String| {
            Error::new(
                Code::BadManifest,
                format!("{file}: tool {tool:?}, field `{field}`: {why}"),
                "fix the manifest (see docs/user-guide.md, \"The manifest\") and create the session again",
            )
        };
        let table: toml::Table = toml::from_str(text).map_err(|e| {
            Error::new(
                Code::BadManifest,
                format!(
                    "{file}: not valid TOML: {}",
                    e.to_string().lines().next().unwrap_or("")
                ),
                "fix the TOML syntax and create the session again",
            )
        })?;
        for k in table.keys() {
            if k != "tool" && k != "exec" {
                return Err(bad(
                    "-",
                    k,
                    "unknown top-level key (only [[tool]] tables and [exec] are allowed)".into(),
                ));
            }
        }
        let exec = match table.get("exec") {
            Some(v) => ExecSection::parse(v, file)?,
            None => ExecSection::default(),
        };
        let list = match table.get("tool") {
            None => {
                return Ok(Manifest {
                    tools: Vec::new(),
                    exec,
                })
            }
            Some(toml::Value::Array(a)) => a.clone(),
            Some(_) => {
                return Err(bad(
                    "-",
                    "tool",
                    "must be an array of tables ([[tool]])".into(),
                ))
            }
        };
        let mut tools: Vec<Tool> = Vec::new();
        for (i, t) in list.iter().enumerate() {
            let Some(t) = t.as_table() else {
                return Err(bad(
                    &format!("#{}", i + 1),
                    "tool",
                    "must be a table".into(),
                ));
            };
            let name = match t.get("name") {
                Some(toml::Value::String(s)) if !s.is_empty() => s.clone(),
                Some(_) => {
                    return Err(bad(
                        &format!("#{}", i + 1),
                        "name",
                        "must be a non-empty string".into(),
                    ))
                }
                None => return Err(bad(&format!("#{}", i + 1), "name", "is required".into())),
            };
            let n = name.as_str();
            if tools.iter().any(|x| x.name == name) {
                return Err(bad(n, "name", "is declared twice".into()));
            }
            for k in t.keys() {
                if !TOOL_KEYS.contains(&k.as_str()) {
                    return Err(bad(n, k, "unknown key".into()));
                }
            }
            let string = |field: &str| -> Result<Option<String>> {
                match t.get(field) {
                    None => Ok(None),
                    Some(toml::Value::String(s)) => Ok(Some(s.clone())),
                    Some(_) => Err(bad(n, field, "must be a string".into())),
                }
            };
            let class = match string("class")?.as_deref() {
                Some("effect") => Class::Effect,
                Some("emission") => Class::Emission,
                Some("deferred") => Class::Deferred,
                Some("opaque") => Class::Opaque,
                Some("inverse") => Class::Inverse,
                Some(other) => {
                    return Err(bad(
                        n,
                        "class",
                        format!(
                            "unknown class {other:?} (effect, emission, deferred, opaque, inverse)"
                        ),
                    ))
                }
                None => return Err(bad(n, "class", "is required".into())),
            };
            let scope = match t.get("scope") {
                None if class == Class::Opaque => None,
                None => {
                    return Err(bad(
                        n,
                        "scope",
                        format!("is required for class {}", class.as_str()),
                    ))
                }
                Some(v) => Some(normalise_scope(v).map_err(|why| bad(n, "scope", why))?),
            };
            let python = match (t.get("python"), source) {
                (None, _) => None,
                (Some(_), Source::File) => {
                    return Err(bad(
                        n,
                        "python",
                        "a Python function is declared through the Python package (`@revl.tool`, passed in `tools=`), not in a manifest file".into(),
                    ))
                }
                (Some(toml::Value::String(s)), Source::Stored) if python_target_ok(s) => {
                    Some(s.clone())
                }
                (Some(_), Source::Stored) => {
                    return Err(bad(n, "python", "must be \"module:qualname\"".into()))
                }
            };
            let runner = match (t.get("run"), t.get("http")) {
                _ if python.is_some() && (t.contains_key("run") || t.contains_key("http")) => {
                    return Err(bad(
                        n,
                        "python",
                        "give exactly one of `run`, `http` or `python`".into(),
                    ))
                }
                _ if python.is_some() => Runner::Python(python.clone().unwrap_or_default()),
                (Some(_), Some(_)) => {
                    return Err(bad(
                        n,
                        "run",
                        "give exactly one of `run` or `http`, not both".into(),
                    ))
                }
                (None, None) => {
                    return Err(bad(n, "run", "one of `run` or `http` is required".into()))
                }
                (Some(toml::Value::Array(a)), None) => {
                    let argv: Option<Vec<String>> =
                        a.iter().map(|x| x.as_str().map(str::to_string)).collect();
                    match argv {
                        Some(v) if !v.is_empty() && !v[0].is_empty() => {
                            for part in &v {
                                template_names(part).map_err(|why| bad(n, "run", why))?;
                            }
                            Runner::Argv(v)
                        }
                        _ => {
                            return Err(bad(
                                n,
                                "run",
                                "must be a non-empty array of strings (an argv)".into(),
                            ))
                        }
                    }
                }
                (Some(_), None) => {
                    return Err(bad(
                        n,
                        "run",
                        "must be an array of strings (an argv, never a shell line)".into(),
                    ))
                }
                (None, Some(toml::Value::Table(h))) => {
                    for k in h.keys() {
                        if k != "method" && k != "url" {
                            return Err(bad(
                                n,
                                &format!("http.{k}"),
                                "unknown key (method, url)".into(),
                            ));
                        }
                    }
                    let method = h
                        .get("method")
                        .and_then(|m| m.as_str())
                        .unwrap_or("POST")
                        .to_ascii_uppercase();
                    if !["POST", "PUT", "PATCH", "DELETE", "GET"].contains(&method.as_str()) {
                        return Err(bad(
                            n,
                            "http.method",
                            format!("{method:?} is not one of POST, PUT, PATCH, DELETE, GET"),
                        ));
                    }
                    let url = match h.get("url").and_then(|u| u.as_str()) {
                        Some(u) if u.starts_with("http://") || u.starts_with("https://") => {
                            u.to_string()
                        }
                        Some(u) => {
                            return Err(bad(
                                n,
                                "http.url",
                                format!("{u:?} is not an http or https URL"),
                            ))
                        }
                        None => return Err(bad(n, "http.url", "is required".into())),
                    };
                    Runner::Http { method, url }
                }
                (None, Some(_)) => {
                    return Err(bad(n, "http", "must be a table { method, url }".into()))
                }
            };
            let undo = string("undo")?;
            let compensate = string("compensate")?;
            let undo_idempotent = match t.get("undo_idempotent") {
                None => None,
                Some(toml::Value::Boolean(b)) => Some(*b),
                Some(_) => return Err(bad(n, "undo_idempotent", "must be true or false".into())),
            };
            match (class, &undo) {
                (Class::Effect, None) => {
                    return Err(bad(n, "undo", "is required for class effect".into()))
                }
                (Class::Effect, Some(_)) => {}
                (_, Some(_)) => {
                    return Err(bad(n, "undo", "is allowed only on class effect".into()))
                }
                _ => {}
            }
            if undo_idempotent.is_some() && class != Class::Effect {
                return Err(bad(
                    n,
                    "undo_idempotent",
                    "is allowed only on class effect".into(),
                ));
            }
            if compensate.is_some() && class != Class::Emission {
                return Err(bad(
                    n,
                    "compensate",
                    "is allowed only on class emission".into(),
                ));
            }
            let approval_none = match string("approval")?.as_deref() {
                None => false,
                Some("none") if class == Class::Emission => true,
                Some("none") => {
                    return Err(bad(
                        n,
                        "approval",
                        "`approval = \"none\"` is allowed only on class emission".into(),
                    ))
                }
                Some(other) => {
                    return Err(bad(
                        n,
                        "approval",
                        format!("{other:?}: the only value is \"none\""),
                    ))
                }
            };
            let timeout = match t.get("timeout_seconds") {
                None => Duration::from_secs(30),
                Some(toml::Value::Integer(s)) if *s > 0 && *s <= 86_400 => {
                    Duration::from_secs(*s as u64)
                }
                Some(toml::Value::Float(s)) if *s > 0.0 && *s <= 86_400.0 => {
                    Duration::from_secs_f64(*s)
                }
                Some(_) => {
                    return Err(bad(
                        n,
                        "timeout_seconds",
                        "must be a positive number of seconds (at most 86400)".into(),
                    ))
                }
            };
            tools.push(Tool {
                service: string("service")?.unwrap_or_else(|| name.clone()),
                method: string("method")?.unwrap_or_else(|| "call".into()),
                name,
                class,
                scope,
                runner,
                undo,
                undo_idempotent,
                compensate,
                approval_none,
                timeout,
            });
        }
        // Targets of undo/compensate must exist and be of class inverse.
        for t in &tools {
            for (field, target) in [("undo", &t.undo), ("compensate", &t.compensate)] {
                if let Some(target) = target {
                    match tools.iter().find(|x| &x.name == target) {
                        None => {
                            return Err(bad(
                                &t.name,
                                field,
                                format!("names {target:?}, which is not declared"),
                            ))
                        }
                        Some(x) if x.class != Class::Inverse => {
                            return Err(bad(
                                &t.name,
                                field,
                                format!(
                                "names {target:?}, which is of class {} (it must be class inverse)",
                                x.class.as_str()
                            ),
                            ))
                        }
                        Some(_) => {}
                    }
                }
            }
        }
        Ok(Manifest { tools, exec })
    }

    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// Sorted scope tokens the manifest declares, plus `fs` (lineage `capabilities`).
    pub fn capabilities(&self) -> Vec<String> {
        let mut caps: Vec<String> = vec!["fs".into()];
        for t in &self.tools {
            if let Some(list) = t
                .scope
                .as_ref()
                .and_then(|s| s.get("caps"))
                .and_then(Value::as_array)
            {
                caps.extend(list.iter().filter_map(|c| c.as_str().map(str::to_string)));
            }
        }
        caps.sort();
        caps.dedup();
        caps
    }

    pub fn unknown_tool(&self, name: &str) -> Error {
        let names: Vec<&str> = self
            .tools
            .iter()
            .filter(|t| t.class != Class::Inverse)
            .map(|t| t.name.as_str())
            .collect();
        Error::bad_args(
            format!("no tool {name:?} in this session's manifest"),
            if names.is_empty() {
                "this session has no declared tools: a manifest is given when the session is created".to_string()
            } else {
                format!("callable tools: {}", names.join(", "))
            },
        )
    }
}

fn normalise_scope(v: &toml::Value) -> std::result::Result<Value, String> {
    match v {
        toml::Value::Array(a) => {
            let caps: Option<Vec<Value>> = a
                .iter()
                .map(|x| x.as_str().map(|s| Value::String(s.into())))
                .collect();
            caps.map(|c| json!({"caps": c}))
                .ok_or_else(|| "an array of scope tokens must hold only strings".into())
        }
        toml::Value::Table(t) => {
            let mut m = Map::new();
            for (k, v) in t {
                match (k.as_str(), v) {
                    ("caps", toml::Value::Array(a)) => {
                        let caps: Option<Vec<Value>> = a.iter().map(|x| x.as_str().map(|s| Value::String(s.into()))).collect();
                        m.insert("caps".into(), Value::Array(caps.ok_or("`caps` must hold only strings")?));
                    }
                    ("confined" | "sandbox", toml::Value::Boolean(b)) => {
                        m.insert(k.clone(), Value::Bool(*b));
                    }
                    (k, _) => return Err(format!("unknown or mistyped scope key `{k}` (caps = [..], confined = bool, sandbox = bool)")),
                }
            }
            Ok(Value::Object(m))
        }
        _ => Err("must be an array of tokens or a table { caps, confined, sandbox }".into()),
    }
}

/// The `{name}` placeholders of a template (`{{` and `}}` are literal braces).
pub fn template_names(t: &str) -> std::result::Result<Vec<String>, String> {
    let mut names = Vec::new();
    let b = t.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' if b.get(i + 1) == Some(&b'{') => i += 2,
            b'}' if b.get(i + 1) == Some(&b'}') => i += 2,
            b'{' => {
                let end = t[i + 1..]
                    .find('}')
                    .ok_or_else(|| format!("unclosed `{{` in {t:?}"))?;
                let name = &t[i + 1..i + 1 + end];
                if name.is_empty() || name.contains('{') {
                    return Err(format!("bad placeholder in {t:?}"));
                }
                names.push(name.to_string());
                i += end + 2;
            }
            b'}' => {
                return Err(format!(
                    "lone `}}` in {t:?} (write `}}}}` for a literal brace)"
                ))
            }
            _ => i += 1,
        }
    }
    Ok(names)
}

/// Substitute `{name}` from `args` (non-strings JSON-encoded) and `{witness}` (JSON text).
pub fn fill_template(t: &str, args: &Value, witness: Option<&Value>) -> Result<String> {
    let mut out = String::new();
    let b = t.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'{' && b.get(i + 1) == Some(&b'{') {
            out.push('{');
            i += 2;
        } else if b[i] == b'}' && b.get(i + 1) == Some(&b'}') {
            out.push('}');
            i += 2;
        } else if b[i] == b'{' {
            let end = t[i + 1..].find('}').unwrap_or(t.len() - i - 1);
            let name = &t[i + 1..i + 1 + end];
            let v = match (name, args.get(name)) {
                (_, Some(v)) => v.clone(),
                ("witness", None) if witness.is_some() => witness.cloned().unwrap_or(Value::Null),
                _ => {
                    return Err(Error::bad_args(
                        format!("argument `{name}` is missing (the tool's template needs it)"),
                        "give it in the call's args",
                    )
                    .with_remedy(crate::error::Remedy::PassArg(name.to_string())))
                }
            };
            match v {
                Value::String(s) => out.push_str(&s),
                other => out.push_str(&other.to_string()),
            }
            i += end + 2;
        } else {
            let ch = t[i..].chars().next().expect("in bounds");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    Ok(out)
}

/// The outcome of one tool run.
#[derive(Debug, Clone)]
pub struct ToolRun {
    pub exit_code: Option<i32>,
    pub status: Option<u16>,
    pub stdout: String,
    pub stderr: String,
    pub witness: Value,
    /// `None` = success; else `{type, message}` (`exit`, `http`, `timeout`, `connect`, `spawn`).
    pub error: Option<Value>,
}

impl ToolRun {
    /// A run that returned `witness` (a host's function, which has no exit code or status).
    pub fn ok(witness: Value) -> ToolRun {
        ToolRun {
            exit_code: None,
            status: None,
            stdout: String::new(),
            stderr: String::new(),
            witness,
            error: None,
        }
    }

    /// A run that failed before producing anything: `{type, message}` is its error.
    pub fn failed(ty: &str, message: String) -> ToolRun {
        ToolRun {
            error: Some(json!({"type": ty, "message": message})),
            ..ToolRun::ok(Value::Null)
        }
    }

    pub fn timed_out(&self) -> bool {
        self.error
            .as_ref()
            .and_then(|e| e.get("type"))
            .and_then(Value::as_str)
            == Some("timeout")
    }

    pub fn error_message(&self) -> String {
        self.error
            .as_ref()
            .and_then(|e| e.get("message"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    }
}

/// Check the call's args fit the tool's declaration, before anything runs or is queued:
/// every placeholder of its `run` argv and of its `http` URL is given, and a Python
/// function's signature accepts them (asked of the host that holds it).
pub fn check_args(
    tool: &Tool,
    args: &Value,
    inverse: bool,
    host: Option<&dyn ToolHost>,
) -> Result<()> {
    let templates: Vec<&String> = match &tool.runner {
        Runner::Argv(argv) => argv.iter().collect(),
        Runner::Http { url, .. } => vec![url],
        Runner::Python(_) => Vec::new(),
    };
    for part in templates {
        for name in template_names(part).unwrap_or_default() {
            if args.get(&name).is_none() && !(inverse && name == "witness") {
                return Err(Error::bad_args(
                    format!("tool {:?} needs argument `{name}`", tool.name),
                    "give it in the call's args; nothing was queued or run",
                )
                .with_remedy(crate::error::Remedy::PassArg(name.clone())));
            }
        }
    }
    if let (Runner::Python(target), Some(h), false) = (&tool.runner, host, inverse) {
        if h.holds(&tool.name, target) {
            h.accepts(&tool.name, args).map_err(|why| {
                Error::bad_args(
                    format!(
                        "tool {:?} ({target}) does not take these args: {why}",
                        tool.name
                    ),
                    "pass the args its Python signature names; nothing was queued or run",
                )
            })?;
        }
    }
    Ok(())
}

/// An `http` tool's URL with its `{name}` placeholders filled from the args, each value
/// percent-encoded (a string as it is, any other value as its JSON text).
fn fill_url(url: &str, args: &Value, witness: Option<&Value>) -> Result<String> {
    let mut enc = serde_json::Map::new();
    for name in template_names(url).unwrap_or_default() {
        let v = match (args.get(&name), name.as_str()) {
            (Some(v), _) => v.clone(),
            (None, "witness") => witness.cloned().unwrap_or(Value::Null),
            (None, _) => continue,
        };
        let text = match v {
            Value::String(s) => s,
            other => other.to_string(),
        };
        let mut out = String::new();
        for b in text.bytes() {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        enc.insert(name, Value::String(out));
    }
    fill_template(url, &Value::Object(enc), None)
}

/// The process's own tool runner for [`Runner::Python`] tools (docs/python.md): the Python package
/// registers the functions a process passed in `tools=`; nothing else runs them. A process
/// without a host (the CLI, the MCP server) holds no such function.
pub trait ToolHost: Send + Sync {
    /// Whether this process holds the function `target` (`module:qualname`) as tool `tool`.
    fn holds(&self, tool: &str, target: &str) -> bool;
    /// Run it. A forward call gets the call's args; an inverse gets the forward call's args
    /// and witness. The witness is the function's return value; an exception is
    /// `error: {type: <exception type>, message}`.
    fn run(&self, call: HostCall<'_>) -> ToolRun;
    /// Whether the function held as `tool` takes `args` as its keyword arguments (checked at
    /// the call, before anything is queued or run); why not, in a few words.
    fn accepts(&self, _tool: &str, _args: &Value) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// One call of a host's function.
#[derive(Debug, Clone, Copy)]
pub struct HostCall<'a> {
    pub tool: &'a Tool,
    /// `module:qualname`.
    pub target: &'a str,
    pub args: &'a Value,
    /// `Some` for an inverse (an undo or a compensation): the forward call's witness.
    pub witness: Option<&'a Value>,
    /// An emission's or held send's idempotency key.
    pub idempotency_key: Option<&'a str>,
}

/// `module:qualname`, each part dotted Python identifiers.
fn python_target_ok(s: &str) -> bool {
    let ident = |p: &str| {
        !p.is_empty()
            && p.split('.').all(|w| {
                let mut c = w.chars();
                c.next().is_some_and(|f| f == '_' || f.is_alphabetic())
                    && c.all(|x| x == '_' || x.is_alphanumeric())
            })
    };
    matches!(s.split_once(':'), Some((m, q)) if ident(m) && q.split('.').all(|w| w == "<locals>" || ident(w)))
}

/// Refuse (`tool-unavailable`) a tool this process cannot run: a Python function the
/// process's [`ToolHost`] does not hold. Checked before anything is recorded.
pub fn check_runnable(tool: &Tool, host: Option<&dyn ToolHost>) -> Result<()> {
    match &tool.runner {
        Runner::Python(target) if !host.is_some_and(|h| h.holds(&tool.name, target)) => {
            Err(unavailable(tool, target))
        }
        _ => Ok(()),
    }
}

fn unavailable(tool: &Tool, target: &str) -> Error {
    Error::new(
        Code::ToolUnavailable,
        format!(
            "tool {:?} is the Python function {target}, which this process does not hold; nothing was recorded",
            tool.name
        ),
        format!(
            "run this from a Python process that passes {target} in `tools=` (revl.Store(...).session(id, tools=[...]))"
        ),
    )
}

/// A Python tool as the package declares it (`@revl.tool`): written into the manifest copy
/// as a `[[tool]]` table with `python = "module:qualname"`, then validated with every other
/// tool by [`Manifest::parse_from`].
#[derive(Debug, Clone, Default)]
pub struct DeclaredTool {
    pub name: String,
    pub class: String,
    /// An array of tokens or a table `{caps, confined?, sandbox?}`, as in a manifest.
    pub scope: Option<Value>,
    pub python: String,
    pub undo: Option<String>,
    pub compensate: Option<String>,
    pub approval: Option<String>,
    pub service: Option<String>,
    pub method: Option<String>,
    pub undo_idempotent: Option<bool>,
}

impl DeclaredTool {
    /// The `[[tool]]` table (TOML) the manifest copy records.
    pub fn to_toml(&self) -> String {
        // A JSON string is a valid TOML basic string.
        let q = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
        let mut out = String::from("\n[[tool]]\n");
        out += &format!(
            "name = {}\nclass = {}\npython = {}\n",
            q(&self.name),
            q(&self.class),
            q(&self.python)
        );
        for (k, v) in [
            ("undo", &self.undo),
            ("compensate", &self.compensate),
            ("approval", &self.approval),
            ("service", &self.service),
            ("method", &self.method),
        ] {
            if let Some(v) = v {
                out += &format!("{k} = {}\n", q(v));
            }
        }
        if let Some(b) = self.undo_idempotent {
            out += &format!("undo_idempotent = {b}\n");
        }
        if let Some(scope) = &self.scope {
            out += &format!("scope = {}\n", toml_value(scope));
        }
        out
    }
}

/// A JSON value as a TOML inline value (strings, booleans, numbers, arrays, tables).
fn toml_value(v: &Value) -> String {
    match v {
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(toml_value).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => format!(
            "{{ {} }}",
            m.iter()
                .map(|(k, v)| format!(
                    "{} = {}",
                    serde_json::to_string(k).unwrap_or_default(),
                    toml_value(v)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        // `null` has no TOML form: an empty string, which validation then names.
        Value::Null => "\"\"".into(),
        other => other.to_string(),
    }
}

/// Run a tool. `stdin_doc` is `{"args", "witness"}`; `env` adds REVL_* variables;
/// `idem_key` sets `REVL_IDEMPOTENCY_KEY` / the `Idempotency-Key` header. A Python tool
/// runs through `host` ([`check_runnable`] first).
pub fn run_tool(
    tool: &Tool,
    args: &Value,
    witness: Option<&Value>,
    cwd: &Path,
    env: &[(String, String)],
    idem_key: Option<&str>,
    host: Option<&dyn ToolHost>,
) -> Result<ToolRun> {
    let doc = json!({"args": args, "witness": witness.cloned().unwrap_or(Value::Null)});
    match &tool.runner {
        Runner::Python(target) => {
            let Some(host) = host.filter(|h| h.holds(&tool.name, target)) else {
                return Err(unavailable(tool, target));
            };
            Ok(host.run(HostCall {
                tool,
                target,
                args,
                witness,
                idempotency_key: idem_key,
            }))
        }
        Runner::Argv(template) => {
            let argv: Vec<String> = template
                .iter()
                .map(|t| fill_template(t, args, witness))
                .collect::<Result<_>>()?;
            let mut env = env.to_vec();
            if let Some(k) = idem_key {
                env.push(("REVL_IDEMPOTENCY_KEY".into(), k.into()));
            }
            let ran = match crate::proc::run(
                &argv,
                cwd,
                &env,
                Some(doc.to_string().into_bytes()),
                Some(tool.timeout),
            ) {
                Ok(r) => r,
                Err(e) => {
                    return Ok(ToolRun::failed(
                        "spawn",
                        format!("could not start {}: {e}", argv[0]),
                    ))
                }
            };
            let stdout = String::from_utf8_lossy(&ran.stdout).into_owned();
            let stderr = String::from_utf8_lossy(&ran.stderr).into_owned();
            let witness = serde_json::from_str::<Value>(stdout.trim()).unwrap_or(Value::Null);
            let error = if ran.timed_out {
                Some(
                    json!({"type": "timeout", "message": format!("{} did not finish within {}s", tool.name, tool.timeout.as_secs_f64())}),
                )
            } else {
                match ran.code {
                    Some(0) => None,
                    Some(c) => Some(
                        json!({"type": "exit", "message": format!("{} exited with status {c}: {}", tool.name, stderr.trim().lines().last().unwrap_or(""))}),
                    ),
                    None => Some(
                        json!({"type": "exit", "message": format!("{} was killed by a signal", tool.name)}),
                    ),
                }
            };
            Ok(ToolRun {
                exit_code: ran.code,
                status: None,
                stdout,
                stderr,
                witness,
                error,
            })
        }
        Runner::Http { method, url } => {
            let body = if tool.class == Class::Inverse {
                doc
            } else {
                args.clone()
            };
            let url = fill_url(url, args, witness)?;
            Ok(http_call(
                method,
                &url,
                &body,
                idem_key,
                tool.timeout,
                &tool.name,
            ))
        }
    }
}

/// One HTTP request with a JSON body; status ≥ 400, a timeout or a refused connection fail.
pub fn http_call(
    method: &str,
    url: &str,
    body: &Value,
    idem_key: Option<&str>,
    timeout: Duration,
    name: &str,
) -> ToolRun {
    let agent = agent(timeout);
    let mut req = ureq::http::Request::builder()
        .method(method)
        .uri(url)
        .header("Content-Type", "application/json");
    if let Some(k) = idem_key {
        req = req.header("Idempotency-Key", k);
    }
    let fail = ToolRun::failed;
    let req = match req.body(body.to_string().into_bytes()) {
        Ok(r) => r,
        Err(e) => return fail("http", format!("{name}: bad request to {url}: {e}")),
    };
    match agent.run(req) {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let text = resp
                .into_body()
                .with_config()
                .limit(crate::proc::OUTPUT_CAP as u64)
                .read_to_string()
                .unwrap_or_default();
            let witness = serde_json::from_str::<Value>(&text).unwrap_or(Value::Null);
            let error = (status >= 400).then(|| json!({"type": "http", "message": format!("{name}: {method} {url} answered HTTP {status}")}));
            ToolRun {
                exit_code: None,
                status: Some(status),
                stdout: text,
                stderr: String::new(),
                witness,
                error,
            }
        }
        Err(ureq::Error::Timeout(_)) => fail(
            "timeout",
            format!(
                "{name}: {method} {url} did not answer within {}s",
                timeout.as_secs_f64()
            ),
        ),
        Err(e) => fail("connect", format!("{name}: {method} {url} failed: {e}")),
    }
}

fn agent(timeout: Duration) -> ureq::Agent {
    thread_local! {
        static AGENTS: std::cell::RefCell<Vec<(Duration, ureq::Agent)>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    AGENTS.with(|a| {
        let mut a = a.borrow_mut();
        if let Some((_, ag)) = a.iter().find(|(t, _)| *t == timeout) {
            return ag.clone();
        }
        let ag: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .allow_non_standard_methods(true)
            .build()
            .into();
        a.push((timeout, ag.clone()));
        ag
    })
}
