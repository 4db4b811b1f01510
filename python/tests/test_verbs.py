"""Every Session verb once, through the public API, with its real outcome checked (bytes on
disk, modes, steps in the timeline), plus Store.new/session/sessions/log, revl.compare and
revl.diff."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from typing import Any

import revl
from revl import results


def mode_of(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_installed_package_is_typed_and_versioned() -> None:
    pkg = Path(revl.__file__).parent
    assert (pkg / "py.typed").exists()
    assert list(pkg.glob("*.pyi")), "the native module ships a .pyi stub"
    assert isinstance(revl.__version__, str) and revl.__version__


def test_new_returns_a_session_with_a_32_hex_id(store: revl.Store, base: Path) -> None:
    s = store.new(base / "ws")
    assert isinstance(s, revl.Session)
    assert len(s.id) == 32 and all(c in "0123456789abcdef" for c in s.id)
    assert (base / "ws").is_dir(), "new creates a missing workspace"
    assert s.created is not None and s.created.session == s.id
    assert Path(s.created.wal).exists()
    assert Path(s.created.workspace) == (base / "ws").resolve()


def test_store_path_and_default_from_env(store_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert revl.Store(store_dir).path == str(store_dir)
    monkeypatch.setenv("REVL_STORE", str(store_dir / "from-env"))
    assert revl.Store().path == str(store_dir / "from-env")


def test_new_takes_the_workspaces_revl_toml_by_default(store: revl.Store, base: Path) -> None:
    (base / "ws").mkdir()
    (base / "ws/revl.toml").write_text(
        '[[tool]]\nname = "queue_it"\nclass = "deferred"\nscope = ["net"]\nrun = ["true"]\n'
    )
    s = store.new(base / "ws")
    q = s.call("queue_it", {"n": 1})
    assert q.queued is True
    assert s.status().queue == [
        {"seq": q.seq, "tool": "queue_it", "service": "queue_it", "method": "call", "args": {"n": 1}}
    ]
    # the session uses its copy: editing the file later changes nothing
    (base / "ws/revl.toml").write_text("")
    assert s.call("queue_it", {"n": 2}).queued is True


def test_write_str_and_bytes(session: revl.Session, base: Path) -> None:
    r = session.write("notes/a.txt", "héllo\n")
    assert isinstance(r, results.Stepped)
    assert r.step == 1 and r.label == "fs.write notes/a.txt"
    assert (base / "ws/notes/a.txt").read_bytes() == "héllo\n".encode()
    r2 = session.write("b.bin", b"\x00\xff\x10")
    assert r2.step == 2
    assert (base / "ws/b.bin").read_bytes() == b"\x00\xff\x10"
    # bytearray and memoryview-like inputs are bytes too
    session.write("c.bin", bytearray(b"\x01\x02"))
    assert (base / "ws/c.bin").read_bytes() == b"\x01\x02"


def test_delete_rename_mkdir(session: revl.Session, base: Path) -> None:
    ws = base / "ws"
    session.write("a.txt", "a")
    d = session.mkdir("sub/dir")
    assert d.label == "fs.mkdir sub/dir" and (ws / "sub/dir").is_dir()
    r = session.rename("a.txt", "sub/dir/a2.txt")
    assert not (ws / "a.txt").exists()
    assert (ws / "sub/dir/a2.txt").read_text() == "a"
    assert r.label == "fs.rename a.txt -> sub/dir/a2.txt"
    x = session.delete("sub")
    assert not (ws / "sub").exists()
    assert x.step == r.step + 1
    kinds = [s["kind"] for s in session.timeline().steps]
    assert kinds == ["hinge", "effect", "effect", "effect", "effect"]


def test_chmod_int_and_string(session: revl.Session, base: Path) -> None:
    f = base / "ws/x.sh"
    session.write("x.sh", "#!/bin/sh\n")
    session.chmod("x.sh", 0o755)
    assert mode_of(f) == 0o755
    session.chmod("x.sh", "600")
    assert mode_of(f) == 0o600
    session.chmod("x.sh", "0o640")
    assert mode_of(f) == 0o640
    assert session.read_doc("x.sh").mode == "0640"
    with pytest.raises(revl.BadArgs):
        session.chmod("x.sh", "rwx")
    assert mode_of(f) == 0o640


def test_read_now_and_at(session: revl.Session) -> None:
    session.write("a.txt", "one")  # step 1
    session.write("a.txt", "two")  # step 2
    session.write("bin", b"\xff\x00")  # step 3
    assert session.read("a.txt") == b"two"
    assert session.read("a.txt", at=1) == b"one"
    assert session.read("a.txt", at=2) == b"two"
    assert session.read("bin") == b"\xff\x00"
    assert isinstance(session.read("a.txt"), bytes)
    with pytest.raises(revl.Absent):
        session.read("a.txt", at=-1)  # before every step
    with pytest.raises(revl.Absent):
        session.read("a.txt", at=0)  # the hinge: not written yet


def test_read_doc_text_and_binary(session: revl.Session) -> None:
    session.write("t.txt", "text")
    session.write("b.bin", b"\xff\xfe")
    t = session.read_doc("t.txt")
    assert isinstance(t, results.FileRead)
    assert t.path == "t.txt" and t.content == "text" and t.content_base64 is None
    b = session.read_doc("b.bin")
    assert b.content is None and b.content_base64 == "//4="
    old = session.read_doc("t.txt", at=1)
    assert old.content == "text" and old.at == 1


def test_list(session: revl.Session) -> None:
    session.write("a.txt", "12345")
    session.mkdir("d")
    session.write("d/inner", "x")
    top = session.list()
    assert isinstance(top, results.Listing)
    by_name = {e["name"]: e for e in top.entries}
    assert set(by_name) == {"a.txt", "d"}
    assert by_name["a.txt"]["kind"] == "file" and by_name["a.txt"]["size"] == 5
    assert by_name["d"]["kind"] == "dir"
    inner = session.list("d")
    assert [e["name"] for e in inner.entries] == ["inner"]


def test_provide_and_inspect(session: revl.Session) -> None:
    p = session.provide("API_BASE", "https://example.test")
    assert p.label == "provide API_BASE"
    session.write("a", "1")
    assert session.status().provisions == {"API_BASE": "https://example.test"}
    i = session.inspect(p.step)
    assert isinstance(i, results.Inspect)
    assert i.at == p.step
    assert i.active_provisions == {"API_BASE": "https://example.test"}
    assert i.ahead_of_here == [p.step + 1]
    before = session.inspect(-1)
    assert before.at_label == "(before every step)"
    assert before.active_provisions == {}


def test_boundary(session: revl.Session) -> None:
    b = session.boundary("turn-1")
    assert b.step == 1
    step = session.timeline().steps[1]
    assert step["kind"] == "boundary" and "turn-1" in step["label"]
    b2 = session.boundary()
    assert b2.step == 2


def test_exec_records_its_changes_as_one_step(session: revl.Session, base: Path) -> None:
    r = session.exec(["sh", "-c", "echo made > made.txt; echo out; echo err >&2; exit 3"])
    assert isinstance(r, results.ExecResult)
    assert r.exit_code == 3
    assert r.stdout == "out\n" and r.stderr == "err\n"
    assert (base / "ws/made.txt").read_text() == "made\n"
    assert [c["path"] for c in r.changes] == ["made.txt"]
    assert session.timeline().steps[r.step]["kind"] == "effect"
    # and it rewinds like any effect
    session.step_back(0)
    assert not (base / "ws/made.txt").exists()


def test_exec_timeout_and_cwd(session: revl.Session, base: Path) -> None:
    session.mkdir("sub")
    r = session.exec(["sh", "-c", "pwd > here.txt"], cwd="sub")
    assert r.exit_code == 0
    assert (base / "ws/sub/here.txt").exists()
    t = session.exec(["sleep", "5"], timeout=0.3)
    assert t.timed_out is True
    with pytest.raises(TypeError):
        session.exec("echo hi")  # type: ignore[arg-type]


def test_timeline(session: revl.Session) -> None:
    session.write("a", "1")
    session.provide("k", "v")
    t = session.timeline()
    assert isinstance(t, results.Timeline)
    assert t.session == session.id and t.state == "live" and t.head == 2 and t.torn is False
    assert [s["index"] for s in t.steps] == [0, 1, 2]
    assert [s["kind"] for s in t.steps] == ["hinge", "effect", "provision"]
    assert t.accumulated == [2, 1]
    assert "claims nothing" in t.guarantee


def test_status(session: revl.Session, base: Path) -> None:
    st = session.status()
    assert isinstance(st, results.Status)
    assert st.session == session.id and st.state == "live" and st.head == 0
    assert st.queue == [] and st.owed == []
    assert Path(st.workspace) == (base / "ws").resolve()
    assert Path(st.wal).is_file()
    assert st.parent is None  # optional keys read as None


def test_verify_reports_drift_as_data(session: revl.Session, base: Path) -> None:
    session.write("a.txt", "as revl wrote it")
    clean = session.verify()
    assert isinstance(clean, results.Verify)
    assert clean.drift == []
    (base / "ws/a.txt").write_text("changed by hand")
    drifted = session.verify()  # no exception: drift is data
    assert [d["path"] for d in drifted.drift] == ["a.txt"]
    assert drifted.drift[0]["expected"] != drifted.drift[0]["actual"]


def test_step_back_scoped_restores_files(session: revl.Session, base: Path) -> None:
    ws = base / "ws"
    session.write("a.txt", "v1")  # 1
    session.write("a.txt", "v2")  # 2
    session.write("b.txt", "b")  # 3
    session.provide("k", "v")  # 4
    r = session.step_back(1)
    assert isinstance(r, results.StepBackReport)
    assert r.to == 1 and r.live is True and r.compensate is False
    assert sorted(e["index"] for e in r.inverses_ran) == [2, 3]
    assert [e["index"] for e in r.provisions_withdrawn] == [4]
    assert (ws / "a.txt").read_text() == "v1"
    assert not (ws / "b.txt").exists()
    assert session.status().provisions == {}
    # live after it: new steps go on
    session.write("c.txt", "c")
    assert (ws / "c.txt").read_text() == "c"


def test_step_back_compensating(session: revl.Session, base: Path) -> None:
    session.write("a.txt", "v1")
    session.write("a.txt", "v2")
    r = session.step_back(0, mode="compensating")
    assert r.to == 0 and r.live is True
    assert r.compensations_ran == []
    assert [e["index"] for e in r.inverses_ran] == [2, 1]
    assert not (base / "ws/a.txt").exists()
    with pytest.raises(revl.BadArgs):
        session.step_back(0, mode="sideways")
    with pytest.raises(revl.Undone):
        session.step_back(2)  # undone by the rewind above


def test_fork_serial_freezes_parent_and_branch_is_a_session(
    session: revl.Session, base: Path
) -> None:
    ws = base / "ws"
    session.write("a.txt", "at-1")  # 1
    session.write("a.txt", "after")  # 2
    plan = session.fork(1)
    assert isinstance(plan, results.ForkReport)
    assert plan.forked is False and plan.at == 1 and len(plan.hash) == 64
    assert plan.branch is None and plan.clean is True
    assert (ws / "a.txt").read_text() == "after", "fork enumerates, changes nothing"
    done = session.fork_confirm(plan.hash)
    assert done.forked is True
    branch = done.branch
    assert isinstance(branch, revl.Session)
    assert branch.id == done.branch_id != session.id
    assert (ws / "a.txt").read_text() == "at-1"
    assert session.status().state == "frozen"
    assert session.status().branch == branch.id
    bst = branch.status()
    assert bst.state == "live" and bst.parent == session.id and bst.forked_at == 1
    with pytest.raises(revl.Frozen) as exc:
        session.write("x", "y")
    assert branch.id in exc.value.message
    # reads still work on the frozen parent
    assert session.read("a.txt", at=2) == b"after"
    branch.write("b.txt", "on the branch")
    assert (ws / "b.txt").read_text() == "on the branch"


def test_fork_parallel_into_dir_leaves_parent_live(session: revl.Session, base: Path) -> None:
    ws, into = base / "ws", base / "alt"
    session.write("a.txt", "at-1")  # 1
    session.write("a.txt", "after")  # 2
    plan = session.fork(1)
    done = session.fork_confirm(plan.hash, into=into)
    assert done.mode == "parallel" and Path(done.into) == into.resolve()
    assert (into / "a.txt").read_text() == "at-1"
    assert (ws / "a.txt").read_text() == "after", "the parent's workspace is untouched"
    assert session.status().state == "live"
    b = done.branch
    assert isinstance(b, revl.Session)
    assert Path(b.status().workspace) == into.resolve()
    # both act, each in its own workspace
    session.write("p.txt", "parent")
    b.write("q.txt", "branch")
    assert (ws / "p.txt").exists() and not (into / "p.txt").exists()
    assert (into / "q.txt").exists() and not (ws / "q.txt").exists()
    # the pending fork was consumed
    with pytest.raises(revl.NoPendingFork):
        session.fork_confirm(plan.hash)


def test_fork_branch_enumerates_and_confirms_in_one_call(
    session: revl.Session, base: Path
) -> None:
    """`fork_branch` writes what `fork` then `fork_confirm(into=...)` write, and gives the
    same branch; its parents are made."""
    ws, into = base / "ws", base / "deep" / "alt"
    session.write("a.txt", "at-1")  # 1
    session.write("a.txt", "after")  # 2
    # A directory inside the live workspace is refused before any parent of it is made.
    with pytest.raises(revl.PathOutside):
        session.fork_branch(1, ws / "inner" / "alt")
    assert not (ws / "inner").exists()
    done = session.fork_branch(1, into)
    assert done.mode == "parallel" and Path(done.into) == into.resolve()
    assert (into / "a.txt").read_text() == "at-1"
    assert (ws / "a.txt").read_text() == "after", "the parent's workspace is untouched"
    assert session.status().state == "live"
    b = done.branch
    assert isinstance(b, revl.Session) and b.status().parent == session.id
    b.write("q.txt", "branch")
    assert not (ws / "q.txt").exists()
    wal = Path(session.status().wal).read_text().splitlines()
    records = [json.loads(line)["record"] for line in wal]
    # As `fork` then `fork_confirm(into=...)`: the pending fork, then the confirm's records.
    tail = records[records.index("fork-pending") :]
    assert tail[-1] == "fork-complete" and "fork-begin" in tail, records
    with pytest.raises(revl.NoPendingFork):
        session.fork_confirm(done.hash or "0" * 64)


def test_commit_and_commit_confirm(session: revl.Session) -> None:
    session.write("a", "1")
    plan = session.commit()
    assert isinstance(plan, results.CommitPlan)
    assert plan.session == session.id and plan.deferred == [] and len(plan.hash) == 64
    assert plan.witnessed["count"] == 1
    assert session.status().state == "live", "commit() only plans"
    done = session.commit_confirm(plan.hash)
    assert isinstance(done, results.CommitResult)
    assert done.committed is True and done.flushed == [] and done.flush_residue == []
    assert session.status().state == "committed"
    with pytest.raises(revl.NotLive):
        session.write("b", "2")


def test_abort_rolls_everything_back(session: revl.Session, base: Path) -> None:
    ws = base / "ws"
    (ws / "keep.txt").write_text("was there before")
    session.write("keep.txt", "overwritten")
    session.write("new.txt", "new")
    r = session.abort()
    assert isinstance(r, results.AbortReport)
    assert r.aborted is True and sorted(r.replayed) == [1, 2]
    assert (ws / "keep.txt").read_text() == "was there before"
    assert not (ws / "new.txt").exists()
    assert session.status().state == "aborted"


def test_note_model(session: revl.Session) -> None:
    s = session.write("a", "1")
    n = session.note_model(
        s.step,
        "provider/model-2026-01",
        tokens_in=120,
        tokens_out=30,
        latency_seconds=1.5,
        attempts=1,
        attempt_ceiling=3,
        outcome="validated",
        cost=0.01,
        currency="USD",
    )
    assert isinstance(n, results.ModelNote)
    assert n.recorded is True and n.step == s.step and n.outcome == "validated"
    assert n.llm["model"]["value"] == "provider/model-2026-01"
    assert n.llm["tokensIn"]["value"] == 120


def test_store_session_by_id_and_prefix(store: revl.Store, session: revl.Session) -> None:
    session.write("a", "1")
    again = store.session(session.id)
    assert again == session and again.id == session.id
    by_prefix = store.session(session.id[:6])
    assert by_prefix.id == session.id
    assert by_prefix.read("a") == b"1"
    with pytest.raises(revl.UnknownSession):
        store.session(session.id[:3])  # shorter than 6


def test_store_sessions_and_log(store: revl.Store, base: Path) -> None:
    a = store.new(base / "wa")
    b = store.new(base / "wb")
    a.write("x", "1")
    listed = store.sessions()
    assert isinstance(listed, results.Sessions)
    assert {s["session"] for s in listed.sessions} == {a.id, b.id}
    heads = {s["session"]: s["head"] for s in listed.sessions}
    assert heads == {a.id: 1, b.id: 0}
    plan = a.fork(0)
    branch = a.fork_confirm(plan.hash).branch
    assert branch is not None
    log = store.log()
    assert isinstance(log, results.Log)
    assert {s["session"] for s in log.sessions} == {a.id, b.id, branch.id}
    assert any(e.get("parent") == a.id and e.get("branch") == branch.id for e in log.edges), log.edges
    family = store.log(a)
    assert {s["session"] for s in family.sessions} == {a.id, branch.id}


def test_compare_parent_and_branch(session: revl.Session) -> None:
    session.write("a", "1")  # 1
    session.write("b", "2")  # 2
    branch = session.fork_confirm(session.fork(1).hash).branch
    assert branch is not None
    branch.write("c", "3")
    c = revl.compare(session, branch)
    assert isinstance(c, results.Compare)
    assert c.relation == "parent-branch" and c.comparable is True
    assert c.diverged_at == 1
    assert c.left["session"] == session.id and c.right["session"] == branch.id
    # by id, with the store named
    assert revl.compare(session.id, branch.id, store=session.store) == c


def test_diff_is_data(store: revl.Store, base: Path) -> None:
    a = store.new(base / "wa")
    b = store.new(base / "wb")
    a.write("same.txt", "x")
    b.write("same.txt", "x")
    a.write("only-a.txt", "a")
    a.write("changed.txt", "left\n")
    b.write("changed.txt", "right\n")
    d = revl.diff(a, b)
    assert isinstance(d, results.Diff)
    assert d.left == a.id and d.right == b.id
    assert sorted(p["path"] for p in d.paths) == ["changed.txt", "only-a.txt"]
    one = revl.diff(a, b, "changed.txt")
    assert [p["path"] for p in one.paths] == ["changed.txt"]
    assert "-left" in one.paths[0]["diff"] and "+right" in one.paths[0]["diff"]
    # `at`: a side as it was at a step (a's step 1 wrote only same.txt)
    early = revl.diff(a, b, at=(1, 1))
    assert early.paths == []
    assert revl.diff(a, a).paths == []


def test_results_are_read_only_and_snake_cased(session: revl.Session) -> None:
    r = session.write("a", "1")
    with pytest.raises(AttributeError):
        r.step = 5  # type: ignore[misc]
    with pytest.raises(AttributeError):
        r.no_such_field  # noqa: B018
    d = r.to_dict()
    d["step"] = 99
    assert r.step == 1, "to_dict returns a copy"
    plan = session.commit()
    assert plan.to_dict()["hash"] == plan.hash


def test_bind_position_head_and_fork_preview(session: revl.Session, cli: Any) -> None:
    """The checkpoint verbs (docs/langgraph.md): a checkpoint bound to a position (a `bind`
    record `revl log` shows), the session's position, and a fork enumeration that records
    nothing."""
    assert session.head == 0
    session.write("a.txt", "1")
    b = session.bind("ck-1")
    assert isinstance(b, results.Bound)
    assert (b.session, b.checkpoint_id, b.position) == (session.id, "ck-1", 1)
    session.write("a.txt", "2")
    assert session.bind("ck-late", at=1).position == 1
    with pytest.raises(revl.BadArgs):
        session.bind("past", at=9)
    pos = session.position()
    assert isinstance(pos, results.Position)
    assert (pos.state, pos.head, pos.frozen_into) == ("live", 2, None)
    assert pos.checkpoints == [
        {"position": 1, "checkpointId": "ck-1"},
        {"position": 1, "checkpointId": "ck-late"},
    ]
    log = cli("log").doc
    assert log["sessions"][0]["checkpoints"] == pos.checkpoints
    wal = Path(session.created.wal if session.created else "")
    before = wal.read_bytes()
    preview = session.fork_preview(1)
    assert preview.hash and preview.forked is False and preview.clean
    assert wal.read_bytes() == before, "a preview records nothing"
    with pytest.raises(revl.NoPendingFork):
        session.fork_confirm(preview.hash)
    assert session.fork(1).hash == preview.hash
    done = session.fork_confirm(preview.hash)
    assert done.branch is not None
    assert session.position().state == "frozen"
    assert session.position().frozen_into == done.branch.id
    with pytest.raises(revl.Frozen):
        session.bind("on-frozen")
