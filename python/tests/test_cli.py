"""The `revl` command installed with the package: the same command line as the Rust binary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import revl

from conftest import REVL_CLI, CliRun

# A manifest tool that never reads the JSON revl writes to its stdin: the pipe is closed by
# the time revl writes (or soon after). The Rust binary ignores SIGPIPE (EPIPE is an error
# it handles); the installed command must behave the same.
NO_STDIN_MANIFEST = """
[[tool]]
name = "stamp"
class = "effect"
scope = ["fs"]
run = ["true"]
undo = "unstamp"

[[tool]]
name = "unstamp"
class = "inverse"
scope = ["fs"]
run = ["true"]
"""


def test_the_command_is_installed_with_the_package(cli: Callable[..., CliRun]) -> None:
    assert REVL_CLI.parent == Path(sys.executable).parent
    run = cli("--version", json_out=False)
    assert run.rc == 0 and run.stdout.startswith("revl "), run.stdout
    run = cli("sessions")
    assert run.rc == 0 and run.doc == {"sessions": []}


def test_cli_and_python_share_a_session(
    session: revl.Session, cli: Callable[..., CliRun], base: Path
) -> None:
    run = cli("write", session.id, "from-cli.txt", "--content", "hi")
    assert run.rc == 0 and run.doc["step"] == 1
    assert session.read("from-cli.txt") == b"hi"
    session.write("from-py.txt", "yo")
    run = cli("read", session.id, "from-py.txt")
    assert run.rc == 0 and run.doc["content"] == "yo"
    # a prefix of at least 6 works for the CLI too
    assert cli("status", session.id[:6]).doc["head"] == 2


def test_a_session_sees_every_cli_append_between_its_calls(
    session: revl.Session, cli: Callable[..., CliRun], base: Path
) -> None:
    """The Session keeps its state between calls and reads only what was appended since
    (docs/architecture.md, "Incremental attach"): whatever the CLI appends in between is
    seen, in order, and the session's own steps go after it."""
    for i in range(5):
        session.write(f"py{i}.txt", f"p{i}")
        run = cli("write", session.id, f"cli{i}.txt", "--content", f"c{i}")
        assert run.rc == 0 and run.doc["step"] == 2 * i + 2, run.stdout
        assert session.read(f"cli{i}.txt") == f"c{i}".encode()
        assert session.status().head == 2 * i + 2
    labels = [s["label"] for s in session.timeline().steps]
    assert labels[1:] == [
        lbl for i in range(5) for lbl in (f"fs.write py{i}.txt", f"fs.write cli{i}.txt")
    ], labels
    # A WAL cut back underneath the session (a restore from a backup) is read whole.
    wal = Path(session.status().wal)
    full = wal.read_bytes()
    lines = full.splitlines(keepends=True)
    wal.write_bytes(b"".join(lines[:2]))
    assert session.status().head == 0
    wal.write_bytes(full)
    assert session.status().head == 10


def test_cli_usage_error_exits_2(cli: Callable[..., CliRun]) -> None:
    run = cli("frobnicate")
    assert run.rc == 2
    assert run.doc["error"]["code"] == "usage"


def test_a_tool_that_does_not_read_stdin_does_not_kill_the_installed_command(
    store: revl.Store, base: Path, cli: Callable[..., CliRun]
) -> None:
    manifest = base / "m.toml"
    manifest.write_text(NO_STDIN_MANIFEST)
    s = store.new(base / "ws", manifest=manifest)
    # in this Python process (SIGPIPE ignored, as Python sets it): always fine
    for _ in range(10):
        assert s.call("stamp", {}).step is not None
    rcs = [cli("call", s.id, "stamp", "--args", "{}").rc for _ in range(10)]
    assert rcs == [0] * 10, (
        f"the installed `revl call` died {sum(rc != 0 for rc in rcs)}/10 times "
        f"(exit codes {sorted(set(rcs))}; 141 or -13 = killed by SIGPIPE)"
    )
    kinds = [st["kind"] for st in s.timeline().steps]
    assert "opaque" not in kinds, "a killed call left an 'interrupted: outcome unknown' step"
    assert kinds.count("effect") == 20


def test_a_held_send_that_does_not_read_stdin_does_not_kill_commit_confirm(
    store: revl.Store, base: Path, cli: Callable[..., CliRun]
) -> None:
    manifest = base / "q.toml"
    manifest.write_text('[[tool]]\nname = "q"\nclass = "deferred"\nscope = ["net"]\nrun = ["true"]\n')
    outcomes = []
    for i in range(8):
        s = store.new(base / f"ws{i}", manifest=manifest)
        s.call("q", {})
        run = cli("commit-confirm", s.id, "--hash", s.commit().hash)
        st = s.status()
        outcomes.append((run.rc, st.state, len(st.owed)))
    assert outcomes == [(0, "committed", 0)] * 8, (
        "the installed `revl commit-confirm` was killed mid-flush (rc -13: SIGPIPE), leaving "
        f"the send owed with an unknown outcome: {outcomes}"
    )


def test_a_remote_fork_keeps_the_remote_sessions_held_sends(
    store: revl.Store, base: Path, cli: Callable[..., CliRun]
) -> None:
    """docs/fleet.md, "A branch on another machine": a remote fork is confirmed as a
    parallel fork into a new DIR, so nothing is dropped. The remote session's held sends
    stay with it (`parentKeeps.queue`, `droppedDeferred: []`), the branch starts with none,
    and the page says so (it used to speak of held sends that would be dropped)."""

    @revl.tool(cls="deferred", scope=["mail"])
    def send(to: str) -> None:
        raise AssertionError("never runs here")

    s = store.new(base / "ws", tools=[send])
    s.write("f.txt", "1")
    s.write("f.txt", "2")
    queued = s.call(send, {"to": "ann@example.com"})
    bucket = f"file://{base / 'bucket'}"
    assert cli("remote", "add", "origin", bucket).rc == 0
    assert cli("push").rc == 0
    other = str(base / "other-store")

    def there(*args: str) -> CliRun:
        cp = subprocess.run([str(REVL_CLI), "--store", other, "--json", *args], capture_output=True, text=True, timeout=120)
        return CliRun(cp.returncode, cp.stdout, cp.stderr)

    assert there("remote", "add", "origin", bucket).rc == 0
    plan = there("fork", "--remote", "origin", s.id, "--at", "1")
    assert plan.rc == 0, plan.stderr
    assert [d["seq"] for d in plan.doc["droppedDeferred"]] == [queued.seq]  # what a serial fork would drop
    assert "keeps the held sends" in plan.doc["heldSendsByMode"]["parallel"]
    serial = there("fork-confirm", s.id, "--hash", plan.doc["hash"])
    assert serial.rc == 2 and serial.doc["error"]["code"] == "usage", serial.stdout
    done = there("fork-confirm", s.id, "--hash", plan.doc["hash"], "--into", str(base / "branch"))
    assert done.rc == 0, done.stderr
    assert done.doc["mode"] == "parallel" and done.doc["droppedDeferred"] == []
    assert done.doc["parentKeeps"] == {"queue": [queued.seq]}
    assert there("status", done.doc["branch"]).doc["queue"] == []
    assert [q["seq"] for q in s.status().queue] == [queued.seq], "the session keeps its send"
    fleet = (Path(os.environ.get("REVL_REPO", Path(__file__).parents[2])) / "docs/fleet.md").read_text()
    section = fleet[fleet.index("## A branch on another machine") : fleet.index("## The lineage index")]
    assert "held sends that would be dropped" not in section
    assert "Nothing is" in section and "dropped" in section and "`parentKeeps.queue`" in section
