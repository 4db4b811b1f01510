//! The `revl` command line: parse, call a core verb, render. No rules live here.

use crate::{agents, demo, render, resume, view};

use clap::{Parser, Subcommand};
use revl_core::report::to_json;
use revl_core::{Code, Error, FileOp, Remedy, Session, StepBackMode, Store};
use revl_fleet::{Catalog, RemoteCache};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// `revl agent ...`.
#[derive(Subcommand, Debug)]
enum AgentCmd {
    /// Start Claude Code (`claude`, or $REVL_CLAUDE) in this directory on a revl session,
    /// its hooks given with `--settings`: every shell command and edit becomes a step.
    Claude {
        /// The session (default: the live session of this directory, else a new one).
        #[arg(long)]
        session: Option<String>,
        /// Claude Code's own arguments, after `--`.
        #[arg(last = true, value_name = "ARGS")]
        args: Vec<String>,
    },
    /// Start Codex CLI (`codex`, or $REVL_CODEX) in this directory on a revl session, with a
    /// revl-owned CODEX_HOME holding its hooks.
    Codex {
        /// The session (default: the live session of this directory, else a new one).
        #[arg(long)]
        session: Option<String>,
        /// Codex's own arguments, after `--`.
        #[arg(last = true, value_name = "ARGS")]
        args: Vec<String>,
    },
    /// Write revl's hooks for those who start the agent themselves: into this project's
    /// `.claude/settings.local.json` for Claude Code, into `$CODEX_HOME/hooks.json`
    /// (default `~/.codex`) for Codex.
    Install {
        #[arg(value_enum)]
        agent: agents::Agent,
        /// The session (default: the live session of this directory, else a new one).
        #[arg(long)]
        session: Option<String>,
    },
}

#[derive(Parser, Debug)]
#[command(name = "revl", version, about = "Branch and rewind agent sessions without leaving residue in the world.", long_about = None)]
struct Cli {
    /// The store directory (default: $REVL_STORE, else $XDG_STATE_HOME/revl, else ~/.local/state/revl).
    #[arg(long, global = true, value_name = "DIR")]
    store: Option<PathBuf>,
    /// Print exactly one JSON document on stdout.
    #[arg(long, global = true)]
    json: bool,
    /// Read (log, view, branch, compare, diff, read --at, status, timeline, inspect) or fork
    /// a session of this remote (`revl remote add NAME URL`) instead of this store's.
    #[arg(long, global = true, value_name = "NAME")]
    remote: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Create a session on a workspace directory (created if missing).
    New {
        /// The directory the agent works in (created if missing; one live session per
        /// directory tree).
        #[arg(long, value_name = "DIR")]
        workspace: PathBuf,
        /// The tool manifest (default: revl.toml in the workspace, if present).
        #[arg(long, value_name = "FILE")]
        manifest: Option<PathBuf>,
        /// Capture the workspace's files as the session's base tree (automatic when the
        /// store has a remote), so another machine can branch it from the bucket.
        #[arg(long)]
        capture_base: bool,
    },
    /// Remotes: object storage (s3://BUCKET/PREFIX) or a shared directory (file:///DIR)
    /// that sessions are pushed to and read or branched from on any machine.
    Remote {
        #[command(subcommand)]
        cmd: RemoteCmd,
    },
    /// Upload the session's sealed WAL and the blobs it names to a remote (every session of
    /// the store when none is named); idempotent and resumable.
    Push {
        /// A session id (or unique prefix); default: every session of the store.
        session: Option<String>,
        /// Verify every object of SESSION the bucket holds (manifest, segments, blobs,
        /// pack) and upload again those that fail; the manifest gets a new epoch.
        #[arg(long, requires = "session")]
        repair: bool,
    },
    /// List the sessions of the store.
    Sessions,
    /// A session's state, head, provisions, held sends and owed entries.
    Status {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
    },
    /// Report witnessed paths changed outside revl.
    Verify {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
    },
    /// Replace a file (temp + rename), creating missing parent directories.
    Write {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
        /// A path relative to the workspace root.
        path: std::ffi::OsString,
        /// The new content, as text.
        #[arg(
            long,
            conflicts_with = "from",
            required_unless_present = "from",
            allow_hyphen_values = true
        )]
        content: Option<String>,
        /// Take the new content from this file (bytes, up to 16 MiB).
        #[arg(long, value_name = "FILE")]
        from: Option<PathBuf>,
    },
    /// Delete a file or a whole directory tree.
    Delete {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
        /// A path relative to the workspace root.
        path: std::ffi::OsString,
    },
    /// Rename a file or directory (replaces an existing file target).
    Rename {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
        /// The path to move, relative to the workspace root.
        from: std::ffi::OsString,
        /// Where it goes, relative to the workspace root.
        to: std::ffi::OsString,
    },
    /// Create a directory (like mkdir -p; an existing directory is an error).
    Mkdir {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
        /// A path relative to the workspace root.
        path: std::ffi::OsString,
    },
    /// Change a mode (octal).
    Chmod {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
        /// A path relative to the workspace root.
        path: std::ffi::OsString,
        /// The new mode, in octal (e.g. 644 or 0755).
        mode: String,
    },
    /// Read a file (records nothing): as it is now, or as it was right after step K ran.
    Read {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
        /// A path relative to the workspace root.
        path: std::ffi::OsString,
        /// The step after which to read PATH (-1: before every step; turn:N or an agent's
        /// turn id: where that turn began); the content is kept even when a later rewind
        /// undid step K.
        #[arg(long, allow_hyphen_values = true)]
        at: Option<String>,
        /// Write exactly the file's bytes to this file (text or binary). Without it, text is
        /// printed exactly as stored (no newline added) and binary content is written only to
        /// a pipe or a file, never to a terminal (or use --json: base64).
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Find the blobs no live or frozen session can reach any more; --apply removes them
    /// (a dry run by default: it says what it would free).
    Gc {
        /// Remove them (takes the store lock and every live session's lock).
        #[arg(long)]
        apply: bool,
    },
    /// Write the bytes of a blob of the store (a preserved file, a preimage) to stdout or
    /// FILE; with --json, a document with the bytes in base64 (or where they went).
    Blob {
        /// The blob's digest (blake3, 64 hex), as `preserved` and restore entries list it.
        digest: String,
        /// Write the bytes to this file instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// List a directory (records nothing).
    List {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
        /// A directory relative to the workspace root (default: the root).
        path: Option<std::ffi::OsString>,
    },
    /// Provide a session-scoped key/value (a provision step).
    #[command(allow_negative_numbers = true)]
    Provide {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
        /// The provision's name (e.g. API_KEY).
        key: String,
        /// Its value (kept in the WAL; a fork to a step before this one withdraws it).
        value: String,
    },
    /// Mark an agent turn.
    Boundary {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
        /// What the turn was (shown in the timeline).
        #[arg(long, allow_hyphen_values = true)]
        label: Option<String>,
    },
    /// Run a command (never through a shell) in a sandbox: no network (unless --net: the
    /// manifest's declared destinations, through revl's recording proxy), the host
    /// read-only, the workspace copy-on-write; what it changed becomes ONE rewindable step.
    Exec {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
        /// Kill the command and everything it started after this many seconds (default 600);
        /// what it changed until then is still applied.
        #[arg(long, value_name = "SECS")]
        timeout: Option<f64>,
        /// Run it in this directory, relative to the workspace root (default: the root).
        #[arg(long, value_name = "REL")]
        cwd: Option<String>,
        /// Run it on the host, outside the sandbox: recorded as an opaque step, which a fork
        /// refuses to cross (for machines where the sandbox cannot be set up).
        #[arg(long)]
        unconfined: bool,
        /// Address space per process (SIZE: bytes, or with K/M/G): an allocation past it
        /// fails. Unlimited by default.
        #[arg(long, value_name = "SIZE")]
        memory: Option<String>,
        /// Processes the command may have at once (default 4096): a fork past it fails.
        #[arg(long, value_name = "N")]
        pids: Option<u64>,
        /// CPU seconds per process (SIGXCPU, then SIGKILL). Unlimited by default.
        #[arg(long, value_name = "N")]
        cpu_seconds: Option<u64>,
        /// What the change set may add (SIZE, default 16G): past it the command is stopped,
        /// nothing is applied (exit 1, limit-exceeded).
        #[arg(long, value_name = "SIZE")]
        max_bytes: Option<String>,
        /// Declared egress: `--net` lets the command reach the manifest's whole `[exec] net`
        /// through revl's proxy; `--net=DEST` (repeatable) only that part of it. Every
        /// connection is recorded before its first byte. Without it: no network.
        #[arg(
            long,
            value_name = "DEST",
            num_args = 0..=1,
            require_equals = true,
            default_missing_value = NET_ALL,
            action = clap::ArgAction::Append
        )]
        net: Vec<String>,
        /// Behave as the command itself: its stdout and stderr pass through byte for byte,
        /// no summary, and revl exits with its status (128+N for signal N, 124 when it timed
        /// out); being ended (SIGTERM, SIGHUP) or losing the parent process stops the
        /// command's whole tree and records what it did (docs/agents.md).
        #[arg(long)]
        passthrough: bool,
        /// Give the command a pipe (its descriptor in $REVL_NOTE_FD) and write what it wrote
        /// there (up to 4 KiB) to FILE afterwards, e.g. /dev/fd/3 (docs/agents.md).
        #[arg(long, value_name = "FILE")]
        note_to: Option<PathBuf>,
        /// The agent call this command is, recorded in the step: a JSON object
        /// `{"agent", "agentSession"?, "turn"?, "toolUse"?}` (docs/agents.md).
        #[arg(long, value_name = "JSON")]
        origin: Option<String>,
        /// The program and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "ARGV")]
        argv: Vec<String>,
    },
    /// A coding agent's hook (docs/agents.md): reads the hook event's JSON on stdin and
    /// answers on stdout in the agent's hook schema. Installed by `revl agent`.
    Hook {
        /// The agent whose hook this is.
        #[arg(value_enum)]
        agent: agents::Agent,
        /// The event (default: the payload's `hook_event_name`).
        event: Option<String>,
        /// The revl session the agent works in (default: the live session of the payload's
        /// `cwd`).
        #[arg(long)]
        session: Option<String>,
    },
    /// Start a coding agent on a revl session with revl's hooks, or install them in the
    /// project (docs/agents.md).
    Agent {
        #[command(subcommand)]
        cmd: AgentCmd,
    },
    /// Check what this machine allows: the exec sandbox, reflink clones.
    Doctor,
    /// The paths whose content differs between two sessions' workspaces (exit 1 when any
    /// does), with unified diffs for text files up to 1 MiB.
    Diff {
        /// SESSION or SESSION@K (K a step index; default: now).
        left: String,
        /// SESSION or SESSION@K.
        right: String,
        /// Only this path and what is below it.
        path: Option<String>,
    },
    /// The session's steps.
    Timeline {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
    },
    /// The lineage tree of the store (or of SESSION's family): states, heads, workspaces,
    /// forks with their step and residue, held sends and pending approvals counted.
    Log {
        /// Only this session's family (its root and every branch below it).
        session: Option<String>,
    },
    /// Write one self-contained HTML file that shows the lineage tree and every session's
    /// timeline (open it in any browser; it loads nothing from the network).
    View {
        /// Only this session's family.
        session: Option<String>,
        /// Where to write the page (default: revl-view.html in the current directory).
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// The pending approval tickets: the tool and the exact args that would be sent.
    Approvals {
        /// Only this session's tickets.
        session: Option<String>,
    },
    /// What holds at step K.
    Inspect {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
        /// A step index from `revl timeline`; -1 means before every step (the session's start).
        #[arg(long, allow_hyphen_values = true, value_name = "K")]
        at: String,
    },
    /// Rewind to step K: scoped (default, never crosses) or compensating.
    StepBack {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
        /// The step to go back to (a live step index from `revl timeline`; -1: before every
        /// step; turn:N or an agent's turn id: where that turn began, docs/agents.md).
        #[arg(long, allow_hyphen_values = true, value_name = "K")]
        to: String,
        /// Run only host-confined inverses and provision withdrawals (the default).
        #[arg(long, conflicts_with = "compensating")]
        scoped: bool,
        /// Run every inverse, compensations and outbound undos included (they cross).
        #[arg(long)]
        compensating: bool,
        /// With --compensating: run the rest even over emissions that have no compensation.
        #[arg(long, requires = "compensating")]
        force: bool,
        /// Leave witnessed paths the rewound steps never touched as they are when they were
        /// changed outside revl (listed; `verify` reports them). By default they are
        /// preserved, then put back to step K.
        #[arg(long)]
        keep_drift: bool,
    },
    /// Call a declared tool (by its class: effect, emission, deferred, opaque).
    Call {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
        /// A tool the session's manifest declares (revl.toml).
        tool: String,
        /// The tool's arguments, a JSON object.
        #[arg(long, default_value = "{}", allow_hyphen_values = true)]
        args: String,
    },
    /// The commit plan: held sends and witnessed steps, with the hash to confirm.
    Commit {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
    },
    /// Commit: fire every held send once, FIFO, and close the session.
    CommitConfirm {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
        /// The whole 64-character hash `revl commit` printed (a prefix is refused).
        #[arg(long)]
        hash: String,
    },
    /// Drop held sends and run every remaining inverse, newest first.
    Abort {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
        /// A parallel branch's workspace goes too: a layered one is unmounted and its upper
        /// layer removed (with a lower layer no branch uses), then the directory is removed.
        /// Refused for a session whose workspace a parallel fork did not make.
        #[arg(long)]
        remove: bool,
    },
    /// Operator: fire one owed or failed held send of a committed session again.
    Resend {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
        /// The held send's number (`send N` in `revl status`; `seq` in JSON).
        #[arg(long)]
        seq: u64,
    },
    /// Operator: approve an emission (a ticket once, or a tool for this session).
    Approve {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
        /// Approve this one ticket (an emission's refusal, or `revl approvals`, names it):
        /// once, for exactly the args it was requested with.
        #[arg(long, conflicts_with = "tool", required_unless_present = "tool")]
        ticket: Option<String>,
        /// Approve every call of this emission tool in this session (standing).
        #[arg(long)]
        tool: Option<String>,
    },
    /// Enumerate a fork at step K: the report and its hash. Changes nothing in the workspace.
    Fork {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
        /// The step the branch starts from (a live step index from `revl timeline`; -1:
        /// before every step, the session's start; turn:N or an agent's turn id: where that
        /// turn began, docs/agents.md).
        #[arg(long, allow_hyphen_values = true, value_name = "K")]
        at: String,
    },
    /// Perform the enumerated fork: rewind, freeze the parent, start the branch.
    ForkConfirm {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        /// May be left out for the one remote fork pending in this store (`fork --remote`).
        session: Option<String>,
        /// The whole 64-character hash the `fork` report printed (a prefix is refused).
        #[arg(long)]
        hash: String,
        /// A parallel fork: this new (or empty) directory becomes the branch's workspace at
        /// step k's content; the session stays live, its workspace and held sends untouched.
        #[arg(long, value_name = "DIR")]
        into: Option<PathBuf>,
        /// Leave witnessed paths the rewound steps never touched as they are when they were
        /// changed outside revl (listed; the branch's `verify` reports them). By default they
        /// are preserved, then put back to step k.
        #[arg(long)]
        keep_drift: bool,
    },
    /// Record which model answered step K and what it cost (metadata only, never text).
    NoteModel {
        /// A session id (32 hex characters, or a unique prefix of at least 6; `revl sessions` lists them).
        session: String,
        /// The step the model's answer produced (one decision per step).
        #[arg(long)]
        step: u64,
        /// The model's name and version, e.g. provider/model-2026-01.
        #[arg(long)]
        model: String,
        /// Input tokens.
        #[arg(long)]
        tokens_in: u64,
        /// Output tokens.
        #[arg(long)]
        tokens_out: u64,
        /// Wall time of the call(s), in seconds.
        #[arg(long)]
        latency_seconds: f64,
        /// How many attempts were made (at most --attempt-ceiling).
        #[arg(long)]
        attempts: u64,
        /// How many attempts were allowed.
        #[arg(long)]
        attempt_ceiling: u64,
        /// `validated` (an attempt passed validation) or `exhausted` (none did).
        #[arg(long)]
        outcome: String,
        /// What the calls cost (with --currency).
        #[arg(long)]
        cost: Option<f64>,
        /// The currency of --cost, e.g. USD.
        #[arg(long)]
        currency: Option<String>,
    },
    /// Offline: the lineage of one WAL, the topology of several, or (--at) a partition.
    Branch {
        /// A WAL file, or a session id of the store (its WAL); repeat for a topology.
        #[arg(
            long = "wal",
            value_name = "FILE|SESSION",
            required_unless_present = "sessions"
        )]
        wals: Vec<PathBuf>,
        /// Session ids (or WAL files), as positional arguments: the same as --wal each.
        #[arg(value_name = "SESSION")]
        sessions: Vec<PathBuf>,
        /// With one --wal: what a fork at this step would rewind, withdraw and leave crossed
        /// (a step index; -1: before every step).
        #[arg(long, allow_hyphen_values = true, value_name = "K")]
        at: Option<String>,
    },
    /// Offline: compare two branches (WAL files or session ids) step by step, by content.
    Compare {
        /// A WAL file, or a session id of the store.
        left: PathBuf,
        /// A WAL file, or a session id of the store.
        right: PathBuf,
    },
    /// Operator: the verdict on a dead session, and its repair.
    Recover {
        /// A session id (or a unique prefix of at least 6).
        session: Option<String>,
        #[arg(
            long,
            value_name = "FILE",
            conflicts_with = "session",
            required_unless_present = "session"
        )]
        /// A session's WAL file (its store is found from the path).
        wal: Option<PathBuf>,
        /// Roll a live session back like an abort.
        #[arg(long)]
        force: bool,
        /// A WAL corrupt past its header: keep its intact records and move every byte from
        /// the first unreadable line on into a file next to it (no byte is lost), so the
        /// session can be read and attached again. Does nothing else.
        #[arg(long, conflicts_with = "force")]
        truncate_corrupt: bool,
    },
    /// Serve the Model Context Protocol over stdio on one session (for MCP clients: coding
    /// agents, custom agents). What the agent may do beyond the session's workspace is fixed
    /// here, by whoever starts the server (docs/mcp.md, "Who decides what").
    Mcp {
        /// Serve the live session of this workspace, or create one there (with --manifest,
        /// never the workspace's own revl.toml).
        #[arg(
            long,
            value_name = "DIR",
            conflicts_with = "session",
            required_unless_present = "session"
        )]
        workspace: Option<PathBuf>,
        /// Serve this session (id or unique prefix), frozen or not.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// The server's manifest, read once at start: a session created here gets it, and a
        /// session whose manifest differs is not served. Default: the served session's own
        /// (none for a session created on --workspace).
        #[arg(long, value_name = "FILE")]
        manifest: Option<PathBuf>,
        /// Let `revl_exec {unconfined: true}` run commands on the host (default: refused,
        /// `not-allowed`).
        #[arg(long)]
        allow_unconfined: bool,
        /// A directory `revl_new {workspace}` and `revl_fork_confirm {into}` may use, itself
        /// or below it (repeatable; default: none, both refused with `not-allowed`).
        #[arg(long, value_name = "DIR")]
        root: Vec<PathBuf>,
    },
    /// The end-to-end story on a temporary workspace.
    Demo {
        /// Keep the temporary store and workspace and print where they are.
        #[arg(long)]
        keep: bool,
    },
}

#[derive(Subcommand, Debug)]
enum RemoteCmd {
    /// Add a remote: s3://BUCKET[/PREFIX] (credentials, region and AWS_ENDPOINT_URL from
    /// the usual AWS_* variables) or file:///ABSOLUTE/DIR.
    Add { name: String, url: String },
    /// List the store's remotes.
    List,
    /// Index the remote's lineage in PostgreSQL, rebuilt from the bucket alone; pushes keep
    /// it up to date and lineage queries use it.
    Index {
        /// The remote (optional when the store has one remote): `remote index [NAME] URL`.
        #[arg(value_name = "NAME")]
        first: String,
        /// postgres://USER[:PASSWORD]@HOST[:PORT]/DB
        #[arg(value_name = "URL")]
        url: Option<String>,
    },
    /// The remote's sessions and their parents (from the index when there is one, else by
    /// listing the bucket).
    Lineage {
        name: String,
        /// Only this session's family.
        session: Option<String>,
    },
}

/// What a command produced: the JSON document, its human rendering, and the exit code.
pub struct Outcome {
    pub doc: Value,
    pub text: String,
    pub exit: u8,
    /// The `--json` document was already written to stdout (a long offline partition is
    /// streamed straight from its typed form).
    pub printed: bool,
}

impl Outcome {
    fn ok(doc: Value, text: String) -> Self {
        Outcome {
            doc,
            text,
            exit: 0,
            printed: false,
        }
    }
}

fn default_store() -> Result<PathBuf, Error> {
    revl_core::api::default_store_root()
}

fn open_store(cli: &Cli) -> Result<Store, Error> {
    let root = match &cli.store {
        Some(s) => s.clone(),
        None => default_store()?,
    };
    let new_ws = match &cli.cmd {
        Cmd::New { workspace, .. } => Some(workspace.as_path()),
        _ => None,
    };
    revl_core::api::open_store(&root, new_ws)
}

fn parse_k(s: &str, what: &str) -> Result<i64, Error> {
    s.trim().parse::<i64>().map_err(|_| {
        Error::bad_args(
            format!("{what} {s:?} is not an integer"),
            "give a step index from `revl timeline`, or -1 for before every step",
        )
    })
}

thread_local! {
    /// What attaching repaired during this command: printed with its result.
    static REPAIRS: std::cell::RefCell<Vec<revl_core::session::Repaired>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

fn note_repairs(s: &Session) {
    REPAIRS.with(|r| r.borrow_mut().extend(s.repairs().iter().cloned()));
}

fn attach(store: &Store, given: &str) -> Result<Session, Error> {
    let id = store.resolve(given)?;
    let s = store.attach(&id)?;
    note_repairs(&s);
    Ok(s)
}

/// For the verbs that only read: never waits for another command's lock.
fn attach_read(store: &Store, given: &str) -> Result<Session, Error> {
    let id = store.resolve(given)?;
    let s = store.attach_read(&id)?;
    note_repairs(&s);
    Ok(s)
}

/// The repairs this command's attach made: `repaired: [...]` in its JSON document, and a
/// line each before its text.
fn with_repairs(mut out: Outcome) -> Outcome {
    let done = REPAIRS.with(|r| std::mem::take(&mut *r.borrow_mut()));
    if done.is_empty() {
        return out;
    }
    out.doc = revl_core::api::with_repairs(std::mem::take(&mut out.doc), &done);
    let mut lines: Vec<String> = done
        .iter()
        .map(|r| format!("repaired on attach: {}", r.detail))
        .collect();
    if !out.text.is_empty() {
        lines.push(std::mem::take(&mut out.text));
    }
    out.text = lines.join("\n");
    out
}

/// `revl exec` in text mode: the command's stdout to ours and its stderr to ours as they
/// are read, each made visible as a stream (a control character split across two writes is
/// escaped whole); remembers whether stdout was left mid-line, so the summary starts on its
/// own.
#[derive(Default)]
struct Streamed {
    open: std::sync::Arc<std::sync::atomic::AtomicBool>,
    escapes: std::sync::Arc<std::sync::Mutex<[revl_core::util::Visible; 2]>>,
    /// Bytes shown so far on each lane: the terminal gets at most [`STREAM_CAP`] of each.
    shown: std::sync::Arc<[std::sync::atomic::AtomicUsize; 2]>,
}

/// What a terminal is shown of each of a command's outputs (escaped): as much as the step
/// records of it (1 MiB); past it, one line says the rest was cut.
const STREAM_CAP: usize = revl_core::proc::OUTPUT_CAP;

impl Streamed {
    fn sink(&self) -> revl_core::proc::OutputSink {
        let open = self.open.clone();
        let escapes = self.escapes.clone();
        let shown = self.shown.clone();
        revl_core::proc::OutputSink::new(move |which, raw| {
            use std::sync::atomic::Ordering;
            let lane = usize::from(matches!(which, revl_core::proc::Stream::Stderr));
            let bytes = match escapes.lock() {
                Ok(mut e) => e[lane].push(raw),
                Err(_) => return,
            };
            let before = shown[lane].fetch_add(bytes.len(), Ordering::Relaxed);
            if before > STREAM_CAP || bytes.is_empty() {
                return;
            }
            let room = STREAM_CAP - before;
            if bytes.len() <= room {
                Self::write(&open, lane, &bytes);
            } else {
                Self::write(&open, lane, &bytes[..room]);
                let which = if lane == 0 { "stdout" } else { "stderr" };
                let note = format!(
                    "\n[revl: the command's {which} shown up to 1 MiB; the rest is cut here]\n"
                );
                Self::write(&open, lane, note.as_bytes());
            }
        })
    }

    fn write(open: &std::sync::atomic::AtomicBool, lane: usize, bytes: &[u8]) {
        use std::io::Write;
        if bytes.is_empty() {
            return;
        }
        let _ = if lane == 0 {
            open.store(
                !bytes.ends_with(b"\n"),
                std::sync::atomic::Ordering::Relaxed,
            );
            let mut o = std::io::stdout().lock();
            o.write_all(bytes).and_then(|()| o.flush())
        } else {
            std::io::stderr().lock().write_all(bytes)
        };
    }

    fn then(&self, summary: String) -> String {
        // What was held back at the end of either stream (a sequence cut short) goes out too.
        if let Ok(mut e) = self.escapes.lock() {
            for lane in 0..2 {
                let rest = e[lane].finish();
                Self::write(&self.open, lane, &rest);
            }
        }
        match self.open.load(std::sync::atomic::Ordering::Relaxed) {
            true => format!("\n{summary}"),
            false => summary,
        }
    }
}

/// The session a hook or `revl agent` works on: the one given, else the live session whose
/// workspace holds `dir` (the nearest), else (`create`) a new one on `dir`.
fn agent_session(
    store: &Store,
    given: Option<&str>,
    dir: &Path,
    create: bool,
) -> Result<(String, PathBuf), Error> {
    let id = match given {
        Some(g) => store.resolve(g)?,
        None => {
            let found = dir
                .ancestors()
                .map(|d| store.live_session_of(d))
                .find_map(|r| r.transpose())
                .transpose()?;
            match (found, create) {
                (Some(id), _) => id,
                (None, true) => store.new_session(dir, None)?.id().to_string(),
                (None, false) => {
                    return Err(Error::new(
                        Code::UnknownSession,
                        format!(
                            "no live revl session's workspace holds {}",
                            revl_core::util::visible(&dir.to_string_lossy(), false)
                        ),
                        "start the agent with `revl agent claude|codex`, or run `revl agent install claude|codex` in the project (docs/agents.md)",
                    ))
                }
            }
        }
    };
    let info = store.info(&id)?;
    let ws = PathBuf::from(&info.workspace);
    let ws = std::fs::canonicalize(&ws).unwrap_or(ws);
    Ok((id, ws))
}

/// `revl hook AGENT [EVENT]`: the payload on stdin, the answer on stdout. A payload that
/// cannot be answered is one line on stderr; at `PreToolUse` the exit status is 2, which
/// the agents read as "block this tool call" (nothing runs unrecorded).
fn hook_cmd(
    store: &Store,
    agent: agents::Agent,
    named: Option<&str>,
    session: Option<&str>,
) -> Result<Outcome, Error> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .take(agents::PAYLOAD_MAX as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("cannot read the hook payload on stdin", e))?;
    let blocking = named == Some("PreToolUse")
        || (named.is_none() && bytes.windows(12).any(|w| w == b"\"PreToolUse\""));
    let answer = (|| -> Result<Option<Value>, Error> {
        let p = agents::parse_payload(&bytes)?;
        let event = agents::event_of(&p, named)?;
        let tool = match p.get("tool_name") {
            Some(Value::String(t)) => Some(t.as_str()),
            _ => None,
        };
        match (event, tool) {
            ("PreToolUse", Some(t)) if agents::is_shell_tool(agent, t) => {
                let cwd = payload_cwd(&p)?;
                let (id, workspace) = agent_session(store, session, &cwd, false)?;
                let revl = std::env::current_exe()
                    .map_err(|e| Error::io("cannot find revl's own binary", e))?;
                let target = agents::Target {
                    revl,
                    store: store.root().to_path_buf(),
                    session: id,
                    workspace,
                };
                agents::pre_tool_use_shell(agent, &target, &p).map(Some)
            }
            ("PreToolUse", Some(t)) if agents::is_edit_tool(agent, t) => {
                edit_before(store, session, &p, t)
            }
            ("PostToolUse" | "PostToolUseFailure", Some(t)) if agents::is_edit_tool(agent, t) => {
                edit_after(store, agent, session, &p, t)?;
                Ok(None)
            }
            ("UserPromptSubmit", _) => {
                let cwd = payload_cwd(&p)?;
                let (id, _) = agent_session(store, session, &cwd, false)?;
                let prompt = match p.get("prompt") {
                    Some(Value::String(s)) => s.as_str(),
                    _ => "",
                };
                let origin = agents::origin_of(agent, &p)?;
                let mut s = attach(store, &id)?;
                s.turn(&origin, &agents::first_line(prompt))?;
                Ok(None)
            }
            _ => Ok(None),
        }
    })();
    match answer {
        Ok(a) => {
            if let Some(a) = a {
                out_line(&a.to_string());
            }
            Ok(Outcome {
                doc: Value::Null,
                text: String::new(),
                exit: 0,
                printed: true,
            })
        }
        // At PreToolUse exit 2 blocks the call; elsewhere exit 1: the agent shows the line
        // and goes on (2 would block the user's prompt).
        Err(e) => {
            eprintln!("{}", shown(&format!("revl: {} ({})", e.message, e.hint)));
            Ok(Outcome {
                doc: Value::Null,
                text: String::new(),
                exit: if blocking { 2 } else { 1 },
                printed: true,
            })
        }
    }
}

fn payload_cwd(p: &serde_json::Map<String, Value>) -> Result<PathBuf, Error> {
    match p.get("cwd") {
        Some(Value::String(c)) => Ok(PathBuf::from(c)),
        _ => std::env::current_dir().map_err(|e| Error::io("the current directory", e)),
    }
}

/// The tool call an edit's preimages wait under for its PostToolUse (the store's pending
/// edits, never in the workspace): its `tool_use_id` (Codex: `call_id`).
fn tool_use_key(p: &serde_json::Map<String, Value>) -> Result<&str, Error> {
    match p.get("tool_use_id").or_else(|| p.get("call_id")) {
        Some(Value::String(s)) => Ok(s),
        _ => Err(Error::bad_args(
            "the hook payload has no `tool_use_id`: revl cannot pair the edit's preimage with its result",
            "`revl hook` is run by the agent's hooks (docs/agents.md)",
        )),
    }
}

/// PreToolUse on an edit tool: the preimage of every path it will change, kept until its
/// PostToolUse. An edit outside the workspace is denied (revl could not put it back).
fn edit_before(
    store: &Store,
    session: Option<&str>,
    p: &serde_json::Map<String, Value>,
    tool: &str,
) -> Result<Option<Value>, Error> {
    let cwd = payload_cwd(p)?;
    let (id, ws) = agent_session(store, session, &cwd, false)?;
    let mut rels = Vec::new();
    // A call whose files revl cannot tell is denied: it would run unconfined and unrecorded.
    let paths = match agents::edit_paths(p) {
        Ok(paths) => paths,
        Err(e) => return Ok(Some(agents::deny(&e))),
    };
    for abs in paths {
        if abs
            .components()
            .any(|c| c == std::path::Component::ParentDir)
        {
            let e = Error::new(
                Code::PathOutside,
                format!(
                    "{tool} names {}, with `..`: the system resolves it through symlinks, so revl cannot confine it; nothing was changed",
                    revl_core::util::visible(&abs.to_string_lossy(), false)
                ),
                "name the file without `..`",
            );
            return Ok(Some(agents::deny(&e)));
        }
        match agents::rel_path(&ws, &abs) {
            Some(r) => rels.push(r),
            None => {
                let e = Error::new(
                    Code::PathOutside,
                    format!(
                        "{tool} would change {}, outside the revl session's workspace {}: nothing was changed",
                        revl_core::util::visible(&abs.to_string_lossy(), false),
                        ws.display()
                    ),
                    "edit files inside the workspace",
                );
                return Ok(Some(agents::deny(&e)));
            }
        }
    }
    let s = attach_read(store, &id)?;
    // Each path as the tool names it (the step's label), with its preimage.
    let pre = rels
        .iter()
        .map(|r| Ok((r.clone(), s.capture_preimage(r)?)))
        .collect::<Result<Vec<_>, Error>>()?;
    store.pending_edits(&id).put(tool_use_key(p)?, &pre)?;
    Ok(None)
}

/// PostToolUse or PostToolUseFailure on an edit tool: each path it changed recorded as a
/// file step with the preimage taken before (a path left as it was records nothing).
fn edit_after(
    store: &Store,
    agent: agents::Agent,
    session: Option<&str>,
    p: &serde_json::Map<String, Value>,
    tool: &str,
) -> Result<(), Error> {
    let cwd = payload_cwd(p)?;
    let (id, _) = agent_session(store, session, &cwd, false)?;
    let key = tool_use_key(p)?;
    let pending = store.pending_edits(&id);
    // Its PreToolUse kept nothing (denied, or another hook ran it): nothing to record.
    let Some(pre) = pending.get(key)? else {
        return Ok(());
    };
    // A call that failed may still have changed files (a patch applied in part): what
    // changed is recorded either way; a path left as it was records nothing.
    let origin = agents::origin_of(agent, p)?;
    let mut s = attach(store, &id)?;
    for (rel, entry) in pre {
        let label = format!(
            "{}: {tool} {}",
            agent.name(),
            revl_core::util::visible(&rel, false)
        );
        s.record_edit(&rel, entry, Some(origin.clone()), &label)?;
    }
    let _ = pending.remove(key);
    Ok(())
}

/// `revl agent claude|codex|install`.
fn agent_cmd(store: &Store, cmd: &AgentCmd, json: bool) -> Result<Outcome, Error> {
    let here = std::env::current_dir().map_err(|e| Error::io("the current directory", e))?;
    let revl =
        std::env::current_exe().map_err(|e| Error::io("cannot find revl's own binary", e))?;
    match cmd {
        AgentCmd::Claude { session, args } => {
            let (id, ws) = agent_session(store, session.as_deref(), &here, true)?;
            let hook = agents::hook_command(&revl, store.root(), agents::Agent::Claude, &id);
            let settings = json_settings(agents::hooks_json(agents::Agent::Claude, &hook));
            let program = std::env::var_os("REVL_CLAUDE").unwrap_or_else(|| "claude".into());
            let dir = agent_dir(&here, &ws);
            let config = agents::claude_config_dir()?;
            let homes = resume::Homes {
                search: vec![config.clone()],
                write: config,
            };
            let args = resumed(store, &id, agents::Agent::Claude, &homes, &dir, args, json)?;
            let mut c = std::process::Command::new(&program);
            c.arg("--settings").arg(settings).args(args);
            // Claude Code's temporary files (its cwd file, task output) go to a revl-owned
            // directory of the session, not /tmp, unless the user chose one.
            if std::env::var_os("CLAUDE_CODE_TMPDIR").is_none_or(|v| v.is_empty()) {
                c.env("CLAUDE_CODE_TMPDIR", agents::claude_tmp(store.root(), &id)?);
            }
            // The agent works in the session's workspace (a branch's, when one is named).
            c.env("REVL_SESSION", &id).current_dir(dir);
            Err(start_agent(c, &program))
        }
        AgentCmd::Codex { session, args } => {
            let (id, ws) = agent_session(store, session.as_deref(), &here, true)?;
            let hook = agents::hook_command(&revl, store.root(), agents::Agent::Codex, &id);
            let home = agents::codex_home(
                store.root(),
                &id,
                &agents::hooks_json(agents::Agent::Codex, &hook),
            )?;
            let dir = agent_dir(&here, &ws);
            // The parent's conversation is in the parent session's revl-owned home, or in
            // the user's own (hooks installed with `revl agent install codex`).
            let parent = store.attach_read(&id)?.state().origin.clone();
            let mut search: Vec<PathBuf> = parent
                .map(|o| agents::codex_home_of(store.root(), &o.parent))
                .into_iter()
                .collect();
            search.extend(agents::user_codex_home().ok());
            let homes = resume::Homes {
                search,
                write: home.clone(),
            };
            let args = resumed(store, &id, agents::Agent::Codex, &homes, &dir, args, json)?;
            let program = std::env::var_os("REVL_CODEX").unwrap_or_else(|| "codex".into());
            let mut c = std::process::Command::new(&program);
            // revl's sandbox runs every shell command, so Codex's own (which would wrap
            // revl and refuse its store) steps aside; the hooks file is revl's own.
            c.args([
                "-c",
                "sandbox_mode=\"danger-full-access\"",
                "--dangerously-bypass-hook-trust",
            ])
            .args(args)
            .env("CODEX_HOME", &home)
            .env("REVL_SESSION", &id)
            .current_dir(dir);
            Err(start_agent(c, &program))
        }
        AgentCmd::Install { agent, session } => {
            let (id, _) = agent_session(store, session.as_deref(), &here, true)?;
            let hook = agents::hook_command(&revl, store.root(), *agent, &id);
            let path = agents::install(&here, *agent, &agents::hooks_json(*agent, &hook))?;
            let doc = serde_json::json!({"session": id, "settings": path.to_string_lossy()});
            let text = format!(
                "revl's hooks for {} are in {} (session {id}): start the agent in this directory",
                agent.name(),
                path.display()
            );
            Ok(Outcome::ok(doc, text))
        }
    }
}

/// The agent's arguments on session `id`: for a branch, resuming the parent's conversation
/// cut at the fork's turn (docs/agents.md, "Resume on a branch"), with one line on stderr
/// saying what was resumed or why not (never a reason not to start the agent).
fn resumed(
    store: &Store,
    id: &str,
    agent: agents::Agent,
    homes: &resume::Homes,
    dir: &Path,
    args: &[String],
    json: bool,
) -> Result<Vec<String>, Error> {
    let s = store.attach_read(id)?;
    if s.state().origin.is_none() {
        return Ok(args.to_vec());
    }
    let (said, args) = resume::resume(s.fork_turn(), agent, homes, dir, args);
    match json {
        true => eprintln!("{}", said.doc()),
        false => eprintln!("{}", said.line()),
    }
    Ok(args)
}

/// Where the agent starts: here when here is inside the session's workspace, else the
/// workspace (a branch's, when `--session` names one).
fn agent_dir(here: &Path, ws: &Path) -> PathBuf {
    let canon = std::fs::canonicalize(here).unwrap_or_else(|_| here.to_path_buf());
    match canon.starts_with(ws) {
        true => canon,
        false => ws.to_path_buf(),
    }
}

fn json_settings(hooks: Value) -> String {
    serde_json::json!({ "hooks": hooks }).to_string()
}

/// Replace this process with the agent (its signals and terminal are the agent's); only
/// returns when it could not start.
fn start_agent(mut c: std::process::Command, program: &std::ffi::OsStr) -> Error {
    use std::os::unix::process::CommandExt;
    let e = c.exec();
    Error::new(
        Code::ExecFailed,
        format!("could not start {}: {e}", program.to_string_lossy()),
        "install the agent (docs/agents.md names the versions), or name its binary in $REVL_CLAUDE / $REVL_CODEX",
    )
}

/// `exec --passthrough`: the command's bytes to our stdout and stderr as they are read,
/// unchanged.
fn passed_through() -> revl_core::proc::OutputSink {
    revl_core::proc::OutputSink::new(|which, raw| {
        use std::io::Write;
        let _ = match which {
            revl_core::proc::Stream::Stdout => {
                let mut o = std::io::stdout().lock();
                o.write_all(raw).and_then(|()| o.flush())
            }
            revl_core::proc::Stream::Stderr => std::io::stderr().lock().write_all(raw),
        };
    })
}

/// `exec --passthrough`'s end: nothing more on stdout, the command's status as ours. What
/// revl has to say (a repair made on attach, a timeout) goes to stderr, one line each.
fn passthrough_outcome(r: &revl_core::report::ExecReport) -> Outcome {
    let mut notes: Vec<String> = REPAIRS
        .with(|x| std::mem::take(&mut *x.borrow_mut()))
        .iter()
        .map(|x| format!("revl: repaired on attach: {}", x.detail))
        .collect();
    let x = r.sandboxed.as_ref();
    let exit = match (r.exit_code, x.and_then(|x| x.signal)) {
        _ if x.is_some_and(|x| x.timed_out) => {
            notes.push(format!(
                "revl: the command timed out and was killed with everything it started; what it changed is step {}",
                r.step
            ));
            124
        }
        (Some(c), _) => c.clamp(0, 255) as u8,
        (None, Some(sig)) => (128 + sig).clamp(0, 255) as u8,
        (None, None) => 1,
    };
    for n in notes {
        eprintln!("{}", shown(&n));
    }
    Outcome {
        doc: Value::Null,
        text: String::new(),
        exit,
        printed: true,
    }
}

fn run(cli: &Cli) -> Result<Outcome, Error> {
    if let Cmd::Demo { keep } = &cli.cmd {
        return demo::run(*keep);
    }
    if let Some(name) = &cli.remote {
        if !matches!(cli.cmd, Cmd::Push { .. }) {
            return run_remote(cli, name);
        }
    }
    // The readers of WALs alone: no store is opened (a WAL file may be given).
    if let Some(out) = offline(cli, &|w| wal_of(cli, w)) {
        return out;
    }
    if let Cmd::Doctor = &cli.cmd {
        // A check creates nothing: without a store it probes in a temporary directory.
        let root = match &cli.store {
            Some(s) => s.clone(),
            None => default_store()?,
        };
        let r = revl_core::doctor::check(&root);
        let mut out = Outcome::ok(to_json(&r), render::doctor(&r));
        // A script can rely on `revl doctor && …`: exit 1 when exec cannot be sandboxed.
        out.exit = u8::from(!r.sandbox.available);
        return Ok(out);
    }
    let store = open_store(cli)?;
    if reads_only(&cli.cmd) {
        return reads(cli, &store);
    }
    let effect = |session: &str, op: FileOp| -> Result<Outcome, Error> {
        let mut s = attach(&store, session)?;
        let r = s.file_effect(op)?;
        Ok(Outcome::ok(to_json(&r), render::stepped(&r)))
    };
    match &cli.cmd {
        Cmd::Demo { .. }
        | Cmd::Branch { .. }
        | Cmd::Compare { .. }
        | Cmd::Doctor
        | Cmd::Status { .. }
        | Cmd::Timeline { .. }
        | Cmd::Inspect { .. }
        | Cmd::Log { .. }
        | Cmd::View { .. }
        | Cmd::Diff { .. }
        | Cmd::Read { .. } => {
            unreachable!("handled above")
        }
        Cmd::Remote { cmd } => remote_cmd(&store, cmd),
        Cmd::Hook {
            agent,
            event,
            session,
        } => hook_cmd(&store, *agent, event.as_deref(), session.as_deref()),
        Cmd::Agent { cmd } => agent_cmd(&store, cmd, cli.json),
        Cmd::Push { session, repair } => {
            let remote = revl_fleet::Remotes::load(&store)?.pick(cli.remote.as_deref())?;
            let ids = match session {
                Some(s) => vec![store.resolve(s)?],
                None => Vec::new(),
            };
            let mode = if *repair {
                revl_fleet::push::Mode::Repair
            } else {
                revl_fleet::push::Mode::Extend
            };
            let bucket = revl_fleet::Bucket::open(&remote.url)?;
            let r = revl_fleet::push::push_with(&store, &remote, &bucket, &ids, mode)?;
            let text = r
                .pushed
                .iter()
                .map(|p| {
                    let mut line = format!(
                        "{}  epoch {}  {} segment(s), {} blob(s), {} bytes uploaded",
                        p.session, p.remote_head["epoch"], p.segments, p.blobs, p.bytes
                    );
                    if *repair {
                        line.push_str(&format!(
                            "; {} object(s) failed verification and were uploaded again",
                            p.repaired.len()
                        ));
                    }
                    line
                })
                .collect::<Vec<_>>()
                .join("\n");
            Ok(Outcome::ok(to_json(&r), text))
        }
        Cmd::Mcp {
            workspace,
            session,
            manifest,
            allow_unconfined,
            root,
        } => {
            let target = match (session, workspace) {
                (Some(id), _) => revl_mcp::Target::Session(id.clone()),
                (None, Some(dir)) => revl_mcp::Target::Workspace(dir.clone()),
                (None, None) => {
                    return Err(Error::new(
                        Code::Usage,
                        "mcp needs --workspace DIR or --session ID",
                        "revl mcp --workspace .",
                    ))
                }
            };
            let config = revl_mcp::Config {
                target,
                manifest: manifest.clone(),
                bounds: revl_mcp::Bounds {
                    allow_unconfined: *allow_unconfined,
                    roots: root.clone(),
                },
            };
            revl_mcp::serve(store, config)?;
            Ok(Outcome::ok(Value::Null, String::new()))
        }
        Cmd::New {
            workspace,
            manifest,
            capture_base,
        } => {
            let s = store.new_session(workspace, manifest.as_deref())?;
            let r = revl_core::api::Created::of(&s);
            // The base tree lets another machine branch this session from a remote.
            if *capture_base || !revl_fleet::Remotes::load(&store)?.remotes.is_empty() {
                store.capture_base(&r.session, Path::new(&r.workspace))?;
            }
            let text = format!(
                "session   {}\nworkspace {}\nwal       {}",
                r.session, r.workspace, r.wal
            );
            Ok(Outcome::ok(to_json(&r), text))
        }
        Cmd::Sessions => {
            let r = store.sessions()?;
            Ok(Outcome::ok(to_json(&r), render::sessions(&r)))
        }
        Cmd::Verify { session } => {
            let s = attach_read(&store, session)?;
            let r = s.verify()?;
            // Like diff(1): drift found exits 1, with the normal document.
            let mut out = Outcome::ok(to_json(&r), render::verify(&r));
            out.exit = u8::from(!r.drift.is_empty());
            Ok(out)
        }
        Cmd::Gc { apply } => {
            let r = store.gc(*apply)?;
            let text = format!(
                "{} blob(s); {} reachable from {} live or frozen session(s); {} unreachable ({} bytes){}",
                r.blobs,
                r.reachable,
                r.sessions_kept,
                r.unreachable,
                r.unreachable_bytes,
                if r.applied {
                    ": removed"
                } else {
                    ": nothing removed (dry run; --apply removes them)"
                }
            ) + &render::gc_preserved(&r.preserved)
                + &render::gc_layers(&r.layers)
                + &render::gc_abandoned(&r);
            Ok(Outcome::ok(to_json(&r), text))
        }
        Cmd::Blob { digest, out } => {
            let bytes = store.blobs().fetch(digest)?;
            let size = bytes.len();
            match out {
                Some(path) => {
                    std::fs::write(path, &bytes)
                        .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
                    let doc = serde_json::json!({"digest": digest, "size": size, "out": path.display().to_string()});
                    Ok(Outcome::ok(
                        doc,
                        format!("{size} bytes written to {}", path.display()),
                    ))
                }
                None if cli.json => {
                    let doc = serde_json::json!({"digest": digest, "size": size, "contentBase64": revl_core::workspace::b64(&bytes)});
                    Ok(Outcome::ok(doc, String::new()))
                }
                None => {
                    use std::io::Write as _;
                    let mut o = std::io::stdout().lock();
                    let _ = o.write_all(&bytes).and_then(|_| o.flush());
                    Ok(Outcome {
                        doc: Value::Null,
                        text: String::new(),
                        exit: 0,
                        printed: true,
                    })
                }
            }
        }
        Cmd::Write {
            session,
            path,
            content,
            from,
        } => {
            let bytes = match (content, from) {
                (Some(c), _) => c.clone().into_bytes(),
                (None, Some(f)) => read_input_file(f)?,
                (None, None) => {
                    return Err(Error::new(
                        Code::Usage,
                        "write needs --content TEXT or --from FILE",
                        "revl write SESSION PATH --content TEXT",
                    ))
                }
            };
            effect(
                session,
                FileOp::Write {
                    path: path_arg(path),
                    content: bytes,
                },
            )
        }
        Cmd::Delete { session, path } => effect(
            session,
            FileOp::Delete {
                path: path_arg(path),
            },
        ),
        Cmd::Rename { session, from, to } => effect(
            session,
            FileOp::Rename {
                from: path_arg(from),
                to: path_arg(to),
            },
        ),
        Cmd::Mkdir { session, path } => effect(
            session,
            FileOp::Mkdir {
                path: path_arg(path),
            },
        ),
        Cmd::Chmod {
            session,
            path,
            mode,
        } => {
            let mode = revl_core::workspace::parse_mode(mode)?;
            effect(
                session,
                FileOp::Chmod {
                    path: path_arg(path),
                    mode,
                },
            )
        }
        Cmd::List { session, path } => {
            let s = attach_read(&store, session)?;
            let r = s.workspace().list(path.as_ref().map(path_arg).as_deref())?;
            Ok(Outcome::ok(to_json(&r), render::list(&r)))
        }
        Cmd::Provide {
            session,
            key,
            value,
        } => {
            let mut s = attach(&store, session)?;
            let r = s.provide(key, value)?;
            Ok(Outcome::ok(to_json(&r), render::stepped(&r)))
        }
        Cmd::Boundary { session, label } => {
            let mut s = attach(&store, session)?;
            let r = s.boundary(label.as_deref())?;
            Ok(Outcome::ok(to_json(&r), render::stepped(&r)))
        }
        Cmd::Exec {
            session,
            timeout,
            cwd,
            unconfined,
            memory,
            pids,
            cpu_seconds,
            max_bytes,
            net,
            passthrough,
            note_to,
            origin,
            argv,
        } => {
            if *passthrough && cli.json {
                return Err(Error::bad_args(
                    "--passthrough and --json both say what revl prints",
                    "drop one: --passthrough gives the command's own output and status, --json revl's document",
                ));
            }
            let origin = origin
                .as_deref()
                .map(revl_core::agent::Origin::parse)
                .transpose()?;
            let net = net_request(net)?;
            let timeout = revl_core::ExecOptions::timeout_secs(*timeout)?;
            let limits = revl_core::ExecLimits::parse(
                memory.as_deref(),
                *pids,
                *cpu_seconds,
                max_bytes.as_deref(),
            )?;
            let mut s = attach(&store, session)?;
            // Ctrl-C stops the command, not revl: what it did by then is recorded and said.
            // Passed through for another program, that program ending revl does too.
            #[cfg(target_os = "linux")]
            match passthrough {
                true => revl_core::sandbox::stop_with_caller(),
                false => revl_core::sandbox::catch_interrupt(),
            }
            // In text mode the command's output streams to the terminal as it runs; the
            // summary follows it. --json keeps the captured document alone.
            let stream = (!cli.json && !passthrough).then(Streamed::default);
            let output = match passthrough {
                true => Some(passed_through()),
                false => stream.as_ref().map(Streamed::sink),
            };
            let r = s.exec_with(&revl_core::ExecOptions {
                argv: argv.clone(),
                timeout,
                cwd: cwd.clone(),
                unconfined: *unconfined,
                output,
                limits,
                net,
                note: note_to.is_some(),
                origin,
            })?;
            if let Some(to) = note_to {
                let note = r
                    .sandboxed
                    .as_ref()
                    .and_then(|x| x.note.clone())
                    .unwrap_or_default();
                std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(to)
                    .and_then(|mut f| std::io::Write::write_all(&mut f, &note))
                    .map_err(|e| {
                        Error::io(format!("cannot write the note to {}", to.display()), e)
                    })?;
            }
            if *passthrough {
                return Ok(passthrough_outcome(&r));
            }
            let text = match &stream {
                Some(st) => st.then(render::exec(&revl_core::report::ExecReport {
                    stdout: String::new(),
                    stderr: String::new(),
                    ..r.clone()
                })),
                None => render::exec(&r),
            };
            let mut out = Outcome::ok(to_json(&r), text);
            if r.sandboxed.as_ref().is_some_and(|x| x.interrupted) {
                // As a shell reports a command Ctrl-C ended.
                out.exit = 130;
            }
            Ok(out)
        }
        Cmd::Approvals { session } => {
            let r = revl_core::log::approvals(&store, session.as_deref())?;
            Ok(Outcome::ok(to_json(&r), render::approvals(&r)))
        }
        Cmd::Call {
            session,
            tool,
            args,
        } => {
            let args: Value = serde_json::from_str(args).map_err(|e| {
                Error::bad_args(
                    format!("--args is not valid JSON: {e}"),
                    "pass a JSON object, e.g. --args '{\"to\": \"a@b.c\"}'",
                )
            })?;
            let mut s = attach(&store, session)?;
            let r = s.call(tool, args)?;
            Ok(answered(&r, render::call(&r)))
        }
        Cmd::Commit { session } => {
            let s = attach(&store, session)?;
            let r = s.commit()?;
            Ok(Outcome::ok(to_json(&r), render::commit_plan(&r)))
        }
        Cmd::CommitConfirm { session, hash } => {
            let mut s = attach(&store, session)?;
            let r = s.commit_confirm(hash)?;
            Ok(answered(&r, render::commit_done(&r)))
        }
        Cmd::Abort { session, remove } => {
            let mut s = attach(&store, session)?;
            let r = if *remove {
                s.abort_and_remove()?
            } else {
                s.abort()?
            };
            Ok(Outcome::ok(to_json(&r), render::abort(&r)))
        }
        Cmd::Resend { session, seq } => {
            let mut s = attach(&store, session)?;
            let r = s.resend(*seq)?;
            Ok(Outcome::ok(to_json(&r), render::resent(&r)))
        }
        Cmd::Approve {
            session,
            ticket,
            tool,
        } => {
            let mut s = attach(&store, session)?;
            let r = s.approve(ticket.as_deref(), tool.as_deref())?;
            Ok(Outcome::ok(to_json(&r), render::approval(&r)))
        }
        Cmd::NoteModel {
            session,
            step,
            model,
            tokens_in,
            tokens_out,
            latency_seconds,
            attempts,
            attempt_ceiling,
            outcome,
            cost,
            currency,
        } => {
            let args = serde_json::json!({"step": step, "model": model, "tokensIn": tokens_in, "tokensOut": tokens_out,
                "latencySeconds": latency_seconds, "attempts": attempts, "attemptCeiling": attempt_ceiling,
                "outcome": outcome, "cost": cost, "currency": currency});
            let mut s = attach(&store, session)?;
            let r = s.note_model(&args)?;
            Ok(Outcome::ok(to_json(&r), render::model_note(&r)))
        }
        Cmd::Fork { session, at } => {
            let mut s = attach(&store, session)?;
            let k = s.point(at, "--at")?;
            let report = s.fork(k)?;
            Ok(Outcome::ok(to_json(&report), render::fork(&report)))
        }
        Cmd::ForkConfirm {
            session,
            hash,
            into,
            keep_drift,
        } => {
            // A fork enumerated with --remote waits in this store, not in a local session.
            use revl_fleet::pull::ForkOf;
            if let ForkOf::Remote { remote, id } =
                revl_fleet::pull::fork_to_confirm(&store, session.as_deref(), hash)?
            {
                return remote_fork_confirm(&store, &remote, &id, hash, into.as_deref());
            }
            let session = session.as_deref().unwrap_or("");
            let mut s = attach(&store, session)?;
            let policy = revl_core::DriftPolicy::keeping(*keep_drift);
            let report = s.fork_confirm_with(hash, into.as_deref(), policy)?;
            Ok(answered(&report, render::fork(&report)))
        }
        Cmd::Recover {
            session,
            wal,
            force,
            truncate_corrupt,
        } => {
            let (store, id) = match (session, wal) {
                (Some(sid), _) => {
                    let id = store.resolve(sid)?;
                    (store, id)
                }
                (None, Some(w)) => {
                    let given = cli.store.as_ref().map(|_| &store);
                    let (root, id) = revl_core::recover::locate_wal(w, given)?;
                    (Store::open(&root, revl_core::Failpoints::from_env())?, id)
                }
                (None, None) => {
                    return Err(Error::new(
                        Code::Usage,
                        "recover needs SESSION or --wal FILE",
                        "revl recover SESSION",
                    ))
                }
            };
            if *truncate_corrupt {
                let r = store.truncate_corrupt(&id)?;
                return Ok(Outcome::ok(to_json(&r), render::truncated(&r)));
            }
            let report = store.recover(&id, *force)?;
            Ok(Outcome::ok(to_json(&report), render::recover(&report)))
        }
        Cmd::StepBack {
            session,
            to,
            compensating,
            force,
            keep_drift,
            ..
        } => {
            let mode = if *compensating {
                StepBackMode::Compensating { force: *force }
            } else {
                StepBackMode::Scoped
            };
            let mut s = attach(&store, session)?;
            let k = s.point(to, "--to")?;
            let policy = revl_core::DriftPolicy::keeping(*keep_drift);
            let report = s.step_back_with(k, mode, policy)?;
            Ok(Outcome::ok(to_json(&report), render::step_back(&report)))
        }
    }
}

fn remote_cmd(store: &Store, cmd: &RemoteCmd) -> Result<Outcome, Error> {
    match cmd {
        RemoteCmd::Add { name, url } => {
            let r = revl_fleet::config::add(store, name, url)?;
            let text = format!("remote {} = {}", r.name, r.url);
            Ok(Outcome::ok(to_json(&r), text))
        }
        RemoteCmd::List => {
            let list: Vec<_> = revl_fleet::Remotes::load(store)?
                .list()
                .into_iter()
                .map(|mut r| {
                    r.index = r.index.map(|u| revl_fleet::index::redact(&u));
                    r
                })
                .collect();
            let text = list
                .iter()
                .map(|r| match &r.index {
                    Some(i) => format!("{}  {}  (index {i})", r.name, r.url),
                    None => format!("{}  {}", r.name, r.url),
                })
                .collect::<Vec<_>>()
                .join("\n");
            Ok(Outcome::ok(serde_json::json!({ "remotes": list }), text))
        }
        RemoteCmd::Index { first, url } => {
            let (name, url) = match url {
                Some(url) => (first.clone(), url.as_str()),
                None => (
                    revl_fleet::Remotes::load(store)?.pick(None)?.name,
                    first.as_str(),
                ),
            };
            let r = revl_fleet::index::index(store, &name, url)?;
            let text = format!(
                "remote {}: {} session(s) indexed in {}",
                r.remote, r.sessions, r.index
            );
            Ok(Outcome::ok(to_json(&r), text))
        }
        RemoteCmd::Lineage { name, session } => {
            let remote = revl_fleet::Remotes::load(store)?.get(name)?;
            let r = revl_fleet::pull::lineage(store, &remote, session.as_deref())?;
            let mut text = r
                .sessions
                .iter()
                .map(|e| match (&e.parent, e.at) {
                    (Some(p), Some(at)) => format!(
                        "{}  {}  head {}  branch of {p} at step {at}",
                        e.session, e.state, e.head
                    ),
                    _ => format!("{}  {}  head {}", e.session, e.state, e.head),
                })
                .collect::<Vec<_>>()
                .join("\n");
            for u in &r.unreadable {
                text.push_str(&format!(
                    "\nunreadable: session {} ({}: {})",
                    u.session, u.code, u.message
                ));
            }
            if !r.stale.is_empty() {
                text.push_str(&format!(
                    "\nthe index is stale for {} (answered from the bucket): rebuild it with `revl remote index {} URL`",
                    r.stale.join(", "),
                    r.remote
                ));
            }
            Ok(Outcome::ok(to_json(&r), text))
        }
    }
}

fn remote_fork_confirm(
    store: &Store,
    remote: &str,
    id: &str,
    hash: &str,
    into: Option<&Path>,
) -> Result<Outcome, Error> {
    let Some(dir) = into else {
        return Err(Error::new(
            Code::Usage,
            "a branch of a remote session needs its own workspace: give --into DIR",
            "revl fork-confirm SESSION --hash H --into DIR",
        ));
    };
    let report = revl_fleet::pull::fork_confirm(store, remote, id, hash, dir)?;
    Ok(answered(&report, render::fork(&report)))
}

/// `--remote NAME`: a read verb runs as it runs on this store, on the remote's verified
/// cache (docs/fleet.md, "Reading a remote"); `fork --remote` and its confirm branch it.
fn run_remote(cli: &Cli, name: &str) -> Result<Outcome, Error> {
    let store = open_store(cli)?;
    match &cli.cmd {
        Cmd::Fork { session, at } => {
            let cache = RemoteCache::open(&store, name)?;
            let k = parse_k(at, "--at")?;
            let report = revl_fleet::pull::fork(&store, &cache, session, k)?;
            Ok(Outcome::ok(to_json(&report), render::fork(&report)))
        }
        Cmd::ForkConfirm {
            session,
            hash,
            into,
            ..
        } => {
            let given = session.as_deref().unwrap_or("");
            let id = match revl_fleet::pull::pending_fork(&store, given)? {
                Some((_, id)) => id,
                None if given.is_empty() => {
                    return Err(Error::new(
                        Code::NoPendingFork,
                        format!("no remote fork is pending in this store (remote {name})"),
                        "enumerate it first: `revl fork --remote NAME SESSION --at K`",
                    ))
                }
                None => RemoteCache::open(&store, name)?.reader().resolve(given)?,
            };
            remote_fork_confirm(&store, name, &id, hash, into.as_deref())
        }
        Cmd::Read { at: None, .. } => Err(Error::new(
            Code::Usage,
            "--remote reads a file as it was after a step: give --at K",
            "revl read --remote NAME SESSION PATH --at K",
        )),
        cmd if reads_only(cmd) || matches!(cmd, Cmd::Branch { .. } | Cmd::Compare { .. }) => {
            let cache = RemoteCache::open(&store, name)?;
            let wal = |w: &Path| -> Result<PathBuf, Error> {
                match w.to_str() {
                    Some(g) => Ok(cache.store().wal_path(&cache.session(g)?)),
                    None => Err(Error::bad_args(
                        format!("{} is not a session id", w.display()),
                        "with --remote, give session ids of the remote",
                    )),
                }
            };
            revl_fleet::reading(&cache, |c| match offline(cli, &wal) {
                Some(out) => out,
                None => reads(cli, c),
            })
        }
        _ => Err(Error::new(
            Code::Usage,
            "--remote applies to log, view, branch, compare, diff, read --at, status, timeline, inspect, fork and fork-confirm (and picks the remote of push)",
            "run this verb without --remote, on the store that holds the session",
        )),
    }
}

/// The verbs that read WALs (`branch`, `compare`), each WAL argument found by `wal`: a file
/// or a session of this store, or a session of a remote's cache. `None` for other verbs.
fn offline(
    cli: &Cli,
    wal: &dyn Fn(&Path) -> Result<PathBuf, Error>,
) -> Option<Result<Outcome, Error>> {
    Some(match &cli.cmd {
        Cmd::Branch { wals, sessions, at } => wals
            .iter()
            .chain(sessions)
            .map(|w| wal(w))
            .collect::<Result<Vec<_>, _>>()
            .and_then(|wals| offline_branch(&wals, at.as_deref(), cli.json)),
        Cmd::Compare { left, right } => (|| {
            let report = revl_core::lineage::compare(&wal(left)?, &wal(right)?)?;
            let doc = to_json(&report);
            Ok(Outcome {
                text: render::compare(&report),
                exit: u8::from(report.unclean()),
                doc,
                printed: false,
            })
        })(),
        _ => return None,
    })
}

/// Whether `cmd` is one of the verbs [`reads`] runs.
fn reads_only(cmd: &Cmd) -> bool {
    matches!(
        cmd,
        Cmd::Status { .. }
            | Cmd::Timeline { .. }
            | Cmd::Inspect { .. }
            | Cmd::Read { .. }
            | Cmd::Diff { .. }
            | Cmd::Log { .. }
            | Cmd::View { .. }
    )
}

/// The verbs that only read sessions ([`reads_only`]), run the same on this store and on a
/// remote's verified cache (`--remote NAME`): `catalog` resolves (for a remote: fetches and
/// verifies) the sessions named, then the verb reads its store.
fn reads(cli: &Cli, catalog: &dyn Catalog) -> Result<Outcome, Error> {
    let store = catalog.store();
    let session = |given: &str| catalog.session(given);
    match &cli.cmd {
        Cmd::Status { session: given } => {
            // A WAL corrupt past its header shows its intact records, marked.
            let s = store.attach_prefix(&session(given)?)?;
            note_repairs(&s);
            let r = s.status();
            Ok(Outcome::ok(to_json(&r), render::status(&r)))
        }
        Cmd::Timeline { session: given } => {
            let s = store.attach_prefix(&session(given)?)?;
            note_repairs(&s);
            let r = s.timeline();
            Ok(Outcome::ok(to_json(&r), render::timeline(&r)))
        }
        Cmd::Inspect { session: given, at } => {
            let k = parse_k(at, "--at")?;
            let s = attach_read(store, &session(given)?)?;
            let r = s.inspect(k)?;
            Ok(Outcome::ok(to_json(&r), render::inspect(&r)))
        }
        Cmd::Read {
            session: given,
            path,
            at,
            out,
        } => {
            let s = attach_read(store, &session(given)?)?;
            let p = path_arg(path);
            // After a step, or the workspace now (never a remote's: refused before).
            let (doc, path, content, base64) = match at {
                Some(at) => {
                    let r = s.read_at(&p, s.point(at, "--at")?)?;
                    (to_json(&r), r.path, r.content, r.content_base64)
                }
                None => {
                    let r = s.workspace().read(&p)?;
                    (to_json(&r), r.path, r.content, r.content_base64)
                }
            };
            read_out(cli, doc, &path, &content, &base64, out)
        }
        Cmd::Diff { left, right, path } => {
            let (l, r) = (catalog.point(left)?, catalog.point(right)?);
            let report = revl_core::session::diff::diff_in(store, &l, &r, path.as_deref())?;
            let mut out = Outcome::ok(to_json(&report), render::diff(&report));
            out.exit = u8::from(!report.paths.is_empty());
            Ok(out)
        }
        Cmd::Log { session: given } => {
            let listing = catalog.listing(given.as_deref())?;
            let r = revl_core::log::log(store, listing.session.as_deref())?;
            Ok(with_unreadable(
                Outcome::ok(to_json(&r), render::log(&r)),
                &listing.unreadable,
            ))
        }
        Cmd::View {
            session: given,
            out,
        } => {
            let listing = catalog.listing(given.as_deref())?;
            let out = out
                .clone()
                .unwrap_or_else(|| PathBuf::from("revl-view.html"));
            let r = view::write(store, listing.session.as_deref(), &out)?;
            let text = format!(
                "wrote {} ({} session(s), {} step(s), {} bytes): open it in a browser",
                r.out, r.sessions, r.steps, r.bytes
            );
            Ok(with_unreadable(
                Outcome::ok(to_json(&r), text),
                &listing.unreadable,
            ))
        }
        _ => Err(Error::new(
            Code::Usage,
            "this verb does not only read sessions",
            "run it without --remote",
        )),
    }
}

/// A listing's sessions of a remote that were refused: `unreadable` in the document, a line
/// each in the text (docs/fleet.md, "A remote is untrusted input").
fn with_unreadable(mut o: Outcome, unreadable: &[revl_fleet::pull::Unreadable]) -> Outcome {
    if !unreadable.is_empty() {
        o.doc["unreadable"] = to_json(&unreadable);
        for u in unreadable {
            o.text.push_str(&format!(
                "\nunreadable: session {} ({}: {})",
                u.session, u.code, u.message
            ));
        }
    }
    o
}

/// `branch`: reads WALs only (no store, no lock, no repair).
/// A WAL argument of the offline readers: a file as given, else a session id (or unique
/// prefix) of the store, read without a lock.
fn wal_of(cli: &Cli, given: &Path) -> Result<PathBuf, Error> {
    // A path (a file, or anything with a slash: the reader reports it) is taken as given.
    if given.is_file() || given.to_str().is_none_or(|g| g.contains('/')) {
        return Ok(given.to_path_buf());
    }
    let root = match &cli.store {
        Some(s) => s.clone(),
        None => default_store()?,
    };
    match given.to_str() {
        Some(id) if root.join("sessions").is_dir() => {
            let store = Store::open(&root, revl_core::Failpoints::none())?;
            let id = store.resolve(id)?;
            Ok(store.wal_path(&id))
        }
        _ => Err(Error::bad_args(
            format!("{} is neither a WAL file nor a session id of the store", given.display()),
            "give the path of a session's wal.jsonl, or a session id (`--store DIR` picks the store)",
        )),
    }
}

fn offline_branch(wals: &[PathBuf], at: Option<&str>, json: bool) -> Result<Outcome, Error> {
    use revl_core::lineage;
    let done = |doc: Value, text: String, exit: u8| Outcome {
        doc,
        text,
        exit,
        printed: false,
    };
    match (wals, at) {
        ([one], Some(k)) => {
            let k = parse_k(k, "--at")?;
            let w = lineage::open(one)?;
            let doc = w.partition_doc(k)?;
            let exit = u8::from(doc.unclean());
            if json {
                use std::io::Write as _;
                let mut out = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
                // A closed stdout (`| head`) is not an error of the reader.
                let _ = serde_json::to_writer_pretty(&mut out, &doc)
                    .map_err(std::io::Error::from)
                    .and_then(|_| out.write_all(b"\n"))
                    .and_then(|_| out.flush());
                drop(doc);
                // The process exits next: freeing a million-step timeline one allocation at a
                // time would only delay that exit (by about 0.2 s).
                std::mem::forget(w);
                return Ok(Outcome {
                    doc: Value::Null,
                    text: String::new(),
                    exit,
                    printed: true,
                });
            }
            let v = serde_json::to_value(&doc).unwrap_or_default();
            Ok(done(Value::Null, render::partition(&v), exit))
        }
        (_, Some(_)) => Err(Error::new(
            Code::Usage,
            "--at takes exactly one --wal",
            "revl branch --wal FILE --at K",
        )),
        ([one], None) => {
            // The parent is found (in the WAL's store, by id) or the reader says so.
            let report = lineage::open(one)?.lineage_checked()?;
            let exit = u8::from(report.unclean());
            Ok(done(to_json(&report), render::lineage(&report), exit))
        }
        (many, None) => {
            let report = lineage::topology(many)?;
            let exit = u8::from(report.unclean());
            Ok(done(to_json(&report), render::topology(&report), exit))
        }
    }
}

/// A verb's own-shape refusal (a stale hash, an approval required) exits 1.
/// A path argument as revl's text: any name the filesystem allows, one that is not UTF-8
/// in the escaped form of docs/wal-format.md, "Names that are not UTF-8".
fn path_arg(os: &std::ffi::OsString) -> String {
    revl_core::name::from_os(os).into_owned()
}

/// What `read` gives: with `--out FILE`, exactly the bytes into FILE; with `--json`, the
/// document; else the bytes exactly on stdout (text as stored, no newline added), binary
/// content refused when stdout is a terminal (it would garble it).
fn read_out(
    cli: &Cli,
    mut doc: Value,
    path: &str,
    content: &Option<String>,
    base64: &Option<String>,
    out: &Option<PathBuf>,
) -> Result<Outcome, Error> {
    use std::io::{IsTerminal as _, Write as _};
    let bytes = match (content, base64) {
        (Some(c), _) => c.clone().into_bytes(),
        (None, Some(b)) => revl_core::workspace::unb64(b)?,
        (None, None) => Vec::new(),
    };
    let shown = render::path_text(path);
    if let Some(file) = out {
        std::fs::write(file, &bytes)
            .map_err(|e| Error::io(format!("cannot write {}", file.display()), e))?;
        if let Value::Object(m) = &mut doc {
            m.remove("content");
            m.remove("contentBase64");
            m.insert("out".into(), file.display().to_string().into());
            m.insert("size".into(), bytes.len().into());
        }
        let text = format!(
            "{} bytes of {shown} written to {}",
            bytes.len(),
            file.display()
        );
        return Ok(Outcome::ok(doc, text));
    }
    if cli.json {
        return Ok(Outcome::ok(doc, String::new()));
    }
    let stdout = std::io::stdout();
    if content.is_none() && stdout.is_terminal() {
        return Err(Error::bad_args(
            format!(
                "{shown} is binary ({} bytes): written to a terminal it would garble it",
                bytes.len()
            ),
            "write it to a file with --out FILE (or pipe it), or read it as base64 with --json",
        ));
    }
    let mut o = stdout.lock();
    let _ = o.write_all(&bytes).and_then(|_| o.flush());
    Ok(Outcome {
        doc: Value::Null,
        text: String::new(),
        exit: 0,
        printed: true,
    })
}

fn answered(r: &impl revl_core::api::Answer, t: String) -> Outcome {
    let doc = r.document();
    let refusal = r.refusal();
    // The text already says it on stdout; stderr gets one line (the refusal's own words),
    // not the same text again.
    if let Some(refusal) = &refusal {
        eprintln!("revl: {}", refusal.message());
    }
    Outcome {
        doc,
        text: t,
        exit: u8::from(refusal.is_some()),
        printed: false,
    }
}

fn read_input_file(f: &Path) -> Result<Vec<u8>, Error> {
    let meta = std::fs::metadata(f).map_err(|e| {
        Error::bad_args(
            format!("cannot read --from {}: {e}", f.display()),
            "give a readable file",
        )
    })?;
    if meta.len() > revl_core::workspace::CONTENT_MAX as u64 {
        return Err(Error::bad_args(
            format!(
                "--from {} is {} bytes; the limit is 16 MiB per call",
                f.display(),
                meta.len()
            ),
            "split the file",
        ));
    }
    std::fs::read(f).map_err(|e| {
        Error::bad_args(
            format!("cannot read --from {}: {e}", f.display()),
            "give a readable file",
        )
    })
}

/// `--json` may appear anywhere before a `--`.
fn wants_json(args: &[std::ffi::OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|a| a.as_os_str() != "--")
        .any(|a| a.as_os_str() == "--json")
}

/// Run the command line `args` (the program name first) and return its exit code.
pub fn main_with(args: Vec<std::ffi::OsString>) -> u8 {
    let json = wants_json(&args);
    let cli = match Cli::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return 0;
            }
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                // The help goes to stdout; stderr gets the one-line error every failure has.
                if !json {
                    use std::io::Write as _;
                    let _ = write!(std::io::stdout().lock(), "{}", e.render());
                }
                let err = Error::new(Code::Usage, "a command is required", "see `revl --help`");
                return fail(&err, json);
            }
            // The whole error, not just its first line (which may end with "…not provided:").
            let msg = e.to_string();
            let first = msg
                .lines()
                .map(str::trim)
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            let first = match first.trim_start_matches("error: ") {
                "" => "bad usage".to_string(),
                m => m.to_string(),
            };
            let err = Error::new(
                Code::Usage,
                first,
                "see `revl --help` or `revl <command> --help`",
            );
            return fail(&err, json);
        }
    };
    // A panic anywhere becomes a one-line error, never a stack trace.
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&cli)));
    match result {
        Ok(Ok(out)) => {
            let out = with_repairs(out);
            if out.printed {
            } else if cli.json && !out.doc.is_null() {
                out_line(&serde_json::to_string_pretty(&out.doc).unwrap_or_default());
            } else if !out.text.is_empty() {
                out_line(&shown(&out.text));
            }
            out.exit
        }
        Ok(Err(e)) => {
            // A repair is durable even when the verb then failed: say so (text only; the
            // JSON error document has one member).
            if !cli.json {
                let out = with_repairs(Outcome::ok(Value::Null, String::new()));
                if !out.text.is_empty() {
                    out_line(&shown(&out.text));
                }
            }
            fail(&e, cli.json)
        }
        Err(p) => fail(&Error::from_panic(&*p, "the command you ran"), cli.json),
    }
}

/// A remedy in the CLI's words.
fn cli_remedy(r: &Remedy) -> String {
    match r {
        Remedy::ListSessions => {
            "`revl sessions` lists them; `--store DIR` picks another store".into()
        }
        Remedy::Timeline => "`revl timeline SESSION` lists the steps".into(),
        Remedy::ListPath => "`revl list SESSION [DIR]` shows what is there".into(),
        Remedy::Status => "`revl status SESSION`".into(),
        Remedy::NewSession => "`revl new --workspace DIR`".into(),
        Remedy::PassArg(name) => format!("--args '{{\"{name}\": ...}}'"),
        Remedy::ArgsObject => "--args '{\"name\": value, ...}'".into(),
        Remedy::GiveStore => "--store DIR or REVL_STORE".into(),
        Remedy::GiveManifest => "--manifest FILE".into(),
        Remedy::GiveWorkspace => "--workspace DIR".into(),
        Remedy::Unconfined => "`revl exec SESSION --unconfined -- ARGV`".into(),
    }
}

fn fail(e: &Error, json: bool) -> u8 {
    let hint = e.hint_with(cli_remedy);
    if json {
        out_line(&serde_json::to_string_pretty(&e.to_json_with_hint(&hint)).unwrap_or_default());
    }
    err_line(&format!(
        "revl: {}: {} (hint: {})",
        e.code.as_str(),
        render::path_text(&e.message),
        render::path_text(&hint)
    ));
    e.code.exit_code() as u8
}

/// A text report as the terminal gets it: whatever came from the workspace, a command or a
/// manifest and was not escaped where it was written, its control characters escaped here
/// (newlines and tabs of the report kept). The last line of defence: the renderers escape
/// each name on its own line (render::path_text), so a newline in a name forges no line.
fn shown(text: &str) -> String {
    revl_core::util::visible(text, true)
}

/// One line to stdout. A closed stdout (`revl log | head`) is the reader's choice, not an
/// error: the line is dropped and the exit code stays the verb's. (`println!` would panic,
/// and in the Python package's `revl`, where SIGPIPE is ignored, print a stack trace.)
fn out_line(s: &str) {
    use std::io::Write as _;
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{s}").and_then(|()| o.flush());
}

/// One line to stderr, never a panic.
fn err_line(s: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{s}");
}

/// What clap gives for a bare `--net` (never a destination: it has no port).
const NET_ALL: &str = "(the declared set)";

/// `--net` (the whole declared set) or `--net=DEST`... (a part of it), from clap's list.
fn net_request(net: &[String]) -> revl_core::Result<revl_core::egress::NetRequest> {
    use revl_core::egress::NetRequest;
    let parts: Vec<String> = net.iter().filter(|d| *d != NET_ALL).cloned().collect();
    match (net.is_empty(), parts.is_empty()) {
        (true, _) => Ok(NetRequest::None),
        (false, true) => Ok(NetRequest::All),
        (false, false) if parts.len() != net.len() => Err(revl_core::Error::bad_args(
            "--net (the whole declared set) and --net=DEST (a part of it) were both given",
            "give --net for the manifest's whole [exec] net, or --net=DEST for each destination you need",
        )),
        _ => Ok(NetRequest::Only(parts)),
    }
}
