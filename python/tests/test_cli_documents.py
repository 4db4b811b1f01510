"""`.to_dict()` is the CLI's `--json` document for the same call.

Read-only verbs: the Python result and the installed `revl` command's document are compared
whole, on the same session. Verbs that change state cannot run twice on one session, so the
same sequence runs on two sessions, one through Python and one through the CLI, and the two
documents must have the same shape (the same keys, recursively, and the same value types) and
be equal once what differs between two sessions (ids, digests, paths, times) is set aside.
Errors: the exception's class, code, message and `exit_code` are the CLI's error document and
exit status for the same failing call (the CLI appends its own wording of a remedy to the hint).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable

import pytest

import revl

from conftest import CliRun

MANIFEST = """
# each tool reads the JSON revl writes to its stdin (test_cli.py covers one that does not)
[[tool]]
name = "queue_it"
class = "deferred"
scope = ["net"]
run = ["sh", "-c", "cat > /dev/null"]

[[tool]]
name = "stamp"
class = "effect"
scope = ["fs"]
run = ["sh", "-c", "cat > /dev/null; echo '{{\\"stamped\\": true}}'"]   # `{{` is a literal brace
undo = "unstamp"

[[tool]]
name = "unstamp"
class = "inverse"
scope = ["fs"]
run = ["sh", "-c", "cat > /dev/null"]

[[tool]]
name = "announce"
class = "emission"
scope = ["net"]
run = ["sh", "-c", "cat > /dev/null; echo '{{\\"announced\\": true}}'"]
"""


def shape(v: Any) -> Any:
    """The keys and value types of a document, recursively (lists by their first item)."""
    if isinstance(v, dict):
        return {k: shape(x) for k, x in v.items()}
    if isinstance(v, list):
        return [shape(v[0])] if v else []
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if v is None:
        return "null"
    return type(v).__name__


HEX = re.compile(r"\b[0-9a-f]{64}\b|\b[0-9a-f]{32}\b")


def normal(v: Any, paths: dict[str, str]) -> Any:
    """A document with what differs between twin sessions replaced: ids and digests (hex),
    workspace and store paths, timestamps."""
    if isinstance(v, dict):
        return {k: ("<ts>" if k == "ts" else normal(x, paths)) for k, x in v.items()}
    if isinstance(v, list):
        return [normal(x, paths) for x in v]
    if isinstance(v, str):
        for old, new in paths.items():
            v = v.replace(old, new)
        return HEX.sub("<hex>", v)
    return v


def same(py: Any, run: CliRun, rc: int = 0) -> None:
    assert run.rc == rc, (run.rc, run.stdout, run.stderr)
    assert py.to_dict() == run.doc


# ---- read-only verbs: the whole document ----


@pytest.fixture
def busy_session(store: revl.Store, base: Path) -> revl.Session:
    s = store.new(base / "ws")
    s.write("a.txt", "one\n")
    s.write("bin.dat", b"\x00\xff")
    s.mkdir("d")
    s.provide("k", "v")
    s.boundary("turn")
    s.chmod("a.txt", 0o600)
    return s


def test_status_document(busy_session: revl.Session, cli: Callable[..., CliRun]) -> None:
    same(busy_session.status(), cli("status", busy_session.id))


def test_timeline_document(busy_session: revl.Session, cli: Callable[..., CliRun]) -> None:
    same(busy_session.timeline(), cli("timeline", busy_session.id))


def test_inspect_document(busy_session: revl.Session, cli: Callable[..., CliRun]) -> None:
    for k in (-1, 0, 2, 4):
        same(busy_session.inspect(k), cli("inspect", busy_session.id, "--at", str(k)))


def test_read_and_list_documents(busy_session: revl.Session, cli: Callable[..., CliRun]) -> None:
    sid = busy_session.id
    same(busy_session.read_doc("a.txt"), cli("read", sid, "a.txt"))
    same(busy_session.read_doc("bin.dat"), cli("read", sid, "bin.dat"))
    same(busy_session.read_doc("a.txt", at=1), cli("read", sid, "a.txt", "--at", "1"))
    same(busy_session.list(), cli("list", sid))
    same(busy_session.list("d"), cli("list", sid, "d"))


def test_verify_document_clean_and_drifted(
    busy_session: revl.Session, cli: Callable[..., CliRun], base: Path
) -> None:
    same(busy_session.verify(), cli("verify", busy_session.id))
    (base / "ws/a.txt").write_text("edited by hand\n")
    drifted = busy_session.verify()
    assert [d["path"] for d in drifted.drift] == ["a.txt"]
    # the CLI answers "drift?" with its exit code, the same document on stdout
    same(drifted, cli("verify", busy_session.id), rc=1)


def test_sessions_log_compare_diff_documents(
    busy_session: revl.Session, store: revl.Store, cli: Callable[..., CliRun]
) -> None:
    sid = busy_session.id
    branch = busy_session.fork_confirm(busy_session.fork(2).hash).branch
    assert branch is not None
    branch.write("b.txt", "branch\n")
    same(store.sessions(), cli("sessions"))
    same(store.log(), cli("log"))
    same(store.log(busy_session), cli("log", sid))
    same(revl.compare(busy_session, branch), cli("compare", sid, branch.id))
    # diff answers "different?" with exit 1, like diff(1)
    same(revl.diff(busy_session, branch), cli("diff", sid, branch.id), rc=1)
    same(revl.diff(busy_session, branch, "a.txt"), cli("diff", sid, branch.id, "a.txt"), rc=1)
    same(revl.diff(busy_session, busy_session), cli("diff", sid, sid), rc=0)
    same(
        revl.diff(busy_session, branch, at=(1, None)),
        cli("diff", f"{sid}@1", branch.id),
        rc=1,
    )


def test_commit_plan_document(busy_session: revl.Session, cli: Callable[..., CliRun]) -> None:
    same(busy_session.commit(), cli("commit", busy_session.id))


# ---- verbs that change state: the same shape on twin sessions ----


class Twins:
    """Session `py` driven through Python, session `cli_id` through the CLI, same steps."""

    def __init__(self, store: revl.Store, base: Path, cli: Callable[..., CliRun], name: str):
        manifest = base / f"{name}.toml"
        manifest.write_text(MANIFEST)
        self.py = store.new(base / f"{name}-py", manifest=manifest)
        made = cli("new", "--workspace", str(base / f"{name}-cli"), "--manifest", str(manifest))
        assert made.rc == 0, made.stderr
        self.created_cli = made.doc
        self.cli_id: str = made.doc["session"]
        self.cli = cli
        self.base = base
        self.name = name

    def both(self, py_result: Any, *cli_args: str, rc: int = 0) -> tuple[Any, Any]:
        run = self.cli(*cli_args)
        assert run.rc == rc, (cli_args, run.rc, run.stdout, run.stderr)
        doc = run.doc
        pyd = py_result.to_dict()
        assert shape(pyd) == shape(doc), (cli_args, pyd, doc)
        # beyond the shape: the same document, once ids, paths and times are set aside
        paths = {
            str(self.base / f"{self.name}-py-into"): "<into>",
            str(self.base / f"{self.name}-cli-into"): "<into>",
            str(self.base / f"{self.name}-py"): "<ws>",
            str(self.base / f"{self.name}-cli"): "<ws>",
        }
        assert normal(pyd, paths) == normal(doc, paths), (cli_args, pyd, doc)
        return pyd, doc


def test_effect_verbs_have_the_cli_shape(
    store: revl.Store, base: Path, cli: Callable[..., CliRun]
) -> None:
    t = Twins(store, base, cli, "fx")
    c = t.cli_id
    assert set(t.py.created.to_dict()) == set(t.created_cli)
    pyd, doc = t.both(t.py.write("a.txt", "x"), "write", c, "a.txt", "--content", "x")
    assert pyd == doc, "no id in a write's document: the same call gives the same document"
    t.both(t.py.mkdir("d"), "mkdir", c, "d")
    t.both(t.py.chmod("a.txt", 0o600), "chmod", c, "a.txt", "600")
    t.both(t.py.rename("a.txt", "d/a.txt"), "rename", c, "a.txt", "d/a.txt")
    t.both(t.py.delete("d/a.txt"), "delete", c, "d/a.txt")
    t.both(t.py.provide("k", "v"), "provide", c, "k", "v")
    t.both(t.py.boundary("turn"), "boundary", c, "--label", "turn")
    pyd, doc = t.both(
        t.py.exec(["sh", "-c", "echo hi > e.txt; echo out"]),
        "exec", c, "--", "sh", "-c", "echo hi > e.txt; echo out",
    )
    assert pyd["stdout"] == doc["stdout"] == "out\n"
    t.both(
        t.py.note_model(
            1, "m/1", tokens_in=1, tokens_out=2, latency_seconds=0.1, attempts=1,
            attempt_ceiling=1, outcome="validated",
        ),
        "note-model", c, "--step", "1", "--model", "m/1", "--tokens-in", "1", "--tokens-out",
        "2", "--latency-seconds", "0.1", "--attempts", "1", "--attempt-ceiling", "1",
        "--outcome", "validated",
    )
    pyd, doc = t.both(t.py.call("queue_it", {"to": "x"}), "call", c, "queue_it", "--args", '{"to": "x"}')
    assert pyd["queued"] is True and doc["queued"] is True
    pyd, doc = t.both(t.py.call("stamp", {}), "call", c, "stamp", "--args", "{}")
    assert pyd["witness"] == doc["witness"] == {"stamped": True}
    t.both(t.py.step_back(8), "step-back", c, "--to", "8")
    t.both(t.py.step_back(1, mode="compensating"), "step-back", c, "--to", "1", "--compensating")
    plan_py = t.py.commit()
    plan_cli = cli("commit", c).doc
    t.both(plan_py, "commit", c)
    t.both(t.py.commit_confirm(plan_py.hash), "commit-confirm", c, "--hash", plan_cli["hash"])


def test_fork_verbs_have_the_cli_shape(
    store: revl.Store, base: Path, cli: Callable[..., CliRun]
) -> None:
    t = Twins(store, base, cli, "fk")
    c = t.cli_id
    for who in ("py", "cli"):
        if who == "py":
            t.py.write("a", "1")
            t.py.write("a", "2")
            t.py.call("queue_it", {"n": 1})
        else:
            cli("write", c, "a", "--content", "1")
            cli("write", c, "a", "--content", "2")
            cli("call", c, "queue_it", "--args", '{"n": 1}')
    fpy = t.py.fork(1)
    pyd, doc = t.both(fpy, "fork", c, "--at", "1")
    assert pyd["droppedDeferred"] == doc["droppedDeferred"]
    # parallel
    par = t.both(
        t.py.fork_confirm(fpy.hash, into=base / "fk-py-into"),
        "fork-confirm", c, "--hash", doc["hash"], "--into", str(base / "fk-cli-into"),
    )
    assert par[0]["mode"] == par[1]["mode"] == "parallel"
    # serial
    fpy = t.py.fork(1)
    _, doc = t.both(fpy, "fork", c, "--at", "1")
    ser_py, ser_cli = t.both(t.py.fork_confirm(fpy.hash), "fork-confirm", c, "--hash", doc["hash"])
    assert ser_py["forked"] is ser_cli["forked"] is True


def test_abort_has_the_cli_shape(store: revl.Store, base: Path, cli: Callable[..., CliRun]) -> None:
    t = Twins(store, base, cli, "ab")
    c = t.cli_id
    t.py.write("a", "1")
    t.py.call("queue_it", {"n": 1})
    cli("write", c, "a", "--content", "1")
    cli("call", c, "queue_it", "--args", '{"n": 1}')
    pyd, doc = t.both(t.py.abort(), "abort", c)
    assert pyd["aborted"] is doc["aborted"] is True
    assert len(pyd["droppedDeferred"]) == len(doc["droppedDeferred"]) == 1


def test_approval_required_document_is_the_cli_refusal(
    store: revl.Store, base: Path, cli: Callable[..., CliRun]
) -> None:
    t = Twins(store, base, cli, "ap")
    with pytest.raises(revl.ApprovalRequired) as exc:
        t.py.call("announce", {"text": "hi"})
    run = cli("call", t.cli_id, "announce", "--args", '{"text": "hi"}')
    assert run.rc == exc.value.exit_code == 1
    pyd = exc.value.document.to_dict()
    assert shape(pyd) == shape(run.doc)
    assert pyd["approvalRequired"] is run.doc["approvalRequired"] is True
    assert pyd["argsDigest"] == run.doc["argsDigest"], "same tool, same args: same digest"
    assert pyd["ticket"] == exc.value.ticket
    # approved from the CLI, the Python call fires the manifest emission
    assert cli("approve", t.py.id, "--ticket", exc.value.ticket).rc == 0
    assert t.py.call("announce", {"text": "hi"}).witness == {"announced": True}


def test_stale_hash_document_is_the_cli_refusal(
    session: revl.Session, cli: Callable[..., CliRun]
) -> None:
    session.write("a", "1")
    wrong = "0" * 64
    with pytest.raises(revl.StaleHash) as exc:
        session.commit_confirm(wrong)
    run = cli("commit-confirm", session.id, "--hash", wrong)
    assert run.rc == exc.value.exit_code == 1
    assert exc.value.document.to_dict() == run.doc
    assert run.doc["refused"] is True


# ---- errors: the CLI's error document and exit status ----


def test_error_documents_match_the_cli(
    session: revl.Session, store: revl.Store, cli: Callable[..., CliRun], base: Path
) -> None:
    sid = session.id
    session.write("f", "1")
    cases: list[tuple[Callable[[], Any], tuple[str, ...], type[revl.RevlError]]] = [
        (lambda: session.write("../x", "y"), ("write", sid, "../x", "--content", "y"), revl.PathOutside),
        (lambda: session.read("missing"), ("read", sid, "missing"), revl.Absent),
        (lambda: session.inspect(99), ("inspect", sid, "--at", "99"), revl.BadArgs),
        (lambda: session.call("nope", {}), ("call", sid, "nope", "--args", "{}"), revl.BadArgs),
        (lambda: session.fork_confirm("a" * 64), ("fork-confirm", sid, "--hash", "a" * 64), revl.NoPendingFork),
        (lambda: store.session("f" * 32).status(), ("status", "f" * 32), revl.UnknownSession),
        (lambda: store.new(base / "ws"), ("new", "--workspace", str(base / "ws")), revl.WorkspaceBusy),
    ]
    for call, argv, cls in cases:
        with pytest.raises(cls) as exc:
            call()
        run = cli(*argv)
        assert run.rc == exc.value.exit_code, (argv, run.rc, run.stderr)
        err = run.doc["error"]
        assert exc.value.code == err["code"], argv
        assert exc.value.message == err["message"], argv
        # The CLI appends its own wording of the core's remedy to the hint (each front end
        # words it its own way); the core's hint comes first in both.
        common = os.path.commonprefix([exc.value.hint, err["hint"]])
        assert len(common) >= min(10, len(err["hint"])), (argv, exc.value.hint, err["hint"])
        assert exc.value.to_dict()["error"]["code"] == err["code"]
