//! The tools' arguments (docs/mcp.md): the CLI's names in camelCase. Every field is documented;
//! the doc comments become the input schemas that clients show to the model. Unknown
//! fields are refused (a misspelt `mode` must not silently fall back to the default).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewArgs {
    /// The workspace directory the new session's file effects are confined to (created if
    /// missing): one the operator named with --root when starting the server, or below one
    /// (symlinks resolved). It must not have, or be nested in or around, a live session.
    pub workspace: String,
    /// Not in the schema: the manifest is the operator's, fixed when the server started.
    /// Accepted only to refuse it with `not-allowed` (not `bad-args`), saying why.
    #[serde(default)]
    #[schemars(skip)]
    pub manifest: Option<Value>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WriteArgs {
    /// Path of the file, relative to the workspace (paths leaving the workspace are refused).
    pub path: String,
    /// The new content as UTF-8 text. Give exactly one of `content` or `contentBase64`.
    #[serde(default)]
    pub content: Option<String>,
    /// The new content as standard base64 (for bytes that are not UTF-8). Give exactly one
    /// of `content` or `contentBase64`.
    #[serde(default)]
    pub content_base64: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PathArgs {
    /// Path relative to the workspace (paths leaving the workspace are refused).
    pub path: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadArgs {
    /// Path relative to the workspace (paths leaving the workspace are refused).
    pub path: String,
    /// Read the file as it was right after this step ran (-1: before every step), even when
    /// a later rewind undid that step. Absent: the file as it is now.
    #[serde(default)]
    pub at: Option<i64>,
    /// Read a session of this remote (a name from `revl remote list`) instead of this
    /// store's, fetched and verified into the store's cache of it; needs `at`.
    #[serde(default)]
    pub remote: Option<String>,
    /// The session to read (an id or unique prefix). Default: the session this server
    /// serves.
    #[serde(default)]
    pub session: Option<String>,
}

/// Which session a read tool reads, and where.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionArgs {
    /// Read a session of this remote (a name from `revl remote list`) instead of this
    /// store's, fetched and verified into the store's cache of it (nothing outside that
    /// cache is written).
    #[serde(default)]
    pub remote: Option<String>,
    /// The session to read (an id or unique prefix). Default: the session this server
    /// serves.
    #[serde(default)]
    pub session: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RenameArgs {
    /// The existing path, relative to the workspace.
    pub from: String,
    /// The new path, relative to the workspace (an existing file there is replaced; a
    /// non-empty directory there is refused).
    pub to: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChmodArgs {
    /// Path relative to the workspace.
    pub path: String,
    /// The new mode as an octal string, e.g. "644", "0755" or "0o600".
    pub mode: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListArgs {
    /// Directory relative to the workspace; the workspace root when omitted.
    #[serde(default)]
    pub path: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProvideArgs {
    /// The key (non-empty).
    pub key: String,
    /// The value the runtime holds for the session under that key.
    pub value: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BoundaryArgs {
    /// Optional label of the turn or iteration; recorded as `<label>/boundary` (default
    /// `turn/boundary`).
    #[serde(default)]
    pub label: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallArgs {
    /// The name of a tool declared in the session's manifest (see the manifest's [[tool]]
    /// entries). Tools of class `inverse` cannot be called.
    pub tool: String,
    /// The tool's arguments, a JSON object (default: {}).
    #[serde(default)]
    pub args: Option<Map<String, Value>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecArgs {
    /// The command and its arguments, e.g. ["cargo", "test"]. Run in a sandbox over the
    /// workspace (no network, the host read-only), never through a shell; what it changed in
    /// the workspace becomes one step that a fork or step-back rewinds byte for byte.
    pub argv: Vec<String>,
    /// Seconds before the command and everything it started are killed (default 600); what
    /// it changed until then is still recorded.
    #[serde(default)]
    pub timeout: Option<f64>,
    /// The working directory, relative to the workspace root (default: the root).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Run it on the host, outside the sandbox: recorded as an opaque step that a fork
    /// refuses to cross. Only where the sandbox is unavailable, and only when the operator
    /// started the server with --allow-unconfined (else refused, not-allowed, nothing runs).
    #[serde(default)]
    pub unconfined: Option<bool>,
    /// Address space per process, bytes or with K/M/G (e.g. "512M"); unlimited by default.
    #[serde(default)]
    pub memory: Option<String>,
    /// Processes the command may have at once (default 4096).
    #[serde(default)]
    pub pids: Option<u64>,
    /// CPU seconds per process; unlimited by default (the timeout still applies).
    #[serde(default)]
    pub cpu_seconds: Option<u64>,
    /// What the change set may add, bytes or with K/M/G (default 16G): past it the command
    /// is stopped, nothing is applied (error limit-exceeded).
    #[serde(default)]
    pub max_bytes: Option<String>,
    /// Declared egress: true lets the command reach the (operator's) manifest's whole [exec] net through
    /// revl's proxy; a list (["pypi.org:443"]) only that part of it (a destination outside
    /// the declared set is refused, bad-args, before anything runs). Every connection is
    /// recorded before its first byte. Absent or false: no network.
    #[serde(default)]
    pub net: Option<NetArg>,
}

/// `net`: `true` (the whole declared set), `false`, or a list of destinations.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum NetArg {
    All(bool),
    Only(Vec<String>),
}

impl NetArg {
    pub fn request(arg: Option<NetArg>) -> revl_core::egress::NetRequest {
        use revl_core::egress::NetRequest;
        match arg {
            None | Some(NetArg::All(false)) => NetRequest::None,
            Some(NetArg::All(true)) => NetRequest::All,
            Some(NetArg::Only(v)) => NetRequest::Only(v),
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AtArgs {
    /// A step index from revl_timeline, or -1 for "before every step".
    pub at: i64,
}

/// How a step-back treats inverses that would cross (leave the machine).
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum StepBackModeArg {
    /// Run only host-confined inverses and provision withdrawals; never crosses, never
    /// refuses over residue (the default, and what a fork does).
    #[default]
    Scoped,
    /// Run every inverse, compensations and outbound undos included (they cross); refused
    /// when the tail holds an emission with no compensation.
    Compensating,
    /// Like compensating, but runs the rest even over emissions with no compensation and
    /// reports what was crossed.
    Force,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepBackArgs {
    /// The step to rewind to (a live step index from revl_timeline, or -1 for before every
    /// step). Steps above it are unwound, newest first.
    pub to: i64,
    /// "scoped" (default), "compensating" or "force".
    #[serde(default)]
    pub mode: Option<StepBackModeArg>,
    /// Leave witnessed paths the rewound steps never touched as they are when they were
    /// changed outside revl (listed in beyondTail; verify keeps reporting them). By default
    /// they are preserved, then put back to their step-k content.
    #[serde(default)]
    pub keep_drift: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HashArgs {
    /// The `hash` of the report or plan you read (64 hex characters).
    pub hash: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForkConfirmArgs {
    /// The `hash` of the fork report you read (64 hex characters).
    pub hash: String,
    /// A parallel fork: a new (or empty) directory that becomes the branch's workspace, at
    /// step k's content (one the operator named with --root when starting the server, or
    /// below one; else refused, not-allowed); this session stays live with its own workspace and held sends, and
    /// the server keeps serving it. Without `into`, the fork is serial: this session is
    /// frozen and the server continues on the branch.
    #[serde(default)]
    pub into: Option<String>,
    /// Leave witnessed paths the rewound steps never touched as they are when they were
    /// changed outside revl (listed in beyondTail; verify keeps reporting them). By default
    /// they are preserved, then put back to their step-k content.
    #[serde(default)]
    pub keep_drift: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DiffArgs {
    /// A session id (or unique prefix), optionally `@K` for its workspace right after step K
    /// (default: now). Default: the session this server serves.
    #[serde(default)]
    pub left: Option<String>,
    /// The other side, the same way (e.g. a sibling branch's id).
    pub right: String,
    /// Only this path and what is below it.
    #[serde(default)]
    pub path: Option<String>,
    /// Both sides are sessions of this remote (a name from `revl remote list`), fetched
    /// and verified into the store's cache of it.
    #[serde(default)]
    pub remote: Option<String>,
}

/// Whether the model's answer was accepted.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ModelOutcome {
    /// The answer passed validation.
    Validated,
    /// The attempt ceiling was reached without a valid answer.
    Exhausted,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NoteModelArgs {
    /// The step the model decision belongs to (0..=head).
    pub step: i64,
    /// Which model answered, e.g. "claude-sonnet-4".
    pub model: String,
    /// Input tokens used.
    pub tokens_in: u64,
    /// Output tokens used.
    pub tokens_out: u64,
    /// Wall-clock latency of the answer, in seconds.
    pub latency_seconds: f64,
    /// How many attempts were made.
    pub attempts: u64,
    /// The most attempts that were allowed.
    pub attempt_ceiling: u64,
    /// "validated" or "exhausted".
    pub outcome: ModelOutcome,
    /// Optional cost of the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// Optional currency of the cost, e.g. "EUR".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
}
