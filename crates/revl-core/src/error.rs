//! One error type for the whole core. Every failure carries a stable `code`
//! (docs/reference.md, "Errors and exit codes"), a one-line message that says what was
//! wrong, and a hint that says what to do. Front ends (CLI, MCP) render it as the error
//! document `{"error": {code, message, hint}}`.

use std::fmt;

/// Stable error codes (docs/reference.md, "Errors and exit codes"). Exit code 1 = an honest
/// negative, 2 = bad usage or input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Frozen,
    NotLive,
    KindOpaque,
    NonIdempotent,
    Undone,
    Irreversible,
    Live,
    WorkspaceBusy,
    NotCommitted,
    NoPendingFork,
    Busy,
    ToolFailed,
    Timeout,
    CorruptWal,
    MissingPreimage,
    Io,
    Usage,
    UnknownSession,
    AmbiguousSession,
    BadManifest,
    PathOutside,
    StoreInWorkspace,
    BadArgs,
    /// v2: `blob` of a digest the store does not hold.
    UnknownBlob,
    /// v2: `read --at K` of a path that did not exist after step K.
    Absent,
    /// v2: `exec` of a program that cannot be started (nothing is recorded).
    ExecFailed,
    /// v2: the exec sandbox cannot be set up on this machine (nothing ran).
    SandboxUnavailable,
    /// A WAL holds a record (CRC-correct) this revl cannot decode: a newer revl wrote it.
    /// Refused whole, never truncated (the WAL version policy, docs/wal-format.md).
    NewerWal,
    /// v3: an exec went past one of its limits (`--max-bytes`): nothing was applied.
    LimitExceeded,
    /// v3: a Python function tool (docs/python.md) this process does not hold: nothing recorded.
    ToolUnavailable,
    /// v3: a push whose local history does not extend the remote one (docs/fleet.md): another
    /// store wrote the session; nothing local changed.
    Fenced,
    /// `revl mcp`: a call asks for more than the operator allowed when starting the server
    /// (unconfined exec, a workspace or `into` outside the `--root` directories, a manifest
    /// the agent names, a session whose manifest is not the server's; docs/mcp.md, "Who
    /// decides what"). Nothing ran, nothing was recorded.
    NotAllowed,
    /// v4: an object read from a remote (a bucket, a `file://` directory) breaks a rule every
    /// input passes (docs/fleet.md, "A remote is untrusted input"): refused, nothing written
    /// outside the store's cache; only its session is unreadable.
    CorruptRemote,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Frozen => "frozen",
            Code::NotLive => "not-live",
            Code::KindOpaque => "KIND_OPAQUE",
            Code::NonIdempotent => "non-idempotent",
            Code::Undone => "undone",
            Code::Irreversible => "irreversible",
            Code::Live => "live",
            Code::WorkspaceBusy => "workspace-busy",
            Code::NotCommitted => "not-committed",
            Code::NoPendingFork => "no-pending-fork",
            Code::Busy => "busy",
            Code::ToolFailed => "tool-failed",
            Code::Timeout => "timeout",
            Code::CorruptWal => "corrupt-wal",
            Code::MissingPreimage => "missing-preimage",
            Code::Io => "io",
            Code::Usage => "usage",
            Code::UnknownSession => "unknown-session",
            Code::AmbiguousSession => "ambiguous-session",
            Code::BadManifest => "bad-manifest",
            Code::PathOutside => "path-outside",
            Code::StoreInWorkspace => "store-in-workspace",
            Code::BadArgs => "bad-args",
            Code::UnknownBlob => "unknown-blob",
            Code::Absent => "absent",
            Code::ExecFailed => "exec-failed",
            Code::SandboxUnavailable => "sandbox-unavailable",
            Code::NewerWal => "newer-wal",
            Code::LimitExceeded => "limit-exceeded",
            Code::ToolUnavailable => "tool-unavailable",
            Code::Fenced => "fenced",
            Code::NotAllowed => "not-allowed",
            Code::CorruptRemote => "corrupt-remote",
        }
    }

    /// The process exit code this error maps to (docs/reference.md, "Errors and exit codes").
    pub fn exit_code(self) -> i32 {
        match self {
            Code::Usage
            | Code::UnknownSession
            | Code::AmbiguousSession
            | Code::BadManifest
            | Code::PathOutside
            | Code::StoreInWorkspace
            | Code::BadArgs
            | Code::NotAllowed => 2,
            _ => 1,
        }
    }

    /// Every code, in the order docs/reference.md lists them.
    pub const ALL: [Code; 33] = [
        Code::Frozen,
        Code::NotLive,
        Code::KindOpaque,
        Code::NonIdempotent,
        Code::Undone,
        Code::Irreversible,
        Code::Live,
        Code::WorkspaceBusy,
        Code::NotCommitted,
        Code::NoPendingFork,
        Code::Busy,
        Code::ToolFailed,
        Code::Timeout,
        Code::CorruptWal,
        Code::CorruptRemote,
        Code::MissingPreimage,
        Code::Io,
        Code::Usage,
        Code::UnknownSession,
        Code::AmbiguousSession,
        Code::BadManifest,
        Code::PathOutside,
        Code::StoreInWorkspace,
        Code::BadArgs,
        Code::UnknownBlob,
        Code::Absent,
        Code::ExecFailed,
        Code::SandboxUnavailable,
        Code::NewerWal,
        Code::LimitExceeded,
        Code::ToolUnavailable,
        Code::Fenced,
        Code::NotAllowed,
    ];
}

impl serde::Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// The codes as a string enumeration; each code's exit status is in `x-exit-codes`.
impl schemars::JsonSchema for Code {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Code".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let names: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
        let exits: serde_json::Map<String, serde_json::Value> = Code::ALL
            .iter()
            .map(|c| (c.as_str().to_string(), c.exit_code().into()))
            .collect();
        schemars::json_schema!({
            "type": "string",
            "enum": names,
            "x-exit-codes": exits,
        })
    }
}

/// What a caller can do next, named without any front end's words: the CLI and the MCP
/// server each say it their own way ([`Error::remedy`]), after the core's hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remedy {
    /// List the sessions of the store.
    ListSessions,
    /// Read the session's timeline (its step indices).
    Timeline,
    /// List a directory of the workspace.
    ListPath,
    /// Read the session's status (queue and owed entries).
    Status,
    /// Start a new session.
    NewSession,
    /// Give this argument in the tool call's args.
    PassArg(String),
    /// Give the tool call's args as a JSON object.
    ArgsObject,
    /// Say which store to use.
    GiveStore,
    /// Give a readable manifest file.
    GiveManifest,
    /// Give a workspace directory.
    GiveWorkspace,
    /// Run the command outside the sandbox (an opaque step).
    Unconfined,
}

/// A core error: a stable code (docs/reference.md, "Errors and exit codes"), a one-line
/// message that says what was wrong, a hint that says what to do (in no front end's words),
/// what the caller can do next, the step a failed tool call was still recorded as, and the
/// cause.
#[derive(Debug, Clone)]
pub struct Error {
    pub code: Code,
    pub message: String,
    pub hint: String,
    pub remedy: Option<Remedy>,
    pub step: Option<u64>,
    /// The underlying failure (an I/O error, ...), kept for `source()`.
    pub cause: Option<Cause>,
}

impl Error {
    /// A panic caught by a front end (`catch_unwind`'s payload), as the one-line internal
    /// error every front end reports instead of a stack trace.
    pub fn from_panic(payload: &(dyn std::any::Any + Send), when: &str) -> Error {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Error::new(
            Code::Io,
            format!("internal error: {what}"),
            format!("this is a bug in revl; the WAL is intact; report it with {when}"),
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_deref()
            .map(|c| c as &(dyn std::error::Error + 'static))
    }
}

/// The cause of an [`Error`], shared so errors stay cheap to clone.
pub type Cause = std::sync::Arc<dyn std::error::Error + Send + Sync>;

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(code: Code, message: impl Into<String>, hint: impl Into<String>) -> Self {
        Error {
            code,
            message: one_line(message.into()),
            hint: one_line(hint.into()),
            remedy: None,
            step: None,
            cause: None,
        }
    }

    pub fn with_step(mut self, step: u64) -> Self {
        self.step = Some(step);
        self
    }

    /// What the caller can do next (each front end words it).
    pub fn with_remedy(mut self, remedy: Remedy) -> Self {
        self.remedy = Some(remedy);
        self
    }

    pub fn with_cause(mut self, cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.cause = Some(std::sync::Arc::new(cause));
        self
    }

    /// Whether the underlying failure is a full disk (`ENOSPC`, or a quota: `EDQUOT`).
    pub fn disk_full(&self) -> bool {
        self.cause
            .as_deref()
            .and_then(|c| c.downcast_ref::<std::io::Error>())
            .is_some_and(io_disk_full)
    }

    /// An I/O failure on `what` (a path or an operation); the `io::Error` is its cause.
    pub fn io(what: impl fmt::Display, e: std::io::Error) -> Self {
        let hint = if io_disk_full(&e) {
            "free some disk space, then run the command again; nothing was acknowledged"
        } else {
            "check the path and its permissions, then run the command again"
        };
        Error::new(Code::Io, format!("{what}: {e}"), hint).with_cause(e)
    }

    pub fn bad_args(message: impl Into<String>, hint: impl Into<String>) -> Self {
        Error::new(Code::BadArgs, message, hint)
    }

    /// The hint with a front end's wording of the remedy appended.
    pub fn hint_with(&self, word: impl Fn(&Remedy) -> String) -> String {
        match &self.remedy {
            Some(r) => format!("{} ({})", self.hint, word(r)),
            None => self.hint.clone(),
        }
    }

    /// The error document (docs/reference.md, "Errors and exit codes"), with the hint as given.
    pub fn to_json_with_hint(&self, hint: &str) -> serde_json::Value {
        let doc = crate::wire::ErrorDoc {
            error: crate::wire::ErrorBody {
                hint: hint.to_string(),
                ..self.body()
            },
        };
        serde_json::to_value(doc).expect("an error document serialises")
    }

    /// The body of the error document, with the core's hint.
    pub fn body(&self) -> crate::wire::ErrorBody {
        crate::wire::ErrorBody {
            code: self.code,
            message: self.message.clone(),
            hint: self.hint.clone(),
            step: self.step,
        }
    }

    /// The error document of docs/reference.md, "Errors and exit codes" (the core's hint alone).
    pub fn to_json(&self) -> serde_json::Value {
        self.to_json_with_hint(&self.hint)
    }
}

fn one_line(s: String) -> String {
    if s.contains('\n') || s.contains('\r') {
        s.split(['\n', '\r'])
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
    } else {
        s
    }
}

fn io_disk_full(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_io_error_keeps_its_cause_and_a_remedy_is_worded_by_the_caller() {
        let e = Error::io(
            "cannot open x",
            std::io::Error::from_raw_os_error(2), // ENOENT
        );
        let cause = std::error::Error::source(&e).expect("the io::Error is the source");
        let io = cause
            .downcast_ref::<std::io::Error>()
            .expect("it is the io::Error itself");
        assert_eq!(io.raw_os_error(), Some(2));
        assert_eq!(e.to_string(), e.message);
        let e = Error::bad_args("m", "check it").with_remedy(Remedy::PassArg("n".into()));
        assert_eq!(
            e.hint_with(|r| format!("{r:?}")),
            "check it (PassArg(\"n\"))"
        );
        assert_eq!(e.to_json()["error"]["hint"], "check it");
        assert_eq!(Error::bad_args("m", "h").hint_with(|_| "x".into()), "h");
    }
}
