//! docs/user-guide.md is a tested transcript: every ```console block is run, in order, in
//! one bash, with the binary under test first on PATH, and each command's output must match
//! the lines the guide shows under it (`…` stands for any text within a line; a line that is
//! only `…` for any number of lines). A command with no lines under it is run, its output not
//! checked. `REVL_BLESS=1` rewrites the shown output from a real run (ids, hashes and digests
//! become `…`). The guide's commands use jq, which scripts/test installs: plain `cargo test`
//! leaves the transcript out (ignored).

use crate::common::World;
use std::path::{Path, PathBuf};

struct Cmd {
    /// The command as typed (continuation lines joined with newlines).
    text: String,
    /// Line index in the guide of the command's first line.
    line: usize,
    /// The expected output lines, as shown.
    expected: Vec<String>,
    /// The guide's line range of the expected output.
    out_lines: std::ops::Range<usize>,
}

fn guide_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/user-guide.md")
}

/// The ```console blocks' commands, in order.
fn parse(guide: &str) -> Vec<Cmd> {
    let lines: Vec<&str> = guide.lines().collect();
    let mut out: Vec<Cmd> = Vec::new();
    let mut in_block = false;
    for (i, l) in lines.iter().enumerate() {
        if !in_block {
            in_block = l.trim_end() == "```console";
            continue;
        }
        if l.trim_end() == "```" {
            in_block = false;
            continue;
        }
        if let Some(c) = l.strip_prefix("$ ") {
            out.push(Cmd {
                text: c.to_string(),
                line: i,
                expected: Vec::new(),
                out_lines: i + 1..i + 1,
            });
        } else if let (Some(c), Some(last)) = (
            l.strip_prefix("> ").or((l.trim_end() == ">").then_some("")),
            out.last_mut(),
        ) {
            if last.expected.is_empty() {
                last.text.push('\n');
                last.text.push_str(c);
                last.out_lines = i + 1..i + 1;
                continue;
            }
        } else if let Some(last) = out.last_mut() {
            last.expected.push(l.to_string());
            last.out_lines.end = i + 1;
        }
    }
    out
}

/// Does `got` show `want`, `…` standing for any text?
fn line_matches(want: &str, got: &str) -> bool {
    let parts: Vec<&str> = want.split('…').collect();
    if parts.len() == 1 {
        return want.trim_end() == got.trim_end();
    }
    let got = got.trim_end();
    let Some(rest) = got.strip_prefix(parts[0]) else {
        return false;
    };
    let mut rest = rest;
    for (n, p) in parts[1..].iter().enumerate() {
        let last = n == parts.len() - 2;
        if last {
            return rest.trim_end().ends_with(p.trim_end());
        }
        match rest.find(p) {
            Some(at) => rest = &rest[at + p.len()..],
            None => return false,
        }
    }
    true
}

/// Do the lines `got` show the lines `want` (a line of only `…`: any lines)?
fn lines_match(want: &[String], got: &[&str]) -> bool {
    match want.split_first() {
        None => got.is_empty(),
        Some((w, rest)) if w.trim() == "…" => {
            (0..=got.len()).any(|skip| lines_match(rest, &got[skip..]))
        }
        Some((w, rest)) => {
            !got.is_empty() && line_matches(w, got[0]) && lines_match(rest, &got[1..])
        }
    }
}

/// What the guide would show for this output: ids, hashes and digests as `…`.
fn blessed(got: &str, root: &str) -> String {
    let mut out = String::new();
    let mut hex = String::new();
    let flush = |hex: &mut String, out: &mut String| {
        if hex.len() >= 16 {
            out.push('…');
        } else {
            out.push_str(hex);
        }
        hex.clear();
    };
    for c in got.replace(root, "…").chars() {
        if c.is_ascii_hexdigit() && !c.is_ascii_uppercase() {
            hex.push(c);
        } else {
            flush(&mut hex, &mut out);
            out.push(c);
        }
    }
    flush(&mut hex, &mut out);
    out
}

#[test]
#[ignore = "needs jq: run by scripts/test (README)"]
fn the_user_guide_is_a_tested_transcript() {
    let guide = std::fs::read_to_string(guide_path()).unwrap();
    let cmds = parse(&guide);
    assert!(
        cmds.len() >= 20,
        "the guide holds {} console commands",
        cmds.len()
    );
    let w = World::new();
    let sink = revl::sink::Sink::start().unwrap();
    let bin_dir = Path::new(crate::common::bin())
        .parent()
        .unwrap()
        .to_path_buf();
    let mut script = String::from("cd \"$GUIDE_ROOT\"\n");
    for (i, c) in cmds.iter().enumerate() {
        script.push_str(&format!(
            "printf '\\n@@CMD {i}@@\\n'\n{{\n{}\n}} 2>&1\nprintf '\\n@@END {i} %d@@\\n' $?\n",
            c.text
        ));
    }
    let root = w.root().to_path_buf();
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin_dir.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("HOME", &w.home)
        .env("GUIDE_ROOT", &root)
        .env("REVL_STORE", root.join("store"))
        .env("REVL_GUIDE_SINK", sink.url(""))
        .env("TMPDIR", &root)
        .current_dir(&root)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let all =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let root_s = root.display().to_string();
    let mut failures = Vec::new();
    let mut blessed_guide: Vec<String> = guide.lines().map(str::to_string).collect();
    let bless = std::env::var_os("REVL_BLESS").is_some();
    // Rewritten from the end, so that earlier line numbers stay valid.
    for (i, c) in cmds.iter().enumerate().rev() {
        let start = format!("@@CMD {i}@@\n");
        let end = format!("\n@@END {i} ");
        let (got, rc) = match (all.find(&start), all.find(&end)) {
            (Some(a), Some(b)) if a + start.len() <= b => {
                let rc: i32 = all[b + end.len()..]
                    .split("@@")
                    .next()
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(-1);
                (&all[a + start.len()..b], rc)
            }
            _ => {
                failures.push(format!(
                    "line {}: `{}` did not run to its end\n{all}",
                    c.line + 1,
                    c.text
                ));
                continue;
            }
        };
        let got_lines: Vec<&str> = got.lines().collect();
        // Every command exits 0 unless its comment says otherwise (`# … (exit N)`).
        let want_rc: i32 = c
            .text
            .split_once(" # ")
            .and_then(|(_, comment)| comment.split("exit ").nth(1))
            .and_then(|t| t.split(|ch: char| !ch.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        if rc != want_rc {
            failures.push(format!(
                "docs/user-guide.md line {}: `{}` exited {rc}, the guide says {want_rc} (mark another code in its comment: `# … (exit N)`)\n{got}",
                c.line + 1,
                c.text
            ));
            continue;
        }
        // A hand-made pattern (some lines, and a line of only `…`) is kept as written.
        let pattern = c.expected.len() > 1 && c.expected.iter().any(|l| l.trim() == "…");
        if bless && !c.expected.is_empty() && !pattern {
            let new: Vec<String> = blessed(got, &root_s).lines().map(str::to_string).collect();
            blessed_guide.splice(c.out_lines.clone(), new);
            continue;
        }
        if !c.expected.is_empty() && !lines_match(&c.expected, &got_lines) {
            failures.push(format!(
                "docs/user-guide.md line {}: `{}`\n--- the guide shows ---\n{}\n--- revl printed ---\n{}",
                c.line + 1,
                c.text,
                c.expected.join("\n"),
                got
            ));
        }
    }
    if bless && failures.is_empty() {
        let mut text = blessed_guide.join("\n");
        text.push('\n');
        std::fs::write(guide_path(), text).unwrap();
        return;
    }
    failures.reverse();
    assert!(
        failures.is_empty(),
        "{} command(s) of the user guide disagree with revl (REVL_BLESS=1 rewrites the shown output):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn the_transcript_matcher_can_fail() {
    let want = vec!["step 1  fs.write …".to_string(), "…".to_string()];
    assert!(lines_match(&want, &["step 1  fs.write a.txt", "x", "y"]));
    assert!(!lines_match(&want, &["step 2  fs.write a.txt"]));
    assert!(!lines_match(&["a".to_string()], &["a", "b"]));
    assert!(line_matches(
        "fork of … at step 4 (…): nothing",
        "fork of ab at step 4 (x): nothing"
    ));
    assert!(!line_matches("fork of … at step 4", "fork of ab at step 5"));
}
