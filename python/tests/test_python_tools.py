"""Python functions as tools (docs/python.md, `@revl.tool`), counted at a loopback HTTP sink: held
sends fire exactly once at a confirmed commit and never before; abort and forks drop or keep
them as documented; an effect's undo gets the forward call's args and witness; an emission
needing approval is approved from the installed CLI while the Python object is alive; and a
process that does not hold the function (the CLI, or Python without `tools=`) refuses,
recording nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

import revl

from _support import Sink, file_digest, post
from conftest import CliRun


def wal_records(s: revl.Session) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(s.status().wal).read_text().splitlines()]


class Calls:
    """How many times each tool function ran, and with what."""

    def __init__(self) -> None:
        self.log: list[tuple[str, dict[str, Any]]] = []

    def add(self, name: str, **kw: Any) -> None:
        self.log.append((name, kw))

    def of(self, name: str) -> list[dict[str, Any]]:
        return [kw for n, kw in self.log if n == name]


# ---- held sends through commit ----


def test_held_sends_fire_exactly_once_at_commit_confirm(
    store: revl.Store, base: Path, sink: Sink
) -> None:
    @revl.tool(cls="deferred", scope=["mail"])
    def send_email(to: str, body: str) -> dict[str, Any]:
        post(sink.url, {"to": to, "body": body})
        return {"delivered": to}

    s = store.new(base / "ws", tools=[send_email])
    s.write("reply.md", "thanks")
    q1 = s.call(send_email, {"to": "ana@example.com", "body": "one"})
    q2 = s.call("send_email", {"to": "bo@example.com", "body": "two"})
    assert q1.queued is True and q2.queued is True and q2.seq > q1.seq
    assert sink.count == 0, "a held send fires nothing at the call"
    assert [q["tool"] for q in s.status().queue] == ["send_email", "send_email"]
    plan = s.commit()
    assert [d["seq"] for d in plan.deferred] == [q1.seq, q2.seq]
    assert sink.count == 0, "the plan fires nothing"
    done = s.commit_confirm(plan.hash)
    assert done.committed is True
    assert done.flushed == [q1.seq, q2.seq] and done.flush_residue == []
    assert sink.count == 2, "exactly one request per held send"
    assert sink.bodies == [
        {"to": "ana@example.com", "body": "one"},
        {"to": "bo@example.com", "body": "two"},
    ], "FIFO, with the call's args as keyword arguments"
    # nothing fires again: a new attach with the tools, reads, a refused commit
    again = store.session(s.id, tools=[send_email])
    assert again.status().state == "committed" and again.status().owed == []
    with pytest.raises(revl.NotLive):
        again.commit()
    assert sink.count == 2


def test_the_wal_and_manifest_record_a_python_tool_like_a_manifest_tool(
    store: revl.Store, base: Path, cli: Callable[..., CliRun]
) -> None:
    @revl.tool(cls="deferred", scope=["mail"], service="mail", method="send")
    def send_email(to: str) -> dict[str, str]:
        return {"delivered": to}

    assert send_email.name == "send_email"
    assert send_email.target == f"{__name__}:test_the_wal_and_manifest_record_a_python_tool_like_a_manifest_tool.<locals>.send_email"
    assert send_email(to="direct") == {"delivered": "direct"}, "calling the Tool calls the function"
    s = store.new(base / "ws", tools=[send_email])
    s.call(send_email, {"to": "ana@example.com"})
    s.commit_confirm(s.commit().hash)
    recs = wal_records(s)
    deferred = [r for r in recs if r["record"] == "deferred-emission"]
    assert len(deferred) == 1
    assert deferred[0]["tool"] == "send_email"
    assert deferred[0]["service"] == "mail" and deferred[0]["method"] == "send"
    assert deferred[0]["args"] == {"to": "ana@example.com"}
    assert [r["seq"] for r in recs if r["record"] == "flushed"] == [deferred[0]["seq"]]
    # the manifest copy in the store names the function as python = "module:qualname"
    blob = cli("blob", recs[0]["manifestDigest"], json_out=False)
    assert blob.rc == 0, blob.stderr
    assert 'name = "send_email"' in blob.stdout
    assert f'python = "{send_email.target}"' in blob.stdout


def test_a_held_send_that_raises_is_flush_residue_and_not_retried(
    store: revl.Store, base: Path, sink: Sink, cli: Callable[..., CliRun]
) -> None:
    calls = Calls()

    @revl.tool(cls="deferred", scope=["mail"])
    def flaky(n: int) -> None:
        calls.add("flaky", n=n)
        raise ConnectionRefusedError(f"mail server said no to {n}")

    @revl.tool(cls="deferred", scope=["mail"])
    def good(n: int) -> dict[str, int]:
        post(sink.url, {"n": n})
        return {"n": n}

    s = store.new(base / "ws", tools=[flaky, good])
    bad = s.call(flaky, {"n": 1})
    ok = s.call(good, {"n": 2})
    plan = s.commit()
    done = s.commit_confirm(plan.hash)
    assert done.committed is True
    assert done.flushed == [ok.seq]
    assert len(done.flush_residue) == 1
    residue = done.flush_residue[0]
    assert residue["seq"] == bad.seq
    assert residue["type"] == "ConnectionRefusedError"
    assert "mail server said no to 1" in residue["message"]
    assert flaky.target in residue["message"]
    assert calls.of("flaky") == [{"n": 1}], "it ran once"
    assert sink.count == 1, "the send after it still fired, once"
    # not retried: re-attaching with the tools, reading, committing again
    again = store.session(s.id, tools=[flaky, good])
    assert again.status().state == "committed"
    with pytest.raises(revl.NotLive):
        again.commit_confirm(plan.hash)  # the same plan, once more: refused
    # the operator's resend needs the function: the CLI does not hold it
    wal = Path(s.status().wal)
    before = file_digest(wal)
    run = cli("resend", s.id, "--seq", str(bad.seq))
    assert run.rc == 1 and run.doc["error"]["code"] == "tool-unavailable", run.stdout
    assert flaky.target in run.doc["error"]["message"]
    assert file_digest(wal) == before
    assert calls.of("flaky") == [{"n": 1}] and sink.count == 1


def test_abort_drops_held_sends(store: revl.Store, base: Path, sink: Sink) -> None:
    @revl.tool(cls="deferred", scope=["mail"])
    def send(n: int) -> None:
        post(sink.url, {"n": n})

    s = store.new(base / "ws", tools=[send])
    s.write("a.txt", "x")
    q = s.call(send, {"n": 1})
    r = s.abort()
    assert r.aborted is True
    assert [d["seq"] for d in r.dropped_deferred] == [q.seq]
    assert s.status().state == "aborted" and s.status().queue == []
    assert sink.count == 0
    assert not (base / "ws/a.txt").exists()


def test_step_back_drops_the_held_sends_after_its_step(
    store: revl.Store, base: Path, sink: Sink
) -> None:
    @revl.tool(cls="deferred", scope=["mail"])
    def send(n: int) -> None:
        post(sink.url, {"n": n})

    s = store.new(base / "ws", tools=[send])
    keep = s.call(send, {"n": 1})  # after step 0
    s.write("a", "1")  # step 1
    drop = s.call(send, {"n": 2})  # after step 1
    r = s.step_back(0)
    assert [d["seq"] for d in r.dropped_deferred] == [drop.seq]
    assert [q["seq"] for q in s.status().queue] == [keep.seq]
    done = s.commit_confirm(s.commit().hash)
    assert done.flushed == [keep.seq]
    assert sink.bodies == [{"n": 1}]


def test_serial_fork_drops_the_parents_held_sends(
    store: revl.Store, base: Path, sink: Sink
) -> None:
    @revl.tool(cls="deferred", scope=["mail"])
    def send(n: int) -> None:
        post(sink.url, {"n": n})

    s = store.new(base / "ws", tools=[send])
    s.write("a", "1")  # step 1
    s.call(send, {"n": 1})
    s.write("a", "2")  # step 2
    s.call(send, {"n": 2})
    plan = s.fork(1)
    assert len(plan.dropped_deferred) == 2
    done = s.fork_confirm(plan.hash)
    assert [d["args"]["n"] for d in done.dropped_deferred] == [1, 2]
    assert sink.count == 0
    branch = done.branch
    assert branch is not None
    assert branch.status().queue == [], "a branch starts with an empty queue"
    assert s.status().queue == [], "the parent's queue was dropped"
    with pytest.raises(revl.Frozen):
        s.commit()
    # the branch was attached with the parent's tools: its own held send fires at its commit
    branch.call(send, {"n": 3})
    fired = branch.commit_confirm(branch.commit().hash)
    assert len(fired.flushed) == 1
    assert sink.bodies == [{"n": 3}], "only the branch's own send; the dropped ones never"


def test_parallel_fork_parent_keeps_its_queue_branch_starts_empty(
    store: revl.Store, base: Path, sink: Sink
) -> None:
    @revl.tool(cls="deferred", scope=["mail"])
    def send(n: int) -> None:
        post(sink.url, {"n": n})

    s = store.new(base / "ws", tools=[send])
    s.write("a", "1")  # step 1
    s.write("a", "2")  # step 2
    q = s.call(send, {"n": 1})
    plan = s.fork(1)
    done = s.fork_confirm(plan.hash, into=base / "alt")
    assert done.mode == "parallel"
    assert done.dropped_deferred == []
    assert done.parent_keeps == {"queue": [q.seq]}
    branch = done.branch
    assert branch is not None
    assert branch.status().queue == []
    assert [x["seq"] for x in s.status().queue] == [q.seq]
    # the branch commits first: nothing of the parent's fires
    b = branch.commit_confirm(branch.commit().hash)
    assert b.flushed == [] and sink.count == 0
    # the parent commits: its held send fires once
    p = s.commit_confirm(s.commit().hash)
    assert p.flushed == [q.seq]
    assert sink.bodies == [{"n": 1}]


# ---- effects and their undo, emissions and their compensation ----


def test_scoped_step_back_runs_a_python_undo_once_with_args_and_witness(
    store: revl.Store, base: Path
) -> None:
    calls = Calls()

    @revl.tool(cls="inverse", scope={"caps": ["fs"]})
    def unreserve(args: dict[str, Any], witness: Any) -> None:
        calls.add("unreserve", args=args, witness=witness)

    @revl.tool(cls="effect", scope=["fs"], undo=unreserve)
    def reserve(room: str, nights: int) -> dict[str, Any]:
        calls.add("reserve", room=room, nights=nights)
        return {"reservation": f"{room}-{nights}", "nested": [1, {"ok": True}]}

    s = store.new(base / "ws", tools=[unreserve, reserve])
    r = s.call(reserve, {"room": "12B", "nights": 2})
    assert r.step == 1
    assert r.witness == {"reservation": "12B-2", "nested": [1, {"ok": True}]}
    step = s.timeline().steps[1]
    assert step["kind"] == "effect" and step["detail"]["witness"] == r.witness
    assert step["undo"] == {"tool": "unreserve", "type": "tool"}
    s.write("x", "after")
    back = s.step_back(0)
    assert [e["index"] for e in back.inverses_ran] == [2, 1]
    assert calls.of("unreserve") == [
        {"args": {"room": "12B", "nights": 2}, "witness": r.witness}
    ], "the undo ran exactly once, with the forward call's args and witness"
    assert calls.of("reserve") == [{"room": "12B", "nights": 2}]
    # stepping back again over the same span runs nothing more
    s.step_back(0)
    assert len(calls.of("unreserve")) == 1


def test_an_undo_gets_witness_none_when_the_effect_returned_none(
    store: revl.Store, base: Path
) -> None:
    got: list[dict[str, Any]] = []

    @revl.tool(cls="inverse", scope=["fs"])
    def undo_it(**kw: Any) -> None:
        got.append(kw)

    @revl.tool(cls="effect", scope=["fs"], undo=undo_it)
    def do_it(x: int) -> None:
        return None

    s = store.new(base / "ws", tools=[undo_it, do_it])
    assert s.call(do_it, {"x": 1}).witness is None
    s.step_back(0)
    assert got == [{"args": {"x": 1}, "witness": None}], "an inverse always gets args= and witness="


def test_a_failing_python_undo_is_listed_and_the_rewind_goes_on(
    store: revl.Store, base: Path
) -> None:
    @revl.tool(cls="inverse", scope=["fs"])
    def cannot_undo(args: dict[str, Any], witness: Any) -> None:
        raise ValueError(f"cannot undo {args['x']}")

    @revl.tool(cls="effect", scope=["fs"], undo=cannot_undo)
    def do_it(x: int) -> dict[str, int]:
        return {"x": x}

    s = store.new(base / "ws", tools=[cannot_undo, do_it])
    s.write("a.txt", "1")  # 1
    s.call(do_it, {"x": 2})  # 2
    r = s.step_back(0)
    assert [f["index"] for f in r.failed] == [2]
    assert "ValueError" in r.failed[0]["error"] and "cannot undo 2" in r.failed[0]["error"]
    assert [e["index"] for e in r.inverses_ran] == [1], "the unwind went on past the failure"
    assert not (base / "ws/a.txt").exists()


def test_compensating_step_back_runs_a_crossing_undo(store: revl.Store, base: Path, sink: Sink) -> None:
    calls = Calls()

    @revl.tool(cls="inverse", scope=["net"])
    def delete_object(args: dict[str, Any], witness: Any) -> None:
        calls.add("delete_object", args=args, witness=witness)
        post(sink.url, {"delete": witness["etag"]})

    @revl.tool(cls="effect", scope=["net"], undo=delete_object)
    def put_object(key: str) -> dict[str, str]:
        post(sink.url, {"put": key})
        return {"etag": f"etag-{key}"}

    s = store.new(base / "ws", tools=[delete_object, put_object])
    s.call(put_object, {"key": "k1"})
    assert sink.count == 1
    scoped = s.step_back(0)
    assert scoped.inverses_ran == [], "a crossing undo is never run by a scoped rewind"
    assert [e["index"] for e in scoped.would_cross_on_rewind] == [1]
    assert calls.of("delete_object") == [] and sink.count == 1
    # the step stayed done: a compensating step-back runs it
    s2 = store.new(base / "ws2", tools=[delete_object, put_object])
    s2.call(put_object, {"key": "k2"})
    comp = s2.step_back(0, mode="compensating")
    assert [e["index"] for e in comp.inverses_ran] == [1]
    assert calls.of("delete_object") == [{"args": {"key": "k2"}, "witness": {"etag": "etag-k2"}}]
    assert sink.bodies[-1] == {"delete": "etag-k2"}


def test_emission_with_compensation_fires_at_call_and_abort_compensates(
    store: revl.Store, base: Path, sink: Sink
) -> None:
    calls = Calls()

    @revl.tool(cls="inverse", scope=["net"])
    def close_ticket(args: dict[str, Any], witness: Any) -> dict[str, bool]:
        calls.add("close_ticket", args=args, witness=witness)
        post(sink.url, {"close": witness["id"]})
        return {"closed": True}

    @revl.tool(cls="emission", scope=["net"], approval="none", compensate=close_ticket)
    def open_ticket(title: str) -> dict[str, Any]:
        post(sink.url, {"open": title})
        return {"id": 42}

    s = store.new(base / "ws", tools=[close_ticket, open_ticket])
    r = s.call(open_ticket, {"title": "bug"})
    assert sink.bodies == [{"open": "bug"}], "an emission fires at the call"
    assert r.witness == {"id": 42} and r.key
    a = s.abort()
    assert [c["tool"] for c in a.compensations_ran] == ["close_ticket"]
    assert calls.of("close_ticket") == [{"args": {"title": "bug"}, "witness": {"id": 42}}]
    assert sink.bodies == [{"open": "bug"}, {"close": 42}]


def test_emission_approved_from_the_cli_while_the_session_object_is_alive(
    store: revl.Store, base: Path, sink: Sink, cli: Callable[..., CliRun]
) -> None:
    @revl.tool(cls="emission", scope=["net"])
    def notify(channel: str, text: str) -> dict[str, str]:
        post(sink.url, {"channel": channel, "text": text})
        return {"posted": channel}

    s = store.new(base / "ws", tools=[notify])
    args = {"channel": "#ops", "text": "deploying"}
    with pytest.raises(revl.ApprovalRequired) as exc:
        s.call(notify, args)
    err = exc.value
    assert isinstance(err, revl.RevlError) and err.code == "approval-required" and err.exit_code == 1
    assert len(err.ticket) == 32
    doc = err.document
    assert doc.approval_required is True and doc.ticket == err.ticket and doc.tool == "notify"
    assert sink.count == 0, "nothing fired"
    # a human approves from a terminal, while `s` (and this process) stays alive
    run = cli("approve", s.id, "--ticket", err.ticket)
    assert run.rc == 0, run.stderr
    assert run.doc["approved"] is True and run.doc["ticket"] == err.ticket
    fired = s.call(notify, args)
    assert sink.count == 1 and sink.bodies == [args]
    assert fired.witness == {"posted": "#ops"}
    assert s.timeline().steps[fired.step]["kind"] == "emission"
    # the ticket was for one call: the next one needs a new approval
    with pytest.raises(revl.ApprovalRequired) as again:
        s.call(notify, args)
    assert again.value.ticket != err.ticket
    assert sink.count == 1


def test_a_standing_approval_from_the_cli_is_not_inherited_by_a_branch(
    store: revl.Store, base: Path, sink: Sink, cli: Callable[..., CliRun]
) -> None:
    @revl.tool(cls="emission", scope=["net"])
    def notify(text: str) -> None:
        post(sink.url, {"text": text})

    s = store.new(base / "ws", tools=[notify])
    run = cli("approve", s.id, "--tool", "notify")
    assert run.rc == 0 and run.doc["standing"] is True, run.stdout
    s.call(notify, {"text": "one"})
    s.call(notify, {"text": "two"})
    assert sink.count == 2, "a standing approval covers every call in this session"
    branch = s.fork_confirm(s.fork(0).hash, into=base / "alt").branch
    assert branch is not None
    with pytest.raises(revl.ApprovalRequired):
        branch.call(notify, {"text": "three"})
    assert sink.count == 2, "a branch starts with no approvals"


def test_args_and_witness_round_trip_as_json(store: revl.Store, base: Path) -> None:
    got: list[dict[str, Any]] = []

    @revl.tool(cls="emission", scope=["net"], approval="none")
    def echo(**kw: Any) -> dict[str, Any]:
        got.append(kw)
        return {"echo": kw}

    args = {"s": "héllo ✓ \u0000", "n": 1.5, "i": -3, "l": [1, None, {"k": True}], "class": "kw"}
    s = store.new(base / "ws", tools=[echo])
    r = s.call(echo, args)
    assert got == [args]
    assert r.witness == {"echo": args}
    step = s.timeline().steps[r.step]
    assert step["detail"]["args"] == args and step["detail"]["witness"] == {"echo": args}


def test_a_failing_effect_records_nothing_a_failing_emission_is_recorded(
    store: revl.Store, base: Path
) -> None:
    @revl.tool(cls="inverse", scope=["fs"])
    def undo_it(args: dict[str, Any], witness: Any) -> None:
        pass

    @revl.tool(cls="effect", scope=["fs"], undo=undo_it)
    def broken_effect() -> None:
        raise RuntimeError("disk on fire")

    @revl.tool(cls="emission", scope=["net"], approval="none")
    def broken_emission(x: int) -> None:
        raise OSError(f"network down {x}")

    s = store.new(base / "ws", tools=[undo_it, broken_effect, broken_emission])
    with pytest.raises(revl.ToolFailed) as eff:
        s.call(broken_effect)
    assert "RuntimeError" in eff.value.message and "disk on fire" in eff.value.message
    assert eff.value.step is None
    assert s.timeline().head == 0, "a failed effect is taken at its word: nothing recorded"
    with pytest.raises(revl.ToolFailed) as em:
        s.call(broken_emission, {"x": 7})
    assert em.value.step == 1
    step = s.timeline().steps[1]
    assert step["kind"] == "emission"
    assert step["detail"]["error"]["type"] == "OSError"
    assert "network down 7" in step["detail"]["error"]["message"]


def test_a_witness_that_is_not_json_is_recorded_as_its_repr(store: revl.Store, base: Path) -> None:
    @revl.tool(cls="emission", scope=["net"], approval="none")
    def odd() -> Any:
        return {3}

    s = store.new(base / "ws", tools=[odd])
    r = s.call(odd)
    assert r.witness == "{3}"


def test_an_inverse_cannot_be_called(store: revl.Store, base: Path) -> None:
    calls = Calls()

    @revl.tool(cls="inverse", scope=["fs"])
    def inv(args: dict[str, Any], witness: Any) -> None:
        calls.add("inv")

    s = store.new(base / "ws", tools=[inv])
    with pytest.raises(revl.BadArgs):
        s.call(inv, {})
    assert calls.log == [] and s.timeline().head == 0


def test_tools_and_a_manifest_file_together(store: revl.Store, base: Path, sink: Sink) -> None:
    manifest = base / "revl.toml"
    manifest.write_text(
        '[[tool]]\nname = "queue_file"\nclass = "deferred"\nscope = ["net"]\nrun = ["true"]\n'
    )

    @revl.tool(cls="deferred", scope=["net"])
    def queue_py(n: int) -> None:
        post(sink.url, {"n": n})

    s = store.new(base / "ws", manifest=manifest, tools=[queue_py])
    s.call("queue_file", {})
    s.call(queue_py, {"n": 1})
    done = s.commit_confirm(s.commit().hash)
    assert len(done.flushed) == 2 and done.flush_residue == []
    assert sink.bodies == [{"n": 1}]


# ---- a process that does not hold the function refuses, recording nothing ----


def test_the_cli_refuses_a_python_tool_and_records_nothing(
    store: revl.Store, base: Path, sink: Sink, cli: Callable[..., CliRun]
) -> None:
    @revl.tool(cls="deferred", scope=["mail"])
    def send(n: int) -> None:
        post(sink.url, {"n": n})

    s = store.new(base / "ws", tools=[send])
    s.call(send, {"n": 1})
    wal = Path(s.status().wal)
    before = file_digest(wal)

    run = cli("call", s.id, "send", "--args", "{}")
    assert run.rc == 1, run.stderr
    assert run.doc["error"]["code"] == "tool-unavailable"
    assert "send" in run.doc["error"]["message"]
    assert send.target in run.doc["error"]["message"], "names module:qualname"
    assert file_digest(wal) == before

    plan = s.commit()
    run = cli("commit-confirm", s.id, "--hash", plan.hash)
    assert run.rc == 1, run.stderr
    assert run.doc["error"]["code"] == "tool-unavailable"
    assert send.target in run.doc["error"]["message"]
    assert file_digest(wal) == before, "the WAL is byte-identical"
    assert sink.count == 0
    assert s.status().state == "live"

    # the process that holds it commits the same plan: exactly one send
    done = s.commit_confirm(plan.hash)
    assert len(done.flushed) == 1 and sink.count == 1


def test_the_cli_refuses_a_rewind_that_would_run_a_python_undo(
    store: revl.Store, base: Path, cli: Callable[..., CliRun]
) -> None:
    calls = Calls()

    @revl.tool(cls="inverse", scope=["fs"])
    def unmark(args: dict[str, Any], witness: Any) -> None:
        calls.add("unmark", args=args, witness=witness)

    @revl.tool(cls="effect", scope=["fs"], undo=unmark)
    def mark(tag: str) -> dict[str, str]:
        return {"tag": tag}

    s = store.new(base / "ws", tools=[unmark, mark])
    s.call(mark, {"tag": "t"})
    wal = Path(s.status().wal)
    before = file_digest(wal)
    for argv in (("step-back", s.id, "--to", "0"), ("abort", s.id)):
        run = cli(*argv)
        assert run.rc == 1, (argv, run.stdout)
        assert run.doc["error"]["code"] == "tool-unavailable"
        assert unmark.target in run.doc["error"]["message"]
        assert file_digest(wal) == before
    assert calls.log == []
    s.abort()
    assert calls.of("unmark") == [{"args": {"tag": "t"}, "witness": {"tag": "t"}}]


def test_a_python_process_without_the_function_gets_tool_unavailable(
    store: revl.Store, base: Path, sink: Sink
) -> None:
    calls = Calls()

    @revl.tool(cls="deferred", scope=["mail"])
    def send(n: int) -> None:
        post(sink.url, {"n": n})

    @revl.tool(cls="inverse", scope=["fs"])
    def unmark(args: dict[str, Any], witness: Any) -> None:
        calls.add("unmark")

    @revl.tool(cls="effect", scope=["fs"], undo=unmark)
    def mark() -> None:
        calls.add("mark")

    s = store.new(base / "ws", tools=[send, unmark, mark])
    s.call(mark)
    s.call(send, {"n": 1})
    wal = Path(s.status().wal)
    before = file_digest(wal)

    bare = store.session(s.id)  # no tools=
    assert bare.status().queue[0]["tool"] == "send", "reads work without the function"
    with pytest.raises(revl.ToolUnavailable) as exc:
        bare.call("send", {"n": 2})
    assert exc.value.exit_code == 1 and send.target in exc.value.message
    with pytest.raises(revl.ToolUnavailable):
        bare.commit_confirm(bare.commit().hash)
    with pytest.raises(revl.ToolUnavailable) as undo_exc:
        bare.step_back(0)
    assert unmark.target in undo_exc.value.message
    with pytest.raises(revl.ToolUnavailable):
        bare.abort()

    # a function of the same name that is not the declared one is not the tool
    @revl.tool(cls="deferred", scope=["mail"], name="send")
    def impostor(n: int) -> None:
        post(sink.url, {"impostor": n})

    assert impostor.name == "send" and impostor.target != send.target
    other = store.session(s.id, tools=[impostor])
    with pytest.raises(revl.ToolUnavailable):
        other.commit_confirm(other.commit().hash)

    assert file_digest(wal) == before, "every refusal recorded nothing"
    assert sink.count == 0 and calls.of("unmark") == []
    # with the function, the same session goes on
    done = store.session(s.id, tools=[send, unmark, mark]).commit_confirm(s.commit().hash)
    assert len(done.flushed) == 1 and sink.count == 1


NO_TOOLS_SCRIPT = """
import json, sys, revl
s = revl.Store(sys.argv[1]).session(sys.argv[2])   # no tools=
out = {"queue": [q["tool"] for q in s.status().queue]}
for verb, attempt in {
    "call": lambda: s.call("send", {"n": 2}),
    "commit_confirm": lambda: s.commit_confirm(s.commit().hash),
}.items():
    try:
        attempt()
        out[verb] = "ran"
    except revl.RevlError as e:
        out[verb] = [type(e).__name__, e.code, e.exit_code, e.message]
print(json.dumps(out))
"""


def test_another_python_process_without_the_function_gets_tool_unavailable(
    store: revl.Store, store_dir: Path, base: Path, sink: Sink
) -> None:
    import subprocess
    import sys

    @revl.tool(cls="deferred", scope=["mail"])
    def send(n: int) -> None:
        post(sink.url, {"n": n})

    s = store.new(base / "ws", tools=[send])
    s.call(send, {"n": 1})
    before = file_digest(s.status().wal)
    cp = subprocess.run(
        [sys.executable, "-c", NO_TOOLS_SCRIPT, str(store_dir), s.id],
        capture_output=True, text=True, cwd=base, timeout=60,
    )
    assert cp.returncode == 0, cp.stderr
    out = json.loads(cp.stdout)
    assert out["queue"] == ["send"]
    for verb in ("call", "commit_confirm"):
        name, code, exit_code, message = out[verb]
        assert (name, code, exit_code) == ("ToolUnavailable", "tool-unavailable", 1), verb
        assert send.target in message
    assert file_digest(s.status().wal) == before and sink.count == 0


SIDE_EFFECT_MODULE = """
import os, pathlib
pathlib.Path(os.environ["REVL_TEST_MARKER"]).write_text("imported")
import revl

@revl.tool(cls="deferred", scope=["mail"])
def send(n: int) -> int:
    return n
"""


def test_revl_never_imports_a_tools_module_by_itself(
    store: revl.Store, store_dir: Path, base: Path, cli: Callable[..., CliRun],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util
    import os
    import subprocess
    import sys

    mods = base / "mods"
    mods.mkdir()
    (mods / "revl_side_effect_tool.py").write_text(SIDE_EFFECT_MODULE)
    monkeypatch.setenv("REVL_TEST_MARKER", str(base / "imported-here"))
    spec = importlib.util.spec_from_file_location("revl_side_effect_tool", mods / "revl_side_effect_tool.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "revl_side_effect_tool", mod)
    spec.loader.exec_module(mod)
    assert mod.send.target == "revl_side_effect_tool:send"

    s = store.new(base / "ws", tools=[mod.send])
    q = s.call(mod.send, {"n": 1})
    plan = s.commit()
    # other processes that COULD import it (it is on their path) but were not given it
    env = {**os.environ, "PYTHONPATH": str(mods), "REVL_TEST_MARKER": str(base / "imported-there")}
    script = (
        "import sys, revl\n"
        "s = revl.Store(sys.argv[1]).session(sys.argv[2])\n"
        "try:\n    s.commit_confirm(sys.argv[3])\nexcept revl.ToolUnavailable as e:\n    print(e.code)\n"
    )
    cp = subprocess.run(
        [sys.executable, "-c", script, str(store_dir), s.id, plan.hash],
        env=env, cwd=base, capture_output=True, text=True, timeout=60,
    )
    assert cp.returncode == 0 and cp.stdout.strip() == "tool-unavailable", cp.stderr
    from conftest import REVL_CLI

    run = subprocess.run(
        [str(REVL_CLI), "--store", str(store_dir), "--json", "commit-confirm", s.id, "--hash", plan.hash],
        env=env, cwd=base, capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 1 and "tool-unavailable" in run.stdout
    assert not (base / "imported-there").exists(), "revl imported the tool's module by itself"
    assert s.commit_confirm(plan.hash).flushed == [q.seq], "this process holds it: it runs"


def test_tools_must_be_decorated(store: revl.Store, base: Path) -> None:
    def plain(n: int) -> None:
        pass

    with pytest.raises(TypeError):
        store.new(base / "ws", tools=[plain])  # type: ignore[list-item]
    assert store.sessions().sessions == []
