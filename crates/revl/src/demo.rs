//! `revl demo`: the story, on a temporary store and workspace, through the library.

use crate::Outcome;
use revl_core::{Error, Failpoints, FileOp, StepBackMode, Store};
use serde_json::json;
use std::fmt::Write as _;

fn io(e: std::io::Error) -> Error {
    Error::io("demo temp dir", e)
}

pub fn run(keep: bool) -> Result<Outcome, Error> {
    let tmp = tempfile::Builder::new()
        .prefix("revl-demo-")
        .tempdir()
        .map_err(io)?;
    let store = Store::open(&tmp.path().join("store"), Failpoints::none())?;
    let ws = tmp.path().join("workspace");
    let mut out = String::new();
    let mut say = |line: String| {
        out.push_str(&line);
        out.push('\n');
    };
    let mut s = store.new_session(&ws, None)?;
    say(format!(
        "revl demo: a session on a temporary workspace\n  session   {}\n  workspace {}\n",
        s.id(),
        ws.display()
    ));

    let step = |r: serde_json::Value| {
        format!(
            "  step {:>2}  {}",
            r["step"],
            r["label"].as_str().unwrap_or("")
        )
    };
    say("1. The agent writes a plan and a draft, and is given an API key:".into());
    say(step(s.file_effect(FileOp::Write {
        path: "notes/plan.md".into(),
        content: b"# Plan\n- answer politely\n".to_vec(),
    })?));
    say(step(s.file_effect(FileOp::Write {
        path: "draft.txt".into(),
        content: b"Dear customer, thank you.\n".to_vec(),
    })?));
    say(step(s.provide("API_KEY", "demo-key-1")?));
    let k = s.boundary(Some("turn-1"))?;
    say(step(k.clone()));
    let k = k["step"].as_i64().unwrap_or(0);

    say("\n2. Next turn: it overwrites the draft, deletes the plan, renames, chmods, rotates the key:".into());
    say(step(s.file_effect(FileOp::Write {
        path: "draft.txt".into(),
        content: b"Dear customer, NO REFUND.\n".to_vec(),
    })?));
    say(step(s.file_effect(FileOp::Delete {
        path: "notes".into(),
    })?));
    say(step(s.file_effect(FileOp::Mkdir {
        path: "out/final".into(),
    })?));
    say(step(s.file_effect(FileOp::Rename {
        from: "draft.txt".into(),
        to: "out/final/reply.txt".into(),
    })?));
    say(step(s.file_effect(FileOp::Chmod {
        path: "out/final/reply.txt".into(),
        mode: 0o600,
    })?));
    say(step(s.provide("API_KEY", "demo-key-2")?));

    say("\n3. The timeline (every effect recorded with its scope and inverse):".into());
    say(crate::render::timeline(&s.timeline()));

    say(format!(
        "\n4. \"What if I had answered differently?\" A scoped step-back to step {k}:"
    ));
    let report = s.step_back(k, StepBackMode::Scoped)?;
    say(crate::render::step_back(&report));

    say("\n5. The workspace is back at its step-k content, byte for byte:".into());
    let plan = std::fs::read_to_string(ws.join("notes/plan.md")).map_err(io)?;
    let draft = std::fs::read_to_string(ws.join("draft.txt")).map_err(io)?;
    say(format!(
        "  notes/plan.md: {:?}\n  draft.txt:     {:?}\n  out/ exists:   {}",
        plan,
        draft,
        ws.join("out").exists()
    ));
    say(format!(
        "  API_KEY:       {:?}",
        s.status()["provisions"]["API_KEY"].as_str().unwrap_or("")
    ));
    let ok =
        plan.contains("answer politely") && draft.contains("thank you") && !ws.join("out").exists();
    say(format!(
        "\n{}",
        if ok {
            "demo ok: rewound without residue"
        } else {
            "demo FAILED: the workspace is not at step k"
        }
    ));
    let wal = s.wal_path().display().to_string();
    let id = s.id().to_string();
    drop(s);
    let place = if keep {
        let p = tmp.keep();
        format!("kept in {}", p.display())
    } else {
        "removed".into()
    };
    let _ = writeln!(out, "(temporary store and workspace {place})");
    let doc = json!({"session": id, "wal": wal, "rewoundTo": k, "ok": ok});
    Ok(Outcome {
        doc,
        text: out.trim_end().to_string(),
        exit: if ok { 0 } else { 1 },
    })
}
