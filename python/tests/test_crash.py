"""A Python agent process SIGKILLed in the middle of a commit (its held send had reached the
sink and was blocked before returning), then new processes attaching: nothing is sent twice,
and the interrupted send is reported as owed (outcome unknown), never re-fired."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import revl

from _support import Sink, file_digest
from conftest import CliRun

CHILD = Path(__file__).with_name("_crash_child.py")


def child(base: Path, *args: str) -> subprocess.Popen[str]:
    # cwd outside the source tree: the child imports the installed revl
    return subprocess.Popen(
        [sys.executable, str(CHILD), *args],
        cwd=base,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigkill_mid_commit_nothing_sent_twice_and_the_send_is_owed(
    base: Path, store_dir: Path, sink: Sink, cli: Callable[..., CliRun]
) -> None:
    agent = child(base, "start", str(store_dir), str(base / "ws"), sink.url)
    try:
        assert agent.stdout is not None
        started = json.loads(agent.stdout.readline())
        sid, plan_hash = started["session"], started["hash"]
        assert sink.wait_for(1, timeout=30), "the held send never reached the sink"
        assert agent.poll() is None, "the agent is still inside commit_confirm"
    finally:
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(timeout=30)
    assert agent.returncode == -signal.SIGKILL
    assert sink.count == 1 and sink.bodies == [{"n": 1}]
    assert Path(base / "ws/draft.txt").read_text() == "draft"

    # a new process attaches WITH the function: repair must not re-fire anything
    after = child(base, "attach", str(store_dir), sid, sink.url, plan_hash)
    out, err = after.communicate(timeout=60)
    assert after.returncode == 0, err
    seen: dict[str, Any] = json.loads(out)
    assert sink.count == 1, "nothing is sent twice"

    first = seen["status"]
    assert first["state"] == "committed"
    assert [r["what"] for r in first["repaired"]] == ["commit-finished"]
    assert "owed" in first["repaired"][0]["detail"]
    owed = {o["seq"]: o for o in first["owed"]}
    queued = sorted(owed)
    assert len(queued) == 2, first["owed"]
    interrupted, never_started = owed[queued[0]], owed[queued[1]]
    assert interrupted["args"] == {"n": 1} and interrupted["kind"] == "held-send"
    assert interrupted["tool"] == "send"
    assert "unknown" in interrupted["why"]
    # the second send never started; its outcome is reported the same way (owed, unknown)
    assert never_started["args"] == {"n": 2}
    assert first["queue"] == []
    # the repair is reported once, by the attach that made it
    assert "repaired" not in seen["status_again"]
    assert seen["status_again"]["owed"] == first["owed"]
    # commit attempts on the finished commit are refused; nothing fires
    assert seen["commit"] == "not-live"
    assert seen["commit_confirm"] == "not-live"
    assert seen["abort"] == "not-live"

    # the WAL says why: each send without `flushed` got flush-residue "unconfirmed"
    s = revl.Store(store_dir).session(sid)
    wal = Path(s.status().wal)
    recs = [json.loads(line) for line in wal.read_text().splitlines()]
    kinds = [r["record"] for r in recs]
    assert "flushed" not in kinds
    residue = [r for r in recs if r["record"] == "flush-residue"]
    assert sorted(r["seq"] for r in residue) == queued
    assert {r["error"]["type"] for r in residue} == {"unconfirmed"}
    assert kinds[-1] == "activation-complete"

    # this process, the CLI: the same owed report; the operator's resend needs the function
    st = s.status()
    assert st.owed == first["owed"] and st.state == "committed"
    run = cli("status", sid)
    assert run.rc == 0 and run.doc == st.to_dict()
    before = file_digest(wal)
    resend = cli("resend", sid, "--seq", str(queued[0]))
    assert resend.rc == 1 and resend.doc["error"]["code"] == "tool-unavailable"
    assert "__main__:send" in resend.doc["error"]["message"]
    assert file_digest(wal) == before
    assert sink.count == 1

    # the operator's retry from a process that has the function: that one send, once
    again = child(base, "resend", str(store_dir), sid, sink.url, str(queued[0]))
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    assert json.loads(out) == {"resent": True, "seq": queued[0], "flushed": True}
    assert sink.count == 2 and sink.bodies[-1] == {"n": 1}
    assert cli("status", sid).doc["owed"] == [o for o in first["owed"] if o["seq"] != queued[0]]


def test_sigkill_mid_effect_call_the_step_is_opaque_and_its_undo_never_runs(
    base: Path, store_dir: Path, sink: Sink
) -> None:
    agent = child(base, "start-effect", str(store_dir), str(base / "ws"), sink.url)
    try:
        assert agent.stdout is not None
        sid = json.loads(agent.stdout.readline())["session"]
        assert sink.wait_for(1, timeout=30), "the effect never reached the sink"
        assert agent.poll() is None
    finally:
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(timeout=30)
    assert sink.bodies == [{"reserve": "12B"}]

    after = child(base, "attach-effect", str(store_dir), sid, sink.url)
    out, err = after.communicate(timeout=60)
    assert after.returncode == 0, err
    seen: dict[str, Any] = json.loads(out)
    assert [r["what"] for r in seen["status"]["repaired"]] == ["outcome-unknown"]
    step = seen["timeline"]["steps"][2]
    assert step["kind"] == "opaque"
    assert step["detail"]["repr"] == "interrupted: outcome unknown"
    # a fork over it is refused, honestly; a step-back lists it, never runs its undo
    assert seen["fork"] == "KIND_OPAQUE"
    assert [u["index"] for u in seen["step_back"]["unrestored"]] == [2]
    assert sink.bodies == [{"reserve": "12B"}], "the undo never ran, nothing re-ran"
    assert not (base / "ws/draft.txt").exists(), "the host-confined step before it was rewound"
