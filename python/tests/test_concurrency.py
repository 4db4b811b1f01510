"""Blocking work releases the GIL: two threads on two sessions run at once, and so do two
asyncio tasks through revl.aio. Measured: two 1-second commands take well under 2 seconds."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import revl
import revl.aio

from _support import Sink, post

SLEEP = 1.0
LIMIT = 1.8  # two SLEEP-second commands that overlap finish well before 2 * SLEEP


def timed_threads(*fns: Any) -> float:
    errors: list[BaseException] = []

    def run(f: Any) -> None:
        try:
            f()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(f,)) for f in fns]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - t0
    assert not errors, errors
    return took


def test_two_threads_on_two_sessions_overlap(
    store: revl.Store, base: Path, record_property: Any
) -> None:
    a = store.new(base / "wa")
    b = store.new(base / "wb")
    t0 = time.monotonic()
    one = a.exec(["sleep", str(SLEEP)])
    single = time.monotonic() - t0
    assert one.exit_code == 0 and single >= SLEEP
    got: dict[str, Any] = {}
    both = timed_threads(
        lambda: got.__setitem__("a", a.exec(["sh", "-c", f"sleep {SLEEP}; echo a > a.txt"])),
        lambda: got.__setitem__("b", b.exec(["sh", "-c", f"sleep {SLEEP}; echo b > b.txt"])),
    )
    record_property("single_exec_seconds", round(single, 3))
    record_property("two_threads_seconds", round(both, 3))
    print(f"one exec of sleep {SLEEP}: {single:.3f}s; two on two threads: {both:.3f}s")
    assert got["a"].exit_code == 0 and got["b"].exit_code == 0
    assert (base / "wa/a.txt").read_text() == "a\n" and (base / "wb/b.txt").read_text() == "b\n"
    assert both < LIMIT, f"two {SLEEP}s execs on two threads took {both:.2f}s: they did not overlap"


def test_the_gil_is_released_while_a_command_runs(session: revl.Session) -> None:
    done = threading.Event()

    def work() -> None:
        session.exec(["sleep", "0.8"])
        done.set()

    t = threading.Thread(target=work)
    t.start()
    stamps = [time.monotonic()]
    while not done.is_set():
        time.sleep(0.005)
        stamps.append(time.monotonic())
    t.join()
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert len(stamps) > 20 and max(gaps) < 0.4, (
        f"the main thread ran {len(stamps)} times, its longest wait {max(gaps):.2f}s: "
        "the GIL was held while the command ran"
    )


def test_reads_do_not_wait_for_a_busy_session(session: revl.Session) -> None:
    started = threading.Event()

    def long_exec() -> None:
        started.set()
        session.exec(["sleep", "1"])

    t = threading.Thread(target=long_exec)
    t.start()
    started.wait()
    time.sleep(0.3)
    t0 = time.monotonic()
    st = session.status()
    tl = session.timeline()
    took = time.monotonic() - t0
    t.join()
    assert took < 0.5, f"reads waited {took:.2f}s for the exec's lock"
    assert st.busy is True and tl.busy is True
    assert session.status().busy is None, "not busy once the exec is done"


def test_two_threads_committing_python_tools_overlap(
    store: revl.Store, base: Path, sink: Sink
) -> None:
    @revl.tool(cls="deferred", scope=["mail"])
    def slow_send(who: str) -> None:
        time.sleep(SLEEP)
        post(sink.url, {"who": who})

    a = store.new(base / "wa", tools=[slow_send])
    b = store.new(base / "wb", tools=[slow_send])
    a.call(slow_send, {"who": "a"})
    b.call(slow_send, {"who": "b"})
    pa, pb = a.commit(), b.commit()
    results: dict[str, Any] = {}
    took = timed_threads(
        lambda: results.__setitem__("a", a.commit_confirm(pa.hash)),
        lambda: results.__setitem__("b", b.commit_confirm(pb.hash)),
    )
    print(f"two commits of a {SLEEP}s Python send on two threads: {took:.3f}s")
    assert len(results["a"].flushed) == 1 and len(results["b"].flushed) == 1
    assert sorted(x["who"] for x in sink.bodies) == ["a", "b"]
    assert took < LIMIT, f"took {took:.2f}s: the two commits did not overlap"


def test_asyncio_gather_two_sessions_overlap(
    store_dir: Path, base: Path, record_property: Any
) -> None:
    async def main() -> float:
        st = revl.aio.Store(store_dir)
        a = await st.new(base / "wa")
        b = await st.new(base / "wb")
        assert isinstance(a, revl.aio.Session)
        t0 = time.monotonic()
        ra, rb = await asyncio.gather(
            a.exec(["sh", "-c", f"sleep {SLEEP}; echo a > a.txt"]),
            b.exec(["sh", "-c", f"sleep {SLEEP}; echo b > b.txt"]),
        )
        took = time.monotonic() - t0
        assert ra.exit_code == 0 and rb.exit_code == 0
        assert await a.read("a.txt") == b"a\n" and await b.read("b.txt") == b"b\n"
        return took

    took = asyncio.run(main())
    record_property("asyncio_two_execs_seconds", round(took, 3))
    print(f"asyncio.gather of two {SLEEP}s execs: {took:.3f}s")
    assert took < LIMIT, f"took {took:.2f}s: the two execs did not overlap"


def test_aio_verbs(store_dir: Path, base: Path, sink: Sink) -> None:
    @revl.tool(cls="deferred", scope=["mail"])
    def send(n: int) -> None:
        post(sink.url, {"n": n})

    async def main() -> None:
        st = revl.aio.Store(store_dir)
        assert st.path == str(store_dir)
        s = await st.new(base / "ws", tools=[send])
        assert (await s.write("a.txt", "one")).step == 1
        await s.mkdir("d")
        await s.rename("a.txt", "d/a.txt")
        await s.chmod("d/a.txt", 0o600)
        await s.provide("k", "v")
        await s.boundary("turn")
        assert await s.read("d/a.txt") == b"one"
        assert (await s.read_doc("d/a.txt")).mode == "0600"
        assert [e["name"] for e in (await s.list("d")).entries] == ["a.txt"]
        assert (await s.timeline()).head == 6
        assert (await s.inspect(5)).active_provisions == {"k": "v"}
        assert (await s.verify()).drift == []
        await s.write("b.txt", "two")
        await s.delete("b.txt")
        back = await s.step_back(6)
        assert [e["index"] for e in back.inverses_ran] == [8, 7]
        await s.note_model(
            1, "m/1", tokens_in=1, tokens_out=1, latency_seconds=0.1, attempts=1,
            attempt_ceiling=1, outcome="validated",
        )
        q = await s.call(send, {"n": 1})
        assert q.queued is True
        assert [x["seq"] for x in (await s.status()).queue] == [q.seq]
        par = await s.fork_confirm((await s.fork(1)).hash, into=base / "alt")
        assert isinstance(par.branch, revl.aio.Session)
        branch = par.branch
        assert await branch.read("a.txt") == b"one", "the branch is at step 1"
        assert (await revl.aio.compare(s, branch)).relation == "parent-branch"
        d = await revl.aio.diff(s, branch)
        assert sorted(p["path"] for p in d.paths) == ["a.txt", "d", "d/a.txt"]
        assert {x["session"] for x in (await st.sessions()).sessions} == {s.id, branch.id}
        assert {x["session"] for x in (await st.log(s)).sessions} == {s.id, branch.id}
        assert sink.count == 0
        done = await s.commit_confirm((await s.commit()).hash)
        assert done.flushed == [q.seq] and sink.count == 1
        again = await st.session(s.id[:8])
        assert again.id == s.id
        with pytest.raises(revl.NotLive):
            await again.write("x", "y")
        aborted = await branch.abort()
        assert aborted.aborted is True

    asyncio.run(main())


def test_aio_diff_takes_at_like_revl_diff(store_dir: Path, base: Path) -> None:
    """revl.aio offers the same verbs as revl: `revl.diff(a, b, path, at=(ka, kb))`."""
    st = revl.Store(store_dir)
    a, b = st.new(base / "wa"), st.new(base / "wb")
    a.write("f", "1")  # step 1
    a.write("f", "2")  # step 2
    b.write("f", "1")  # step 1
    sync = revl.diff(a, b, at=(1, None))
    assert sync.paths == []

    async def main() -> Any:
        return await revl.aio.diff(revl.aio.Session(a), revl.aio.Session(b), at=(1, None))

    assert asyncio.run(main()) == sync


def _twin_normal(v: Any, names: dict[str, str]) -> Any:
    """A document with what differs between twin sessions (ids, paths, times) named."""
    if isinstance(v, dict):
        return {k: ("<ts>" if k == "ts" else _twin_normal(x, names)) for k, x in v.items()}
    if isinstance(v, list):
        return [_twin_normal(x, names) for x in v]
    if isinstance(v, str):
        for old, new in names.items():
            v = v.replace(old, new)
    return v


def stepped_ws(s: revl.aio.Session) -> str:
    return str(s.sync.status().workspace)


def test_aio_fork_branch_gives_an_aio_branch(store_dir: Path, base: Path) -> None:
    """`revl.aio.Session.fork_branch` is `revl.Session.fork_branch` awaited: its `.branch` is
    a `revl.aio.Session` at the step, in its own directory."""

    async def main() -> None:
        s = await revl.aio.Store(store_dir).new(base / "aio-ws")
        await s.write("a.txt", "one")
        await s.write("a.txt", "two")
        report = await s.fork_branch(1, base / "aio-alt")
        branch = report.branch
        assert isinstance(branch, revl.aio.Session), type(branch)
        assert await branch.read("a.txt") == b"one"
        assert (base / "aio-alt" / "a.txt").read_text() == "one"
        assert (base / "aio-ws" / "a.txt").read_text() == "two"

    asyncio.run(main())


@pytest.mark.parametrize("parallel", [False, True])
def test_aio_fork_confirm_gives_an_aio_branch(store_dir: Path, base: Path, parallel: bool) -> None:
    """docs/python.md: `revl.aio` offers the same verbs; `fork_confirm`'s `.branch` is the branch as
    an attached session, so in asyncio it is a `revl.aio.Session` whose verbs are awaited
    (none of them runs on the event loop), and `.to_dict()` is the synchronous document."""
    sync_store = revl.Store(store_dir)
    twin = sync_store.new(base / "sync-ws")
    twin.write("a.txt", "one")
    twin.write("b.txt", "two")
    plan = twin.fork(1)
    twin_report = twin.fork_confirm(plan.hash, into=base / "sync-alt" if parallel else None)
    assert isinstance(twin_report.branch, revl.Session)

    async def main() -> tuple[revl.aio.Session, revl.results.ForkReport[revl.aio.Session]]:
        st = revl.aio.Store(store_dir)
        s = await st.new(base / "aio-ws")
        await s.write("a.txt", "one")
        await s.write("b.txt", "two")
        report = await s.fork_confirm(
            (await s.fork(1)).hash, into=base / "aio-alt" if parallel else None
        )
        branch = report.branch
        assert isinstance(branch, revl.aio.Session), type(branch)
        assert branch.id == report.branch_id
        assert branch.store is s.store and branch.store.path == st.path
        # its verbs are coroutines: awaiting them works
        stepped = await branch.write("c.txt", "three")
        assert stepped.step == 1  # a branch starts at its hinge, step 0
        assert await branch.read("c.txt") == b"three"
        assert await branch.read("a.txt") == b"one"
        assert not (Path(stepped_ws(branch)) / "b.txt").exists()
        assert await branch.head == 1
        return s, report

    s, report = asyncio.run(main())
    assert isinstance(report, revl.results.ForkReport) and report.clean
    sync_branch = report.branch.sync if report.branch is not None else None
    assert isinstance(sync_branch, revl.Session)
    assert sync_branch.timeline().head == 1
    # The same document as the synchronous fork_confirm's, but for ids and paths.
    assert twin_report.branch is not None
    names_sync = {twin.id: "<parent>", twin_report.branch.id: "<branch>", str(base / "sync"): "<base>"}
    names_aio = {s.id: "<parent>", sync_branch.id: "<branch>", str(base / "aio"): "<base>"}
    # A layered branch names its own lower layer (each fork here froze its own point).
    for doc, names in ((twin_report.to_dict(), names_sync), (report.to_dict(), names_aio)):
        lower = (doc.get("layers") or {}).get("lower")
        if lower:
            names[lower] = "<lower>"
    assert _twin_normal(report.to_dict(), names_aio) == _twin_normal(twin_report.to_dict(), names_sync)


def test_aio_session_has_the_sync_sessions_attributes(store_dir: Path, base: Path) -> None:
    @revl.tool(cls="deferred", scope=["mail"])
    def send(n: int) -> None:
        return None

    async def main() -> None:
        st = revl.aio.Store(store_dir)
        s = await st.new(base / "ws", tools=[send])
        sync = s.sync
        assert isinstance(s.store, revl.aio.Store) and s.store.sync is sync.store
        assert s.store.path == sync.store.path == str(store_dir)
        assert s.tools == sync.tools and send in s.tools
        assert s.created is not None and s.created == sync.created
        assert s.created.session == s.id
        assert await s.head == sync.head == 0
        await s.write("f", "1")
        assert await s.head == sync.head == 1
        again = await st.session(s.id)
        assert again.created is None and again == s and hash(again) == hash(s)
        assert revl.aio.Session(s) == s and revl.aio.Session(s).sync is s.sync
        for name in ("id", "store", "tools", "created", "head"):
            with pytest.raises(AttributeError):
                setattr(s, name, None)
        # a wrapped synchronous store: the same store underneath
        wrapped = revl.aio.Store(sync.store)
        assert wrapped.sync is sync.store and repr(wrapped) == f"revl.aio.Store({st.path!r})"

    asyncio.run(main())


def test_aio_compare_and_diff_take_sync_objects(store_dir: Path, base: Path) -> None:
    """`revl.aio.compare`/`diff` accept a synchronous `revl.Store` (and sessions) as well."""
    sync_store = revl.Store(store_dir)
    a = sync_store.new(base / "wa")
    a.write("f", "1")
    branch = a.fork_confirm(a.fork(0).hash).branch
    assert branch is not None
    branch.write("g", "2")
    want_cmp = revl.compare(a, branch)
    want_diff = revl.diff(a.id, branch.id, store=sync_store)

    async def main() -> None:
        got = await revl.aio.compare(a.id, branch.id, store=sync_store)
        assert got == want_cmp and got.relation == "parent-branch"
        assert await revl.aio.compare(a, branch) == want_cmp
        d = await revl.aio.diff(a.id, branch.id, store=sync_store)
        assert d == want_diff
        assert await revl.aio.diff(a, revl.aio.Session(branch)) == want_diff
        assert await revl.aio.diff(a.id, branch.id, store=revl.aio.Store(sync_store)) == want_diff
        assert {x["session"] for x in (await revl.aio.Store(sync_store).log(a)).sessions} == {
            a.id,
            branch.id,
        }

    asyncio.run(main())


def test_aio_exec_and_note_model_take_the_sync_keywords(session: revl.Session) -> None:
    """The limits of `exec` and the fields of `note_model` are named keyword arguments, as in
    `revl.Session`: a misspelt one is refused before anything runs."""
    s = revl.aio.Session(session)

    async def main() -> None:
        r = await s.exec(["sh", "-c", "echo hi > out.txt"], pids=64, max_bytes="1M", memory=None)
        assert r.exit_code == 0 and r.step == 1
        with pytest.raises(TypeError, match="memroy"):
            await s.exec(["true"], memroy="1G")  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="outcome"):
            await s.note_model(  # type: ignore[call-arg]
                1, "m", tokens_in=1, tokens_out=1, latency_seconds=0.1, attempts=1,
                attempt_ceiling=1,
            )
        n = await s.note_model(
            1, "m", tokens_in=1, tokens_out=1, latency_seconds=0.1, attempts=1,
            attempt_ceiling=1, outcome="validated", cost=0.5, currency="USD",
        )
        assert n.recorded is True and n.llm["cost"]["value"] == 0.5

    asyncio.run(main())
    assert session.timeline().head == 1, "the refused calls recorded nothing"
