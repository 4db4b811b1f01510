//! The real coding agents on revl (docs/agents.md): Claude Code and Codex CLI, the pinned
//! npm releases scripts/test installs ($REVL_TEST_CLAUDE, $REVL_TEST_CODEX), started with
//! `revl agent claude|codex` and driven offline by a scripted model on loopback
//! (common/fake_model.rs). As root and as an unprivileged user.

use crate::common::env::records;
use crate::common::fake_model::{Api, FakeModel, Say};
use crate::common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

const NEEDS: &str = "needs Claude Code and Codex from npm: run by scripts/test (README)";

fn agent_bin(var: &str) -> String {
    std::env::var(var).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| {
        panic!("${var} is not set: this test {NEEDS} (it installs the pinned agents and exports their paths)")
    })
}

/// One run's directories: the workspace, the store, the agent's home.
struct Run {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    store: PathBuf,
    home: PathBuf,
    nobody: bool,
}

/// A run's parallel branch is a layered mount where the machine has no snapshot or reflink
/// (docs/reference.md, "Serial and parallel branches"): unmounted before the run's directory
/// is removed, so no run leaves a mount behind.
impl Drop for Run {
    fn drop(&mut self) {
        crate::common::unmount_under(&self.root);
    }
}

impl Run {
    fn new(nobody: bool) -> Run {
        // Not under /tmp: the sandbox gives commands a private /tmp, and Codex wants its home
        // out of /tmp too.
        let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("agents-runs");
        std::fs::create_dir_all(&base).unwrap();
        let dir = tempfile::Builder::new()
            .prefix("run-")
            .tempdir_in(&base)
            .unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let (ws, store, home) = (root.join("ws"), root.join("store"), root.join("home"));
        for d in [&ws, &home] {
            std::fs::create_dir_all(d).unwrap();
        }
        if nobody {
            let ok = Command::new("chown")
                .args(["-R", "65534:65534"])
                .arg(&root)
                .status()
                .unwrap()
                .success();
            assert!(ok);
        }
        Run {
            _dir: dir,
            root,
            ws,
            store,
            home,
            nobody,
        }
    }

    /// A command run as this run's user, in `cwd`, with a clean environment.
    fn command(&self, program: &str, cwd: &Path) -> Command {
        let mut c = if self.nobody {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", program]);
            c
        } else {
            Command::new(program)
        };
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("LC_ALL", "C")
            .current_dir(cwd);
        c
    }

    fn revl(&self, args: &[&str]) -> Value {
        let o = self
            .command(bin(), &self.root)
            .arg("--store")
            .arg(&self.store)
            .arg("--json")
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "revl {args:?}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).unwrap()
    }

    /// `revl agent AGENT [--session S] -- ARGS` in `cwd`, no standard input, `with` adding
    /// what the agent needs: revl's stderr.
    fn agent(
        &self,
        agent: &str,
        cwd: &Path,
        session: Option<&str>,
        args: &[&str],
        with: impl FnOnce(&mut Command),
    ) -> String {
        let mut c = self.command(bin(), cwd);
        c.arg("--store").arg(&self.store).args(["agent", agent]);
        if let Some(s) = session {
            c.args(["--session", s]);
        }
        c.arg("--").args(args).stdin(std::process::Stdio::null());
        with(&mut c);
        let o = c.output().unwrap();
        assert!(
            o.status.success(),
            "{agent}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stderr).into_owned()
    }

    /// `revl agent claude [--session S] -- ARGS` in `cwd` against `fake`: revl's stderr.
    fn claude(&self, fake: &FakeModel, cwd: &Path, session: Option<&str>, args: &[&str]) -> String {
        self.agent("claude", cwd, session, args, |c| {
            c.args([
                "--output-format",
                "json",
                "--permission-mode",
                "acceptEdits",
            ])
            .env("REVL_CLAUDE", agent_bin("REVL_TEST_CLAUDE"));
            fake.claude_env(c);
        })
    }

    /// `revl agent codex [--session S] -- ARGS` in `cwd`, the model's key set: revl's
    /// stderr.
    fn codex(&self, cwd: &Path, session: Option<&str>, args: &[&str]) -> String {
        self.agent("codex", cwd, session, args, |c| {
            c.env("REVL_CODEX", agent_bin("REVL_TEST_CODEX"))
                .env("FAKE_KEY", "x");
        })
    }

    /// A parallel fork of `s` at `at` into `ROOT/name`: the branch's id and its directory.
    fn fork_into(&self, s: &str, at: &str, name: &str) -> (String, PathBuf) {
        let plan = self.revl(&["fork", s, "--at", at]);
        let dir = self.root.join(name);
        let done = self.revl(&[
            "fork-confirm",
            s,
            "--hash",
            plan["hash"].as_str().unwrap(),
            "--into",
            dir.to_str().unwrap(),
        ]);
        let b = done["branch"]
            .as_str()
            .or(done["session"].as_str())
            .expect("the branch's id")
            .to_string();
        (b, std::fs::canonicalize(&dir).unwrap())
    }

    fn session(&self) -> String {
        let s = self.revl(&["sessions"]);
        s["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["workspace"].as_str() == Some(self.ws.to_str().unwrap()))
            .and_then(|x| x["session"].as_str().or(x["id"].as_str()))
            .expect("the session revl agent made")
            .to_string()
    }

    fn labels(&self, s: &str) -> Vec<String> {
        self.revl(&["timeline", s])["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["label"].as_str().unwrap().to_string())
            .collect()
    }
}

fn result_of(fake: &FakeModel, id: &str) -> (String, bool) {
    fake.results()
        .into_iter()
        .find(|r| r.0 == id)
        .map(|r| (r.1, r.2))
        .unwrap_or_else(|| panic!("no result for {id}: {:?}", fake.results()))
}

/// The texts of the user's messages in the last request the model got (Anthropic
/// `messages`, OpenAI `input`): the prompts of the conversation the agent sent.
fn prompts_sent(fake: &FakeModel) -> Vec<String> {
    let reqs = fake.requests.lock().unwrap();
    let last = reqs.last().expect("a request");
    let mut out = Vec::new();
    let items = last["messages"]
        .as_array()
        .or(last["input"].as_array())
        .cloned()
        .unwrap_or_default();
    for m in items.iter().filter(|m| m["role"] == "user") {
        match &m["content"] {
            Value::String(t) => out.push(t.clone()),
            Value::Array(a) => out.extend(
                a.iter()
                    .filter(|c| matches!(c["type"].as_str(), Some("text" | "input_text")))
                    .filter_map(|c| c["text"].as_str().map(str::to_string)),
            ),
            _ => {}
        }
    }
    out
}

/// Every path under /tmp whose name names Claude Code or Codex, with its size and
/// modification time: what the agents would leave there (their cwd files, task output).
fn agent_tmp() -> std::collections::BTreeMap<PathBuf, (u64, Option<std::time::SystemTime>)> {
    fn walk(
        d: &Path,
        depth: usize,
        named: bool,
        out: &mut std::collections::BTreeMap<PathBuf, (u64, Option<std::time::SystemTime>)>,
    ) {
        let Ok(rd) = std::fs::read_dir(d) else { return };
        for e in rd.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().to_lowercase();
            let ours = named || name.contains("claude") || name.contains("codex");
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if ours {
                out.insert(p.clone(), (m.len(), m.modified().ok()));
            }
            if m.is_dir() && depth < 4 && (ours || depth == 0) {
                walk(&p, depth + 1, ours, out);
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(Path::new("/tmp"), 0, false, &mut out);
    out
}

fn claude_scenario(nobody: bool) {
    let tmp_before = agent_tmp();
    let r = Run::new(nobody);
    let ws = r.ws.to_str().unwrap().to_string();
    let sid = "0b1c2d3e-4f50-4a6b-8c7d-8e9f00112233";
    // Turn 1: directories made, a cd carried between commands, output read back, the edit
    // tools.
    let turn1 = vec![
        Say::Call(
            "Bash",
            json!({"command": "mkdir -p src/old build && cd src && printf 'one\\n' > a.txt && pwd"}),
        ),
        Say::Call("Bash", json!({"command": "pwd && cat a.txt && ls"})),
        Say::Call(
            "Write",
            json!({"file_path": format!("{ws}/src/notes.md"), "content": "v1\n"}),
        ),
        Say::Call(
            "Edit",
            json!({"file_path": format!("{ws}/src/notes.md"), "old_string": "v1", "new_string": "v2"}),
        ),
        Say::Text("turn one done"),
    ];
    let fake = FakeModel::start(Api::Anthropic, turn1);
    r.claude(
        &fake,
        &r.ws,
        None,
        &["-p", "set up the project\nsecond line", "--session-id", sid],
    );
    assert_eq!(result_of(&fake, "toolu_0").0, format!("{ws}/src"));
    assert_eq!(
        result_of(&fake, "toolu_1").0,
        format!("{ws}/src\none\na.txt\nold"),
        "the cd carried"
    );
    assert_eq!(
        std::fs::read_to_string(r.ws.join("src/notes.md")).unwrap(),
        "v2\n"
    );
    let s = r.session();
    let after_turn1 = snapshot(&r.ws);
    // Turn 2 (the conversation resumed): a directory deleted, a command that fails.
    let mut turn2 = vec![Say::Text("-"); 5];
    turn2.extend([
        Say::Call(
            "Bash",
            json!({"command": "rm -rf src/old build && echo gone; echo bad >&2; exit 4"}),
        ),
        Say::Call(
            "Write",
            json!({"file_path": format!("{ws}/src/b.txt"), "content": "two\n"}),
        ),
        Say::Text("turn two done"),
    ]);
    let fake = FakeModel::start(Api::Anthropic, turn2);
    r.claude(&fake, &r.ws, None, &["-p", "clean up", "--resume", sid]);
    let (out, err) = result_of(&fake, "toolu_5");
    assert!(err, "a failing command is an error for the agent: {out}");
    assert!(
        out.contains("Exit code 4") && out.contains("gone") && out.contains("bad"),
        "{out}"
    );
    assert!(!r.ws.join("build").exists() && !r.ws.join("src/old").exists());
    // Turn 3.
    let mut turn3 = vec![Say::Text("-"); 8];
    turn3.extend([
        Say::Call(
            "Bash",
            json!({"command": "mkdir -p dist && echo three > dist/out && cd dist && pwd"}),
        ),
        Say::Call("Bash", json!({"command": "pwd && cat out"})),
        Say::Text("turn three done"),
    ]);
    let fake = FakeModel::start(Api::Anthropic, turn3);
    r.claude(&fake, &r.ws, None, &["-p", "build it", "--resume", sid]);
    assert_eq!(result_of(&fake, "toolu_9").0, format!("{ws}/dist\nthree"));
    let labels = r.labels(&s);
    let turns: Vec<&String> = labels
        .iter()
        .filter(|l| l.starts_with("claude turn"))
        .collect();
    assert_eq!(
        turns,
        [
            "claude turn 1: set up the project",
            "claude turn 2: clean up",
            "claude turn 3: build it"
        ]
    );
    assert!(
        labels.contains(&"claude: Edit src/notes.md".to_string()),
        "{labels:?}"
    );
    assert!(
        labels
            .iter()
            .any(|l| l.starts_with("exec claude: rm -rf src/old build")),
        "{labels:?}"
    );
    // Every step records the agent call.
    let origins: Vec<Value> = records(&r.store.join("sessions").join(&s).join("wal.jsonl"))
        .into_iter()
        .filter(|x| x["record"] == "step" && x["kind"] == "effect")
        .map(|x| x["detail"]["origin"].clone())
        .collect();
    assert!(
        origins.iter().all(|o| o["agent"] == "claude"
            && o["agentSession"] == sid
            && o["toolUse"].is_string()),
        "{origins:?}"
    );
    // A parallel fork where turn 3 began, and the agent resumed in the branch: its
    // conversation holds turns 1 and 2 (8 answers of the model), not turn 3.
    let (b, bdir) = r.fork_into(&s, "turn:3", "branch");
    let mut script = vec![Say::Text("-"); 8];
    script.extend([
        Say::Call(
            "Bash",
            json!({"command": "pwd && ls src && echo branch > src/branch.txt"}),
        ),
        Say::Text("branched"),
    ]);
    let fake = FakeModel::start(Api::Anthropic, script);
    let said = r.claude(&fake, &r.root, Some(&b), &["-p", "try another way"]);
    assert!(
        said.contains(&format!("{{agent: claude, from: {sid}, turns kept: 2}}")),
        "{said}"
    );
    let sent = prompts_sent(&fake);
    assert!(
        sent.iter().any(|p| p == "clean up") && !sent.iter().any(|p| p == "build it"),
        "{sent:?}"
    );
    assert_eq!(
        result_of(&fake, "toolu_8").0,
        format!("{}\na.txt\nb.txt\nnotes.md", bdir.display())
    );
    // A parallel fork where turn 2 began: the conversation resumes with turn 1 only, its
    // prompt and its tool results, and none of turns 2 and 3.
    let (b2, _) = r.fork_into(&s, "turn:2", "branch2");
    let mut script = vec![Say::Text("-"); 5];
    script.push(Say::Text("next done"));
    let fake = FakeModel::start(Api::Anthropic, script);
    let said = r.claude(&fake, &r.root, Some(&b2), &["-p", "next"]);
    assert!(
        said.contains(&format!("{{agent: claude, from: {sid}, turns kept: 1}}")),
        "{said}"
    );
    let sent = prompts_sent(&fake);
    assert!(
        sent.iter().any(|p| p == "set up the project\nsecond line")
            && sent.iter().any(|p| p == "next"),
        "{sent:?}"
    );
    assert!(
        !sent.iter().any(|p| p == "clean up" || p == "build it"),
        "{sent:?}"
    );
    assert_eq!(
        result_of(&fake, "toolu_1").0,
        format!("{ws}/src\none\na.txt\nold"),
        "turn 1's tool results"
    );
    assert!(
        !fake.results().iter().any(|r| r.0 == "toolu_5"),
        "no tool result of turn 2: {:?}",
        fake.results()
    );
    // Looked at as the run's user: an unprivileged user's layered DIR is its FUSE mount,
    // which no other user (root included) may look into.
    let exists = |p: &Path| {
        r.command("test", &r.root)
            .arg("-e")
            .arg(p)
            .status()
            .unwrap()
            .success()
    };
    let listing = r
        .command("ls", &r.root)
        .arg("-la")
        .arg(bdir.join("src"))
        .arg(&bdir)
        .output()
        .unwrap();
    let seen = format!(
        "{}{}\nthe branch: {}",
        String::from_utf8_lossy(&listing.stdout),
        String::from_utf8_lossy(&listing.stderr),
        r.revl(&["timeline", &b])
    );
    assert!(exists(&bdir.join("src/branch.txt")), "{seen}");
    assert!(!exists(&bdir.join("dist")), "{seen}");
    assert!(
        !r.ws.join("src/branch.txt").exists(),
        "the branch's command stayed in the branch"
    );
    // A hand edit, then back to where turn 2 began: byte for byte as after turn 1, the
    // hand edit preserved and listed.
    std::fs::write(r.ws.join("src/a.txt"), "by hand\n").unwrap();
    let back = r.revl(&["step-back", &s, "--to", "turn:2"]);
    assert_eq!(snapshot(&r.ws), after_turn1);
    let text = back.to_string();
    assert!(
        text.contains("src/a.txt"),
        "the hand edit is listed: {text}"
    );
    assert_eq!(
        back["turnsUnwound"],
        json!(["claude turn 2: clean up", "claude turn 3: build it"])
    );
    let v = r.revl(&["verify", &s]);
    assert_eq!(v["drift"], json!([]), "{v}");
    // Claude Code's temporary files were revl's (CLAUDE_CODE_TMPDIR): nothing of the
    // agent's changed under /tmp.
    assert_eq!(agent_tmp(), tmp_before, "Claude Code wrote under /tmp");
}

#[test]
#[ignore = "needs Claude Code and Codex from npm: run by scripts/test (README)"]
fn claude_code_every_command_and_edit_a_step_as_root() {
    claude_scenario(false);
}

#[test]
#[ignore = "needs Claude Code and Codex from npm: run by scripts/test (README)"]
fn claude_code_every_command_and_edit_a_step_unprivileged() {
    claude_scenario(true);
}

fn codex_scenario(nobody: bool) {
    let r = Run::new(nobody);
    let fake = FakeModel::start(
        Api::OpenAi,
        vec![
            Say::Call(
                "exec_command",
                json!({"cmd": "mkdir -p d/e && echo x > d/e/f && cat d/e/f"}),
            ),
            Say::Call("exec_command", json!({"cmd": "ls d; echo bad >&2; exit 3"})),
            Say::Call(
                "apply_patch",
                json!({"patch": "*** Begin Patch\n*** Add File: d/p.txt\n+patched\n*** End Patch\n"}),
            ),
            Say::Text("done"),
            // Turns 2 and 3 (the conversation resumed).
            Say::Call("exec_command", json!({"cmd": "echo two > two.txt"})),
            Say::Text("two done"),
            Say::Call("exec_command", json!({"cmd": "echo three > three.txt"})),
            Say::Text("three done"),
            // The branch's turn, resumed after turn 1 (4 answers).
            Say::Text("branch done"),
        ],
    );
    // The user's own Codex home: read (its config), never written.
    fake.codex_config(&r.home.join(".codex"));
    if r.nobody {
        Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(&r.home)
            .status()
            .unwrap();
    }
    let before = snapshot(&r.home);
    r.codex(
        &r.ws,
        None,
        &["exec", "--skip-git-repo-check", "make the files"],
    );
    assert!(
        result_of(&fake, "call_0").0.contains("Output:\nx\n"),
        "{:?}",
        fake.results()
    );
    let (out, _) = result_of(&fake, "call_1");
    assert!(
        out.contains("exited with code 3") && out.contains("bad"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(r.ws.join("d/p.txt")).unwrap(),
        "patched\n"
    );
    let s = r.session();
    let labels = r.labels(&s);
    assert_eq!(labels[1], "codex turn 1: make the files");
    assert!(
        labels.iter().any(|l| l == "codex: apply_patch d/p.txt"),
        "{labels:?}"
    );
    assert_eq!(
        labels
            .iter()
            .filter(|l| l.starts_with("exec codex: "))
            .count(),
        2,
        "{labels:?}"
    );
    assert_eq!(snapshot(&r.home), before, "the user's home is untouched");
    // Turns 2 and 3: the same conversation resumed (`exec resume ID PROMPT`).
    let agent_session = records(&r.store.join("sessions").join(&s).join("wal.jsonl"))
        .into_iter()
        .find_map(|x| {
            x["detail"]["origin"]["agentSession"]
                .as_str()
                .map(str::to_string)
        })
        .expect("the steps record Codex's session id");
    for (prompt, file) in [("second turn", "two.txt"), ("third turn", "three.txt")] {
        r.codex(
            &r.ws,
            None,
            &[
                "exec",
                "--skip-git-repo-check",
                "resume",
                &agent_session,
                prompt,
            ],
        );
        assert!(r.ws.join(file).exists(), "{prompt}: {:?}", fake.results());
    }
    let labels = r.labels(&s);
    assert!(
        labels.iter().any(|l| l == "codex turn 3: third turn"),
        "{labels:?}"
    );
    // A parallel fork where turn 2 began, Codex resumed in the branch: its conversation
    // holds turn 1 (its prompt and its tool results), none of turns 2 and 3.
    let (b, _) = r.fork_into(&s, "turn:2", "branch");
    let asked = fake.requests.lock().unwrap().len();
    let said = r.codex(
        &r.root,
        Some(&b),
        &["exec", "--skip-git-repo-check", "next"],
    );
    assert!(
        said.contains(&format!(
            "{{agent: codex, from: {agent_session}, turns kept: 1}}"
        )),
        "{said}"
    );
    let sent = prompts_sent(&fake);
    assert!(
        sent.iter().any(|p| p == "make the files") && sent.iter().any(|p| p == "next"),
        "{sent:?}"
    );
    assert!(
        !sent.iter().any(|p| p == "second turn" || p == "third turn"),
        "{sent:?}"
    );
    assert!(
        result_of(&fake, "call_0").0.contains("Output:\nx\n"),
        "turn 1's tool results: {:?}",
        fake.results()
    );
    // The branch's first request: turn 1's three tool results, none of turn 2's.
    let first = fake.requests.lock().unwrap()[asked].clone();
    let outputs: Vec<&str> = first["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| {
            matches!(
                i["type"].as_str(),
                Some("function_call_output" | "custom_tool_call_output")
            )
        })
        .filter_map(|i| i["call_id"].as_str())
        .collect();
    assert_eq!(outputs, ["call_0", "call_1", "call_2"], "{first}");
    assert_eq!(snapshot(&r.home), before, "the user's home is untouched");
    r.revl(&["step-back", &s, "--to", "turn:1"]);
    assert_eq!(snapshot(&r.ws).len(), 0, "back where the turn began");
}

#[test]
#[ignore = "needs Claude Code and Codex from npm: run by scripts/test (README)"]
fn codex_every_command_and_patch_a_step_as_root() {
    codex_scenario(false);
}

#[test]
#[ignore = "needs Claude Code and Codex from npm: run by scripts/test (README)"]
fn codex_every_command_and_patch_a_step_unprivileged() {
    codex_scenario(true);
}

/// docs/agents.md's two-line setups, run as written (`cd my-project`, `revl agent …`) with
/// `revl`, `claude` and `codex` on PATH, against the scripted model.
#[test]
#[ignore = "needs Claude Code and Codex from npm: run by scripts/test (README)"]
fn the_docs_setup_runs_as_written() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/agents.md"))
            .unwrap();
    let blocks: Vec<String> = doc
        .split("```sh\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap().to_string())
        .collect();
    assert_eq!(blocks.len(), 2, "one setup block per agent");
    for (block, agent) in blocks.iter().zip(["claude", "codex"]) {
        assert!(block.contains(&format!("revl agent {agent}")), "{block}");
        let r = Run::new(false);
        let project = r.root.join("my-project");
        std::fs::create_dir_all(&project).unwrap();
        // Codex wants a git repository (as a user's project is).
        assert!(Command::new("git")
            .args(["init", "-q"])
            .current_dir(&project)
            .status()
            .unwrap()
            .success());
        let bin_dir = r.root.join("bin");
        std::fs::create_dir_all(&bin_dir).unwrap();
        for (name, target) in [
            ("revl", bin().to_string()),
            ("claude", agent_bin("REVL_TEST_CLAUDE")),
            ("codex", agent_bin("REVL_TEST_CODEX")),
        ] {
            std::os::unix::fs::symlink(target, bin_dir.join(name)).unwrap();
        }
        let (api, call) = match agent {
            "claude" => (
                Api::Anthropic,
                Say::Call(
                    "Bash",
                    json!({"command": "mkdir tests && echo ok > tests/t.txt"}),
                ),
            ),
            _ => (
                Api::OpenAi,
                Say::Call(
                    "exec_command",
                    json!({"cmd": "mkdir tests && echo ok > tests/t.txt"}),
                ),
            ),
        };
        let fake = FakeModel::start(api, vec![call, Say::Text("done")]);
        fake.codex_config(&r.home.join(".codex"));
        let path = format!(
            "{}:{}",
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut c = r.command("/bin/bash", &r.root);
        c.args(["-e", "-c", block])
            .env("PATH", path)
            .env("REVL_STORE", &r.store)
            .env("FAKE_KEY", "x")
            .stdin(std::process::Stdio::null());
        fake.claude_env(&mut c);
        let o = c.output().unwrap();
        assert!(
            o.status.success(),
            "{agent}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(
            std::fs::read_to_string(project.join("tests/t.txt")).unwrap(),
            "ok\n"
        );
        let s = r.revl(&["sessions"]);
        let id = s["sessions"][0]["session"]
            .as_str()
            .or(s["sessions"][0]["id"].as_str())
            .unwrap()
            .to_string();
        let labels = r.labels(&id);
        assert_eq!(
            labels[1],
            format!("{agent} turn 1: add a test for the parser")
        );
        assert_eq!(
            labels[2],
            format!("exec {agent}: mkdir tests && echo ok > tests/t.txt (2 changes)")
        );
    }
}
