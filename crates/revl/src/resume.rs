//! A branch's agent conversation resumed at the fork's turn (docs/agents.md, "Resume on a
//! branch"): revl finds the parent's transcript (Claude Code's
//! `~/.claude/projects/DIR/ID.jsonl`, Codex's `CODEX_HOME/sessions/Y/M/D/rollout-…-ID.jsonl`),
//! writes the lines before the first turn the branch drops as a new conversation of the
//! agent (a new id, where the agent looks for it from the branch's directory), and rewrites
//! the agent's arguments to resume it. The transcript is another program's file, read as
//! untrusted input: never through a symlink, size-bounded, every line a JSON object. When
//! the conversation cannot be resumed, the agent starts a new one and revl says why; the
//! launch never fails for it.
//!
//! Which turn is dropped is the core's rule ([`revl_core::session::ForkTurn`]); this module
//! only speaks the agents' file formats and command lines.

use crate::agents::Agent;
use revl_core::session::ForkTurn;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};

/// A transcript past this is not read (not resumed).
pub const TRANSCRIPT_MAX: u64 = 256 << 20;
/// A transcript line past this is not read (not resumed).
pub const LINE_MAX: usize = 16 << 20;
/// Directory entries looked at while finding a transcript.
const ENTRIES_MAX: usize = 100_000;

/// The parent's conversation, cut at the fork's turn, resumed as a new conversation.
#[derive(Debug)]
pub struct Resumed {
    agent: Agent,
    /// The parent's conversation (the agent's session id).
    from: String,
    /// The new conversation's id.
    id: String,
    turns_kept: usize,
    /// The label of the dropped turn the branch's files are inside (a fork inside it).
    inside: Option<String>,
    transcript: PathBuf,
}

/// The conversation a launch continues.
#[derive(Debug)]
pub enum Conversation {
    Resumed(Resumed),
    /// A new conversation, and why the parent's is not resumed.
    New(String),
}

impl Conversation {
    /// The one line `revl agent` says before the agent starts.
    pub fn line(&self) -> String {
        match self {
            Conversation::Resumed(r) => {
                let mut s = format!(
                    "revl: conversation: {{agent: {}, from: {}, turns kept: {}}}, resumed as {}",
                    r.agent.name(),
                    r.from,
                    r.turns_kept,
                    r.id
                );
                if let Some(l) = &r.inside {
                    s.push_str(&format!(
                        "; the branch's files are inside {}, which the conversation does not keep",
                        revl_core::util::visible(l, false)
                    ));
                }
                s
            }
            Conversation::New(why) => format!(
                "revl: conversation: a new one (the parent's is not resumed: {})",
                revl_core::util::visible(why, false)
            ),
        }
    }

    /// The same as a JSON document (`revl --json agent …`).
    pub fn doc(&self) -> Value {
        match self {
            Conversation::Resumed(r) => json!({"conversation": {
                "agent": r.agent.name(), "from": r.from, "turnsKept": r.turns_kept,
                "resumedAs": r.id, "filesInside": r.inside,
                "transcript": r.transcript.to_string_lossy(),
            }}),
            Conversation::New(why) => json!({"conversation": null, "notResumed": why}),
        }
    }
}

/// Where the agent keeps its conversations, for finding the parent's and writing the
/// branch's.
pub struct Homes {
    /// Claude Code: its config directory (`$CLAUDE_CONFIG_DIR`, else `~/.claude`). Codex:
    /// the homes to look for the parent's rollout in (the parent session's revl-owned home,
    /// then the user's).
    pub search: Vec<PathBuf>,
    /// Claude Code: the same config directory; Codex: the branch's revl-owned home.
    pub write: PathBuf,
}

/// Resume the branch's conversation for `agent` starting in `cwd` with `args` (`fork`: where
/// the branch's conversation resumes, or why it cannot): the new arguments and what was
/// resumed, or `args` unchanged and why not.
pub fn resume(
    fork: Result<ForkTurn, revl_core::Error>,
    agent: Agent,
    homes: &Homes,
    cwd: &Path,
    args: &[String],
) -> (Conversation, Vec<String>) {
    match fork
        .map_err(|e| e.message)
        .and_then(|f| try_resume(&f, agent, homes, cwd, args))
    {
        Ok(done) => done,
        Err(why) => (Conversation::New(why), args.to_vec()),
    }
}

fn try_resume(
    fork: &ForkTurn,
    agent: Agent,
    homes: &Homes,
    cwd: &Path,
    args: &[String],
) -> Result<(Conversation, Vec<String>), String> {
    let o = &fork.origin;
    if o.agent != agent.name() {
        return Err(format!(
            "the conversation at the fork is {}'s, not {}'s",
            revl_core::util::visible(&o.agent, false),
            agent.name()
        ));
    }
    let from = o
        .agent_session
        .as_deref()
        .ok_or_else(|| format!("{} records no agent session id", fork.label))?;
    if !safe_id(from) {
        return Err("the agent session id the fork's turn records is not a plain id".into());
    }
    let drop = match fork.drops {
        true => Some(
            o.turn
                .as_deref()
                .ok_or_else(|| format!("{} records no turn id", fork.label))?,
        ),
        false => None,
    };
    let id = new_uuid();
    // The arguments first: when they choose a conversation themselves, nothing is written.
    let args = match agent {
        Agent::Claude => claude_args(args, &id)?,
        Agent::Codex => codex_args(args, &id)?,
    };
    let source = find(agent, &homes.search, from)?;
    let file = revl_core::util::open_regular_nofollow(&source)
        .map_err(|e| format!("the transcript {} cannot be read ({e})", source.display()))?;
    let (kept, turns_kept) = cut(file, agent, from, drop, &id)
        .map_err(|why| format!("the transcript {} {why}", source.display()))?;
    if turns_kept == 0 {
        return Err(format!(
            "the fork is at the conversation's first turn ({}): nothing of it is kept",
            fork.label
        ));
    }
    let dest = match agent {
        Agent::Claude => homes
            .write
            .join("projects")
            .join(claude_project(cwd)?)
            .join(format!("{id}.jsonl")),
        Agent::Codex => {
            // The same `sessions/Y/M/D/` as the parent's rollout, its name with the new id.
            let day: Vec<_> = source
                .parent()
                .map(|d| d.components().rev().take(3).collect())
                .unwrap_or_default();
            let name = source
                .file_name()
                .map(|n| n.to_string_lossy().replace(from, &id))
                .unwrap_or_else(|| format!("rollout-{id}.jsonl"));
            let mut dest = homes.write.join("sessions");
            dest.extend(day.iter().rev());
            dest.join(name)
        }
    };
    revl_core::util::write_durable(&dest, &kept).map_err(|e| {
        format!(
            "the new conversation {} cannot be written ({e})",
            dest.display()
        )
    })?;
    let c = Conversation::Resumed(Resumed {
        agent,
        from: from.to_string(),
        id,
        turns_kept,
        inside: fork.inside.then(|| fork.label.clone()),
        transcript: dest,
    });
    Ok((c, args))
}

/// An id revl puts in a path: letters, digits, `-` and `_`, at most 128.
fn safe_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A fresh random UUID (version 4): both agents take a conversation id in that form.
fn new_uuid() -> String {
    let h = revl_core::util::new_id().into_bytes();
    let hex = |r: std::ops::Range<usize>| String::from_utf8_lossy(&h[r]).into_owned();
    let variant = ['8', '9', 'a', 'b'][(h[16] as usize) % 4];
    format!(
        "{}-{}-4{}-{variant}{}-{}",
        hex(0..8),
        hex(8..12),
        hex(13..16),
        hex(17..20),
        hex(20..32)
    )
}

/// The parent's transcript of conversation `id`: Claude Code's `projects/*/ID.jsonl` in its
/// config directory, Codex's `sessions/Y/M/D/rollout-*-ID.jsonl` in one of its homes.
/// Nothing is followed through a symlink.
fn find(agent: Agent, homes: &[PathBuf], id: &str) -> Result<PathBuf, String> {
    let mut seen = 0usize;
    let mut dirs = |d: &Path| -> Vec<PathBuf> {
        let Ok(rd) = std::fs::read_dir(d) else {
            return Vec::new();
        };
        let mut out: Vec<PathBuf> = rd
            .flatten()
            .take(ENTRIES_MAX.saturating_sub(seen))
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        seen += out.len();
        out.sort();
        out
    };
    let mut symlink = None;
    let name = format!("{id}.jsonl");
    for home in homes {
        let found: Vec<PathBuf> = match agent {
            Agent::Claude => dirs(&home.join("projects"))
                .into_iter()
                .map(|d| d.join(&name))
                .collect(),
            Agent::Codex => {
                let mut files = Vec::new();
                for y in dirs(&home.join("sessions")) {
                    for m in dirs(&y) {
                        for d in dirs(&m) {
                            let Ok(rd) = std::fs::read_dir(&d) else {
                                continue;
                            };
                            files.extend(rd.flatten().take(ENTRIES_MAX).map(|e| e.path()).filter(
                                |p| {
                                    p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                                        n.starts_with("rollout-")
                                            && n.ends_with(&format!("-{name}"))
                                    })
                                },
                            ));
                        }
                    }
                }
                files.sort();
                files
            }
        };
        for f in found {
            match std::fs::symlink_metadata(&f) {
                Ok(m) if m.file_type().is_symlink() => symlink = Some(f),
                Ok(m) if m.is_file() => return Ok(f),
                _ => {}
            }
        }
    }
    if let Some(f) = symlink {
        return Err(format!(
            "the transcript {} is a symlink, which revl does not follow",
            f.display()
        ));
    }
    let wher = homes
        .iter()
        .map(|h| h.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    Err(format!(
        "no transcript of {} conversation {id} was found (looked in {wher})",
        agent.name()
    ))
}

/// The members of a transcript line revl reads (Claude Code's `type` and `promptId`,
/// Codex's `payload`), as the raw JSON they are.
#[derive(serde::Deserialize)]
struct Line<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<&'a serde_json::value::RawValue>,
    #[serde(rename = "promptId", default, borrow)]
    prompt_id: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow)]
    payload: Option<&'a serde_json::value::RawValue>,
}

/// Codex's `payload.turn_id`.
#[derive(serde::Deserialize)]
struct Payload<'a> {
    #[serde(default, borrow)]
    turn_id: Option<&'a serde_json::value::RawValue>,
}

/// A member's string, if it is one.
fn text(raw: Option<&serde_json::value::RawValue>) -> Option<String> {
    raw.and_then(|r| serde_json::from_str::<String>(r.get()).ok())
}

/// The lines of a transcript before the first line of turn `drop` (every line when
/// `None`), and how many turns they hold. Every line must be a JSON object (a last line
/// without its newline that is not is a torn write, left out); Codex's first line must be
/// the `session_meta` of conversation `from`, and is rewritten to name `new`.
fn cut(
    file: std::fs::File,
    agent: Agent,
    from: &str,
    drop: Option<&str>,
    new: &str,
) -> Result<(Vec<u8>, usize), String> {
    let mut bytes = Vec::new();
    file.take(TRANSCRIPT_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot be read ({e})"))?;
    if bytes.len() as u64 > TRANSCRIPT_MAX {
        return Err(format!(
            "is over {} MiB, more than revl reads",
            TRANSCRIPT_MAX >> 20
        ));
    }
    let mut out: Vec<u8> = Vec::new();
    // Where each kept line starts in `out`, and whether it is Claude Code's queueing of a
    // prompt (which belongs to the prompt's turn).
    let mut starts: Vec<(usize, bool)> = Vec::new();
    let mut turns = BTreeSet::new();
    let mut found = false;
    let mut rest = &bytes[..];
    let mut n = 0usize;
    while !rest.is_empty() {
        n += 1;
        let (line, ended) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (&rest[..=i], true),
            None => (rest, false),
        };
        rest = &rest[line.len()..];
        if line.len() > LINE_MAX {
            return Err(format!(
                "has line {n} over {} MiB, more than revl reads",
                LINE_MAX >> 20
            ));
        }
        let body = line.strip_suffix(b"\n").unwrap_or(line);
        if body.iter().all(u8::is_ascii_whitespace) {
            starts.push((out.len(), false));
            out.extend_from_slice(line);
            continue;
        }
        // Only the members revl reads are taken out; the rest is checked and skipped.
        let l = match serde_json::from_slice::<Line>(body) {
            Ok(l) if body.trim_ascii_start().starts_with(b"{") => l,
            Ok(_) => {
                return Err(format!(
                    "has line {n}, which is not a JSON object: its format is not recognised"
                ))
            }
            Err(_) if !ended && drop.is_none() => break,
            Err(e) => {
                return Err(format!(
                    "has line {n}, which is not JSON ({e}): its format is not recognised"
                ))
            }
        };
        let turn = match agent {
            Agent::Claude => text(l.prompt_id),
            Agent::Codex => l
                .payload
                .and_then(|p| serde_json::from_str::<Payload>(p.get()).ok())
                .and_then(|p| text(p.turn_id)),
        };
        if drop.is_some() && turn.as_deref() == drop {
            found = true;
            // Claude Code writes the queueing of a prompt before its first line.
            while let Some(&(at, true)) = starts.last() {
                out.truncate(at);
                starts.pop();
            }
            break;
        }
        if let Some(t) = turn {
            turns.insert(t);
        }
        let kind = text(l.kind);
        let queued = agent == Agent::Claude && kind.as_deref() == Some("queue-operation");
        starts.push((out.len(), queued));
        if agent == Agent::Codex && n == 1 {
            let mut v: Value = serde_json::from_slice(body).unwrap_or_default();
            let meta = v.get("type") == Some(&json!("session_meta"));
            let p = match v.get_mut("payload") {
                Some(Value::Object(p)) if meta && p.get("id") == Some(&json!(from)) => p,
                _ => {
                    return Err(format!(
                        "does not begin with the session_meta of conversation {from}: its format is not recognised"
                    ))
                }
            };
            p.insert("id".into(), json!(new));
            if p.contains_key("session_id") {
                p.insert("session_id".into(), json!(new));
            }
            out.extend_from_slice(v.to_string().as_bytes());
            out.push(b'\n');
            continue;
        }
        out.extend_from_slice(line);
        if !ended {
            out.push(b'\n');
        }
    }
    if let (Some(d), false) = (drop, found) {
        return Err(format!(
            "has no line of turn {}, the turn the fork drops: its format is not recognised",
            revl_core::util::visible(d, false)
        ));
    }
    Ok((out, turns.len()))
}

/// Claude Code's directory for the conversations started in `cwd`: every character but
/// ASCII letters and digits as `-` (per UTF-16 unit, as Claude Code counts), and past 200
/// of them the first 200, `-` and a hash of the path in base 36 (Claude Code 2.1.332).
fn claude_project(cwd: &Path) -> Result<String, String> {
    let s = cwd
        .to_str()
        .ok_or_else(|| format!("the directory {} is not UTF-8", cwd.display()))?;
    let units: Vec<u16> = s.encode_utf16().collect();
    let mut name: String = units
        .iter()
        .map(|&u| match u8::try_from(u) {
            Ok(b) if b.is_ascii_alphanumeric() => b as char,
            _ => '-',
        })
        .collect();
    if units.len() > 200 {
        let h = units.iter().fold(0i32, |h, &u| {
            h.wrapping_shl(5).wrapping_sub(h).wrapping_add(u as i32)
        });
        name.truncate(200);
        name.push('-');
        name.push_str(&base36((h as i64).unsigned_abs()));
    }
    Ok(name)
}

fn base36(mut n: u64) -> String {
    let digits = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(digits[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// Claude Code's arguments resuming conversation `id`: `--resume ID` first, in print mode
/// and interactive alike. Arguments that choose the conversation themselves are left as
/// they are.
fn claude_args(args: &[String], id: &str) -> Result<Vec<String>, String> {
    const CHOOSE: [&str; 6] = [
        "--resume",
        "-r",
        "--continue",
        "-c",
        "--session-id",
        "--fork-session",
    ];
    if let Some(a) = args.iter().find(|a| {
        CHOOSE
            .iter()
            .any(|c| a == c || a.starts_with(&format!("{c}=")))
    }) {
        return Err(format!(
            "the agent's arguments choose the conversation ({})",
            revl_core::util::visible(a, false)
        ));
    }
    let mut out = vec!["--resume".to_string(), id.to_string()];
    out.extend(args.iter().cloned());
    Ok(out)
}

/// Codex 0.171.0's options that take a value (top level and `exec`).
const CODEX_VALUED: [&str; 24] = [
    "-c",
    "--config",
    "--enable",
    "--disable",
    "--remote",
    "--remote-auth-token-env",
    "-i",
    "--image",
    "-m",
    "--model",
    "--local-provider",
    "-p",
    "--profile",
    "-s",
    "--sandbox",
    "-C",
    "--cd",
    "--add-dir",
    "-a",
    "--ask-for-approval",
    "--thread-source",
    "--output-schema",
    "--color",
    "-o",
];

/// The index of the first positional argument in `args` (options and their values
/// skipped), if any.
fn first_positional(args: &[String]) -> Option<usize> {
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--" {
            return (i + 1 < args.len()).then_some(i + 1);
        }
        if !a.starts_with('-') || a == "-" {
            return Some(i);
        }
        let valued = CODEX_VALUED.contains(&a.as_str())
            || a == "--output-last-message"
            || a == "--cyber-access-program";
        i += if valued && !a.contains('=') { 2 } else { 1 };
    }
    None
}

/// Codex's arguments resuming conversation `id`: `codex [OPTS] [PROMPT]` (interactive)
/// becomes `codex [OPTS] resume ID [PROMPT]`; `codex [OPTS] exec [EXEC-OPTS] [PROMPT]`
/// becomes `codex [OPTS] exec [EXEC-OPTS] resume ID [PROMPT]`. Another subcommand (one
/// that resumes, forks, or is no conversation) is left as it is.
fn codex_args(args: &[String], id: &str) -> Result<Vec<String>, String> {
    const SUBCOMMANDS: [&str; 29] = [
        "agents",
        "exec",
        "e",
        "review",
        "login",
        "logout",
        "mcp",
        "plugin",
        "app-server",
        "remote-control",
        "completion",
        "update",
        "doctor",
        "sandbox",
        "debug",
        "apply",
        "a",
        "resume",
        "queue",
        "archive",
        "delete",
        "migrate-rollouts",
        "migrate-nfs-db",
        "unarchive",
        "fork",
        "cloud",
        "exec-server",
        "features",
        "help",
    ];
    let insert = |args: &[String], at: usize| {
        let mut out = args[..at].to_vec();
        out.extend(["resume".to_string(), id.to_string()]);
        out.extend(args[at..].iter().cloned());
        out
    };
    let Some(i) = first_positional(args) else {
        return Ok(insert(args, args.len()));
    };
    let sub = args[i].as_str();
    if sub == "exec" || sub == "e" {
        let rest = &args[i + 1..];
        return match first_positional(rest) {
            None => Ok(insert(args, args.len())),
            Some(j) if matches!(rest[j].as_str(), "resume" | "fork" | "review" | "help") => {
                Err(format!(
                    "the agent's arguments run `codex exec {}`, which chooses its own conversation",
                    rest[j]
                ))
            }
            Some(j) => Ok(insert(args, i + 1 + j)),
        };
    }
    if SUBCOMMANDS.contains(&sub) {
        return Err(format!(
            "the agent's arguments run `codex {}`, not a new conversation",
            revl_core::util::visible(sub, false)
        ));
    }
    Ok(insert(args, i))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn codex_arguments_resume_before_the_prompt() {
        for (given, want) in [
            (
                &["exec", "--skip-git-repo-check", "p"][..],
                &["exec", "--skip-git-repo-check", "resume", "ID", "p"][..],
            ),
            (
                &["-m", "x", "exec", "-o", "f", "p"],
                &["-m", "x", "exec", "-o", "f", "resume", "ID", "p"],
            ),
            (&["exec", "--json"], &["exec", "--json", "resume", "ID"]),
            (&[], &["resume", "ID"]),
            (&["-c", "a=b", "p"], &["-c", "a=b", "resume", "ID", "p"]),
        ] {
            assert_eq!(codex_args(&v(given), "ID").unwrap(), v(want), "{given:?}");
        }
        for given in [&["exec", "resume", "X"][..], &["login"], &["fork", "X"]] {
            assert!(codex_args(&v(given), "ID").is_err(), "{given:?}");
        }
    }

    #[test]
    fn claude_arguments_resume_unless_they_choose() {
        assert_eq!(
            claude_args(&v(&["-p", "x"]), "ID").unwrap(),
            v(&["--resume", "ID", "-p", "x"])
        );
        assert!(claude_args(&v(&["-p", "x", "--resume=abc"]), "ID").is_err());
        assert!(claude_args(&v(&["-c"]), "ID").is_err());
    }

    #[test]
    fn claude_project_names_are_claude_codes() {
        assert_eq!(
            claude_project(Path::new("/work/a.b/c_d")).unwrap(),
            "-work-a-b-c-d"
        );
        // As Claude Code's own function gives them (checked with node).
        assert_eq!(
            claude_project(Path::new("/wörk/🙂/a")).unwrap(),
            "-w-rk----a"
        );
        let long = format!("/{}", "x".repeat(250));
        let name = claude_project(Path::new(&long)).unwrap();
        assert_eq!(&name[195..], "xxxxx-v734pd");
        let id = new_uuid();
        assert!(id.len() == 36 && id.as_bytes()[14] == b'4', "{id}");
    }
}
