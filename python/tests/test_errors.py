"""Errors are exceptions: revl.RevlError with code, message, hint, and one subclass per error
code (docs/reference.md) with the CLI's exit code; and real ones, triggered through the
public API."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest

import revl
import revl.aio
import revl.errors

from _support import Sink, file_digest, post

# docs/reference.md, "Errors and exit codes": every code, its class, and the CLI's exit code.
EXPECTED: dict[str, tuple[str, int]] = {
    "frozen": ("Frozen", 1),
    "not-live": ("NotLive", 1),
    "KIND_OPAQUE": ("KindOpaque", 1),
    "non-idempotent": ("NonIdempotent", 1),
    "undone": ("Undone", 1),
    "irreversible": ("Irreversible", 1),
    "live": ("Live", 1),
    "workspace-busy": ("WorkspaceBusy", 1),
    "not-committed": ("NotCommitted", 1),
    "stale-hash": ("StaleHash", 1),
    "approval-required": ("ApprovalRequired", 1),
    "no-pending-fork": ("NoPendingFork", 1),
    "busy": ("Busy", 1),
    "tool-failed": ("ToolFailed", 1),
    "timeout": ("Timeout", 1),
    "corrupt-wal": ("CorruptWal", 1),
    "missing-preimage": ("MissingPreimage", 1),
    "io": ("Io", 1),
    "exec-failed": ("ExecFailed", 1),
    "sandbox-unavailable": ("SandboxUnavailable", 1),
    "absent": ("Absent", 1),
    "unknown-blob": ("UnknownBlob", 1),
    "tool-unavailable": ("ToolUnavailable", 1),
    "limit-exceeded": ("LimitExceeded", 1),
    "fenced": ("Fenced", 1),
    "corrupt-remote": ("CorruptRemote", 1),
    "newer-wal": ("NewerWal", 1),
    "usage": ("Usage", 2),
    "unknown-session": ("UnknownSession", 2),
    "ambiguous-session": ("AmbiguousSession", 2),
    "bad-manifest": ("BadManifest", 2),
    "path-outside": ("PathOutside", 2),
    "store-in-workspace": ("StoreInWorkspace", 2),
    "bad-args": ("BadArgs", 2),
    "not-allowed": ("NotAllowed", 2),
}
EXIT_2 = {"usage", "unknown-session", "ambiguous-session", "bad-manifest", "path-outside",
          "store-in-workspace", "bad-args", "not-allowed"}


def error_classes() -> list[type[revl.RevlError]]:
    return [
        obj
        for name in revl.errors.__all__
        if inspect.isclass(obj := getattr(revl.errors, name))
        and issubclass(obj, revl.RevlError)
        and obj is not revl.RevlError
    ]


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_each_code_has_its_class_and_exit_code(code: str) -> None:
    name, exit_code = EXPECTED[code]
    cls = getattr(revl, name)
    assert cls is getattr(revl.errors, name)
    assert issubclass(cls, revl.RevlError) and issubclass(cls, Exception)
    assert cls.code == code
    assert cls.exit_code == exit_code == (2 if code in EXIT_2 else 1)


def test_one_class_per_code_and_exit_codes_follow_spec_9() -> None:
    classes = error_classes()
    codes = [c.code for c in classes]
    assert len(codes) == len(set(codes)), "one class per code"
    assert set(EXPECTED) <= set(codes)
    for c in classes:
        assert c.exit_code == (2 if c.code in EXIT_2 else 1), c
        assert c.__name__ in revl.__all__, f"revl.{c.__name__} is exported"


def test_an_error_carries_code_message_hint() -> None:
    e = revl.PathOutside("path \"../x\" leaves the workspace", "give a path inside")
    assert e.code == "path-outside" and e.exit_code == 2
    assert e.message == 'path "../x" leaves the workspace' and e.hint == "give a path inside"
    assert str(e).startswith("path-outside: ")
    assert e.to_dict() == {
        "error": {"code": "path-outside", "message": e.message, "hint": e.hint}
    }


def check(exc: pytest.ExceptionInfo[revl.RevlError], cls: type[revl.RevlError]) -> None:
    e = exc.value
    assert type(e) is cls, f"{type(e).__name__} raised, {cls.__name__} expected"
    assert isinstance(e, revl.RevlError)
    assert e.code == cls.code and e.message and isinstance(e.hint, str)
    assert e.to_dict()["error"]["code"] == cls.code


# ---- real ones ----


def test_unknown_session(store: revl.Store, session: revl.Session) -> None:
    with pytest.raises(revl.UnknownSession) as exc:
        store.session("0123456789abcdef0123456789abcdef")
    check(exc, revl.UnknownSession)
    assert exc.value.exit_code == 2
    with pytest.raises(revl.UnknownSession):
        store.session("not-an-id")


def test_a_session_object_for_an_id_the_store_does_not_hold(store: revl.Store, session: revl.Session) -> None:
    """`revl.Session(store, id)` is public (exported, documented as naming a session by id):
    a verb on an id the store does not hold is `unknown-session`, as `revl status ID` says,
    not an `io` error about a lock file."""
    ghost = revl.Session(store, "f" * 32)
    for verb in (ghost.status, ghost.timeline, lambda: ghost.write("a", "b")):
        with pytest.raises(revl.UnknownSession) as exc:
            verb()
        check(exc, revl.UnknownSession)
    assert not (Path(store.path) / "sessions" / ("f" * 32)).exists(), "nothing was created"


def test_arguments_python_cannot_hand_to_rust_are_bad_args(session: revl.Session) -> None:
    """A step past 64 bits or a path with a lone surrogate is the caller's mistake, raised
    as revl.BadArgs with a hint, not as a bare OverflowError or UnicodeEncodeError; nothing
    is recorded."""
    before = session.timeline().to_dict()
    with pytest.raises(revl.BadArgs) as exc:
        session.inspect(2**70)
    check(exc, revl.BadArgs)
    assert "out of range" in exc.value.message
    with pytest.raises(revl.BadArgs) as exc:
        session.write("bad\udc80name.txt", "x")
    check(exc, revl.BadArgs)
    assert "Unicode" in exc.value.message
    assert session.timeline().to_dict() == before


def test_every_str_with_a_lone_surrogate_is_bad_args_and_nothing_is_recorded(
    store: revl.Store, base: Path
) -> None:
    """A str that is not Unicode text (a lone surrogate, as `"\\ud800"` or what
    os.fsdecode makes of a byte that is not UTF-8) is refused as revl.BadArgs wherever it
    is given: write() content, paths, labels, call args (values and keys, nested), tool
    names, exec argv, note_model. One line that says what was wrong (the verb, where, the
    character) and what to do; nothing recorded, nothing written."""

    @revl.tool(cls="deferred", scope=["mail"])
    def send(to: str) -> None:
        raise AssertionError("never runs")

    s = store.new(base / "ws", tools=[send])
    s.write("a.txt", "1")
    before = s.timeline().to_dict()
    files = sorted(p.name for p in (base / "ws").iterdir())
    bad = "x\ud800y"
    cases: list[tuple[str, Any]] = [
        ("content", lambda: s.write("b.txt", bad)),
        ("content", lambda: revl.aio.Session(s).write("b.txt", "\udce9")),
        ("path", lambda: s.write(bad, "y")),
        ("path", lambda: s.mkdir(bad)),
        ("path", lambda: s.rename("a.txt", bad)),
        ("path", lambda: s.read(bad)),
        ("label", lambda: s.boundary(bad)),
        ("label", lambda: s.bind(bad)),
        ("provide", lambda: s.provide("k", bad)),
        ("args", lambda: s.call(send, {"to": bad})),
        ("args", lambda: s.call(send, {bad: "a@example.com"})),
        ("args", lambda: s.call(send, {"to": ["ok", {"deep": bad}]})),
        ("tool", lambda: s.call(bad, {})),
        ("argv", lambda: s.exec(["echo", bad])),
        ("model", lambda: s.note_model(
            1, bad, tokens_in=1, tokens_out=1, latency_seconds=0.1, attempts=1,
            attempt_ceiling=1, outcome="validated")),
    ]
    for what, verb in cases:
        with pytest.raises(revl.BadArgs) as exc:
            r = verb()
            if inspect.iscoroutine(r):
                asyncio.run(r)
        check(exc, revl.BadArgs)
        text = str(exc.value)
        assert "\n" not in text and text.isprintable(), (what, text)
        assert "lone surrogate" in exc.value.message and "nothing was recorded" in exc.value.message, text
        assert "U+D800" in text or "U+DCE9" in text, text
        assert "valid Unicode" in exc.value.hint and "revl.name_of" in exc.value.hint, text
        text.encode()  # the error itself is Unicode text: it prints
    # Where: the argument is named (nested call args by their path).
    with pytest.raises(revl.BadArgs) as exc:
        s.call(send, {"to": ["ok", {"deep": bad}]})
    assert "args['to'][1]['deep']" in exc.value.message, exc.value.message
    with pytest.raises(revl.BadArgs) as exc:
        s.write("b.txt", bad)
    assert exc.value.message.startswith("write: content 'x\\ud800y'"), exc.value.message
    # A tool whose name is not Unicode: refused when the session is made.
    with pytest.raises(revl.BadArgs) as exc:
        store.new(base / "ws2", tools=[revl.tool(cls="deferred", scope=["mail"], name=bad)(lambda: None)])
    assert "tools[0]['name']" in exc.value.message, exc.value.message
    assert not (base / "ws2").exists()
    assert s.timeline().to_dict() == before
    assert sorted(p.name for p in (base / "ws").iterdir()) == files
    assert s.status().queue == []
    # Valid text beyond the BMP and revl's escaped names are text, not mistakes.
    s.write("emoji.txt", "\U0001f600")
    assert s.read("emoji.txt") == "\U0001f600".encode()


def test_path_outside(session: revl.Session, base: Path) -> None:
    for bad in ("../x", "/etc/passwd", "a/../../x"):
        with pytest.raises(revl.PathOutside) as exc:
            session.write(bad, "y")
        check(exc, revl.PathOutside)
    assert not (base / "x").exists()
    # a symlink that leads out, reads, lists and exec's cwd: the same rule
    (base / "secret").write_text("secret")
    (base / "ws" / "link").symlink_to(base / "secret")
    for verb in (
        lambda: session.write("link", "overwrite"),
        lambda: session.read("link"),
        lambda: session.read("../secret"),
        lambda: session.list(".."),
        lambda: session.exec(["true"], cwd=".."),
    ):
        with pytest.raises(revl.PathOutside):
            verb()
    assert (base / "secret").read_text() == "secret"
    assert session.timeline().head == 0, "refused before anything was recorded"
    # a parallel fork into a directory inside the workspace
    session.write("a", "1")
    plan = session.fork(0)
    with pytest.raises(revl.PathOutside):
        session.fork_confirm(plan.hash, into=base / "ws" / "inside")


def test_bad_args(session: revl.Session) -> None:
    session.write("a", "1")
    with pytest.raises(revl.BadArgs) as exc:
        session.inspect(42)
    check(exc, revl.BadArgs)
    with pytest.raises(revl.BadArgs):
        session.fork(42)
    with pytest.raises(revl.BadArgs):
        session.call("undeclared_tool", {"x": 1})
    with pytest.raises(revl.BadArgs):
        session.step_back(0, mode="nope")
    with pytest.raises(revl.BadArgs):
        session.step_back(0, force=True)  # force is for compensating only
    with pytest.raises(revl.BadArgs):
        session.mkdir("a")  # exists
    assert session.timeline().head == 1


@pytest.mark.parametrize(
    "decl, field",
    [
        ({"cls": "effect", "scope": ["fs"]}, "undo"),  # an effect needs an undo
        ({"cls": "deferred", "scope": ["fs"], "approval": "none"}, "approval"),
        ({"cls": "deferred", "scope": ["net"], "compensate": "x"}, "compensate"),
        ({"cls": "teleport", "scope": ["fs"]}, "class"),
        ({"cls": "deferred"}, "scope"),  # scope is required but for opaque
        ({"cls": "effect", "scope": ["fs"], "undo": "no_such_inverse"}, "undo"),
    ],
)
def test_bad_manifest_from_a_bad_tool(
    store: revl.Store, base: Path, decl: dict[str, Any], field: str
) -> None:
    def f() -> None:
        pass

    t = revl.tool(**decl)(f)
    with pytest.raises(revl.BadManifest) as exc:
        store.new(base / "ws", tools=[t])
    check(exc, revl.BadManifest)
    assert exc.value.exit_code == 2
    assert '"f"' in exc.value.message and field in exc.value.message, exc.value.message
    assert store.sessions().sessions == [], "no session was made"


def test_bad_manifest_undo_naming_a_tool_that_is_not_an_inverse(store: revl.Store, base: Path) -> None:
    @revl.tool(cls="deferred", scope=["net"])
    def not_inverse() -> None:
        pass

    @revl.tool(cls="effect", scope=["fs"], undo=not_inverse)
    def eff() -> None:
        pass

    with pytest.raises(revl.BadManifest):
        store.new(base / "ws", tools=[not_inverse, eff])


def test_bad_manifest_a_name_declared_twice(store: revl.Store, base: Path) -> None:
    @revl.tool(cls="deferred", scope=["net"], name="send")
    def one() -> None:
        pass

    @revl.tool(cls="deferred", scope=["net"], name="send")
    def two() -> None:
        pass

    with pytest.raises(revl.BadManifest) as exc:
        store.new(base / "ws", tools=[one, two])
    assert "declared twice" in exc.value.message
    # a Python tool and the workspace's revl.toml naming the same tool
    (base / "ws2").mkdir()
    (base / "ws2/revl.toml").write_text(
        '[[tool]]\nname = "send"\nclass = "deferred"\nscope = ["net"]\nrun = ["true"]\n'
    )
    with pytest.raises(revl.BadManifest):
        store.new(base / "ws2", tools=[one])
    assert store.sessions().sessions == []


def test_not_live_after_commit_and_abort(store: revl.Store, base: Path) -> None:
    s = store.new(base / "ws")
    s.write("a", "1")
    s.commit_confirm(s.commit().hash)
    for verb in (
        lambda: s.write("b", "2"),
        lambda: s.provide("k", "v"),
        lambda: s.commit(),
        lambda: s.fork(0),
        lambda: s.step_back(0),
        lambda: s.abort(),
    ):
        with pytest.raises(revl.NotLive) as exc:
            verb()
        check(exc, revl.NotLive)
    assert "committed boundary" in exc.value.message
    assert s.read("a") == b"1", "reads still work"
    t = store.new(base / "ws2")
    t.abort()
    with pytest.raises(revl.NotLive):
        t.write("x", "y")


def test_frozen_after_a_serial_fork(session: revl.Session) -> None:
    session.write("a", "1")
    branch = session.fork_confirm(session.fork(0).hash).branch
    assert branch is not None
    with pytest.raises(revl.Frozen) as exc:
        session.write("b", "2")
    check(exc, revl.Frozen)
    assert branch.id in exc.value.message
    with pytest.raises(revl.Frozen):
        session.fork(0)


def test_stale_hash(store: revl.Store, base: Path, sink: Sink) -> None:
    @revl.tool(cls="deferred", scope=["mail"])
    def send(n: int) -> None:
        post(sink.url, {"n": n})

    s = store.new(base / "ws", tools=[send])
    s.call(send, {"n": 1})
    with pytest.raises(revl.StaleHash) as exc:
        s.commit_confirm("ab" * 32)  # a wrong 64-hex hash
    check(exc, revl.StaleHash)
    e = exc.value
    assert e.exit_code == 1
    assert e.document.refused is True and e.document.committed is False
    assert e.document.reason and e.document.plan["hash"] != "ab" * 32
    assert sink.count == 0 and s.status().state == "live"
    # a real change since the plan makes its hash stale too
    plan = s.commit()
    s.write("a", "changed since the plan")
    with pytest.raises(revl.StaleHash):
        s.commit_confirm(plan.hash)
    assert sink.count == 0
    # the fork confirm's own stale hash: a refusal with its fork report
    f = s.fork(0)
    with pytest.raises(revl.StaleHash) as fexc:
        s.fork_confirm("cd" * 32)
    assert fexc.value.document.refused is True and fexc.value.document.forked is False
    assert s.status().state == "live"
    with pytest.raises(revl.NoPendingFork):
        s.fork_confirm(f.hash)  # the stale confirm consumed the pending fork


def test_no_pending_fork(session: revl.Session) -> None:
    session.write("a", "1")
    with pytest.raises(revl.NoPendingFork) as exc:
        session.fork_confirm("0" * 64)
    check(exc, revl.NoPendingFork)


def test_absent(session: revl.Session) -> None:
    with pytest.raises(revl.Absent) as exc:
        session.read("no/such/file.txt")
    check(exc, revl.Absent)
    session.write("a", "1")
    session.delete("a")
    with pytest.raises(revl.Absent):
        session.read("a")
    assert session.read("a", at=1) == b"1"
    with pytest.raises(revl.Absent):
        session.read("a", at=2)


def test_tool_unavailable(store: revl.Store, base: Path) -> None:
    @revl.tool(cls="deferred", scope=["mail"])
    def send(n: int) -> None:
        pass

    s = store.new(base / "ws", tools=[send])
    before = file_digest(s.status().wal)
    with pytest.raises(revl.ToolUnavailable) as exc:
        store.session(s.id).call("send", {"n": 1})
    check(exc, revl.ToolUnavailable)
    assert send.target in exc.value.message and exc.value.exit_code == 1
    assert file_digest(s.status().wal) == before


def test_workspace_busy(store: revl.Store, base: Path) -> None:
    s = store.new(base / "ws")
    with pytest.raises(revl.WorkspaceBusy) as exc:
        store.new(base / "ws")
    check(exc, revl.WorkspaceBusy)
    assert s.id in exc.value.message
    with pytest.raises(revl.WorkspaceBusy):
        store.new(base / "ws" / "nested")
    # once the session is over the workspace is free again
    s.abort()
    assert store.new(base / "ws").id != s.id


def test_store_in_workspace(base: Path) -> None:
    with pytest.raises(revl.StoreInWorkspace) as exc:
        revl.Store(base / "ws" / "store").new(base / "ws")
    check(exc, revl.StoreInWorkspace)
    assert exc.value.exit_code == 2
    with pytest.raises(revl.StoreInWorkspace):
        revl.Store(base / "ws2").new(base / "ws2" / "inner")


def test_undone(session: revl.Session) -> None:
    session.write("a", "1")
    session.write("a", "2")
    session.step_back(0)
    with pytest.raises(revl.Undone) as exc:
        session.step_back(1)
    check(exc, revl.Undone)


def test_kind_opaque(session: revl.Session) -> None:
    session.write("a", "1")
    r = session.exec(["true"], unconfined=True)
    assert session.timeline().steps[r.step]["kind"] == "opaque"
    with pytest.raises(revl.KindOpaque) as exc:
        session.fork(0)
    check(exc, revl.KindOpaque)


def test_non_idempotent(store: revl.Store, base: Path) -> None:
    @revl.tool(cls="inverse", scope=["fs"])
    def undo_once(args: dict[str, Any], witness: Any) -> None:
        pass

    @revl.tool(cls="effect", scope=["fs"], undo=undo_once, undo_idempotent=False)
    def do_once() -> None:
        pass

    s = store.new(base / "ws", tools=[undo_once, do_once])
    s.call(do_once)
    assert s.timeline().steps[1]["undoIdempotent"] is False
    with pytest.raises(revl.NonIdempotent) as exc:
        s.fork(0)
    check(exc, revl.NonIdempotent)
    assert "do_once" in exc.value.message


def test_irreversible(store: revl.Store, base: Path, sink: Sink) -> None:
    @revl.tool(cls="emission", scope=["net"], approval="none")
    def announce() -> None:
        post(sink.url, {"announce": True})

    s = store.new(base / "ws", tools=[announce])
    s.call(announce)
    with pytest.raises(revl.Irreversible) as exc:
        s.step_back(0, mode="compensating")
    check(exc, revl.Irreversible)
    forced = s.step_back(0, mode="compensating", force=True)
    assert [e["index"] for e in forced.emissions_crossed] == [1]
    assert sink.count == 1


def test_busy_when_another_call_holds_the_session(
    session: revl.Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REVL_LOCK_WAIT_MS", "100")  # how long a verb waits for the lock
    started = threading.Event()

    def long_exec() -> None:
        started.set()
        session.exec(["sleep", "1"])

    t = threading.Thread(target=long_exec)
    t.start()
    started.wait()
    time.sleep(0.3)
    try:
        with pytest.raises(revl.Busy) as exc:
            session.write("a", "1")
        check(exc, revl.Busy)
        assert exc.value.exit_code == 1
    finally:
        t.join()
    assert [s["kind"] for s in session.timeline().steps] == ["hinge", "effect"]
    assert session.write("a", "1").step == 2, "free again once the other call is done"


def test_limit_exceeded(session: revl.Session, base: Path) -> None:
    with pytest.raises(revl.LimitExceeded) as exc:
        session.exec(["sh", "-c", "head -c 2000000 /dev/zero > big"], max_bytes="1M")
    check(exc, revl.LimitExceeded)
    assert not (base / "ws/big").exists() and session.timeline().head == 0, "nothing applied"
    # the limits are passed through: the address-space limit is what the command sees
    r = session.exec(["sh", "-c", "ulimit -v"], memory="64M", pids=10, cpu_seconds=5)
    assert r.exit_code == 0 and r.stdout.strip() == str(64 * 1024)


def test_exec_failed_and_tool_failed(store: revl.Store, base: Path) -> None:
    @revl.tool(cls="emission", scope=["net"], approval="none")
    def fails() -> None:
        raise KeyError("nope")

    s = store.new(base / "ws", tools=[fails])
    with pytest.raises(revl.ExecFailed) as exc:
        s.exec(["/no/such/program"])
    check(exc, revl.ExecFailed)
    with pytest.raises(revl.ToolFailed) as tf:
        s.call(fails)
    check(tf, revl.ToolFailed)
    assert tf.value.step == 1 and "KeyError" in tf.value.message


def test_wrong_types_and_non_finite_numbers_are_refused_before_anything_is_recorded(
    session: revl.Session,
) -> None:
    before = session.timeline().to_dict()
    with pytest.raises(TypeError, match="str or bytes"):
        session.write("f.txt", 5)  # type: ignore[arg-type]
    with pytest.raises(revl.BadArgs) as exc:
        session.note_model(
            1, "m", tokens_in=1, tokens_out=1, latency_seconds=float("nan"), attempts=1,
            attempt_ceiling=1, outcome="validated",
        )
    check(exc, revl.BadArgs)
    assert session.timeline().to_dict() == before


def test_note_model_requires_every_decision_field(session: revl.Session) -> None:
    """The fields `revl note-model` requires are required keyword arguments (a type checker
    sees a missing one; test_typing.py runs mypy on it): Python refuses the call before
    anything is recorded. `cost` and `currency` stay optional."""
    session.write("a", "1")
    before = session.timeline().to_dict()
    full: dict[str, Any] = dict(
        tokens_in=1, tokens_out=2, latency_seconds=0.5, attempts=1, attempt_ceiling=2,
        outcome="validated",
    )
    for missing in full:
        partial = {k: v for k, v in full.items() if k != missing}
        with pytest.raises(TypeError, match=missing):
            session.note_model(1, "m", **partial)
    assert session.timeline().to_dict() == before
    assert session.note_model(1, "m", **full).recorded is True


@pytest.mark.parametrize(
    "args, what",
    [
        ([1, 2], "not list"),
        ("to=a@example.com", "not str"),
        ([("to", "a@example.com")], "not list"),
        ({"when": object()}, "not JSON-serialisable"),
        ({"x": float("nan")}, "not JSON-serialisable"),
        ({("a", "b"): 1}, "not JSON-serialisable"),
    ],
)
def test_call_args_that_are_not_a_json_object_are_bad_args(
    store: revl.Store, base: Path, args: Any, what: str
) -> None:
    """`call`'s args are the JSON object `revl call --args` takes: a value that is not a
    mapping, or not JSON-serialisable, is `revl.BadArgs` (as bad JSON is for the CLI), with
    a one-line message saying what was wrong and what to pass; nothing is recorded. Sync
    and asyncio alike."""
    @revl.tool(cls="deferred", scope=["mail"])
    def send(**kw: Any) -> None:
        return None

    s = store.new(base / "ws", tools=[send])
    before = s.timeline().to_dict()
    with pytest.raises(revl.BadArgs) as exc:
        s.call(send, args)
    check(exc, revl.BadArgs)
    e = exc.value
    assert what in e.message and "call send" in e.message, e.message
    assert "\n" not in e.message and e.hint and "\n" not in e.hint
    assert exc.value.exit_code == 2

    async def aio() -> None:
        with pytest.raises(revl.BadArgs):
            await revl.aio.Session(s).call("send", args)

    asyncio.run(aio())
    assert s.timeline().to_dict() == before
    assert s.status().to_dict()["queue"] == []
    # A mapping that is not a dict is fine; so is None.
    assert s.call(send, types.MappingProxyType({"to": "a"})).queued is True
    assert s.call(send, None).queued is True


def test_an_async_function_cannot_be_a_tool() -> None:
    async def send(to: str) -> None:
        return None

    with pytest.raises(TypeError, match="async"):
        revl.tool(cls="deferred", scope=["mail"])(send)


def test_the_store_path_is_absolute_so_chdir_does_not_move_it(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(base)
    st = revl.Store("rel-store")
    s = st.new("ws-rel")
    assert Path(st.path).is_absolute() and Path(st.path) == base / "rel-store"
    (base / "elsewhere").mkdir()
    monkeypatch.chdir(base / "elsewhere")
    assert s.status().state == "live"
    assert [e["session"] for e in st.sessions().sessions] == [s.id]
    assert not (base / "elsewhere" / "rel-store").exists()


def test_status_of_a_corrupt_wal_is_the_cli_document(
    store: revl.Store, base: Path, cli: Any
) -> None:
    s = store.new(base / "wsc")
    s.write("a.txt", "1")
    s.write("b.txt", "2")
    wal = Path(s.status().wal)
    lines = wal.read_bytes().splitlines(keepends=True)
    lines[-1] = b'{"not": "a record"}\n'
    lines.append(b'{"still": "not"}\n')
    wal.write_bytes(b"".join(lines))
    shown = s.status()
    assert shown.corrupt is not None
    run = cli("status", s.id)
    assert run.doc == shown.to_dict()
    t = s.timeline()
    assert t.corrupt is not None and cli("timeline", s.id).doc == t.to_dict()


def test_an_undo_named_by_object_is_held_with_its_tool(store: revl.Store, base: Path) -> None:
    undone: list[Any] = []

    @revl.tool(cls="inverse", scope={"caps": ["t"], "confined": True})
    def unhold(args: dict[str, Any], witness: Any) -> None:
        undone.append(args["n"])

    @revl.tool(cls="effect", scope={"caps": ["t"], "confined": True}, undo=unhold)
    def hold(n: int) -> dict[str, int]:
        return {"n": n}

    s = store.new(base / "wsu", tools=[hold])  # unhold not listed
    assert {t.name for t in s.tools} == {"hold", "unhold"}
    s.call(hold, {"n": 3})
    s.step_back(0)
    assert undone == [3]
