//! One error type for the whole core. Every failure carries a stable `code` (SPEC 9), a
//! one-line message that says what was wrong, and a hint that says what to do. Front ends
//! (CLI, MCP) render it as the error document `{"error": {code, message, hint}}`.

use std::fmt;

/// Stable error codes of SPEC 9. Exit code 1 = an honest negative, 2 = bad usage or input.
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
        }
    }

    /// The process exit code this error maps to (SPEC 9).
    pub fn exit_code(self) -> i32 {
        match self {
            Code::Usage
            | Code::UnknownSession
            | Code::AmbiguousSession
            | Code::BadManifest
            | Code::PathOutside
            | Code::StoreInWorkspace
            | Code::BadArgs => 2,
            _ => 1,
        }
    }
}

/// A core error: code, one-line message, hint, and (for a failed tool call that was still
/// recorded) the step it was recorded as.
#[derive(Debug, Clone)]
pub struct Error {
    pub code: Code,
    pub message: String,
    pub hint: String,
    pub step: Option<u64>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(code: Code, message: impl Into<String>, hint: impl Into<String>) -> Self {
        Error {
            code,
            message: one_line(message.into()),
            hint: one_line(hint.into()),
            step: None,
        }
    }

    pub fn with_step(mut self, step: u64) -> Self {
        self.step = Some(step);
        self
    }

    /// An I/O failure on `what` (a path or an operation).
    pub fn io(what: impl fmt::Display, e: std::io::Error) -> Self {
        let hint = if e.raw_os_error() == Some(28) {
            "free some disk space, then run the command again; nothing was acknowledged"
        } else {
            "check the path and its permissions, then run the command again"
        };
        Error::new(Code::Io, format!("{what}: {e}"), hint)
    }

    pub fn bad_args(message: impl Into<String>, hint: impl Into<String>) -> Self {
        Error::new(Code::BadArgs, message, hint)
    }

    /// The error document of SPEC 9.
    pub fn to_json(&self) -> serde_json::Value {
        let mut inner = serde_json::json!({
            "code": self.code.as_str(),
            "message": self.message,
            "hint": self.hint,
        });
        if let Some(step) = self.step {
            inner["step"] = step.into();
        }
        serde_json::json!({ "error": inner })
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

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for Error {}
