//! `revl demo`: the whole story on a temporary store and workspace, through the library,
//! against a real loopback HTTP sink.

use crate::cli::Outcome;
use crate::sink::Sink;
use revl_core::report::{CallResult, Stepped};
use revl_core::{Error, Failpoints, FileOp, Store};
use serde_json::json;

fn io(e: std::io::Error) -> Error {
    Error::io("demo", e)
}

/// The seq of a held send (`-` for any other call result).
fn seq_of(r: &CallResult) -> String {
    match r {
        CallResult::Queued { seq, .. } => seq.to_string(),
        _ => "-".into(),
    }
}

fn step(r: &Stepped) -> String {
    format!("  step {:>2}  {}", r.step, r.label)
}

fn manifest(sink: &Sink) -> String {
    format!(
        r#"# Tools the demo agent may call, declared with their class and scope.
[[tool]]
name = "send_email"         # held until commit
class = "deferred"
service = "mail"
method = "send"
scope = ["mail"]
http = {{ method = "POST", url = "{outbox}" }}

[[tool]]
name = "post_status"        # fires now and cannot be taken back
class = "emission"
service = "status"
method = "post"
scope = ["net"]
approval = "none"
http = {{ method = "POST", url = "{status}" }}
"#,
        outbox = sink.url("/outbox"),
        status = sink.url("/status")
    )
}

pub fn run(keep: bool) -> Result<Outcome, Error> {
    let tmp = tempfile::Builder::new()
        .prefix("revl-demo-")
        .tempdir()
        .map_err(io)?;
    let sink = Sink::start().map_err(io)?;
    let store = Store::open(&tmp.path().join("store"), Failpoints::none())?;
    let manifest_path = tmp.path().join("revl.toml");
    std::fs::write(&manifest_path, manifest(&sink)).map_err(io)?;
    let mut out = Vec::<String>::new();
    let mut say = |s: String| out.push(s);
    let sent = |sink: &Sink| -> String {
        let got = sink.received();
        if got.is_empty() {
            "the loopback sink has received nothing".into()
        } else {
            format!(
                "the loopback sink has received {}: {}",
                got.len(),
                got.iter()
                    .map(|r| format!("{} {}", r.path, r.body))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    };

    say(format!(
        "revl demo: an agent session on a temporary workspace, a real HTTP sink on 127.0.0.1:{}\n",
        sink.port()
    ));

    // Act 1: held sends never leave before commit, and an abort sends nothing.
    let ws0 = tmp.path().join("scratch");
    let mut s0 = store.new_session(&ws0, Some(&manifest_path))?;
    say("1. A throwaway session queues an email and writes a file, then aborts:".into());
    s0.file_effect(FileOp::Write {
        path: "junk.txt".into(),
        content: b"junk".to_vec(),
    })?;
    let q = s0.call(
        "send_email",
        json!({"to": "boss@example.com", "body": "draft"}),
    )?;
    say(format!(
        "  held send {} queued; {}",
        seq_of(&q),
        sent(&sink)
    ));
    let a = s0.abort()?;
    say(format!(
        "  abort: dropped {} held send(s), ran {} inverse(s); junk.txt exists: {}; {}",
        a.dropped_deferred.len(),
        a.replayed.len(),
        ws0.join("junk.txt").exists(),
        sent(&sink)
    ));
    drop(s0);

    // Act 2: the story.
    let ws = tmp.path().join("workspace");
    let mut s = store.new_session(&ws, Some(&manifest_path))?;
    say(format!(
        "\n2. The real session {} writes, is given a key, ends its first turn:",
        s.id()
    ));
    say(step(&s.file_effect(FileOp::Write {
        path: "notes/plan.md".into(),
        content: b"# Plan\n- answer politely\n".to_vec(),
    })?));
    say(step(&s.file_effect(FileOp::Write {
        path: "reply.txt".into(),
        content: b"Dear customer, thank you.\n".to_vec(),
    })?));
    say(step(&s.provide("API_KEY", "key-1")?));
    let k = s.boundary(Some("turn-1"))?;
    say(step(&k));
    let k = k.step as i64;

    say("\n3. Turn 2 goes wrong: it rewrites the reply, deletes the plan, queues an email, posts a status update:".into());
    say(step(&s.file_effect(FileOp::Write {
        path: "reply.txt".into(),
        content: b"Dear customer, NO REFUND.\n".to_vec(),
    })?));
    say(step(&s.file_effect(FileOp::Delete {
        path: "notes".into(),
    })?));
    let q = s.call(
        "send_email",
        json!({"to": "customer@example.com", "body": "NO REFUND"}),
    )?;
    say(format!(
        "  held send {} queued (it fires only at a confirmed commit)",
        seq_of(&q)
    ));
    if let CallResult::Ran { step, label, .. } =
        s.call("post_status", json!({"text": "refund denied"}))?
    {
        say(format!("  step {step:>2}  {label}"));
    }
    say(format!("  {}", sent(&sink)));

    say(format!("\n4. \"What if I had answered differently?\" Enumerate a fork at step {k}: nothing changes yet.\n"));
    let report = s.fork(k)?;
    say(crate::render::fork(&report));

    say("\n5. Confirm the fork with its hash:\n".into());
    let done = s.fork_confirm(report.hash.as_deref().unwrap_or(""))?;
    say(crate::render::fork(&done));
    let branch = done.branch.clone().unwrap_or_default();
    drop(s);

    let plan = std::fs::read_to_string(ws.join("notes/plan.md")).map_err(io)?;
    let reply = std::fs::read_to_string(ws.join("reply.txt")).map_err(io)?;
    say(format!("\n6. The workspace is back at step {k}, byte for byte, and nothing was sent by the rewind:\n  notes/plan.md: {plan:?}\n  reply.txt:     {reply:?}\n  {}", sent(&sink)));
    let files_ok = plan.contains("answer politely") && reply.contains("thank you");
    let crossed_only = sink.count() == 1;

    say(format!(
        "\n7. The branch {branch} answers differently and commits its own email:"
    ));
    let mut b = store.attach(&branch)?;
    say(step(&b.file_effect(FileOp::Write {
        path: "reply.txt".into(),
        content: b"Dear customer, your refund is on its way.\n".to_vec(),
    })?));
    b.call(
        "send_email",
        json!({"to": "customer@example.com", "body": "refund on its way"}),
    )?;
    say(format!("  before commit: {}", sent(&sink)));
    let plan = b.commit()?;
    let c = revl_core::report::to_json(&b.commit_confirm(&plan.hash)?);
    say(format!(
        "  committed: flushed {}; {}",
        c["flushed"],
        sent(&sink)
    ));
    let got = sink.received();
    let branch_ok =
        got.len() == 2 && got[1].path == "/outbox" && got[1].body.contains("refund on its way");
    let ok = files_ok && crossed_only && branch_ok;
    say(format!(
        "\n{}",
        if ok {
            "demo ok: the fork rewound the files, fired no inverse that could leave the machine, dropped the held send, and said exactly what had already crossed"
        } else {
            "demo FAILED: see above"
        }
    ));
    let wal = b.wal_path().display().to_string();
    drop(b);
    let place = if keep {
        format!("kept in {}", tmp.keep().display())
    } else {
        "removed".into()
    };
    say(format!("(temporary store and workspace {place})"));
    let doc = json!({"branch": branch, "wal": wal, "forkedAt": k, "ok": ok, "sinkReceived": sink.count()});
    Ok(Outcome {
        doc,
        text: out.join("\n"),
        exit: if ok { 0 } else { 1 },
        printed: false,
    })
}
