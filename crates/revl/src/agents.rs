//! Coding agents on a revl session (docs/agents.md): the native hook entry point
//! (`revl hook claude|codex [EVENT]`: the agent's hook JSON on stdin, the answer on stdout),
//! the shell-command rewrite that runs every command through `revl exec` as one step, and
//! `revl agent claude|codex` / `revl agent install`, which start the real agent with those
//! hooks (nothing in the user's project or home changes) or write the project's settings.
//!
//! No rule about sessions lives here: the hook decides what to ask of the core and says it in
//! the agent's words.

use revl_core::{Code, Error};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

/// The agents revl plugs into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Agent {
    // Claude Code (`claude`).
    Claude,
    // Codex CLI (`codex`).
    Codex,
}

impl Agent {
    pub fn name(self) -> &'static str {
        match self {
            Agent::Claude => "claude",
            Agent::Codex => "codex",
        }
    }
}

/// A hook payload is a small JSON object; past this it is refused, never read whole.
pub const PAYLOAD_MAX: usize = 8 << 20;

/// Claude Code's own Bash timeout when the call names none (2 minutes).
const CLAUDE_DEFAULT_TIMEOUT_MS: f64 = 120_000.0;

/// Where the rewritten command finds revl and the session.
#[derive(Debug, Clone)]
pub struct Target {
    /// The revl binary the rewritten command runs (this one).
    pub revl: PathBuf,
    pub store: PathBuf,
    pub session: String,
    /// The session's workspace (canonical).
    pub workspace: PathBuf,
}

/// A hook payload read from stdin: a JSON object, at most [`PAYLOAD_MAX`] bytes.
pub fn parse_payload(bytes: &[u8]) -> Result<Map<String, Value>, Error> {
    if bytes.len() > PAYLOAD_MAX {
        return Err(bad_payload(format!(
            "is {} bytes, over the {} MiB a hook payload may be",
            bytes.len(),
            PAYLOAD_MAX >> 20
        )));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(bad_payload("is empty".into()));
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(bad_payload(format!(
            "is JSON but not an object ({})",
            kind(&other)
        ))),
        Err(e) => Err(bad_payload(format!("is not JSON ({e})"))),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn bad_payload(what: String) -> Error {
    Error::bad_args(
        format!("the hook payload on stdin {what}"),
        "`revl hook` is run by the agent's hooks, which give it the event's JSON on stdin (docs/agents.md)",
    )
}

/// A member of the payload that must be a string.
fn string<'a>(p: &'a Map<String, Value>, key: &str) -> Result<&'a str, Error> {
    match p.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(bad_payload(format!(
            "has `{key}` as {}, not a string",
            kind(other)
        ))),
        None => Err(bad_payload(format!("has no `{key}`"))),
    }
}

/// A member that may be absent, else must be a string.
fn opt_string<'a>(p: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, Error> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => string(p, key).map(Some),
    }
}

/// The event a payload is for: its `hook_event_name`, which must agree with the one the
/// command line names (when it names one).
pub fn event_of<'a>(p: &'a Map<String, Value>, named: Option<&'a str>) -> Result<&'a str, Error> {
    let said = opt_string(p, "hook_event_name")?;
    match (named, said) {
        (Some(n), Some(s)) if n != s => Err(bad_payload(format!(
            "is for the event {}, but the hook was installed for {}",
            revl_core::util::visible(s, false),
            revl_core::util::visible(n, false)
        ))),
        (Some(n), _) => Ok(n),
        (None, Some(s)) => Ok(s),
        (None, None) => Err(bad_payload(
            "has no `hook_event_name` and the command line names no event".into(),
        )),
    }
}

/// The shell tools whose command revl routes through `revl exec`.
pub fn is_shell_tool(agent: Agent, tool: &str) -> bool {
    match agent {
        Agent::Claude => tool == "Bash",
        Agent::Codex => matches!(tool, "Bash" | "exec_command" | "shell" | "local_shell"),
    }
}

/// `'s'` for a POSIX shell, whatever `s` holds.
pub fn sq(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// What runs inside the sandbox for an agent's shell command: bash evaluates the command (as
/// the agent's own shell would) and, when the agent carries the directory to its next
/// command, writes the directory it ended in on revl's note pipe. `exit` in the command
/// ends it before that, as in the agent's own wrapper.
pub fn inner_argv(command: &str, carry_dir: bool) -> Vec<String> {
    let script = if carry_dir {
        r#"__revl_c=$1; shift; eval "$__revl_c"; __revl_s=$?; printf %s "$(pwd -P)" >&"$REVL_NOTE_FD"; exit "$__revl_s""#
    } else {
        r#"__revl_c=$1; shift; eval "$__revl_c""#
    };
    vec![
        "/bin/bash".into(),
        "-c".into(),
        script.into(),
        "revl-agent-shell".into(),
        command.into(),
    ]
}

/// The command the agent's shell runs instead of `command`: `revl exec --passthrough` in
/// `rel` (relative to the workspace), the agent's timeout, the step's origin. With
/// `carry_dir`, the directory the command ended in comes back on descriptor 3 and the
/// agent's shell `cd`s there, so the agent's own wrapper (`pwd -P` after the command) carries
/// it to the next command; the command's exit status is the last.
pub fn rewrite(
    t: &Target,
    command: &str,
    rel: &str,
    timeout_secs: Option<f64>,
    origin: &str,
    carry_dir: bool,
) -> String {
    let mut exec = vec![
        sq(&t.revl.to_string_lossy()),
        "--store".into(),
        sq(&t.store.to_string_lossy()),
        "exec".into(),
        sq(&t.session),
        "--passthrough".into(),
        "--origin".into(),
        sq(origin),
    ];
    if !rel.is_empty() {
        exec.push("--cwd".into());
        exec.push(sq(rel));
    }
    if let Some(s) = timeout_secs {
        exec.push("--timeout".into());
        exec.push(format!("{s}"));
    }
    if carry_dir {
        exec.push("--note-to".into());
        exec.push("/dev/fd/3".into());
    }
    exec.push("--".into());
    exec.extend(inner_argv(command, carry_dir).iter().map(|a| sq(a)));
    let exec = exec.join(" ");
    if !carry_dir {
        return exec;
    }
    // The note (the directory) is captured on descriptor 3; the command's stdout goes to
    // the agent's, through descriptor 4; the status is the note's last word.
    format!(
        r#"{{ __revl_o=$({exec} 3>&1 1>&4 4>&-; printf ' %d' "$?"); }} 4>&1; __revl_s=${{__revl_o##* }}; __revl_d=${{__revl_o% *}}; if [ -n "$__revl_d" ]; then cd -- "$__revl_d" || :; fi; (exit "$__revl_s")"#
    )
}

/// `dir` relative to the workspace, or why the command cannot run there.
pub fn rel_in(workspace: &Path, dir: &str) -> Result<String, Error> {
    let d = Path::new(dir);
    let canon = std::fs::canonicalize(d).unwrap_or_else(|_| d.to_path_buf());
    match canon.strip_prefix(workspace) {
        Ok(r) => Ok(r.to_string_lossy().into_owned()),
        Err(_) => Err(Error::new(
            Code::PathOutside,
            format!(
                "the command would run in {}, outside the revl session's workspace {}: nothing ran",
                revl_core::util::visible(dir, false),
                workspace.display()
            ),
            format!(
                "cd into {} (the agent's commands run in the session's workspace)",
                workspace.display()
            ),
        )),
    }
}

/// The agent's step origin the rewritten command records: agent, its session id, its turn
/// (prompt or turn id) and the tool-use id (docs/agents.md, "What a step records").
pub fn origin(
    agent: Agent,
    p: &Map<String, Value>,
    command: Option<&str>,
) -> Result<String, Error> {
    let mut o = Map::new();
    o.insert("agent".into(), json!(agent.name()));
    for (key, name) in [
        ("session_id", "agentSession"),
        ("prompt_id", "turn"),
        ("turn_id", "turn"),
        ("tool_use_id", "toolUse"),
    ] {
        if let Some(s) = opt_string(p, key)? {
            o.insert(name.into(), json!(s));
        }
    }
    if let Some(c) = command {
        o.insert("command".into(), json!(c));
    }
    Ok(Value::Object(o).to_string())
}

/// The answer to `PreToolUse` on the shell tool: the whole tool input, its command
/// rewritten, allowed (the agent would otherwise ask for a permission the user already gave
/// by routing commands through revl's sandbox). A command that cannot run through revl is
/// denied with why, so nothing runs unrecorded.
pub fn pre_tool_use_shell(
    agent: Agent,
    t: &Target,
    p: &Map<String, Value>,
) -> Result<Value, Error> {
    let input = match p.get("tool_input") {
        Some(Value::Object(m)) => m,
        Some(other) => {
            return Err(bad_payload(format!(
                "has `tool_input` as {}, not an object",
                kind(other)
            )))
        }
        None => return Err(bad_payload("has no `tool_input`".into())),
    };
    let key = if input.contains_key("command") {
        "command"
    } else {
        "cmd"
    };
    let command = string(input, key)?;
    let dir = match opt_string(input, "workdir")? {
        Some(w) if !w.is_empty() => w,
        _ => string(p, "cwd")?,
    };
    let rel = match rel_in(&t.workspace, dir) {
        Ok(r) => r,
        Err(e) => return Ok(deny(&e)),
    };
    let timeout_ms = match input.get("timeout").or_else(|| input.get("timeout_ms")) {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => n.as_f64().filter(|f| f.is_finite() && *f > 0.0),
        Some(other) => {
            return Err(bad_payload(format!(
                "has the command's timeout as {}, not a number",
                kind(other)
            )))
        }
    };
    let timeout_secs = match agent {
        Agent::Claude => Some(timeout_ms.unwrap_or(CLAUDE_DEFAULT_TIMEOUT_MS) / 1000.0),
        Agent::Codex => timeout_ms.map(|ms| ms / 1000.0),
    };
    let carry_dir = agent == Agent::Claude;
    let origin = origin(agent, p, Some(command))?;
    let mut updated = input.clone();
    updated.insert(
        key.into(),
        json!(rewrite(t, command, &rel, timeout_secs, &origin, carry_dir)),
    );
    Ok(json!({
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "updatedInput": Value::Object(updated),
        }
    }))
}

/// A `PreToolUse` answer that stops the tool call, saying why to the agent.
pub fn deny(e: &Error) -> Value {
    json!({
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": format!("revl: {} ({})", e.message, e.hint),
        }
    })
}

/// The agent's edit tools whose edits revl records as file steps.
pub fn is_edit_tool(agent: Agent, tool: &str) -> bool {
    match agent {
        Agent::Claude => matches!(tool, "Write" | "Edit" | "MultiEdit" | "NotebookEdit"),
        Agent::Codex => tool == "apply_patch",
    }
}

/// The paths an edit tool call will change (as the agent named them: absolute, or relative
/// to `cwd`): Claude's `file_path` / `notebook_path`; every file an `apply_patch` patch
/// adds, updates, deletes or moves to.
pub fn edit_paths(p: &Map<String, Value>) -> Result<Vec<PathBuf>, Error> {
    let input = match p.get("tool_input") {
        Some(Value::Object(m)) => m,
        Some(Value::String(patch)) => return patch_paths(patch, p),
        Some(other) => {
            return Err(bad_payload(format!(
                "has `tool_input` as {}, not an object",
                kind(other)
            )))
        }
        None => return Err(bad_payload("has no `tool_input`".into())),
    };
    for key in ["file_path", "notebook_path"] {
        if input.contains_key(key) {
            return Ok(vec![PathBuf::from(string(input, key)?)]);
        }
    }
    for key in ["patch", "input", "command"] {
        if let Some(Value::String(patch)) = input.get(key) {
            return patch_paths(patch, p);
        }
    }
    Err(bad_payload(
        "names no file the edit tool changes (no `file_path`, `notebook_path` or patch)".into(),
    ))
}

/// The files an `apply_patch` patch touches, relative to the payload's `cwd`. A header
/// line is read trimmed, as Codex reads it; a patch whose files revl cannot tell (no
/// file header, a `***` line it does not know, a path from `~`) is refused: it would run
/// unconfined and unrecorded.
fn patch_paths(patch: &str, p: &Map<String, Value>) -> Result<Vec<PathBuf>, Error> {
    let cwd = PathBuf::from(string(p, "cwd")?);
    let refuse = |why: String| {
        Error::new(
            Code::PathOutside,
            format!("the apply_patch {why}: revl cannot tell which files it changes, so nothing was changed"),
            "give a patch with `*** Add File: PATH`, `*** Update File: PATH` or `*** Delete File: PATH` headers, paths inside the workspace",
        )
    };
    let mut out = Vec::new();
    for raw in patch.lines() {
        let line = raw.trim();
        if !line.starts_with("***") {
            continue;
        }
        let head = [
            "*** Add File: ",
            "*** Update File: ",
            "*** Delete File: ",
            "*** Move to: ",
        ]
        .into_iter()
        .find_map(|h| line.strip_prefix(h));
        let Some(f) = head else {
            if matches!(line, "*** Begin Patch" | "*** End Patch" | "*** End of File")
                // An indented `***` that is no header is a hunk's context line.
                || raw.starts_with(char::is_whitespace)
            {
                continue;
            }
            return Err(refuse(format!(
                "has the line {}, which revl does not know",
                revl_core::util::visible(line, false)
            )));
        };
        let f = f.trim();
        if f.is_empty() {
            return Err(refuse("names a file with an empty path".into()));
        }
        if f.starts_with('~') {
            return Err(refuse(format!(
                "names {}, a path from `~`",
                revl_core::util::visible(f, false)
            )));
        }
        let f = Path::new(f);
        let abs = if f.is_absolute() {
            f.to_path_buf()
        } else {
            cwd.join(f)
        };
        if !out.contains(&abs) {
            out.push(abs);
        }
    }
    if out.is_empty() {
        return Err(refuse("names no file".into()));
    }
    Ok(out)
}

/// `abs` (a path an agent's tool names) relative to the workspace, its parent's symlinks
/// followed where it exists (the rest is confined by the session). A path with `..` is
/// none: the system resolves `..` after symlinks, so its place cannot be told lexically.
pub fn rel_path(workspace: &Path, abs: &Path) -> Option<String> {
    let mut clean = PathBuf::new();
    for c in abs.components() {
        match c {
            std::path::Component::ParentDir => return None,
            std::path::Component::CurDir => {}
            c => clean.push(c),
        }
    }
    let resolved = match (clean.parent(), clean.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .map(|d| d.join(name))
            .unwrap_or(clean),
        _ => clean,
    };
    let rel = resolved.strip_prefix(workspace).ok()?;
    (!rel.as_os_str().is_empty()).then(|| rel.to_string_lossy().into_owned())
}

/// The origin of an edit or a turn (no command).
pub fn origin_of(agent: Agent, p: &Map<String, Value>) -> Result<revl_core::agent::Origin, Error> {
    revl_core::agent::Origin {
        agent: agent.name().into(),
        agent_session: opt_string(p, "session_id")?.map(str::to_string),
        // Codex's turn id, else Claude Code's prompt id.
        turn: opt_string(p, "turn_id")?
            .or(opt_string(p, "prompt_id")?)
            .map(str::to_string),
        tool_use: opt_string(p, "tool_use_id")?.map(str::to_string),
        command: None,
    }
    .checked()
}

/// The first line of a prompt, cut to 80 characters: a turn boundary's label.
pub fn first_line(prompt: &str) -> String {
    let line = prompt.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let line = line.trim();
    match line.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_string(),
    }
}

/// The hooks object revl installs for `agent`, each running `command` (which reads the
/// event from the payload).
pub fn hooks_json(agent: Agent, command: &str) -> Value {
    let (shell, edits) = match agent {
        Agent::Claude => ("Bash", "Write|Edit|MultiEdit|NotebookEdit"),
        Agent::Codex => ("Bash|exec_command|shell|local_shell", "apply_patch"),
    };
    let entry = |matcher: Option<&str>| {
        let mut e = json!({"hooks": [{"type": "command", "command": command}]});
        if let Some(m) = matcher {
            e["matcher"] = json!(m);
        }
        json!([e])
    };
    // After a shell command there is nothing to do (its step is recorded by then): no hook
    // process runs for it.
    json!({
        "PreToolUse": entry(Some(&format!("{shell}|{edits}"))),
        "PostToolUse": entry(Some(edits)),
        "PostToolUseFailure": entry(Some(edits)),
        "UserPromptSubmit": entry(None),
    })
}

/// The command line of revl's hook for `agent` on `session`.
pub fn hook_command(revl: &Path, store: &Path, agent: Agent, session: &str) -> String {
    format!(
        "{} --store {} hook {} --session {}",
        sq(&revl.to_string_lossy()),
        sq(&store.to_string_lossy()),
        agent.name(),
        sq(session)
    )
}

/// Merge revl's hooks into a settings document (Claude Code's `.claude/settings.local.json`
/// or Codex's `$CODEX_HOME/hooks.json`): each event's entries that run `revl … hook` are
/// replaced, every other key and hook is kept.
pub fn merge_hooks(mut settings: Value, hooks: &Value) -> Result<Value, Error> {
    let Value::Object(root) = &mut settings else {
        return Err(Error::bad_args(
            "the settings file is JSON but not an object",
            "fix or move the settings file, then run `revl agent install` again",
        ));
    };
    let existing = root.entry("hooks").or_insert_with(|| json!({}));
    let Value::Object(existing) = existing else {
        return Err(Error::bad_args(
            "the settings file's `hooks` is not an object",
            "fix or move the settings file, then run `revl agent install` again",
        ));
    };
    for (event, ours) in hooks.as_object().into_iter().flatten() {
        let list = existing.entry(event.clone()).or_insert_with(|| json!([]));
        let Value::Array(list) = list else {
            return Err(Error::bad_args(
                format!("the settings file's hooks.{event} is not a list"),
                "fix or move the settings file, then run `revl agent install` again",
            ));
        };
        list.retain(|e| !is_revl_entry(e));
        list.extend(ours.as_array().into_iter().flatten().cloned());
    }
    Ok(settings)
}

fn is_revl_entry(e: &Value) -> bool {
    e.get("hooks").and_then(Value::as_array).is_some_and(|hs| {
        hs.iter().any(|h| {
            h.get("command").and_then(Value::as_str).is_some_and(|c| {
                c.contains(" hook claude --session ") || c.contains(" hook codex --session ")
            })
        })
    })
}

/// Write `bytes` to `path` whole or not at all: a temp file of an unguessable name,
/// created new (never through a link planted there), fsynced and renamed over it.
fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    revl_core::util::write_durable(path, bytes).map_err(|e| Error::io(path.display(), e))
}

/// `revl agent install claude`: revl's hooks merged into the project's
/// `.claude/settings.local.json` (Claude Code's per-user project settings: the session id is
/// this machine's, not something to commit). Codex reads hooks only from its home, so for
/// Codex this is the user's `$CODEX_HOME/hooks.json` (default `~/.codex`), trusted with
/// `--dangerously-bypass-hook-trust` or Codex's own `/hooks` review.
pub fn install(project: &Path, agent: Agent, hooks: &Value) -> Result<PathBuf, Error> {
    let path = match agent {
        Agent::Claude => project.join(".claude").join("settings.local.json"),
        Agent::Codex => user_codex_home()?.join("hooks.json"),
    };
    let before = match std::fs::read(&path) {
        Ok(b) => serde_json::from_slice::<Value>(&b).map_err(|e| {
            Error::bad_args(
                format!("{} is not JSON ({e}): nothing was written", path.display()),
                "fix or move the settings file, then run `revl agent install` again",
            )
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => json!({}),
        Err(e) => return Err(Error::io(path.display(), e)),
    };
    let after = merge_hooks(before, hooks)?;
    let mut text = serde_json::to_vec_pretty(&after).unwrap_or_default();
    text.push(b'\n');
    write_whole(&path, &text)?;
    Ok(path)
}

pub fn user_codex_home() -> Result<PathBuf, Error> {
    home_of("CODEX_HOME", ".codex", "Codex's home")
}

/// An agent's directory: `$VAR`, else `~/DOT`.
fn home_of(var: &str, dot: &str, what: &str) -> Result<PathBuf, Error> {
    if let Some(h) = std::env::var_os(var).filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(h));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(dot)),
        None => Err(Error::bad_args(
            format!("neither {var} nor HOME is set: revl cannot find {what}"),
            format!("set {var} to {what}"),
        )),
    }
}

/// Where the revl-owned Codex home of `session` is (see [`codex_home`]).
pub fn codex_home_of(store: &Path, session: &str) -> PathBuf {
    store.join("agents").join("codex").join(session)
}

/// Claude Code's config directory, where it keeps its conversations: `$CLAUDE_CONFIG_DIR`,
/// else `~/.claude`.
pub fn claude_config_dir() -> Result<PathBuf, Error> {
    home_of(
        "CLAUDE_CONFIG_DIR",
        ".claude",
        "Claude Code's config directory",
    )
}

/// The revl-owned directory for Claude Code's temporary files on a revl session
/// (`STORE/agents/claude/SESSION/tmp`, mode 0700): `CLAUDE_CODE_TMPDIR`, so that nothing
/// of the agent's lands in /tmp.
pub fn claude_tmp(store: &Path, session: &str) -> Result<PathBuf, Error> {
    let dir = store
        .join("agents")
        .join("claude")
        .join(session)
        .join("tmp");
    revl_core::store::private_dir(&dir).map_err(|e| Error::io(dir.display(), e))?;
    Ok(dir)
}

/// The revl-owned Codex home of a revl session (`STORE/agents/codex/SESSION`): the user's
/// `config.toml` and `auth.json` copied in (the user's own home is read, never written),
/// revl's `hooks.json`. Codex keeps its transcripts there too, so the session's
/// conversation stays with the session.
pub fn codex_home(store: &Path, session: &str, hooks: &Value) -> Result<PathBuf, Error> {
    let home = codex_home_of(store, session);
    std::fs::create_dir_all(&home).map_err(|e| Error::io(home.display(), e))?;
    if let Ok(user) = user_codex_home() {
        for f in ["config.toml", "auth.json"] {
            let from = user.join(f);
            if from.is_file() && !home.join(f).exists() {
                std::fs::copy(&from, home.join(f))
                    .map_err(|e| Error::io(format!("copying {}", from.display()), e))?;
            }
        }
    }
    let mut text = serde_json::to_vec_pretty(&json!({ "hooks": hooks })).unwrap_or_default();
    text.push(b'\n');
    write_whole(&home.join("hooks.json"), &text)?;
    Ok(home)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        Target {
            revl: "/usr/bin/revl".into(),
            store: "/s".into(),
            session: "abc".into(),
            workspace: "/ws".into(),
        }
    }

    #[test]
    fn hostile_payloads_are_one_line_errors() {
        for (bytes, says) in [
            (&b""[..], "is empty"),
            (b"[1]", "not an object"),
            (b"{\"a\":", "is not JSON"),
            (b"\xff\xfe", "is not JSON"),
        ] {
            let e = parse_payload(bytes).unwrap_err();
            assert!(e.message.contains(says), "{}", e.message);
            assert!(!e.message.contains('\n'));
        }
        let big = vec![b' '; PAYLOAD_MAX + 1];
        assert!(parse_payload(&big).unwrap_err().message.contains("MiB"));
        let p = parse_payload(br#"{"tool_input": 3, "cwd": "/ws"}"#).unwrap();
        let e = pre_tool_use_shell(Agent::Claude, &target(), &p).unwrap_err();
        assert!(
            e.message.contains("`tool_input` as a number"),
            "{}",
            e.message
        );
        let p = parse_payload(br#"{"tool_input": {"command": ["rm"]}, "cwd": "/ws"}"#).unwrap();
        let e = pre_tool_use_shell(Agent::Claude, &target(), &p).unwrap_err();
        assert!(e.message.contains("`command` as an array"), "{}", e.message);
    }

    #[test]
    fn event_named_twice_must_agree() {
        let p = parse_payload(br#"{"hook_event_name": "Stop"}"#).unwrap();
        assert_eq!(event_of(&p, None).unwrap(), "Stop");
        assert!(event_of(&p, Some("PreToolUse")).is_err());
        let q = parse_payload(b"{}").unwrap();
        assert!(event_of(&q, None).is_err());
    }

    #[test]
    fn a_command_outside_the_workspace_is_denied_with_why() {
        let p =
            parse_payload(br#"{"tool_input": {"command": "ls"}, "cwd": "/elsewhere"}"#).unwrap();
        let a = pre_tool_use_shell(Agent::Claude, &target(), &p).unwrap();
        let out = &a["hookSpecificOutput"];
        assert_eq!(out["permissionDecision"], "deny");
        assert!(out["permissionDecisionReason"]
            .as_str()
            .unwrap()
            .contains("outside the revl session's workspace"));
    }

    #[test]
    fn the_rewrite_keeps_every_other_input_and_quotes_the_command() {
        let p = parse_payload(
            br#"{"tool_input": {"command": "echo 'it''s' \"$HOME\"", "description": "d", "timeout": 5000}, "cwd": "/ws", "session_id": "s1", "tool_use_id": "t1"}"#,
        )
        .unwrap();
        let a = pre_tool_use_shell(Agent::Claude, &target(), &p).unwrap();
        let out = &a["hookSpecificOutput"];
        assert_eq!(out["permissionDecision"], "allow");
        assert_eq!(out["updatedInput"]["description"], "d");
        assert_eq!(out["updatedInput"]["timeout"], 5000);
        let cmd = out["updatedInput"]["command"].as_str().unwrap();
        assert!(cmd.contains("--timeout 5 "), "{cmd}");
        assert!(cmd.contains("--passthrough"), "{cmd}");
        assert!(cmd.contains(&sq("echo 'it''s' \"$HOME\"")), "{cmd}");
    }

    #[test]
    fn merge_keeps_foreign_hooks_and_replaces_revls() {
        let hooks = hooks_json(Agent::Claude, "'/r' --store '/s' hook claude --session 'x'");
        let before = json!({"model": "m", "hooks": {"PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "mine"}]},
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "'/r' --store '/s' hook claude --session 'old'"}]}
        ]}});
        let after = merge_hooks(before, &hooks).unwrap();
        assert_eq!(after["model"], "m");
        let pre = after["hooks"]["PreToolUse"].as_array().unwrap();
        assert_eq!(pre.len(), 2);
        assert_eq!(pre[0]["hooks"][0]["command"], "mine");
        assert!(pre[1]["hooks"][0]["command"]
            .as_str()
            .unwrap()
            .ends_with("'x'"));
        assert!(merge_hooks(json!([1]), &hooks).is_err());
    }

    #[test]
    fn a_turn_is_labelled_by_its_first_line() {
        assert_eq!(first_line("\n  fix the bug \nthen test"), "fix the bug");
        assert_eq!(first_line(&"x".repeat(100)).chars().count(), 81);
    }
}
