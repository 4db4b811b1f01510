"""docs/langgraph.md, "What is kept where": a `RevlSaver`'s checkpoints and writes live in the
store, as blobs named by `checkpoint` records in the thread's session's WAL, with the WAL's
integrity, repair and gc, and `revl push` carries them. No second log beside the WAL."""

from __future__ import annotations

import json
import operator
import subprocess
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from conftest import REVL_CLI
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

import revl
from revl.langgraph import RevlSaver, session


class S(TypedDict, total=False):
    xs: Annotated[list[str], operator.add]
    who: str  # set by the input only: later checkpoints use the value the first one kept


def app(saver: RevlSaver, commit: bool = False) -> Any:
    """A graph of two nodes: `write` writes a file through the thread's session, `more`
    adds to the state (and commits the session when `commit`)."""

    def write(state: S, config: RunnableConfig) -> dict[str, list[str]]:
        session(config).write("note.txt", ",".join(state["xs"]))
        return {"xs": ["w"]}

    def more(state: S, config: RunnableConfig) -> dict[str, list[str]]:
        if commit:
            s = session(config)
            s.commit_confirm(s.commit().hash)
        return {"xs": ["m"]}

    g = StateGraph(S)
    g.add_node("write", write)
    g.add_node("more", more)
    g.add_edge(START, "write")
    g.add_edge("write", "more")
    g.add_edge("more", END)
    return g.compile(checkpointer=saver)


def cfg(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


def checkpoint_records(store: Path) -> list[dict[str, Any]]:
    """The `checkpoint` and `checkpoint-writes` records of every WAL of the store."""
    out = []
    for wal in sorted((store / "sessions").glob("*/wal.jsonl")):
        for line in wal.read_bytes().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("record") in ("checkpoint", "checkpoint-writes"):
                out.append(r)
    return out


def blob_path(store: Path, digest: str) -> Path:
    return store / "blobs" / digest[:2] / digest[2:]


def history(a: Any, thread: str) -> list[Any]:
    return [(h.config["configurable"]["checkpoint_id"], h.values) for h in a.get_state_history(cfg(thread))]


def test_checkpoints_are_wal_records_and_blobs_and_survive_a_torn_tail(base: Path) -> None:
    store = base / "store"
    first = RevlSaver(store=store, workspace_root=base / "t")
    a = app(first)
    a.invoke({"xs": ["x"]}, cfg("t1"))
    a.invoke({"xs": ["y"]}, cfg("t1"))
    before = history(a, "t1")
    assert len(before) == 8 and before[0][1] == {"xs": ["x", "w", "m", "y", "w", "m"]}

    # No second log: nothing beside the WALs and the blobs.
    assert not (store / "langgraph").exists()
    assert [p for p in store.rglob("*.jsonl") if p.name != "wal.jsonl"] == []
    recs = checkpoint_records(store)
    ids = {r["id"] for r in recs if r["record"] == "checkpoint"}
    assert ids == {cid for cid, _ in before}
    assert any(r["record"] == "checkpoint-writes" for r in recs)
    for r in recs:
        assert blob_path(store, r["blob"]).is_file(), r

    # A crash mid-append leaves a torn last line: never acknowledged, removed by the next
    # write, and everything before it is read back.
    sid = first.thread_session("t1")
    assert sid is not None
    wal = store / "sessions" / sid.id / "wal.jsonl"
    with wal.open("ab") as f:
        f.write(b'{"record":"checkpoint","thread":"t1","ns":"","id":"torn')
    second = RevlSaver(store=store, workspace_root=base / "t")
    b = app(second)
    assert history(b, "t1") == before
    b.invoke({"xs": ["z"]}, cfg("t1"))
    assert b"torn" not in wal.read_bytes()
    assert b.get_state(cfg("t1")).values["xs"][-3:] == ["z", "w", "m"]
    third = RevlSaver(store=store, workspace_root=base / "t")
    assert history(app(third), "t1") == history(b, "t1")


def test_a_damaged_checkpoint_blob_is_reported_never_skipped(base: Path) -> None:
    store = base / "store"
    a = app(RevlSaver(store=store, workspace_root=base / "t"))
    a.invoke({"xs": ["x"]}, cfg("t1"))
    recs = [r for r in checkpoint_records(store) if r["record"] == "checkpoint"]
    assert recs
    victim = blob_path(store, recs[1]["blob"])
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x20
    victim.chmod(0o600)
    victim.write_bytes(bytes(data))
    with pytest.raises(revl.RevlError) as e:
        RevlSaver(store=store, workspace_root=base / "t")
    assert recs[1]["blob"] in str(e.value) and "damaged" in str(e.value)
    assert recs[1]["id"] in str(e.value)


def test_gc_keeps_the_blobs_of_checkpoints_not_forgotten(base: Path) -> None:
    """`revl gc --apply` keeps every checkpoint a saver can resume from, on a committed
    session too; a pruned one's blob may go, and the checkpoint kept still has all its
    channel values (some were first kept with an older checkpoint)."""
    store = base / "store"
    saver = RevlSaver(store=store, workspace_root=base / "t")
    a = app(saver, commit=True)
    a.invoke({"xs": ["x"], "who": "ann"}, cfg("t1"))
    s = saver.thread_session("t1")
    assert s is not None and s.status().to_dict()["state"] == "committed"
    before = history(a, "t1")
    blobs = {r["blob"] for r in checkpoint_records(store)}
    assert blobs

    def gc() -> dict[str, Any]:
        cp = subprocess.run([str(REVL_CLI), "--store", str(store), "--json", "gc", "--apply"],
                            capture_output=True, text=True)
        assert cp.returncode == 0, cp.stderr
        doc: dict[str, Any] = json.loads(cp.stdout)
        return doc

    gc()
    assert all(blob_path(store, d).is_file() for d in blobs)
    assert history(app(RevlSaver(store=store, workspace_root=base / "t")), "t1") == before

    saver.prune(["t1"], strategy="keep_latest")
    freed = gc()
    assert freed["unreachable"] >= 1
    latest = history(app(RevlSaver(store=store, workspace_root=base / "t")), "t1")
    assert latest == before[:1]
    assert latest[0][1] == {"xs": ["x", "w", "m"], "who": "ann"}


def test_push_carries_the_checkpoint_blobs(base: Path) -> None:
    store = base / "store"
    remote = base / "bucket"
    remote.mkdir()
    saver = RevlSaver(store=store, workspace_root=base / "t")
    app(saver).invoke({"xs": ["x"]}, cfg("t1"))
    s = saver.thread_session("t1")
    assert s is not None

    def run(*args: str) -> str:
        cp = subprocess.run([str(REVL_CLI), "--store", str(store), *args], capture_output=True, text=True)
        assert cp.returncode == 0, (args, cp.stderr)
        return cp.stdout

    run("remote", "add", "origin", remote.as_uri())
    run("push", s.id, "--remote", "origin")
    recs = checkpoint_records(store)
    assert recs
    for r in recs:
        pushed = remote / "blobs" / r["blob"]
        assert pushed.is_file(), r
        assert pushed.read_bytes() == blob_path(store, r["blob"]).read_bytes()
    # The other side reads the session with its checkpoints.
    log = json.loads(run("--json", "log", "--remote", "origin", s.id))
    shown = {c["checkpointId"] for sess in log["sessions"] for c in sess.get("checkpoints", [])}
    assert shown == {r["id"] for r in recs if r["record"] == "checkpoint"}
