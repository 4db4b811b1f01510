//! Human renderings. Designed for people; `--json` is the machine format.

use revl_core::drift::Drift;
use revl_core::egress::host_port;
use revl_core::lineage::{Compare, Lineage, Topology};
use revl_core::log::{Approvals, Log, LogEdge, LogSession};
use revl_core::recover::RecoverReport;
use revl_core::report::{
    to_json, AbortReport, Approval, BeyondTail, CallResult, CommitPlan, CommitResult, ExecReport,
    ForkReport, Inspect, Listing, ModelNote, Owed, Preserved, Resent, Residue, SessionEntry,
    Sessions, Status, StepBackReport, Stepped, Timeline, Verify,
};
use revl_core::state::Deferred;
use revl_core::unwind::Failed;
use serde_json::Value;
use std::fmt::Write as _;

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// A JSON value on one line, cut to `max` characters.
fn one_line_max(v: &Value, max: usize) -> String {
    let t = v.to_string();
    match t.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &t[..cut]),
        None => t,
    }
}

fn one_line(v: &Value) -> String {
    one_line_max(v, 160)
}

fn indices(v: &[u64]) -> String {
    if v.is_empty() {
        return "none".into();
    }
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(" ")
}

pub fn inspect(v: &Inspect) -> String {
    let mut out = format!("at {}", step_at(v.at, &v.at_label));
    let _ = write!(out, "\nsteps in effect here:  {}", indices(&v.accumulated));
    let _ = write!(
        out,
        "\nsteps ahead of here:   {}",
        indices(&v.ahead_of_here)
    );
    let _ = write!(
        out,
        "\nemissions so far (out in the world): {}",
        indices(&v.emissions_so_far)
    );
    if !v.active_provisions.is_empty() {
        let _ = write!(out, "\nprovisions in effect:");
        for (k, val) in &v.active_provisions {
            let _ = write!(out, "\n  {} = {}", path_text(k), path_text(val));
        }
    }
    out
}

pub fn approval(v: &Approval) -> String {
    match (&v.ticket, v.standing) {
        (Some(t), _) => format!(
            "approved ticket {t} for {} in session {} (once, for exactly the args it was requested with); call the tool again to send",
            v.tool, v.session
        ),
        (None, _) => format!(
            "approved {} for every call in session {} (standing, this session only)",
            v.tool, v.session
        ),
    }
}

pub fn abort(v: &AbortReport) -> String {
    let mut out = String::from("ABORTED: every remaining inverse ran, newest first");
    let _ = write!(out, "\nsteps undone: {}", indices(&v.replayed));
    entry_rows(
        &mut out,
        "compensations ran (they crossed)",
        &v.compensations_ran,
    );
    unwind_rows(&mut out, &v.failed, &v.preserved, &v.dropped_deferred);
    if let Some(r) = &v.removed {
        let _ = write!(
            out,
            "\nremoved: the branch's workspace {} ({})",
            path_text(&r.dir),
            r.clone
        );
        if !r.lowers_collected.is_empty() {
            let _ = write!(
                out,
                "; {} lower layer(s) no branch uses collected",
                r.lowers_collected.len()
            );
        }
    }
    out
}

pub fn commit_done(v: &CommitResult) -> String {
    match v {
        CommitResult::Committed {
            flushed,
            flush_residue,
            discharged,
            ..
        } => {
            let mut out = format!(
                "COMMITTED: {} held send(s) fired once, in order; {} witnessed step(s) kept",
                flushed.len(),
                discharged.len()
            );
            rows(
                &mut out,
                "fired",
                flushed
                    .iter()
                    .map(|q| (format!("send {q}"), "sent".to_string(), None)),
            );
            rows(
                &mut out,
                "FAILED to send (`revl resend SESSION --seq N` fires one again)",
                flush_residue.iter().map(|f| {
                    (
                        format!("send {}", f.seq),
                        f.error.kind.clone(),
                        Some(f.error.message.clone()),
                    )
                }),
            );
            out
        }
        CommitResult::Refused { reason, plan, .. } => format!(
            "REFUSED, nothing fired: {reason}\nthe plan now:\n{}",
            commit_plan(plan)
        ),
    }
}

pub fn resent(v: &Resent) -> String {
    match &v.error {
        None => format!("send {} fired again: delivered", v.seq),
        Some(e) => format!(
            "send {} fired again and FAILED: {}",
            v.seq,
            one_line(&revl_core::report::to_json(e))
        ),
    }
}

pub fn model_note(v: &ModelNote) -> String {
    format!(
        "recorded for step {}: {} ({})",
        v.step,
        v.outcome,
        one_line(&v.llm)
    )
}

/// `log`: the lineage tree, roots first, each branch under its parent by fork step.
pub fn log(v: &Log) -> String {
    use std::collections::BTreeMap;
    let mut kids: BTreeMap<&str, Vec<&LogEdge>> = BTreeMap::new();
    for e in &v.edges {
        kids.entry(e.parent.as_str()).or_default().push(e);
    }
    let known: std::collections::BTreeSet<&str> =
        v.sessions.iter().map(|x| x.session.as_str()).collect();
    let byid: BTreeMap<&str, &LogSession> =
        v.sessions.iter().map(|x| (x.session.as_str(), x)).collect();
    let mut out = String::new();
    fn line(x: &LogSession) -> String {
        let mut l = format!("{}  {}", x.session, x.state.to_uppercase());
        if x.state == "unreadable" {
            let _ = write!(
                l,
                "  {}",
                path_text(
                    &x.error
                        .as_ref()
                        .and_then(|e| e.get("message"))
                        .map(s)
                        .unwrap_or_default()
                )
            );
            return l;
        }
        let _ = write!(l, "  head {}  {}", x.head, path_text(&x.workspace));
        if let (Some(at), Some(mode)) = (x.at, x.mode) {
            let _ = write!(
                l,
                "  [{mode} fork at step {at}, residue {}]",
                if x.residue_clean == Some(false) {
                    "NOT CLEAN"
                } else {
                    "clean"
                }
            );
        }
        let _ = write!(
            l,
            "  queued {}  approvals pending {}",
            x.queued, x.pending_approvals
        );
        if let Some(at) = x.mid_fork {
            let _ = write!(
                l,
                "  (fork at step {at} unfinished: any command repairs it)"
            );
        }
        for f in &x.abandoned_forks {
            let _ = write!(l, "  (fork at step {} ABANDONED)", f.at);
        }
        if x.torn {
            l.push_str("  (torn tail)");
        }
        l.push_str(&corrupt_note(x.corrupt.as_ref(), &x.session, true));
        l
    }
    fn walk(
        id: &str,
        prefix: &str,
        last: bool,
        root: bool,
        byid: &BTreeMap<&str, &LogSession>,
        kids: &BTreeMap<&str, Vec<&LogEdge>>,
        out: &mut String,
    ) {
        let (here, next) = match (root, last) {
            (true, _) => (String::new(), String::new()),
            (false, true) => (format!("{prefix}└─ "), format!("{prefix}   ")),
            (false, false) => (format!("{prefix}├─ "), format!("{prefix}│  ")),
        };
        match byid.get(id) {
            Some(x) => {
                let _ = writeln!(out, "{here}{}", line(x));
                for c in &x.checkpoints {
                    let _ = writeln!(
                        out,
                        "{next}    checkpoint {} at step {}",
                        c.checkpoint_id, c.position
                    );
                }
            }
            None => {
                let _ = writeln!(out, "{here}{id}  (WAL missing)");
            }
        }
        let list = kids.get(id).map(Vec::as_slice).unwrap_or_default();
        for (i, e) in list.iter().enumerate() {
            walk(
                &e.branch,
                &next,
                i + 1 == list.len(),
                false,
                byid,
                kids,
                out,
            );
        }
    }
    // Roots: sessions with no parent, or whose parent's WAL is not in the store.
    for x in &v.sessions {
        let root = x.parent.as_deref().is_none_or(|p| !known.contains(p));
        if root {
            walk(&x.session, "", true, true, &byid, &kids, &mut out);
        }
    }
    if out.is_empty() {
        out.push_str("no sessions in this store (`revl new --workspace DIR` starts one)");
    }
    out.trim_end().to_string()
}

pub fn approvals(v: &Approvals) -> String {
    if v.tickets.is_empty() {
        return "no approval is pending".into();
    }
    let mut out = format!("{} approval(s) pending:", v.tickets.len());
    for t in &v.tickets {
        let _ = write!(
            out,
            "\n\nsession {}  ticket {}  (after step {})\n  tool {}\n  args {}\n  approve: {}",
            t.session,
            t.ticket,
            t.after_step,
            path_text(&t.tool),
            if t.args.is_null() {
                "(not recorded: requested by an older revl)".to_string()
            } else {
                one_line_max(&t.args, 2000)
            },
            t.approve
        );
    }
    out
}

pub fn stepped(v: &Stepped) -> String {
    format!("step {}  {}", v.step, path_text(&v.label))
}

/// Output or names shown in text: control characters escaped, lines kept.
pub fn visible(s: &str) -> String {
    revl_core::util::visible(s, true)
}

pub fn exec(v: &ExecReport) -> String {
    let status = match (v.exit_code, &v.sandboxed) {
        (_, Some(s)) if s.interrupted => "interrupted (Ctrl-C: revl stopped it)".to_string(),
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) if s.timed_out => "timed out (killed)".to_string(),
        (None, Some(s)) => format!("killed by signal {}", s.signal.unwrap_or(0)),
        (None, None) => "killed by a signal".to_string(),
    };
    let status = match v.sandboxed.as_ref().and_then(|s| s.limit) {
        Some(l) => format!("{status} ({l} limit reached)"),
        None => status,
    };
    let mut out = match &v.sandboxed {
        Some(s) => format!(
            "step {}  exec (sandboxed)  {status}  {} change(s)",
            v.step,
            s.changes.iter().filter(|c| c.change != "ignored").count()
        ),
        None => format!("step {}  exec/opaque (unconfined)  {status}", v.step),
    };
    if let Some(s) = &v.sandboxed {
        if let Some(n) = &s.net {
            match s.net_step {
                Some(k) => {
                    let _ = write!(
                        out,
                        "\n  step {k}  exec.net  {} connection(s), recorded before they carried a byte (an emission: it cannot be undone)",
                        n.reached().count()
                    );
                }
                None if n.connections.is_empty() => {
                    let _ = write!(out, "\n  no connection was made");
                }
                None => {
                    let _ = write!(
                        out,
                        "\n  no connection reached its destination (nothing crossed)"
                    );
                }
            }
            for c in &n.connections {
                let _ = match &c.error {
                    None => match (c.bytes_up, c.bytes_down) {
                        (Some(up), Some(down)) => write!(
                            out,
                            "\n  reached     {}  {up} bytes up, {down} down",
                            host_port(&visible(&c.dest), c.port),
                        ),
                        _ => write!(
                            out,
                            "\n  reached     {}  bytes unknown (interrupted while open; it may have crossed)",
                            host_port(&visible(&c.dest), c.port),
                        ),
                    },
                    Some(e) => write!(
                        out,
                        "\n  failed      {}  ({}; nothing was forwarded)",
                        host_port(&visible(&c.dest), c.port),
                        visible(e)
                    ),
                };
            }
            for d in &n.denied {
                let _ = write!(
                    out,
                    "\n  refused     {}  ({})",
                    host_port(&visible(&d.dest), d.port),
                    visible(&d.why)
                );
            }
        }
        for c in &s.changes {
            let _ = write!(out, "\n  {:<11} {}", c.change, path_text(&c.path));
            if let Some(why) = &c.why {
                let _ = write!(out, "  ({})", path_text(why));
            }
        }
    }
    let cut = v
        .sandboxed
        .as_ref()
        .map_or((false, false), |s| (s.stdout_truncated, s.stderr_truncated));
    for ((k, t), cut) in [("stdout", &v.stdout), ("stderr", &v.stderr)]
        .into_iter()
        .zip([cut.0, cut.1])
    {
        if !t.is_empty() {
            let more = if cut { " (cut at 1 MiB)" } else { "" };
            let _ = write!(out, "\n--- {k}{more} ---\n{}", visible(t.trim_end()));
        }
    }
    match v.sandboxed.as_ref().and_then(|s| s.pids_limit) {
        Some("rlimit") => out.push_str("\nnote: --pids held by RLIMIT_NPROC (no pids cgroup could be made here)"),
        Some(_) => out.push_str("\nnote: --pids did NOT hold: as root without a pids cgroup the kernel applies no process limit"),
        None => {}
    }
    if v.sandboxed.as_ref().is_some_and(|s| s.interrupted) {
        let _ = write!(
            out,
            "\ninterrupted: revl stopped the command; what it had changed by then is kept as step {} (`revl step-back SESSION --to {}` undoes it)",
            v.step,
            v.step.saturating_sub(1)
        );
    }
    out
}

pub fn doctor(v: &revl_core::doctor::Doctor) -> String {
    let line = |name: &str, c: &revl_core::doctor::Check| match &c.why {
        None => format!("{name:<8} yes"),
        Some(why) => format!("{name:<8} no: {why}"),
    };
    let sb = &v.sandbox;
    let mut sandbox = match &sb.why {
        None => format!("{:<8} yes", "sandbox"),
        Some(why) => format!("{:<8} no: {why}", "sandbox"),
    };
    if let Some(fix) = &sb.fix {
        sandbox.push_str(&format!("\n         fix: {fix}"));
    }
    sandbox.push_str(&format!(
        "\n         layers: namespaces (user namespace: {}), overlay, seccomp {}, landlock {}, limits by {}",
        sb.userns,
        if sb.seccomp { "yes" } else { "no" },
        match sb.landlock.as_i64() {
            Some(n) => format!("ABI {n}"),
            None => "no".to_string(),
        },
        sb.limits
    ));
    format!(
        "{}\n{}\nrunning as {}",
        sandbox,
        line("reflink", &v.reflink),
        if v.root {
            "root"
        } else {
            "a user (the sandbox makes a user namespace)"
        }
    )
}

pub fn sessions(v: &Sessions) -> String {
    if v.sessions.is_empty() {
        return "no sessions".into();
    }
    let mut out = String::new();
    for x in &v.sessions {
        let _ = match x {
            SessionEntry::Known {
                session,
                state,
                workspace,
                head,
                parent,
                corrupt,
            } => writeln!(
                out,
                "{session}  {state:<9} head {head:<5} {}{}{}",
                path_text(workspace),
                parent
                    .as_ref()
                    .map(|p| format!("  (branch of {p})"))
                    .unwrap_or_default(),
                corrupt_note(corrupt.as_ref(), session, true)
            ),
            SessionEntry::Unreadable {
                session,
                state,
                error,
            } => writeln!(out, "{session}  {state:<9} {}", path_text(&error.message)),
        };
    }
    out.trim_end().to_string()
}

pub fn status(v: &Status) -> String {
    let mut out = format!(
        "session   {}\nstate     {}\nworkspace {}\nwal       {}\nhead      {}{}",
        v.session,
        v.state,
        path_text(&v.workspace),
        path_text(&v.wal),
        v.head,
        if v.torn {
            "  (torn tail: the next write truncates it)"
        } else {
            ""
        }
    );
    if let Some(why) = &v.repair_pending {
        let _ = write!(out, "\nREPAIR PENDING: {}", path_text(why));
    }
    if let (Some(p), Some(at)) = (&v.parent, v.forked_at) {
        let _ = write!(out, "\nbranch of {p} at step {at}");
    }
    if let (Some(b), Some(at)) = (&v.branch, v.frozen_at) {
        let _ = write!(out, "\nfrozen at step {at}: continues as branch {b}");
    }
    for f in &v.abandoned_forks {
        let _ = write!(
            out,
            "\nfork at step {} ABANDONED (no branch was made; the workspace was put back): {}",
            f.at,
            path_text(f.why.as_deref().unwrap_or("interrupted"))
        );
    }
    if v.busy {
        out.push_str("\n(another revl command holds this session: this is its WAL as of now)");
    }
    out.push_str(&corrupt_note(v.corrupt.as_ref(), &v.session, false));
    if !v.provisions.is_empty() {
        let _ = write!(out, "\nprovisions:");
        for (k, val) in &v.provisions {
            let _ = write!(out, "\n  {} = {}", path_text(k), path_text(val));
        }
    }
    if !v.queue.is_empty() {
        let _ = write!(out, "\nheld sends (fire only at commit):");
        for d in &v.queue {
            let _ = write!(
                out,
                "\n  send {}  {} ({}.{})  {}",
                d.seq,
                path_text(&d.tool),
                path_text(&d.service),
                path_text(&d.method),
                one_line(&d.args)
            );
        }
    }
    if !v.owed.is_empty() {
        let _ = write!(
            out,
            "\nowed (run only by an explicit abort, recover or resend):"
        );
        for o in &v.owed {
            let _ = write!(out, "\n  {}", to_json(o));
        }
    }
    out
}

pub fn verify(v: &Verify) -> String {
    let busy = if v.busy {
        "\n(another revl command holds this session: a change it is making shows as drift until it is done; run verify again then)"
    } else {
        ""
    };
    if v.drift.is_empty() {
        return format!("no drift: every witnessed path matches its last recorded image{busy}");
    }
    let mut out = String::new();
    drift_rows(
        &mut out,
        &format!("{} path(s) changed outside revl", v.drift.len()),
        &v.drift,
    );
    out.push_str(busy);
    out.trim_start().to_string()
}

pub fn list(v: &Listing) -> String {
    let mut out = String::new();
    for e in &v.entries {
        let _ = writeln!(
            out,
            "{:<8} {} {:>9}  {}",
            e.kind.as_str(),
            e.mode,
            e.size.map(|n| n.to_string()).unwrap_or_default(),
            path_text(&e.name)
        );
    }
    out.trim_end().to_string()
}

pub fn timeline(v: &Timeline) -> String {
    let mut out = format!(
        "session {}  state {}  head {}{}{}\n{:>5}  {:<12} {:<40} {}\n",
        v.session,
        v.state,
        v.head,
        if v.torn { "  (torn tail)" } else { "" },
        if v.busy {
            "  (another revl command holds this session: its WAL as of now)"
        } else {
            ""
        },
        "step",
        "kind",
        "label",
        "scope"
    );
    for st in &v.steps {
        let mut note = String::new();
        if st.undone {
            let _ = write!(
                note,
                "  [undone by {}]",
                st.rewound_by
                    .as_deref()
                    .or(st.undone_by.as_deref())
                    .unwrap_or("-")
            );
        }
        if st.crossed == Some(true) {
            note.push_str("  [crossed]");
        }
        if st.armed {
            note.push_str("  [armed: not run; fires only in a compensating rewind]");
        }
        let scope = st
            .scope
            .as_ref()
            .map(|x| x.to_string())
            .unwrap_or_else(|| "(no scope)".into());
        // A label is one line: control characters are shown escaped. An opaque exec says
        // which command it was.
        let mut label: String = path_text(&st.label);
        if st.kind == "opaque" && st.site == "exec" {
            if let Some(argv) = st.detail.get("argv").and_then(|a| a.as_array()) {
                let cmd: Vec<String> = argv
                    .iter()
                    .map(|a| path_text(a.as_str().unwrap_or("?")))
                    .collect();
                let _ = write!(label, " ({})", cmd.join(" "));
            }
        }
        let _ = writeln!(
            out,
            "{:>5}  {:<12} {:<40} {}{}",
            st.index, st.kind, label, scope, note
        );
    }
    out.push_str(corrupt_note(v.corrupt.as_ref(), &v.session, false).trim_start());
    out.trim_end().to_string()
}

fn entries(out: &mut String, title: &str, v: &Value) {
    if let Some(list) = v.as_array() {
        entry_rows(out, title, list);
    }
}

/// Report entries (the shared entry shapes of docs/reference.md, "Report entries and the
/// guarantee", as JSON values), one row each.
fn entry_rows<T: serde::Serialize>(out: &mut String, title: &str, list: &[T]) {
    let list: Vec<Value> = list.iter().map(revl_core::report::to_json).collect();
    rows(
        out,
        title,
        list.iter().map(|e| {
            let label = entry_label(e);
            let extra = e
                .get("why")
                .or(e.get("error"))
                .or(e.get("repr"))
                .map(s)
                .or_else(|| destinations(e));
            // Step indices and held-send seq numbers are different counters: say which.
            let idx = match (e.get("index"), e.get("seq")) {
                (Some(i), _) => format!("step {}", s(i)),
                (None, Some(q)) => format!("send {}", s(q)),
                (None, None) => String::new(),
            };
            (idx, label, extra)
        }),
    );
}

/// An exec's network emission (docs/user-guide.md §8): each destination it reached, named.
fn destinations(e: &Value) -> Option<String> {
    let names = reached_destinations(e);
    (!names.is_empty()).then(|| format!("reached {}", names.join(", ")))
}

/// The destinations an exec's network emission (its detail or report entry) reached, each
/// once, as `host:port`; a connection whose outbound connect failed reached nothing and is
/// left out, one open when revl was interrupted is marked as maybe reached. The text reports
/// and the view both name them with this.
pub fn reached_destinations(e: &Value) -> Vec<String> {
    let conns: Vec<revl_core::egress::Connection> = e
        .get("connections")
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default();
    let mut names: Vec<String> = Vec::new();
    for c in conns.iter().filter(|c| c.reached()) {
        let d = host_port(&c.dest, c.port);
        let d = if c.interrupted {
            format!("{d} (interrupted: may have been reached)")
        } else {
            d
        };
        if !names.contains(&d) {
            names.push(d);
        }
    }
    names
}

/// The label of a report entry: its own, else the label its step had (an exec's network
/// emission: `exec.net <program>`), else `service.method`.
fn entry_label(e: &Value) -> String {
    if let Some(l) = e.get("label") {
        return s(l);
    }
    let (service, method) = (s(&e["service"]), s(&e["method"]));
    if (service.as_str(), method.as_str()) == ("exec", "net") {
        let argv: Vec<String> =
            serde_json::from_value(e["args"]["argv"].clone()).unwrap_or_default();
        if !argv.is_empty() {
            return revl_core::egress::net_label(&argv);
        }
    }
    format!("{service}.{method}")
}

/// A titled list of `(position, label, note)` rows; nothing when empty.
fn rows(
    out: &mut String,
    title: &str,
    list: impl Iterator<Item = (String, String, Option<String>)>,
) {
    let mut list = list.peekable();
    if list.peek().is_none() {
        return;
    }
    let _ = write!(out, "\n{title}:");
    for (idx, label, extra) in list {
        // Labels and notes name paths, tools and messages from outside: one line each.
        let extra = extra
            .map(|w| format!("  ({})", path_text(&w)))
            .unwrap_or_default();
        let _ = write!(out, "\n  {idx:>10}  {}{extra}", path_text(&label));
    }
}

fn failed_rows(out: &mut String, failed: &[Failed]) {
    rows(
        out,
        "FAILED",
        failed.iter().map(|f| {
            (
                format!("step {}", f.index),
                f.label.clone(),
                Some(f.error.clone()),
            )
        }),
    );
}

/// What every unwind report ends with: failed inverses, preserved drift, dropped sends.
fn unwind_rows(out: &mut String, failed: &[Failed], kept: &[Preserved], dropped: &[Deferred]) {
    failed_rows(out, failed);
    preserved_rows(out, kept);
    held_rows(out, "held sends dropped (never sent)", dropped);
}

fn held_rows(out: &mut String, title: &str, held: &[Deferred]) {
    rows(
        out,
        title,
        held.iter().map(|d| {
            (
                format!("send {}", d.seq),
                format!("{}.{}", d.service, d.method),
                Some(format!("args {}", one_line_max(&d.args, 120))),
            )
        }),
    );
}

/// Drifted content a rewind saved: `revl blob DIGEST` gives it back.
fn preserved_rows(out: &mut String, kept: &[Preserved]) {
    if kept.is_empty() {
        return;
    }
    let _ = write!(
        out,
        "\npreserved (changed outside revl; `revl blob DIGEST` gives the bytes back):"
    );
    for p in kept {
        let _ = write!(
            out,
            "\n  {}  {} {}  {}",
            path_text(&p.path),
            p.kind.as_str(),
            p.mode.as_deref().unwrap_or("-"),
            p.digest
        );
    }
}

/// Witnessed paths the rewound tail never touched that changed outside revl, and what the
/// rewind did with each.
fn beyond_rows(out: &mut String, at: impl std::fmt::Display, beyond: &[BeyondTail]) {
    if beyond.is_empty() {
        return;
    }
    let _ = write!(
        out,
        "\nCHANGED OUTSIDE REVL on paths the rewound steps never touched:"
    );
    for b in beyond {
        let what = match b.outcome {
            "restored" => format!("preserved, restored to step {at}"),
            "kept" => "kept as it is (--keep-drift): `revl verify` reports it".to_string(),
            _ => format!(
                "NOT restored: {}",
                path_text(b.why.as_deref().unwrap_or("-"))
            ),
        };
        let _ = write!(
            out,
            "\n  {}  {}  {what}",
            path_text(&b.path),
            path_text(&b.change)
        );
    }
}

/// Drift entries, one a line, under `title` (nothing when there is none).
fn drift_rows(out: &mut String, title: &str, drift: &[Drift]) {
    if drift.is_empty() {
        return;
    }
    let _ = write!(out, "\n{title}:");
    for d in drift {
        let _ = write!(out, "\n  {}  {}", path_text(&d.path), d.change);
    }
}

fn residue_word(r: &Residue) -> &'static str {
    if r.clean {
        "clean"
    } else {
        "NOT CLEAN"
    }
}

pub fn step_back(v: &StepBackReport) -> String {
    let mut out = format!("stepped back to {}", step_at(v.to, &v.to_label));
    for t in &v.turns_unwound {
        let _ = write!(out, "\nturn unwound: {t}");
    }
    entry_rows(&mut out, "inverses ran", &v.inverses_ran);
    entry_rows(&mut out, "provisions withdrawn", &v.provisions_withdrawn);
    if let Some(c) = &v.compensations_ran {
        entry_rows(&mut out, "compensations ran (they crossed)", c);
    }
    entry_rows(&mut out, "CROSSED (cannot be undone)", &v.emissions_crossed);
    entry_rows(&mut out, "compensated emissions", &v.emissions_compensated);
    if let Some(w) = &v.would_cross_on_rewind {
        entry_rows(&mut out, "NOT FIRED (would cross on rewind)", w);
    }
    entry_rows(&mut out, "unrestored", &v.unrestored);
    beyond_rows(&mut out, v.to, &v.beyond_tail);
    unwind_rows(&mut out, &v.failed, &v.preserved, &v.dropped_deferred);
    let _ = write!(out, "\nguarantee: {}", v.guarantee);
    out
}

pub fn call(v: &CallResult) -> String {
    match v {
        CallResult::ApprovalRequired {
            tool, ticket, hint, ..
        } => format!("APPROVAL REQUIRED for {tool} (ticket {ticket})\n{hint}"),
        CallResult::Queued { seq, .. } => {
            format!("held send {seq} queued: it fires only at a confirmed commit")
        }
        CallResult::Ran {
            step,
            label,
            stdout,
            stderr,
            ..
        } => {
            let mut out = format!("step {step}  {label}");
            for (k, t) in [("stdout", stdout), ("stderr", stderr)] {
                if !t.is_empty() {
                    let _ = write!(out, "\n--- {k} ---\n{}", t.trim_end());
                }
            }
            out
        }
    }
}

pub fn commit_plan(v: &CommitPlan) -> String {
    let mut out = String::from("commit plan (nothing fired yet):");
    held_rows(
        &mut out,
        "held sends that will fire, in this order",
        &v.deferred,
    );
    let _ = write!(
        out,
        "\nwitnessed steps kept as the deliverable: {}",
        v.witnessed.count
    );
    let _ = write!(
        out,
        "\nconfirm with: revl commit-confirm {} --hash {}",
        v.session, v.hash
    );
    out
}

pub fn recover(v: &RecoverReport) -> String {
    let mut out = format!(
        "verdict: {}  (session {})",
        v.verdict.to_uppercase(),
        v.session
    );
    let _ = write!(
        out,
        "\nresidue: {}  {}",
        residue_word(&v.residue),
        v.residue.proof
    );
    rows(
        &mut out,
        "owed",
        v.owed.iter().map(|o| match o {
            Owed::Step(o) => (
                format!("step {}", o.index),
                o.label.clone(),
                Some(o.why.clone()),
            ),
            Owed::HeldSend {
                seq,
                service,
                method,
                why,
                ..
            } => (
                format!("send {seq}"),
                format!("{service}.{method}"),
                Some(why.to_string()),
            ),
        }),
    );
    if let Some(n) = &v.note {
        let _ = write!(out, "\n{n}");
    }
    out
}

pub fn fork(v: &ForkReport) -> String {
    let mut out = if let (true, Some(par)) = (v.forked, &v.parallel) {
        format!(
            "FORKED IN PARALLEL at {}\n  parent {} stays live, its workspace and {} held send(s) untouched\n  branch {} is live in {} ({})",
            step_at(v.at, &v.at_label),
            v.parent,
            par.parent_keeps.queue.len(),
            v.branch.as_deref().unwrap_or("-"),
            par.into,
            made_text(par)
        )
    } else if v.forked {
        format!(
            "FORKED at {}\n  parent {} is now frozen\n  branch {} is live: continue there",
            step_at(v.at, &v.at_label),
            v.parent,
            v.branch.as_deref().unwrap_or("-")
        )
    } else if v.refused == Some(true) {
        format!(
            "REFUSED: {}\nfresh report for step {}:",
            v.reason.as_deref().unwrap_or("-"),
            v.at
        )
    } else {
        format!(
            "fork of {} at {}: nothing has changed yet",
            v.parent,
            step_at(v.at, &v.at_label)
        )
    };
    let done = v.forked;
    entry_rows(
        &mut out,
        if done {
            "rewound (inverses ran, host-confined)"
        } else {
            "will be rewound (host-confined inverses)"
        },
        &v.rewound.inverses_ran,
    );
    entry_rows(
        &mut out,
        if done {
            "provisions withdrawn"
        } else {
            "provisions to withdraw"
        },
        &v.rewound.provisions_withdrawn,
    );
    held_rows(
        &mut out,
        if done {
            "held sends dropped (they never crossed)"
        } else {
            "held sends (a serial fork drops them: they never cross; a parallel fork --into DIR keeps them in the parent's queue)"
        },
        &v.dropped_deferred,
    );
    if let (true, Some(par)) = (done, &v.parallel) {
        if !par.parent_keeps.queue.is_empty() {
            let _ = write!(
                out,
                "\nheld sends kept in the parent's queue (the branch has none): send {}",
                indices(&par.parent_keeps.queue)
            );
        }
    }
    entry_rows(&mut out, "CROSSED (cannot be undone)", &v.emissions_crossed);
    entry_rows(
        &mut out,
        "CROSSED, with a compensation that is NOT FIRED",
        &v.emissions_compensated,
    );
    entry_rows(
        &mut out,
        "NOT FIRED (the inverse would cross; a declared compensation never ran)",
        &v.would_cross_on_rewind,
    );
    entry_rows(&mut out, "unrestored", &v.unrestored);
    if v.preserved.is_none() {
        drift_rows(
            &mut out,
            "CHANGED OUTSIDE REVL (what is there is preserved in the blob store before the rewind runs over it; a deletion is only reported)",
            &v.drift,
        );
    }
    beyond_rows(&mut out, v.at, &v.beyond_tail);
    failed_rows(&mut out, v.failed.as_deref().unwrap_or_default());
    preserved_rows(&mut out, v.preserved.as_deref().unwrap_or_default());
    let _ = write!(out, "\nresidue: {}", residue_word(&v.residue));
    let _ = write!(out, "\nproof: {}", v.residue.proof);
    let outside = v.emissions_crossed.is_empty()
        && v.emissions_compensated.is_empty()
        && v.would_cross_on_rewind.is_empty();
    let _ = write!(
        out,
        "\n{}: {}",
        if outside {
            "out in the world"
        } else {
            "WARNING"
        },
        v.warning_emissions
    );
    if let Some(h) = &v.hash {
        let _ = write!(
            out,
            "\nhash: {h}\nconfirm with: revl fork-confirm {} --hash {h}",
            v.parent
        );
    }
    out
}

pub fn lineage(v: &Lineage) -> String {
    let mut out = format!("{} {}", v.role.to_uppercase(), v.session);
    let _ = write!(
        out,
        "\n  wal {}  steps {}  state {}{}",
        v.wal,
        v.steps,
        v.state,
        if v.torn { "  (torn tail)" } else { "" }
    );
    if let Some(p) = &v.parent {
        let at = v.diverged_at.map_or("-".to_string(), |a| a.to_string());
        let _ = write!(out, "\nbranch of  {p} at step {at}");
        if let Some(r) = &v.inherited_residue {
            let _ = write!(
                out,
                "\n  inherited residue: {}  {}",
                residue_word(r),
                r.proof
            );
        }
        for np in v
            .not_preserved
            .as_ref()
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let _ = write!(
                out,
                "\n  not preserved: {}: {}",
                s(&np["axis"]),
                s(&np["why"])
            );
        }
    }
    // A fork still in progress names no branch yet: the MID-FORK line below says it all.
    let unmade = v.mid_fork.is_some() && v.frozen_at.flatten().is_none();
    if let (Some(c), false) = (&v.child, unmade) {
        let at = v
            .frozen_at
            .flatten()
            .map_or("-".to_string(), |a| a.to_string());
        let _ = write!(
            out,
            "\nforked into {c} at step {at}{}",
            if v.fork_complete == Some(true) {
                ""
            } else {
                " (fork not complete)"
            }
        );
        if let Some(r) = &v.residue {
            let _ = write!(out, "\n  residue: {}  {}", residue_word(r), r.proof);
        }
    }
    if let Some(m) = &v.mid_fork {
        let _ = write!(out, "\nMID-FORK: {m}");
    }
    out
}

pub fn topology(v: &Topology) -> String {
    let mut out = format!("branch topology ({} WALs)", v.sessions.len());
    for e in &v.edges {
        let _ = write!(
            out,
            "\n  {} -> {} (forked at step {})",
            e.parent, e.branch, e.at
        );
    }
    for o in &v.orphans {
        let _ = write!(out, "\n  ORPHAN {}: {}", o.branch, o.why);
    }
    for d in &v.dangling {
        let _ = write!(out, "\n  DANGLING {} -> {}: {}", d.parent, d.branch, d.why);
    }
    for u in &v.unidentified {
        let _ = write!(out, "\n  unidentified {}: {}", u.wal, u.why);
    }
    out
}

pub fn partition(v: &Value) -> String {
    let mut out = format!(
        "partition of {} above step {} ({}), performed: no",
        s(&v["session"]),
        s(&v["at"]),
        s(&v["atLabel"])
    );
    entries(
        &mut out,
        "would rewind (host-confined inverses)",
        &v["wouldRewind"],
    );
    entries(&mut out, "would withdraw (provisions)", &v["wouldWithdraw"]);
    entries(
        &mut out,
        "CROSSED (cannot be undone)",
        &v["emissionsCrossed"],
    );
    entries(
        &mut out,
        "CROSSED, with a compensation that would NOT FIRE",
        &v["emissionsCompensated"],
    );
    entries(
        &mut out,
        "NOT FIRED (would cross on rewind)",
        &v["wouldCrossOnRewind"],
    );
    entries(&mut out, "unrestored", &v["unrestored"]);
    for f in v["findings"].as_array().cloned().unwrap_or_default() {
        let _ = write!(out, "\nfinding {}: {}", s(&f["finding"]), s(&f["why"]));
    }
    let _ = write!(
        out,
        "\nforkable: {}\nresidue: {}  {}\nnote: {}",
        s(&v["forkable"]),
        if v["residue"]["clean"] == Value::Bool(true) {
            "clean"
        } else {
            "NOT CLEAN"
        },
        s(&v["residue"]["proof"]),
        s(&v["readerNote"])
    );
    out
}

pub fn compare(v: &Compare) -> String {
    let mut out = format!("relation: {}", v.relation.to_uppercase());
    // The hinge (step 0) is no step the agent took.
    let took = |n: usize| n.saturating_sub(1);
    let _ = write!(
        out,
        "\n  left  {} ({}, {} step(s) after its start)\n  right {} ({}, {} step(s) after its start)",
        v.left.session,
        v.left.role,
        took(v.left.steps),
        v.right.session,
        v.right.role,
        took(v.right.steps)
    );
    let Some(d) = v.delta.as_ref().filter(|_| v.comparable) else {
        let _ = write!(out, "\nnot comparable: {}", v.why.unwrap_or("-"));
        return out;
    };
    let _ = write!(
        out,
        "\ndiverged at: step {} of the parent\nshared: the first {} step(s) along the lineage (same kind, label and content)\n(positions count along each side's lineage from its first session's step 1; a branch forked at step k numbers its own steps from 1, so its step i is position k+i)",
        v.diverged_at.map_or("-".to_string(), |a| a.to_string()),
        d.shared_prefix
    );
    match &d.first_difference {
        None => out.push_str("\nidentical: the same steps with the same content"),
        Some(f) => {
            let label = |b: &Option<revl_core::wire::BriefStep>| {
                b.as_ref()
                    .map_or("(nothing)".to_string(), |b| b.label.clone())
            };
            let (l, r) = (label(&f.left), label(&f.right));
            let note = if l == r {
                " (same label, different content)"
            } else {
                ""
            };
            let at = |b: &Option<revl_core::wire::BriefStep>| match b {
                Some(b) => format!("step {}: ", b.index),
                None => String::new(),
            };
            let _ = write!(
                out,
                "\nfirst difference at position {}: left {}{l} / right {}{r}{note}",
                f.position,
                at(&f.left),
                at(&f.right),
            );
        }
    }
    entry_rows(&mut out, "only left", &d.only_left);
    entry_rows(&mut out, "only right", &d.only_right);
    held_rows(
        &mut out,
        "held sends queued on the left (fire only if it commits)",
        &v.left.held_sends,
    );
    held_rows(
        &mut out,
        "held sends queued on the right (fire only if it commits)",
        &v.right.held_sends,
    );
    for (side, x) in [("left", &v.left), ("right", &v.right)] {
        rows(
            &mut out,
            &format!("model decisions ({side})"),
            x.model_decisions.iter().map(|m| {
                // Each member is recorded as {value, provenance}.
                let val = |k: &str| s(&m["llm"][k]["value"]);
                let mut note = format!(
                    "{} in / {} out tokens, {}s, attempts {}/{}",
                    val("tokensIn"),
                    val("tokensOut"),
                    val("latencySeconds"),
                    val("attempts"),
                    val("attemptCeiling")
                );
                if !m["llm"]["cost"]["value"].is_null() {
                    let _ = write!(note, ", cost {} {}", val("cost"), val("currency"));
                }
                (
                    format!("step {}", s(&m["step"])),
                    format!("{} ({})", val("model"), s(&m["outcome"])),
                    Some(note),
                )
            }),
        );
    }
    for nc in &v.not_comparable {
        let _ = write!(out, "\nnot comparable: {}: {}", nc.axis, nc.why);
    }
    out.push_str("\nto keep one side's files: `revl diff LEFT RIGHT` lists every path that differs; a serial branch already lives in the original workspace; for a parallel branch, docs/user-guide.md (\"When a branch wins\") shows how to bring its files back");
    out
}

pub fn diff(v: &revl_core::session::diff::DiffReport) -> String {
    let show = |i: &Option<revl_core::undo::Image>| match i {
        None => "absent".to_string(),
        Some(i) => format!(
            "{} {}",
            i.kind.map_or("?", |k| k.as_str()),
            i.mode.as_deref().unwrap_or("")
        )
        .trim_end()
        .to_string(),
    };
    if v.paths.is_empty() {
        return format!("no difference between {} and {}", v.left, v.right);
    }
    let mut out = format!(
        "{} path(s) differ between {} and {}",
        v.paths.len(),
        v.left,
        v.right
    );
    for p in &v.paths {
        let _ = write!(out, "\n{}: {} | {}", p.path, show(&p.left), show(&p.right));
        if let Some(d) = &p.diff {
            let _ = write!(out, "\n{}", d.trim_end());
        }
    }
    out
}

/// `gc`: the blobs kept because they hold content made outside revl that a rewind preserved.
pub fn gc_preserved(kept: &[revl_core::gc::PreservedBlob]) -> String {
    if kept.is_empty() {
        return String::new();
    }
    let bytes: u64 = kept.iter().map(|k| k.bytes).sum();
    let mut out = format!(
        "\n{} blob(s) ({bytes} bytes) hold content made outside revl that a rewind preserved: kept, never removed (`revl blob DIGEST` gives it back):",
        kept.len()
    );
    for k in kept {
        let _ = write!(
            out,
            "\n  {}  {} (session {}, step {})  {}",
            k.digest,
            path_text(&k.path),
            short(&k.session),
            k.step,
            k.bytes
        );
    }
    out
}

/// The temp files of blob writes a killed writer left, which gc removes (or would).
pub fn gc_abandoned(r: &revl_core::gc::GcReport) -> String {
    if r.abandoned_temp_files.is_empty() {
        return String::new();
    }
    let verb = if r.applied {
        "removed"
    } else {
        "would be removed (dry run)"
    };
    let mut out = format!(
        "\n{} temp file(s) of blob writes that never finished ({} bytes, untouched for {} minutes): {verb}",
        r.abandoned_temp_files.len(),
        r.abandoned_temp_bytes,
        revl_core::gc::ABANDONED_AFTER.as_secs() / 60
    );
    for p in &r.abandoned_temp_files {
        let _ = write!(out, "\n  {}", path_text(p));
    }
    out
}

pub fn gc_layers(l: &revl_core::layers::LayersGc) -> String {
    let mut kept = String::new();
    for k in &l.kept {
        let _ = write!(
            kept,
            "\nlayered workspace of an aborted branch kept: {}",
            revl_core::util::visible(k, false)
        );
    }
    if l.workspaces.is_empty() && l.lowers.is_empty() {
        return kept;
    }
    let verb = if l.applied {
        ""
    } else {
        " (dry run: would be)"
    };
    let mut out = format!(
        "\nlayered workspaces of aborted branches taken down{verb}: {}; lower layers no branch uses collected{verb}: {}",
        l.workspaces.len(),
        l.lowers.len()
    );
    for w in &l.workspaces {
        let _ = write!(out, "\n  {}", path_text(w));
    }
    out + &kept
}

/// How a parallel branch's workspace was made, in words.
fn made_text(par: &revl_core::report::Parallel) -> String {
    match (&par.layers, &par.fallback) {
        (Some(l), _) => format!(
            "layers mounted by {}: {} lower layer {}, {} bytes copied",
            l.driver.name(),
            if l.shared_lower {
                "the shared"
            } else {
                "a new"
            },
            short(&l.lower),
            par.bytes_copied
        ),
        (None, Some(why)) => format!(
            "{}, {} bytes copied: no layers ({})",
            par.clone,
            par.bytes_copied,
            path_text(why)
        ),
        (None, None) => format!("{}, {} bytes copied", par.clone, par.bytes_copied),
    }
}

/// A path or name as a terminal shows it: on one line, control characters escaped.
pub fn path_text(p: &str) -> String {
    revl_core::util::visible(p, false)
}

/// A session id as text shows it: its first 8 characters.
fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// `step K (label)`; the start of a session is `step -1 (before every step)`.
fn step_at(at: impl std::fmt::Display, label: &str) -> String {
    let label = path_text(label);
    if label.starts_with('(') {
        format!("step {at} {label}")
    } else {
        format!("step {at} ({label})")
    }
}

/// A WAL corrupt past its header (`status`, `timeline`, `sessions`, `log`): what is shown
/// is its intact records; what to do. `short`: a note for the end of a one-line entry.
pub fn corrupt_note(c: Option<&revl_core::wal::Corrupt>, session: &str, short: bool) -> String {
    let Some(c) = c else {
        return String::new();
    };
    if short {
        return format!(
            "  (CORRUPT WAL: the records from line {} on are unreadable; shown as the {} line(s) before it say)",
            c.line,
            c.line - 1
        );
    }
    format!(
        "\nCORRUPT WAL {}: the records from line {} on are unreadable ({}); this shows the {} intact line(s) before it. Nothing will be written to this session until `revl recover {session} --truncate-corrupt` keeps them and moves line {} and after into a file next to the WAL (no byte is lost), or the WAL is restored from a backup.",
        c.path,
        c.line,
        c.why,
        c.line - 1,
        c.line
    )
}

/// `recover --truncate-corrupt`.
pub fn truncated(v: &revl_core::recover::TruncateReport) -> String {
    format!(
        "verdict: TRUNCATED  (session {})\nkept      {} intact record(s), {} bytes (the WAL now): state {}, head {}\nmoved     line {} and after ({} bytes) to {}\nwhy       {}\n{}",
        v.session,
        v.kept_records,
        v.kept_bytes,
        v.state,
        v.head,
        v.corrupt.line,
        v.moved_bytes,
        v.moved_to,
        v.corrupt.why,
        v.note
    )
}
