//! revl-mcp: the Model Context Protocol server of revl (docs/mcp.md), over stdio.
//!
//! A thin table from MCP tools to session verbs: each tool parses its arguments, attaches
//! to the session (taking its lock and rebuilding it from the WAL, so the server always
//! acts on the durable state and `revl approve` from a terminal works between calls), calls
//! one verb of `revl-core`, drops the session (releasing the lock) and returns the verb's
//! JSON document. No rule of revl lives here.
//!
//! Results: the document as structured content and the same JSON as text. A refusal or
//! failure is a tool result with `isError: true` carrying the error document of docs/reference.md
//! (`{"error": {code, message, hint}}`) or the verb's own negative document
//! (`approvalRequired`, a stale hash's `refused: true`); never a protocol error. Only what
//! is not a call of a revl tool at all (an unknown tool name, a message that is not
//! JSON-RPC) is answered with a JSON-RPC error.
//!
//! There is no approve, resend or recover tool: an agent cannot approve itself, and the
//! operator verbs stay on the command line.
#![forbid(unsafe_code)]

mod args;
mod authority;
mod transport;

use args::*;
use authority::{not_allowed, Authority};
pub use authority::{Bounds, Config, Target};
use revl_core::api::Answer;
use revl_core::session::{Kept, ManifestSource};
use revl_core::{Code, Error, FileOp, Remedy, Session, StepBackMode, Store};
use revl_fleet::{Catalog, RemoteCache};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorCode, Implementation,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_handler, tool_router, ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

pub use transport::MAX_LINE;

/// What the server tells a client about using revl well (sent at `initialize`).
pub const INSTRUCTIONS: &str = "revl records every effect of this session on a step timeline so it can be rewound. \
Change the workspace only through revl's tools (paths are relative to the workspace); a change made any other way is not witnessed and a rewind does not restore it. There are two first-class ways: \
revl_exec {argv} runs a command (never through a shell) in a sandbox with no network, the host read-only and the workspace copy-on-write, and applies what it changed in the workspace as ONE step that a step-back or fork rewinds byte for byte: use it for builds, tests, formatters, code generators, `sed -i`, package installs, anything a shell command does; \
revl_write, revl_delete, revl_rename, revl_mkdir and revl_chmod each change one path exactly as asked, one step each. \
revl_read, revl_list, revl_timeline, revl_inspect_step, revl_status, revl_verify, revl_diff, revl_log and revl_sessions only read; revl_boundary marks a turn (do it each turn) and revl_provide holds a key for the session. \
revl_call calls a tool declared in the manifest, which may leave the machine (see held sends and emissions below). \
Before retrying something that went wrong, step back first: revl_step_back {to: K} (K from revl_timeline) puts the workspace back at step K; then try again. \
To explore an alternative from an earlier step, call revl_fork {at: K}, read its report (emissionsCrossed, wouldCrossOnRewind, unrestored and residue list what cannot be undone), and only then confirm with revl_fork_confirm {hash}; the server then continues on the branch. \
Calls to deferred tools are held sends: they have NOT been sent and will not arrive anywhere until revl_commit shows the plan and revl_commit_confirm {hash} fires them; never tell anyone they were delivered before that. \
Emissions (immediate sends) need a human's approval: when a call returns approvalRequired, ask the user to run `revl approve SESSION --ticket T` (or --tool NAME) in a terminal, then call again; you cannot approve yourself. \
The operator who started this server fixed its bounds (below): the manifest (the tools revl_call reaches and where revl_exec may connect), whether revl_exec may run unconfined on the host, and the directories revl_new and revl_fork_confirm {into} may use. A call outside them is refused with not-allowed and nothing runs: do not work around it; ask the user when you need more. \
A result with isError carries {error: {code, message, hint}}: follow the hint.";

/// The server: the store, the session it currently serves, and the tool table.
#[derive(Clone)]
pub struct RevlServer {
    store: Store,
    /// The id of the session tools act on; it moves to the branch after a fork confirm
    /// and to the new session after revl_new. The mutex also serialises the calls.
    current: Arc<Mutex<String>>,
    /// What the last call on a session left of it, for the next call's attach
    /// (docs/architecture.md, "Incremental attach"); used only for the session it was kept of.
    kept: Arc<Mutex<Option<Kept>>>,
    /// What the operator fixed at start; no call changes it.
    authority: Arc<Authority>,
    tool_router: ToolRouter<RevlServer>,
}

/// Serve `config.target` within `config`'s bounds over stdio until the client closes stdin.
/// Errors only at startup (a root that is not a directory, an unreadable manifest, a target
/// that cannot be resolved or created or whose manifest is not the server's, no runtime).
pub fn serve(store: Store, config: Config) -> Result<(), Error> {
    let (id, notice, authority) = authority::fix(&store, &config)?;
    let info = store.info(&id)?;
    let bounds = format!("revl mcp: bounds: {}", authority.describe());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| Error::io("cannot start the MCP runtime", e))?;
    let server = RevlServer::with_authority(store, id.clone(), authority);
    // The notices go to stderr once the client has completed the handshake, so a client that
    // never speaks MCP gets exactly one line: the error.
    let serving = format!(
        "revl mcp: serving session {id} ({}, workspace {}) on stdio",
        info.state.as_str(),
        info.workspace
    );
    let result = runtime.block_on(async move {
        let transport = transport::LineTransport::new(tokio::io::stdin(), tokio::io::stdout());
        match server.serve(transport).await {
            Ok(running) => {
                if let Some(n) = &notice {
                    eprintln!("{n}");
                }
                eprintln!("{serving}");
                eprintln!("{bounds}");
                running
                    .waiting()
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
            Err(e) => Err(e.to_string()),
        }
    });
    // Let a tool call that is still running on a blocking thread finish its verb (its WAL
    // records and its workspace change) before the process exits; the WAL would survive
    // the exit, but a finished verb needs no repair.
    runtime.shutdown_timeout(std::time::Duration::from_secs(30));
    match result {
        Ok(()) => {
            eprintln!("revl mcp: the client closed the connection");
            Ok(())
        }
        Err(e) => Err(Error::new(
            Code::Io,
            format!("the MCP connection for session {id} ended with an error: {e}"),
            "check that the client speaks MCP over stdio (newline-delimited JSON-RPC)",
        )),
    }
}

/// The live session whose workspace is `dir`, if any ([`Store::live_session_of`]).
pub fn live_session_of(store: &Store, dir: &Path) -> Result<Option<String>, Error> {
    store.live_session_of(dir)
}

/// A verb's document, and whether the verb refused with it (a stale hash, an approval
/// required): such a result goes out with `isError: true`.
struct Reply {
    doc: Value,
    refused: bool,
}

impl Reply {
    /// The answer's document with what attaching repaired.
    fn of<T: Answer>(r: &T, repaired: &[revl_core::session::Repaired]) -> Reply {
        Reply {
            doc: revl_core::api::with_repairs(r.document(), repaired),
            refused: r.refusal().is_some(),
        }
    }
}

/// Where a read tool finds its sessions: this store, or (with `remote`) the verified cache of
/// that remote of this store (docs/fleet.md, "Reading a remote").
fn catalog(store: &Store, remote: Option<&str>) -> Result<Box<dyn Catalog>, Error> {
    Ok(match remote {
        Some(name) => Box::new(RemoteCache::open(store, name)?),
        None => Box::new(store.clone()),
    })
}

/// The document as structured content and the same JSON as text.
fn result_of(r: Reply) -> CallToolResult {
    if r.refused {
        CallToolResult::structured_error(r.doc)
    } else {
        CallToolResult::structured(r.doc)
    }
}

/// A remedy in the words of this server's tools, within its bounds.
fn mcp_remedy(r: &Remedy, allow_unconfined: bool) -> String {
    match r {
        Remedy::ListSessions => "revl_sessions lists them".into(),
        Remedy::Timeline => "revl_timeline lists the steps".into(),
        Remedy::ListPath => "revl_list shows what is there".into(),
        Remedy::Status => "revl_status".into(),
        Remedy::NewSession => {
            "revl_new {workspace}, under a directory the operator allowed (--root)".into()
        }
        Remedy::PassArg(name) => format!("args: {{\"{name}\": ...}}"),
        Remedy::ArgsObject => "args: {\"name\": value, ...}".into(),
        Remedy::GiveStore => "start the server with --store DIR or REVL_STORE".into(),
        Remedy::GiveManifest => "the operator's --manifest FILE when starting revl mcp".into(),
        Remedy::GiveWorkspace => "the workspace argument".into(),
        Remedy::Unconfined if allow_unconfined => "revl_exec with unconfined: true".into(),
        Remedy::Unconfined => {
            "only the operator can allow unconfined: true (revl mcp --allow-unconfined)".into()
        }
    }
}

fn error_result_with(e: &Error, allow_unconfined: bool) -> CallToolResult {
    // The core's hint for an unavailable sandbox is to run unconfined: not a way out for an
    // agent whose operator did not allow it.
    let hint = if e.remedy == Some(Remedy::Unconfined) && !allow_unconfined {
        "tell the user: this machine cannot set up the sandbox (`revl doctor` says what it lacks) and this server refuses unconfined: true (only the operator can allow it, with revl mcp --allow-unconfined)".to_string()
    } else {
        e.hint_with(|r| mcp_remedy(r, allow_unconfined))
    };
    CallToolResult::structured_error(e.to_json_with_hint(&hint))
}

fn bad_args_result(tool: &str, why: &str) -> CallToolResult {
    error_result_with(
        &Error::bad_args(
            format!("bad arguments for {tool}: {why}"),
            "see the tool's input schema (tools/list) for the argument names and types",
        ),
        false,
    )
}

impl RevlServer {
    /// A server on `session` with the narrowest bounds: no root, no unconfined exec, and
    /// the session's own manifest.
    pub fn new(store: Store, session: String) -> Result<Self, Error> {
        let config = Config {
            target: Target::Session(session),
            manifest: None,
            bounds: Bounds::default(),
        };
        let (id, _, authority) = authority::fix(&store, &config)?;
        Ok(Self::with_authority(store, id, authority))
    }

    fn with_authority(store: Store, session: String, authority: Authority) -> Self {
        RevlServer {
            store,
            current: Arc::new(Mutex::new(session)),
            kept: Arc::new(Mutex::new(None)),
            authority: Arc::new(authority),
            tool_router: Self::tool_router(),
        }
    }

    fn error_result(&self, e: &Error) -> CallToolResult {
        error_result_with(e, self.authority.allow_unconfined)
    }

    /// The session the server currently acts on.
    pub fn current_session(&self) -> String {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Run `f` on a blocking thread, one call at a time. A panic becomes an error document,
    /// never a crash.
    async fn blocking<F>(&self, f: F) -> CallToolResult
    where
        F: FnOnce(&Store, &mut String) -> Result<Reply, Error> + Send + 'static,
    {
        let store = self.store.clone();
        let current = self.current.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let mut cur = current.lock().unwrap_or_else(PoisonError::into_inner);
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&store, &mut cur)))
        })
        .await;
        match joined {
            Ok(Ok(Ok(reply))) => result_of(reply),
            Ok(Ok(Err(e))) => self.error_result(&e),
            Ok(Err(_)) | Err(_) => self.error_result(&Error::new(
                Code::Io,
                "internal error while running the tool",
                "this is a bug in revl; the WAL is intact; report it with the call you made",
            )),
        }
    }

    /// Attach to the current session (lock, rebuild from the WAL, repair), run one verb,
    /// and drop the session so its lock is released before the result goes out.
    async fn on_session<F, T>(&self, f: F) -> CallToolResult
    where
        F: FnOnce(&mut Session) -> Result<T, Error> + Send + 'static,
        T: Answer,
    {
        let kept = self.kept.clone();
        self.blocking(move |store, cur| {
            let before = kept.lock().unwrap_or_else(PoisonError::into_inner).take();
            let mut s = store.attach_kept(cur, before)?;
            let doc = f(&mut s);
            let repaired = s.repairs().to_vec();
            // The lock is released before the result goes out; a verb that failed keeps
            // nothing (the next call reads the whole WAL).
            let after = if doc.is_ok() { s.keep() } else { None };
            *kept.lock().unwrap_or_else(PoisonError::into_inner) = after;
            doc.map(|d| Reply::of(&d, &repaired))
        })
        .await
    }

    /// Run a read verb on the session `a` names (this one by default), of this store or
    /// of a remote's verified cache, attached read-only.
    async fn on_read<F, T>(&self, a: SessionArgs, f: F) -> CallToolResult
    where
        F: FnOnce(&Session) -> Result<T, Error> + Send + 'static,
        T: Answer,
    {
        self.blocking(move |store, cur| {
            revl_fleet::reading(&*catalog(store, a.remote.as_deref())?, |c| {
                let id = c.session(a.session.as_deref().unwrap_or(cur))?;
                let s = c.store().attach_prefix(&id)?;
                f(&s).map(|d| Reply::of(&d, s.repairs()))
            })
        })
        .await
    }

    async fn effect(&self, op: FileOp) -> CallToolResult {
        self.on_session(move |s| s.file_effect(op)).await
    }
}

#[tool_router]
impl RevlServer {
    /// Create a new session on a workspace directory and continue on it (the server's later
    /// calls act on the new session). Operator-bounded: the directory must be one the
    /// operator named with --root when starting the server, or below one (else not-allowed;
    /// a server started without --root refuses every revl_new), and the session gets the
    /// server's manifest, fixed at start, never a revl.toml in the workspace. Refused when the
    /// workspace already has, or is nested in or around, a live session: commit or abort
    /// that one first.
    #[tool(
        name = "revl_new",
        annotations(
            title = "New session (in an operator's --root, with the server's manifest)",
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn revl_new(&self, Parameters(a): Parameters<NewArgs>) -> CallToolResult {
        let auth = self.authority.clone();
        self.blocking(move |store, cur| {
            if a.manifest.is_some() {
                return Err(not_allowed(
                    format!(
                        "revl_new takes no manifest: the operator fixed this server's manifest when starting it ({}), and every session it creates gets that one",
                        auth.manifest.origin
                    ),
                    "call revl_new {workspace} without `manifest`; a different manifest needs the operator (revl mcp --manifest FILE)",
                ));
            }
            let ws = auth.inside_roots(&a.workspace, "workspace")?;
            let s = store.new_session_from(
                &ws,
                ManifestSource::Fixed(auth.manifest.text.as_deref()),
                &[],
            )?;
            auth.admit_digest(s.id(), &s.state().manifest_digest)?;
            *cur = s.id().to_string();
            Ok(Reply::of(&revl_core::api::Created::of(&s), &[]))
        })
        .await
    }

    /// Write a file in the workspace: replaces it atomically (never through a link), keeps
    /// the mode of an existing file, creates missing parent directories. Recorded as a
    /// witnessed effect step that a step-back or fork rewinds exactly. Give `content`
    /// (text) or `contentBase64` (bytes); at most 16 MiB.
    #[tool(
        name = "revl_write",
        annotations(
            title = "Write file",
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = false
        )
    )]
    async fn revl_write(&self, Parameters(a): Parameters<WriteArgs>) -> CallToolResult {
        let content = match (a.content, a.content_base64) {
            (Some(c), None) => c.into_bytes(),
            (None, Some(b)) => match revl_core::workspace::unb64(&b) {
                Ok(bytes) => bytes,
                Err(e) => return self.error_result(&e),
            },
            _ => {
                return bad_args_result(
                    "revl_write",
                    "give exactly one of `content` (text) or `contentBase64` (base64 bytes)",
                )
            }
        };
        self.effect(FileOp::Write {
            path: a.path,
            content,
        })
        .await
    }

    /// Delete a file or a whole directory tree in the workspace. Recorded with its preimage:
    /// a step-back or fork puts it back.
    #[tool(
        name = "revl_delete",
        annotations(
            title = "Delete path",
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = false
        )
    )]
    async fn revl_delete(&self, Parameters(a): Parameters<PathArgs>) -> CallToolResult {
        self.effect(FileOp::Delete { path: a.path }).await
    }

    /// Rename a file or directory in the workspace (replaces an existing file target, whose
    /// content is kept as a preimage; refuses a non-empty directory target).
    #[tool(
        name = "revl_rename",
        annotations(
            title = "Rename path",
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = false
        )
    )]
    async fn revl_rename(&self, Parameters(a): Parameters<RenameArgs>) -> CallToolResult {
        self.effect(FileOp::Rename {
            from: a.from,
            to: a.to,
        })
        .await
    }

    /// Create a directory in the workspace, like `mkdir -p` (an existing directory is an
    /// error).
    #[tool(
        name = "revl_mkdir",
        annotations(
            title = "Make directory",
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn revl_mkdir(&self, Parameters(a): Parameters<PathArgs>) -> CallToolResult {
        self.effect(FileOp::Mkdir { path: a.path }).await
    }

    /// Change the mode of a path in the workspace (octal string, e.g. "755").
    #[tool(
        name = "revl_chmod",
        annotations(
            title = "Change mode",
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn revl_chmod(&self, Parameters(a): Parameters<ChmodArgs>) -> CallToolResult {
        let mode = match revl_core::workspace::parse_mode(&a.mode) {
            Ok(m) => m,
            Err(e) => return self.error_result(&e),
        };
        self.effect(FileOp::Chmod { path: a.path, mode }).await
    }

    /// Read a file of the workspace: {path, mode, content} (or contentBase64 for bytes that
    /// are not UTF-8). With `at`: the file as it was right after step `at` ran (kept even when
    /// a later rewind undid it); an error `absent` where it did not exist. Records nothing.
    #[tool(
        name = "revl_read",
        annotations(
            title = "Read file",
            read_only_hint = true,
            destructive_hint = false,
            open_world_hint = true
        )
    )]
    async fn revl_read(&self, Parameters(a): Parameters<ReadArgs>) -> CallToolResult {
        self.blocking(move |store, cur| {
            revl_fleet::reading(&*catalog(store, a.remote.as_deref())?, |c| {
                let id = c.session(a.session.as_deref().unwrap_or(cur))?;
                let s = c.store().attach(&id)?;
                let repaired = s.repairs().to_vec();
                match (a.at, &a.remote) {
                    (Some(k), _) => s.read_at(&a.path, k).map(|r| Reply::of(&r, &repaired)),
                    (None, None) => s
                        .workspace()
                        .read(&a.path)
                        .map(|r| Reply::of(&r, &repaired)),
                    (None, Some(_)) => Err(Error::new(
                        Code::BadArgs,
                        "a remote session is read as it was after a step: give `at`",
                        "call revl_read again with `at` (a step index from revl_timeline with the same `remote`)",
                    )),
                }
            })
        })
        .await
    }

    /// List a directory of the workspace (the root by default): {path, entries: [{name,
    /// kind, mode, size?}]}. Records nothing.
    #[tool(
        name = "revl_list",
        annotations(
            title = "List directory",
            read_only_hint = true,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn revl_list(&self, Parameters(a): Parameters<ListArgs>) -> CallToolResult {
        self.on_session(move |s| s.workspace().list(a.path.as_deref()))
            .await
    }

    /// Provide a session-scoped key/value that the runtime holds for you (a provision step;
    /// a rewind past it withdraws it, restoring the previous value).
    #[tool(
        name = "revl_provide",
        annotations(
            title = "Provide key",
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn revl_provide(&self, Parameters(a): Parameters<ProvideArgs>) -> CallToolResult {
        self.on_session(move |s| s.provide(&a.key, &a.value)).await
    }

    /// Mark an agent turn or iteration on the timeline (a boundary step: a good point to
    /// step back or fork to later).
    #[tool(
        name = "revl_boundary",
        annotations(
            title = "Mark boundary",
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn revl_boundary(&self, Parameters(a): Parameters<BoundaryArgs>) -> CallToolResult {
        self.on_session(move |s| s.boundary(a.label.as_deref()))
            .await
    }

    /// Call a tool declared in the session's manifest (the operator's, fixed when the
    /// server started; an agent cannot add tools), by its class: `deferred` is held (it
    /// is NOT sent until a confirmed commit); `emission` fires now and needs a human's
    /// approval first (a result with approvalRequired and a ticket: ask the user to run
    /// `revl approve`, then call again); `effect` runs and is recorded with its undo;
    /// `opaque` runs and is recorded as opaque (a fork over it is refused).
    #[tool(
        name = "revl_call",
        annotations(
            title = "Call declared tool (the operator's manifest)",
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = true
        )
    )]
    async fn revl_call(&self, Parameters(a): Parameters<CallArgs>) -> CallToolResult {
        let args = Value::Object(a.args.unwrap_or_default());
        self.on_session(move |s| s.call(&a.tool, args)).await
    }

    /// Run a command (never through a shell) in a sandbox: no network, the host read-only,
    /// the workspace copy-on-write. What it changed in the workspace is applied as ONE step
    /// that a fork or step-back rewinds byte for byte: {step, exitCode, signal?, timedOut,
    /// stdout, stderr, stdoutTruncated, stderrTruncated, changes, sandbox, netStep?, net?}.
    /// net: true (or a list of the manifest's [exec] net destinations) lets it reach those
    /// through revl's proxy, each connection recorded first (an emission step, netStep); the
    /// destinations are the operator's manifest's, never the agent's. unconfined: true runs
    /// it on the host, recorded as an opaque step (a fork refuses to cross it): {step,
    /// exitCode, stdout, stderr}; operator-bounded: refused (not-allowed, nothing runs)
    /// unless the operator started the server with --allow-unconfined.
    #[tool(
        name = "revl_exec",
        annotations(
            title = "Run command (sandboxed, rewindable; unconfined only if the operator allows)",
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = true
        )
    )]
    async fn revl_exec(&self, Parameters(a): Parameters<ExecArgs>) -> CallToolResult {
        if a.unconfined == Some(true) && !self.authority.allow_unconfined {
            return self.error_result(&not_allowed(
                "revl_exec with unconfined: true would run the command on the host, and the operator started this server without --allow-unconfined; nothing ran",
                "run it in the sandbox (leave out unconfined); only the operator can allow host commands (revl mcp --allow-unconfined)",
            ));
        }
        let timeout = match revl_core::ExecOptions::timeout_secs(a.timeout) {
            Ok(t) => t,
            Err(e) => return self.error_result(&e),
        };
        let o = revl_core::ExecOptions {
            argv: a.argv,
            timeout,
            cwd: a.cwd,
            unconfined: a.unconfined.unwrap_or(false),
            output: None,
            limits: match revl_core::ExecLimits::parse(
                a.memory.as_deref(),
                a.pids,
                a.cpu_seconds,
                a.max_bytes.as_deref(),
            ) {
                Ok(l) => l,
                Err(e) => return self.error_result(&e),
            },
            net: args::NetArg::request(a.net),
            ..Default::default()
        };
        self.on_session(move |s| s.exec_with(&o)).await
    }

    /// The session's steps: {session, state, head, torn, steps[], accumulated, guarantee}.
    #[tool(
        name = "revl_timeline",
        annotations(
            title = "Timeline",
            read_only_hint = true,
            destructive_hint = false,
            open_world_hint = true
        )
    )]
    async fn revl_timeline(&self, Parameters(a): Parameters<SessionArgs>) -> CallToolResult {
        if a.remote.is_none() && a.session.is_none() {
            return self.on_session(|s| Ok(s.timeline())).await;
        }
        self.on_read(a, |s| Ok(s.timeline())).await
    }

    /// What holds at step `at`: its label, the active provisions, the accumulated effects,
    /// the steps ahead of it and the emissions so far.
    #[tool(
        name = "revl_inspect_step",
        annotations(
            title = "Inspect step",
            read_only_hint = true,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn revl_inspect_step(&self, Parameters(a): Parameters<AtArgs>) -> CallToolResult {
        self.on_session(move |s| s.inspect(a.at)).await
    }

    /// The session's state (live, frozen, committed, aborted), workspace, head, provisions,
    /// held sends (queue) and owed entries; a branch shows its parent, a frozen parent its
    /// branch.
    #[tool(
        name = "revl_status",
        annotations(
            title = "Status",
            read_only_hint = true,
            destructive_hint = false,
            open_world_hint = true
        )
    )]
    async fn revl_status(&self, Parameters(a): Parameters<SessionArgs>) -> CallToolResult {
        if a.remote.is_none() && a.session.is_none() {
            return self.on_session(|s| Ok(s.status())).await;
        }
        self.on_read(a, |s| Ok(s.status())).await
    }

    /// Report witnessed paths whose bytes, mode or kind no longer match what revl recorded
    /// (changes made outside revl are not witnessed and a rewind does not restore them).
    #[tool(
        name = "revl_verify",
        annotations(
            title = "Verify workspace",
            read_only_hint = true,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn revl_verify(&self) -> CallToolResult {
        self.on_session(|s| s.verify()).await
    }

    /// List the sessions of the store: {sessions: [{session, state, workspace, head,
    /// parent?}]}.
    #[tool(
        name = "revl_sessions",
        annotations(
            title = "Sessions",
            read_only_hint = true,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn revl_sessions(&self) -> CallToolResult {
        self.blocking(|store, _| store.sessions().map(|r| Reply::of(&r, &[])))
            .await
    }

    /// Rewind the session to step `to`: undo the steps above it, newest first. Mode
    /// "scoped" (default) runs only host-confined inverses and provision withdrawals and
    /// never crosses; "compensating" also runs compensations and outbound undos (they
    /// cross); "force" does so even over emissions without compensation. Held sends queued
    /// after step `to` are dropped. The report lists what ran and what could not be undone.
    #[tool(
        name = "revl_step_back",
        annotations(
            title = "Step back",
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = true
        )
    )]
    async fn revl_step_back(&self, Parameters(a): Parameters<StepBackArgs>) -> CallToolResult {
        let mode = match a.mode.unwrap_or_default() {
            StepBackModeArg::Scoped => StepBackMode::Scoped,
            StepBackModeArg::Compensating => StepBackMode::Compensating { force: false },
            StepBackModeArg::Force => StepBackMode::Compensating { force: true },
        };
        let drift = revl_core::DriftPolicy::keeping(a.keep_drift);
        self.on_session(move |s| s.step_back_with(a.to, mode, drift))
            .await
    }

    /// Enumerate a fork at step `at` without changing any file: the report says what would
    /// be rewound, which emissions already crossed and cannot be undone (emissionsCrossed),
    /// what would cross on a rewind and is therefore not run, what cannot be restored, the
    /// held sends that would be dropped, and the residue. Read it, then confirm with
    /// revl_fork_confirm and its `hash`.
    #[tool(
        name = "revl_fork",
        annotations(
            title = "Fork (enumerate)",
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn revl_fork(&self, Parameters(a): Parameters<AtArgs>) -> CallToolResult {
        self.on_session(move |s| s.fork(a.at)).await
    }

    /// The paths whose content differs between two sessions' workspaces (e.g. sibling
    /// branches of a parallel fork), each side now or right after a step (`ID@K`):
    /// {left, right, paths: [{path, left, right, diff?}]} with unified diffs for text files.
    #[tool(
        name = "revl_diff",
        annotations(
            title = "Diff two sessions",
            read_only_hint = true,
            destructive_hint = false,
            open_world_hint = true
        )
    )]
    async fn revl_diff(&self, Parameters(a): Parameters<DiffArgs>) -> CallToolResult {
        self.blocking(move |store, cur| {
            revl_fleet::reading(&*catalog(store, a.remote.as_deref())?, |c| {
                let left = c.point(a.left.as_deref().unwrap_or(cur))?;
                let right = c.point(&a.right)?;
                let report =
                    revl_core::session::diff::diff_in(c.store(), &left, &right, a.path.as_deref())?;
                Ok(Reply::of(&report, &[]))
            })
        })
        .await
    }

    /// The lineage tree of this session's family (its root and every branch below it),
    /// read from the WALs without waiting for any lock: {sessions: [{session, state, head,
    /// workspace, parent?, at?, mode?, residueClean?, residueForks?, checkpoints, queued,
    /// pendingApprovals}], edges: [{parent, branch, at, mode}]}. residueClean is false when
    /// the fork that made a branch, or any fork above it, left something out in the world.
    #[tool(
        name = "revl_log",
        annotations(
            title = "Lineage log",
            read_only_hint = true,
            destructive_hint = false,
            open_world_hint = true
        )
    )]
    async fn revl_log(&self, Parameters(a): Parameters<SessionArgs>) -> CallToolResult {
        self.blocking(move |store, cur| {
            revl_fleet::reading(&*catalog(store, a.remote.as_deref())?, |c| {
                // This store: this session's family by default; a remote: all its sessions.
                let given = a
                    .session
                    .as_deref()
                    .or(a.remote.is_none().then_some(cur.as_str()));
                let listing = c.listing(given)?;
                let report = revl_core::log::log(c.store(), listing.session.as_deref())?;
                let mut reply = Reply::of(&report, &[]);
                if !listing.unreadable.is_empty() {
                    reply.doc["unreadable"] = revl_core::report::to_json(&listing.unreadable);
                }
                Ok(reply)
            })
        })
        .await
    }

    /// Perform the fork enumerated by revl_fork: rewind the host-confined state to step k
    /// (no inverse that could leave the machine runs), drop every held send, freeze this
    /// session and continue on the new branch: the server's later calls act on the branch.
    /// With `into` (a new or empty directory), the fork is parallel: the branch gets that
    /// directory at step k's content, this session stays live and untouched, and the server
    /// keeps serving it (the report names the branch). Operator-bounded: `into` must be a
    /// directory the operator named with --root when starting the server, or below one
    /// (else not-allowed, nothing changes). A stale hash is refused (enumerate again).
    #[tool(
        name = "revl_fork_confirm",
        annotations(
            title = "Fork (confirm; `into` only in an operator's --root)",
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = true
        )
    )]
    async fn revl_fork_confirm(
        &self,
        Parameters(a): Parameters<ForkConfirmArgs>,
    ) -> CallToolResult {
        let auth = self.authority.clone();
        self.blocking(move |store, cur| {
            // Checked before attaching: a refused `into` changes nothing, not even a repair.
            let into = match &a.into {
                Some(into) => Some(auth.inside_roots(into, "into")?),
                None => None,
            };
            let mut s = store.attach(cur)?;
            let repaired = s.repairs().to_vec();
            let drift = revl_core::DriftPolicy::keeping(a.keep_drift);
            if let Some(into) = &into {
                let doc = s.fork_confirm_with(&a.hash, Some(into), drift)?;
                return Ok(Reply::of(&doc, &repaired));
            }
            let doc = s.fork_confirm_with(&a.hash, None, drift)?;
            drop(s);
            if let (true, Some(branch)) = (doc.forked, &doc.branch) {
                // A branch inherits its parent's manifest; the check holds the rule anyway.
                auth.admit(store, branch)?;
                eprintln!("revl mcp: forked; now serving branch {branch} (parent {cur} is frozen)");
                *cur = branch.clone();
            }
            Ok(Reply::of(&doc, &repaired))
        })
        .await
    }

    /// The commit plan: the held sends that a commit would fire (FIFO) and the witnessed
    /// steps it would keep, with the `hash` to confirm. Nothing fires.
    #[tool(
        name = "revl_commit",
        annotations(
            title = "Commit (plan)",
            read_only_hint = true,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn revl_commit(&self) -> CallToolResult {
        self.on_session(|s| s.commit()).await
    }

    /// Commit: fire every held send once, in order, and close the session (it takes no more
    /// effects). Needs the `hash` of the current plan from revl_commit; a stale hash fires
    /// nothing.
    #[tool(
        name = "revl_commit_confirm",
        annotations(
            title = "Commit (confirm)",
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = true
        )
    )]
    async fn revl_commit_confirm(&self, Parameters(a): Parameters<HashArgs>) -> CallToolResult {
        self.on_session(move |s| s.commit_confirm(&a.hash)).await
    }

    /// Abort the session: drop every held send and run every remaining inverse, newest
    /// first (declared compensations fire too). The session takes no more effects.
    #[tool(
        name = "revl_abort",
        annotations(
            title = "Abort session",
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = true
        )
    )]
    async fn revl_abort(&self) -> CallToolResult {
        self.on_session(|s| s.abort()).await
    }

    /// Record which model answered at a step and what it cost (no prompt or response text
    /// is ever recorded).
    #[tool(
        name = "revl_note_model",
        annotations(
            title = "Note model decision",
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn revl_note_model(&self, Parameters(a): Parameters<NoteModelArgs>) -> CallToolResult {
        let args = match serde_json::to_value(&a) {
            Ok(v) => v,
            Err(e) => return bad_args_result("revl_note_model", &e.to_string()),
        };
        self.on_session(move |s| s.note_model(&args)).await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for RevlServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("revl", env!("CARGO_PKG_VERSION"))
                    .with_title("revl: branch and rewind agent sessions"),
            )
            .with_instructions(format!(
                "{INSTRUCTIONS} This server's bounds: {}.",
                self.authority.describe()
            ))
    }

    /// Route a call; an argument that does not fit the tool's schema becomes the error
    /// document (docs/reference.md, "Errors and exit codes") with code `bad-args` (a tool
    /// result with isError), and an unknown tool name a JSON-RPC `-32602` error naming the
    /// tools there are.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        if !self.tool_router.has_route(&name) {
            let mut names: Vec<String> = self
                .tool_router
                .list_all()
                .into_iter()
                .map(|t| t.name.to_string())
                .collect();
            names.sort();
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool {name:?}; revl's tools are {}",
                    names.join(", ")
                ),
                None,
            ));
        }
        let ctx = ToolCallContext::new(self, request, context);
        match self.tool_router.call(ctx).await {
            Ok(CallToolResponse::Complete(r))
                if r.is_error == Some(true) && r.structured_content.is_none() =>
            {
                let text = r
                    .content
                    .first()
                    .and_then(|c| c.as_text())
                    .map(|t| t.text.clone())
                    .unwrap_or_default();
                let why = text
                    .strip_prefix("failed to deserialize parameters: ")
                    .unwrap_or(&text);
                Ok(bad_args_result(&name, why).into())
            }
            Ok(other) => Ok(other),
            Err(e) if e.code == ErrorCode::INVALID_PARAMS => {
                Ok(bad_args_result(&name, &e.message).into())
            }
            Err(e) => Err(e),
        }
    }
}
