//! `exec` (docs/architecture.md, "The exec sandbox"): a command in the sandbox, its change
//! set applied as ONE witnessed step through the intent protocol; or, `--unconfined`, on
//! the host as an opaque step (v1).
//!
//! Records, in order: `intent {kind: "effect", site: "exec"}` once the command is running
//! (no undo: the real workspace does not change while it runs; a crash now is repaired by
//! `intent-void`); after it ends and its change set is read, a second `intent` for the same
//! step with every preimage (durable first) and the intended post-images; the changes; the
//! `step`. A crash between the second intent and the step is repaired all forward (every
//! post-image shows) or all back (every preimage restored), never half.

use super::Session;
use crate::changeset::{self, How};
use crate::error::{Code, Error, Remedy, Result};
use crate::report::ExecReport;
use crate::undo::{EffectDetail, ExecDetail, IntentAfter, Undo};
use crate::wal::Record;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The default timeout of a sandboxed command (docs/user-guide.md, "Shell commands: `revl exec`").
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Above this many files to make durable, one `syncfs` of the scratch filesystem is cheaper
/// than an `fsync` each.
const SYNCFS_OVER: usize = 64;

/// What `exec` runs, and how.
#[derive(Debug, Clone, Default)]
pub struct ExecOptions {
    pub argv: Vec<String>,
    /// Default [`DEFAULT_TIMEOUT`]; the whole process tree is killed when it expires.
    pub timeout: Option<Duration>,
    /// The working directory, relative to the workspace.
    pub cwd: Option<String>,
    /// Run on the host, recorded as an opaque step (a fork refuses to cross it).
    pub unconfined: bool,
    /// Also given the command's stdout and stderr while it runs, whole (the report keeps
    /// them capped, head and tail): `revl exec` in a terminal streams them to its own.
    pub output: Option<crate::proc::OutputSink>,
    /// `--memory`, `--pids`, `--cpu-seconds`, `--max-bytes` (docs/security.md).
    pub limits: ExecLimits,
    /// `--net` / `--net=DEST` (docs/user-guide.md §8): what of the manifest's `[exec] net`
    /// the command may reach through revl's proxy. Default: no network.
    pub net: crate::egress::NetRequest,
    /// Give the command a pipe to tell its caller something on (its descriptor number in
    /// `REVL_NOTE_FD`; docs/agents.md): what it wrote there (up to 4 KiB) is the report's
    /// `note`. An agent's shell wrapper writes the directory it ended in.
    pub note: bool,
    /// The agent call this command is (docs/agents.md): recorded in the step's detail.
    pub origin: Option<crate::agent::Origin>,
}

/// The default `--pids` (docs/security.md).
pub const DEFAULT_PIDS: u64 = 4096;
/// The default `--max-bytes`: 16 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 16 << 30;

/// An exec's resource limits (docs/security.md); `None` is the default (`pids` 4096, `max_bytes`
/// 16 GiB, memory and CPU unlimited).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecLimits {
    /// Bytes of address space per process (`RLIMIT_AS`): an allocation past it fails.
    pub memory: Option<u64>,
    /// Processes (and threads) the command may have at once: a fork past it fails.
    pub pids: Option<u64>,
    /// CPU seconds per process (`RLIMIT_CPU`): SIGXCPU, then SIGKILL.
    pub cpu_seconds: Option<u64>,
    /// What the change set may add (the bytes of the files the command wrote): past it the
    /// command is stopped, nothing is applied, `limit-exceeded`.
    pub max_bytes: Option<u64>,
}

impl ExecLimits {
    /// From the CLI's or MCP's words: SIZE is bytes or with a K/M/G suffix (powers of 1024).
    pub fn parse(
        memory: Option<&str>,
        pids: Option<u64>,
        cpu_seconds: Option<u64>,
        max_bytes: Option<&str>,
    ) -> Result<ExecLimits> {
        let positive = |what: &str, n: Option<u64>| match n {
            Some(0) => Err(Error::bad_args(
                format!("{what} 0 is not a positive number"),
                format!("give a positive {what}, or leave it out for the default"),
            )),
            n => Ok(n),
        };
        Ok(ExecLimits {
            memory: positive(
                "memory",
                memory.map(|m| parse_size("memory", m)).transpose()?,
            )?,
            pids: positive("pids", pids)?,
            cpu_seconds: positive("cpu-seconds", cpu_seconds)?,
            max_bytes: positive(
                "max-bytes",
                max_bytes.map(|m| parse_size("max-bytes", m)).transpose()?,
            )?,
        })
    }

    pub fn pids_or_default(&self) -> u64 {
        self.pids.unwrap_or(DEFAULT_PIDS)
    }

    pub fn max_bytes_or_default(&self) -> u64 {
        self.max_bytes.unwrap_or(DEFAULT_MAX_BYTES)
    }
}

/// `SIZE`: bytes, or a number with a K, M or G suffix (powers of 1024).
pub fn parse_size(what: &str, s: &str) -> Result<u64> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 1u64 << 10),
        Some((i, 'M' | 'm')) => (&t[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| {
            Error::bad_args(
                format!("{what} {s:?} is not a size"),
                "give bytes, or a number with K, M or G (powers of 1024), e.g. 512M",
            )
        })
}

impl ExecOptions {
    /// A timeout given in seconds (CLI `--timeout`, MCP `timeout`): positive and finite.
    pub fn timeout_secs(secs: Option<f64>) -> Result<Option<Duration>> {
        match secs {
            Some(t) if !(t.is_finite() && t > 0.0 && t <= 1e9) => Err(Error::bad_args(
                format!("timeout {t} is not a positive number of seconds"),
                "give the seconds the command may run, e.g. 60",
            )),
            t => Ok(t.map(Duration::from_secs_f64)),
        }
    }

    pub fn new(argv: &[String]) -> ExecOptions {
        ExecOptions {
            argv: argv.to_vec(),
            ..ExecOptions::default()
        }
    }
}

/// Every entry of `dir` (which holds the workspace `ws`) but the one on the way down to
/// `ws`, recursively: what the sandbox masks of a store or remote that holds the workspace.
/// A symbolic link is left out (the mask would fall where it leads, outside `dir`).
#[cfg(target_os = "linux")]
fn around(dir: &Path, ws: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    if dir == ws {
        return Ok(());
    }
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir.display(), e))?;
    for e in rd {
        let e = e.map_err(|e| Error::io(dir.display(), e))?;
        let p = e.path();
        if ws.starts_with(&p) {
            around(&p, ws, out)?;
        } else if !e.file_type().is_ok_and(|t| t.is_symlink()) {
            out.push(p);
        }
    }
    Ok(())
}

fn unavailable(why: &crate::sandbox::Unavailable) -> Error {
    let fix = crate::doctor::refusal_fix(why.stage, crate::doctor::is_root())
        .map(|f| format!("; fix: {f}"))
        .unwrap_or_default();
    Error::new(
        Code::SandboxUnavailable,
        format!("the exec sandbox cannot be set up here: {why}{fix}"),
        "run the command unconfined (recorded as an opaque step that a fork cannot cross); `revl doctor` says what this machine lacks",
    )
    .with_remedy(Remedy::Unconfined)
}

impl Session {
    /// The scratch directory of this session's exec: in the store, never in the workspace.
    pub(super) fn exec_scratch(&self) -> PathBuf {
        self.store.root().join("scratch").join(&self.id)
    }

    /// Where this session's last exec left its scratch once the step was recorded: the
    /// inodes its apply replaced (docs/architecture.md, "The exec sandbox"), freed while the
    /// next command runs rather than in the step's own time.
    pub(super) fn exec_spent(&self) -> PathBuf {
        self.store
            .root()
            .join("scratch")
            .join(format!("{}.spent", self.id))
    }

    /// `exec -- ARGV` with the defaults (sandboxed, workspace root, 600 s).
    pub fn exec(&mut self, argv: &[String]) -> Result<ExecReport> {
        self.exec_with(&ExecOptions::new(argv))
    }

    /// `exec [--timeout S] [--cwd REL] [--unconfined] -- ARGV`.
    pub fn exec_with(&mut self, o: &ExecOptions) -> Result<ExecReport> {
        self.require_live()?;
        if o.argv.is_empty() || o.argv[0].is_empty() {
            return Err(Error::bad_args(
                "exec needs a command",
                "give the program to run and its arguments",
            ));
        }
        if let Some(i) = o.argv.iter().position(|a| a.contains('\0')) {
            return Err(Error::bad_args(
                format!("argument {i} of the command holds a NUL byte: nothing ran"),
                "a program's arguments cannot contain NUL; pass such data in a file or through stdin",
            ));
        }
        let cwd_rel = match o.cwd.as_deref() {
            None | Some("") | Some(".") => String::new(),
            Some(c) => self.ws.confine(c, true)?,
        };
        let cwd = self.ws.abs(&cwd_rel);
        if !cwd.is_dir() {
            return Err(if cwd_rel.is_empty() {
                Error::new(
                    Code::Io,
                    format!(
                        "the workspace {} is not a directory (was it removed?)",
                        cwd.display()
                    ),
                    "restore the workspace directory, or abort the session",
                )
            } else {
                Error::bad_args(
                    format!("the working directory {cwd_rel} is not a directory in the workspace"),
                    "give a directory inside the workspace, relative to its root",
                )
                .with_remedy(Remedy::ListPath)
            });
        }
        // The network asked for must be inside the declared set: else nothing runs.
        let allowed = match &o.net {
            crate::egress::NetRequest::None => Vec::new(),
            req => {
                if o.unconfined {
                    return Err(Error::bad_args(
                        "--net is for the sandbox; --unconfined runs the command on the host, with the host's whole network",
                        "drop --unconfined to run in the sandbox with declared egress, or drop --net",
                    ));
                }
                crate::egress::requested(&self.manifest()?.exec.net, req)?
            }
        };
        // A command may move, copy or link a file whose in-place write is not fsynced yet:
        // those writes are made durable in their files first (repair redoes by path).
        self.settle(true)?;
        if o.unconfined {
            return self.exec_unconfined(o, &cwd);
        }
        #[cfg(target_os = "linux")]
        {
            self.exec_sandboxed(o, &cwd_rel, &cwd, allowed)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = allowed;
            Err(unavailable(&crate::sandbox::Unavailable {
                stage: None,
                why: "the sandbox needs Linux namespaces and overlayfs".into(),
            }))
        }
    }

    #[cfg(target_os = "linux")]
    fn exec_sandboxed(
        &mut self,
        o: &ExecOptions,
        cwd_rel: &str,
        cwd: &Path,
        allowed: Vec<crate::egress::Dest>,
    ) -> Result<ExecReport> {
        use crate::sandbox::{self, Failure};
        let step = self.journal.state.next_index();
        let scratch = self.exec_scratch();
        let root = self.ws.root().to_path_buf();
        if scratch.starts_with(&root) || root.starts_with(&scratch) {
            return Err(unavailable(&crate::sandbox::Unavailable {
                stage: None,
                why: format!(
                    "the store's scratch directory {} and the workspace {} overlap (an overlay layer cannot lie inside another)",
                    scratch.display(),
                    root.display()
                ),
            }));
        }
        let _ = crate::workspace::remove_any(&scratch);
        // The last exec's spent scratch is freed while this command runs: started once the
        // command is (the sandbox's set-up does not wait behind it), joined before the
        // change set is read, so at most one exec's worth ever waits.
        let spent = self.exec_spent();
        let mut spent_left = spent.exists().then_some(spent);
        let mut freeing = None;
        // The upper layer lives here while the command runs: a setuid file it makes must be
        // out of every other user's reach (docs/security.md), whatever modes were there.
        let scratch_root = self.store.root().join("scratch");
        crate::store::private_dir(&scratch_root)
            .and_then(|()| crate::store::private_dir(&scratch))
            .map_err(|e| {
                Error::io(
                    format!(
                        "cannot make {} private to revl's user (mode 0700)",
                        scratch.display()
                    ),
                    e,
                )
            })?;
        let label = exec_label(&o.argv, None, o.origin.as_ref());
        let mut env = vec![
            ("REVL_SESSION".to_string(), self.id.clone()),
            ("REVL_STEP".to_string(), step.to_string()),
        ];
        let net = !allowed.is_empty();
        if net {
            let url = format!("http://{}", crate::egress::PROXY_ADDR);
            for k in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
                env.push((k.to_string(), url.clone()));
                env.push((k.to_ascii_lowercase(), url.clone()));
            }
            env.push(("NO_PROXY".to_string(), String::new()));
            env.push(("no_proxy".to_string(), String::new()));
        }
        let listener = std::sync::Mutex::new(None);
        let (hide, from_manifest) = self.hidden_from_exec(&root)?;
        let spec = sandbox::Spec {
            argv: &o.argv,
            workspace: &root,
            cwd,
            env: &env,
            timeout: Some(o.timeout.unwrap_or(DEFAULT_TIMEOUT)),
            scratch: &scratch,
            hide: &hide,
            limits: sandbox::Limits {
                memory: o.limits.memory,
                pids: o.limits.pids_or_default(),
                cpu_seconds: o.limits.cpu_seconds,
                max_bytes: o.limits.max_bytes_or_default(),
            },
            net_listener: net.then_some(&listener),
            note: o.note,
        };
        let intent = Record::Intent {
            step,
            kind: "effect".into(),
            label: label.clone(),
            site: "exec".into(),
            undo: None,
            preimage: None,
            after: None,
            redo: None,
            // With egress, a crash mid-connection leaves an emission to record: its command.
            argv: net.then(|| o.argv.clone()),
        };
        let mut wal_error = None;
        // While the command runs, the proxy's threads append to the WAL (each `net-connect`
        // durable before its connection opens): the journal (writer and state) is theirs
        // until it ends, and each of their records passes the state check first.
        type Shared = std::sync::Arc<std::sync::Mutex<Option<(super::journal::Lent, usize)>>>;
        let lent: Shared = Default::default();
        let mut proxy = None;
        let outcome = sandbox::run_to(
            &spec,
            &mut || {
                if let Some(spent) = spent_left.take() {
                    freeing = Some(std::thread::spawn(move || {
                        let _ = crate::workspace::remove_any(&spent);
                    }));
                }
                self.append(intent.clone(), true).map_err(|e| {
                    let io = std::io::Error::other(e.message.clone());
                    wal_error = Some(e);
                    io
                })?;
                if !net {
                    return Ok(());
                }
                let fd = listener
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take()
                    .ok_or_else(|| std::io::Error::other("no egress listener"))?;
                let journal = self.lend().map_err(|e| {
                    let io = std::io::Error::other(e.message.clone());
                    wal_error = Some(e);
                    io
                })?;
                let before = journal.state().net.len();
                *lent.lock().unwrap_or_else(|p| p.into_inner()) = Some((journal, before));
                let l2 = lent.clone();
                let sink: crate::egress::proxy::Sink = std::sync::Arc::new(move |rec| {
                    let mut g = l2.lock().unwrap_or_else(|p| p.into_inner());
                    let (journal, _) = g.as_mut().ok_or("the exec has ended")?;
                    journal.append(rec, true)
                });
                proxy = Some(crate::egress::proxy::Proxy::start(
                    fd,
                    allowed.clone(),
                    step,
                    sink,
                )?);
                Ok(())
            },
            o.output.clone(),
        );
        // The command has ended: the proxy stops; the journal comes back with what it wrote,
        // and what the proxy did is what those records say.
        let finished = proxy.take().map(|p| p.finish());
        let mut written = Vec::new();
        if let Some((journal, before)) = lent.lock().unwrap_or_else(|p| p.into_inner()).take() {
            written = journal.state().net[before..].to_vec();
            self.take_back(journal);
        }
        let summary =
            finished.map(|f| f.map(|()| crate::egress::NetSummary::from_records(&written)));
        let summary = match summary {
            Some(Ok(s)) => Some(s),
            Some(Err(e)) => {
                let _ = crate::workspace::remove_any(&scratch);
                return Err(Error::new(
                    Code::Io,
                    format!("the egress proxy could not record a connection: {e}"),
                    "run the command again: revl re-reads the WAL and repairs before writing",
                ));
            }
            None if net => Some(crate::egress::NetSummary::default()),
            None => None,
        };
        // A connection was forwarded: the crossing is recorded whatever happens to the files.
        // One whose outbound connect failed carried nothing (its records say so).
        let crossed = summary
            .as_ref()
            .is_some_and(|s| s.reached().next().is_some());
        let net_step = if crossed {
            self.net_emission(step, &o.argv, summary.as_ref().expect("crossed"))?;
            Some(step)
        } else {
            None
        };
        let step = if crossed { step + 1 } else { step };
        let denied = match (&summary, crossed) {
            (Some(s), false) => s.denied.clone(),
            _ => Vec::new(),
        };
        let outcome = match outcome {
            Ok(o) => o,
            Err(f) => {
                let _ = crate::workspace::remove_any(&scratch);
                return Err(match f {
                    Failure::Unavailable(why) => unavailable(&why),
                    Failure::CannotHide { index, why } => {
                        let path = crate::util::visible(&hide[index].to_string_lossy(), false);
                        if index >= from_manifest {
                            Error::new(
                                Code::BadManifest,
                                format!("[exec] hide: {path} cannot be hidden from the command ({why}); nothing ran"),
                                "fix the manifest's [exec] hide: list files and directories the command could read, none holding the workspace (docs/security.md)",
                            )
                        } else {
                            Error::new(
                                Code::SandboxUnavailable,
                                format!("{path} (revl's store or a file:// remote) cannot be hidden from the command ({why}); nothing ran"),
                                "keep the store and file:// remotes out of the workspace's ancestors, where revl can mask them (docs/security.md)",
                            )
                        }
                    }
                    Failure::LimitExceeded(why) => {
                        self.void(step, &format!("stopped: {why}"))?;
                        Error::new(
                            Code::LimitExceeded,
                            format!("the command was stopped and nothing was applied: {why}"),
                            "give a larger --max-bytes, or make the command write less",
                        )
                    }
                    Failure::NotStarted(e) => Error::new(
                        Code::ExecFailed,
                        format!("could not start {}: {e}", o.argv[0]),
                        if e.raw_os_error() == Some(libc::ENOEXEC) {
                            // `execvp` would have run it with /bin/sh; revl runs a command
                            // never through a shell.
                            "a script needs a `#!` line naming its interpreter: add one, or run it with its interpreter (`sh SCRIPT`)"
                        } else {
                            "check the program name and that it is executable (the sandbox shows the host's files read-only; PATH is yours)"
                        },
                    ),
                    Failure::Started(e) => match wal_error.take() {
                        Some(w) => w,
                        None => {
                            self.void(step, &format!("waiting for the command failed: {e}"))?;
                            Error::io("waiting for the sandboxed command", e)
                        }
                    },
                });
            }
        };
        if let Some(t) = freeing {
            let _ = t.join();
        }
        self.fp.point("exec.after-run");
        let result = self.apply_changes(step, o, cwd_rel, &outcome, denied);
        // What the apply replaced sits in the upper layer now: one rename sets it aside,
        // and the next exec frees it while its command runs.
        let spent = self.exec_spent();
        if spent.exists() {
            let _ = crate::workspace::remove_any(&spent);
        }
        if std::fs::rename(&scratch, &spent).is_err() {
            let _ = crate::workspace::remove_any(&scratch);
        }
        let changes = result?;
        let (limit, pids_limit) = (outcome.limit, outcome.pids_limit);
        let note = outcome.note;
        let ran = outcome.ran;
        Ok(ExecReport {
            step,
            exit_code: ran.code,
            stdout: String::from_utf8_lossy(&ran.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&ran.stderr).into_owned(),
            sandboxed: Some(crate::report::Sandboxed {
                signal: ran.signal,
                timed_out: ran.timed_out,
                interrupted: ran.interrupted,
                limit,
                pids_limit: (pids_limit != "cgroup").then_some(pids_limit),
                stdout_truncated: ran.stdout_truncated,
                stderr_truncated: ran.stderr_truncated,
                changes,
                sandbox: true,
                net_step,
                net: summary,
                note,
            }),
        })
    }

    /// What the sandbox masks: the store (every session's WAL, blobs and scratch) and each
    /// `file://` remote's directory (every pushed session), or, when one holds the
    /// workspace, everything in it but the way down to the workspace; then the manifest's
    /// `[exec] hide`, from the index returned on.
    #[cfg(target_os = "linux")]
    fn hidden_from_exec(&self, ws: &Path) -> Result<(Vec<PathBuf>, usize)> {
        let mut hide = Vec::new();
        let mut dirs = vec![self.store.root().to_path_buf()];
        dirs.extend(self.store.file_remote_dirs()?);
        for d in dirs {
            // Absent (a remote not pushed to yet): nothing to hide.
            let Ok(d) = d.canonicalize() else { continue };
            if ws.starts_with(&d) {
                around(&d, ws, &mut hide)?;
            } else {
                hide.push(d);
            }
        }
        let from_manifest = hide.len();
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from);
        let listed = self.manifest()?.exec.hide_paths(home.as_deref()).map_err(|h| {
            Error::new(
                Code::BadManifest,
                format!("[exec] hide: {h} cannot be hidden from the command (HOME is not set, so ~/ names nothing); nothing ran"),
                "set HOME, or list the path absolute in the manifest's [exec] hide (docs/security.md)",
            )
        })?;
        hide.extend(listed);
        Ok((hide, from_manifest))
    }

    /// The emission of an exec whose proxy opened at least one connection (docs/user-guide.md §8):
    /// label `exec.net <argv0>`, site `exec`, scope `{"caps": ["net"]}`.
    pub(super) fn net_emission(
        &mut self,
        step: u64,
        argv: &[String],
        net: &crate::egress::NetSummary,
    ) -> Result<()> {
        let seq = self.take_seq()?;
        let key = format!("{}-{seq}", self.id);
        let label = crate::egress::net_label(argv);
        let detail = json!({
            "key": key,
            "service": "exec",
            "method": "net",
            "args": {"argv": argv},
            "connections": net.connections,
            "denied": net.denied,
        });
        let mut rec = crate::wal::StepRecord::new(
            seq,
            step,
            crate::step::StepKind::Emission,
            &label,
            "exec",
            &detail,
        )?;
        rec.set_scope(Some(&json!({"caps": ["net"]})))?;
        rec.set_ts(Some(&crate::util::now_rfc3339()))?;
        self.append(Record::Step(rec), true)
    }

    /// Close the open intent of `step` as never a step. Nothing to do when no intent of
    /// `step` is open (an exec whose emission took the index: its effect's intent comes
    /// later).
    fn void(&mut self, step: u64, why: &str) -> Result<()> {
        if self
            .journal
            .state
            .intent
            .as_ref()
            .is_none_or(|i| i.step != step)
        {
            return Ok(());
        }
        self.append(
            Record::IntentVoid {
                step,
                why: why.to_string(),
            },
            true,
        )
    }

    /// Read the change set, make it durable, apply it, record the step.
    #[cfg(target_os = "linux")]
    fn apply_changes(
        &mut self,
        step: u64,
        o: &ExecOptions,
        cwd_rel: &str,
        out: &crate::sandbox::Outcome,
        denied: Vec<crate::egress::Denied>,
    ) -> Result<Vec<crate::undo::ExecChange>> {
        let planned = match changeset::plan(&out.upper, out.xattr_prefix, &self.ws, &self.blobs) {
            Ok(p) => p,
            Err(e) => {
                self.void(
                    step,
                    &format!("the change set could not be read: {}", e.message),
                )?;
                return Err(e);
            }
        };
        let label = &exec_label(
            &o.argv,
            Some(planned.items.len() + planned.inside.len()),
            o.origin.as_ref(),
        );
        let detail = ExecDetail {
            argv: o.argv.clone(),
            changes: planned.changes(),
            cwd: cwd_rel.to_string(),
            exit_code: out.ran.code,
            signal: out.ran.signal,
            timed_out: out.ran.timed_out,
            denied,
            origin: o.origin.clone().map(Box::new),
        };
        // The undo restores directory modes last, deepest first (a directory made
        // read-only again after what is inside it was put back).
        let dir_mode = |i: &changeset::Item| {
            matches!(i.how, How::Chmod(_)) && i.after.kind == Some(crate::undo::FileKind::Dir)
        };
        let mut entries: Vec<_> = planned
            .items
            .iter()
            .filter(|i| !dir_mode(i))
            .map(|i| i.pre.clone())
            .collect();
        entries.extend(
            planned
                .items
                .iter()
                .rev()
                .filter(|i| dir_mode(i))
                .map(|i| i.pre.clone()),
        );
        let undo = Undo::Restore { entries };
        let detail = EffectDetail::Exec(detail);
        if !planned.items.is_empty() {
            // What moves in is durable before the intent names it.
            if let Err(e) =
                make_durable_with(planned.items.len(), || planned.files_to_sync(), &out.upper)
            {
                self.void(
                    step,
                    &format!("the change set could not be made durable: {e}"),
                )?;
                return Err(Error::io("making the change set durable", e));
            }
            // Every post-image is somewhere before the intent names it: the small ones in
            // the intent, the others as blobs (copied from the upper layer, one sync).
            // The preimages put in the blob store without a sync of their own are made
            // durable with them (one sync for all).
            let post = planned.post_images(&out.upper);
            let kept = if post.is_empty() && planned.batched {
                self.blobs.sync()
            } else {
                self.blobs.keep_files(&post)
            };
            if let Err(e) = kept {
                self.void(
                    step,
                    &format!("its post-images could not be kept: {}", e.message),
                )?;
                return Err(e);
            }
            self.append(
                Record::Intent {
                    step,
                    kind: "effect".into(),
                    label: label.to_string(),
                    site: "exec".into(),
                    undo: Some(undo.clone()),
                    preimage: None,
                    after: Some(IntentAfter {
                        detail: detail.clone(),
                        images: planned.items.iter().map(|i| i.after.clone()).collect(),
                        kept: planned.kept.kept.clone(),
                    }),
                    redo: None,
                    argv: None,
                },
                true,
            )?;
            if let Err(e) = self.apply_items(&planned.items, step) {
                // Put every preimage back and void the intent; if even that fails, the
                // intent stays open and the next attach repairs it.
                if self.ws.restore(undo.entries(), &self.blobs, step).is_ok() {
                    let images: Vec<_> = planned.items.iter().map(|i| i.after.clone()).collect();
                    self.clean_temps(&images, step);
                    let _ = self.void(step, &e.message);
                }
                return Err(e);
            }
        }
        let changes = match &detail {
            EffectDetail::Exec(d) => d.changes.clone(),
            EffectDetail::File(_) => Vec::new(),
        };
        let rec = self.file_step_record(step, label, "exec", &detail, &undo)?;
        self.append(Record::Step(rec), false)?;
        self.sync()?;
        Ok(changes)
    }

    /// Apply the items in path order (a directory's mode last, deepest first, so that a
    /// directory made read-only does not stop what goes inside it), then fsync every
    /// directory that changed.
    fn apply_items(&self, items: &[changeset::Item], step: u64) -> Result<()> {
        let dir = |it: &changeset::Item| it.after.kind == Some(crate::undo::FileKind::Dir);
        // A directory the command made writable (it was not) is opened first, so that what
        // goes inside it can; every other directory mode is set last, deepest first.
        let opens = |it: &changeset::Item| match (&it.how, &it.pre) {
            (How::Chmod(new), crate::undo::RestoreEntry::Mode { mode, .. }) => {
                let old = crate::workspace::parse_mode(mode).unwrap_or(0o777);
                new & 0o200 != 0 && old & 0o200 == 0
            }
            _ => false,
        };
        let mut dir_modes = Vec::new();
        for it in items.iter().filter(|i| dir(i) && opens(i)) {
            if let How::Chmod(mode) = it.how {
                self.ws.chmod_at(&it.path, mode, step)?;
            }
        }
        for (n, it) in items.iter().enumerate() {
            match &it.how {
                How::Move(src) => self.ws.move_in(&it.path, src, step)?,
                How::Remove => self.ws.remove_at(&it.path, step)?,
                How::Chmod(_) if dir(it) && opens(it) => {}
                How::Chmod(mode) if dir(it) => dir_modes.push((it.path.as_str(), *mode)),
                How::Chmod(mode) => self.ws.chmod_at(&it.path, *mode, step)?,
            }
            if n == 0 {
                self.fp.point("exec.mid-apply");
            }
        }
        for (path, mode) in dir_modes.iter().rev() {
            self.ws.chmod_at(path, *mode, step)?;
        }
        let mut parents: Vec<&str> = items
            .iter()
            .map(|i| i.path.rsplit_once('/').map_or("", |x| x.0))
            .collect();
        parents.sort_unstable();
        parents.dedup();
        let mut dirs: Vec<PathBuf> = parents
            .into_iter()
            .map(|p| self.ws.abs(p))
            .filter(|p| p.is_dir())
            .collect();
        // A chmod changes the inode itself: it is made durable too.
        dirs.extend(
            items
                .iter()
                .filter(|i| matches!(i.how, How::Chmod(_)))
                .map(|i| self.ws.abs(&i.path)),
        );
        make_durable_with(dirs.len(), || dirs, self.ws.root())
            .map_err(|e| Error::io("making the applied changes durable", e))
    }

    /// v1's exec: on the host, an opaque step whatever its exit code.
    fn exec_unconfined(&mut self, o: &ExecOptions, cwd: &Path) -> Result<ExecReport> {
        let argv = &o.argv;
        let step = self.journal.state.next_index();
        self.append(
            Record::Intent {
                step,
                kind: "opaque".into(),
                label: "exec/opaque".into(),
                site: "exec".into(),
                undo: None,
                preimage: None,
                after: None,
                redo: None,
                argv: None,
            },
            true,
        )?;
        let env = vec![
            ("REVL_SESSION".to_string(), self.id.clone()),
            ("REVL_STEP".to_string(), step.to_string()),
        ];
        let ran = match crate::proc::run_to(argv, cwd, &env, None, o.timeout, o.output.clone()) {
            Ok(r) => r,
            Err(e) => {
                let why = format!("could not start {}: {e}", argv[0]);
                self.void(step, &why)?;
                return Err(Error::new(
                    Code::ExecFailed,
                    why,
                    "check the program name and that it is executable",
                ));
            }
        };
        let status = match ran.code {
            Some(c) => format!("exit {c}"),
            None => "killed by a signal".to_string(),
        };
        let repr = format!("exec {} ({status})", crate::util::jcs(&json!(argv)));
        let rec = self.step_record(
            step,
            "opaque",
            "exec/opaque",
            "exec",
            json!({"repr": repr, "argv": argv, "exitCode": ran.code}),
        )?;
        self.append(Record::Step(rec), false)?;
        self.sync()?;
        Ok(ExecReport {
            step,
            exit_code: ran.code,
            stdout: String::from_utf8_lossy(&ran.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&ran.stderr).into_owned(),
            sandboxed: None,
        })
    }
}

/// fsync every file and directory `paths` lists, at least `at_least` of them; above
/// [`SYNCFS_OVER`] of them, one `syncfs` of the filesystem that holds them (where it
/// persists anything). The list is made (a stat of each) only where it is short enough to
/// fsync one by one.
fn make_durable_with(
    at_least: usize,
    paths: impl FnOnce() -> Vec<PathBuf>,
    upper: &Path,
) -> std::io::Result<()> {
    let syncfs = || -> std::io::Result<()> {
        let f = std::fs::File::open(upper)?;
        rustix::fs::syncfs(&f).map_err(Into::into)
    };
    // Asked once, and only where the count calls for it.
    let mut persists = None;
    let mut one_syncfs = |n: usize| {
        n > SYNCFS_OVER && *persists.get_or_insert_with(|| crate::util::syncfs_persists(upper))
    };
    if one_syncfs(at_least) {
        return syncfs();
    }
    let paths = paths();
    if one_syncfs(paths.len()) {
        return syncfs();
    }
    sync_all_parallel(&paths)
}

/// fsync every path, several at once: the filesystem's journal commits concurrent fsyncs
/// together, so ten cost little more than one.
fn sync_all_parallel(paths: &[PathBuf]) -> std::io::Result<()> {
    let lanes = paths.len().clamp(1, 8);
    std::thread::scope(|sc| {
        let handles: Vec<_> = (0..lanes)
            .map(|lane| {
                sc.spawn(move || -> std::io::Result<()> {
                    for p in paths.iter().skip(lane).step_by(lanes) {
                        std::fs::File::open(p)?.sync_all()?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .unwrap_or_else(|_| Err(std::io::Error::other("fsync thread panicked")))
        })
    })
}

/// The label of an exec step: `exec` and the command, shortened to one line (an argument
/// with spaces or shell characters quoted, control characters escaped, at most 80
/// characters), with the number of paths it changed once that is known.
pub fn exec_label(
    argv: &[String],
    changes: Option<usize>,
    origin: Option<&crate::agent::Origin>,
) -> String {
    const MAX: usize = 80;
    let mut words: Vec<String> = Vec::with_capacity(argv.len());
    // An agent's command is shown as the agent gave it (docs/agents.md).
    let shown;
    let argv = match origin.and_then(|o| Some((&o.agent, o.command.as_ref()?))) {
        Some((agent, command)) => {
            words.push(format!("{}:", crate::util::visible(agent, false)));
            shown = [crate::util::visible(command, false)];
            &shown[..]
        }
        None => argv,
    };
    let quote = origin.is_none() || words.is_empty();
    for (i, a) in argv.iter().enumerate() {
        if !quote {
            words.push(a.clone());
            continue;
        }
        let a = if i == 0 {
            crate::util::program_name(a)
        } else {
            a.clone()
        };
        let a = crate::util::visible(&a, false);
        let plain = !a.is_empty()
            && a.chars()
                .all(|c| c.is_alphanumeric() || "-_./=:,+@%^".contains(c));
        words.push(if plain {
            a
        } else {
            format!("'{}'", a.replace('\'', "'\\''"))
        });
    }
    let mut cmd = words.join(" ");
    if cmd.chars().count() > MAX {
        cmd = cmd.chars().take(MAX - 1).collect::<String>() + "…";
    }
    match changes {
        None => format!("exec {cmd}"),
        Some(1) => format!("exec {cmd} (1 change)"),
        Some(n) => format!("exec {cmd} ({n} changes)"),
    }
}
