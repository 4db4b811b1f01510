"""revl for asyncio: the same verbs as :mod:`revl`, as coroutines.

Each verb runs the synchronous one in a worker thread (``asyncio.to_thread``); the native
call releases the GIL, so the event loop and other sessions go on while a command runs or a
WAL record is made durable.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Mapping, Sequence, cast

from . import _session
from ._session import PathLike
from .results import (
    AbortReport,
    Bound,
    CallResult,
    CommitPlan,
    CommitResult,
    Created,
    Resent,
    Compare,
    Diff,
    ExecResult,
    FileRead,
    ForkReport,
    Inspect,
    Listing,
    Log,
    ModelNote,
    Position,
    Sessions,
    Status,
    StepBackReport,
    Stepped,
    Timeline,
    Verify,
)
from .tools import Tool


class Store:
    """:class:`revl.Store` with coroutine verbs. ``path`` is a store directory (default as
    :class:`revl.Store`'s), or a :class:`revl.Store` to wrap; ``.sync`` is the synchronous
    store underneath."""

    def __init__(self, path: PathLike | _session.Store | None = None) -> None:
        self.sync = path if isinstance(path, _session.Store) else _session.Store(path)

    @property
    def path(self) -> str:
        return self.sync.path

    def __repr__(self) -> str:
        return f"revl.aio.Store({self.path!r})"

    async def new(
        self,
        workspace: PathLike,
        manifest: PathLike | None = None,
        tools: Sequence[Tool[Any]] = (),
    ) -> Session:
        s = await asyncio.to_thread(self.sync.new, workspace, manifest, tools)
        return Session(s, _store=self)

    async def session(self, id_or_prefix: str, tools: Sequence[Tool[Any]] = ()) -> Session:
        s = await asyncio.to_thread(self.sync.session, id_or_prefix, tools)
        return Session(s, _store=self)

    async def sessions(self) -> Sessions:
        return await asyncio.to_thread(self.sync.sessions)

    async def log(
        self, session: Session | _session.Session | str | None = None, *, remote: str | None = None
    ) -> Log:
        return await asyncio.to_thread(self.sync.log, _sync(session), remote=remote)

    async def read_at(
        self,
        session: Session | _session.Session | str,
        path: str,
        at: int,
        *,
        remote: str | None = None,
    ) -> FileRead:
        s = _sync(session)
        assert s is not None
        return await asyncio.to_thread(self.sync.read_at, s, path, at, remote=remote)

    async def timeline(
        self, session: Session | _session.Session | str, *, remote: str | None = None
    ) -> Timeline:
        s = _sync(session)
        assert s is not None
        return await asyncio.to_thread(self.sync.timeline, s, remote=remote)


class Session:
    """:class:`revl.Session` with coroutine verbs; ``.sync`` is the synchronous session.

    ``Session(s)`` wraps a synchronous :class:`revl.Session` (given a
    :class:`revl.aio.Session`, it wraps the same synchronous session: the two are equal). The attributes are those of :class:`revl.Session`:
    ``id``, ``store`` (a :class:`revl.aio.Store`), ``tools``, ``created``; ``head`` is
    awaited (``await s.head``), as it reads the WAL."""

    def __init__(
        self, sync: _session.Session | Session, *, _store: Store | None = None
    ) -> None:
        self.sync: _session.Session = sync.sync if isinstance(sync, Session) else sync
        self._store = _store if _store is not None and _store.sync is self.sync.store else None

    @property
    def id(self) -> str:
        """The session's 32-hex id."""
        return self.sync.id

    @property
    def store(self) -> Store:
        """The session's store, as a :class:`revl.aio.Store` (over ``sync.store``)."""
        if self._store is None:
            self._store = Store(self.sync.store)
        return self._store

    @property
    def tools(self) -> tuple[Tool[Any], ...]:
        """The Python tools this process runs for the session (with their inverses)."""
        return self.sync.tools

    @property
    def created(self) -> Created | None:
        """The ``new`` document, on a session made by ``new``."""
        return self.sync.created

    @property
    def head(self) -> Awaitable[int]:
        """The index of the session's last step: ``await s.head``."""
        return asyncio.to_thread(lambda: self.sync.head)

    def __repr__(self) -> str:
        return f"revl.aio.Session({self.id!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Session) and other.sync == self.sync

    def __hash__(self) -> int:
        return hash(self.sync)

    async def write(self, path: str, content: str | bytes) -> Stepped:
        return await asyncio.to_thread(self.sync.write, path, content)

    async def delete(self, path: str) -> Stepped:
        return await asyncio.to_thread(self.sync.delete, path)

    async def rename(self, src: str, dst: str) -> Stepped:
        return await asyncio.to_thread(self.sync.rename, src, dst)

    async def mkdir(self, path: str) -> Stepped:
        return await asyncio.to_thread(self.sync.mkdir, path)

    async def chmod(self, path: str, mode: int | str) -> Stepped:
        return await asyncio.to_thread(self.sync.chmod, path, mode)

    async def read(self, path: str, at: int | None = None) -> bytes:
        return await asyncio.to_thread(self.sync.read, path, at)

    async def read_doc(self, path: str, at: int | None = None) -> FileRead:
        return await asyncio.to_thread(self.sync.read_doc, path, at)

    async def list(self, path: str | None = None) -> Listing:
        return await asyncio.to_thread(self.sync.list, path)

    async def timeline(self) -> Timeline:
        return await asyncio.to_thread(self.sync.timeline)

    async def inspect(self, at: int) -> Inspect:
        return await asyncio.to_thread(self.sync.inspect, at)

    async def status(self) -> Status:
        return await asyncio.to_thread(self.sync.status)

    async def verify(self) -> Verify:
        return await asyncio.to_thread(self.sync.verify)

    async def provide(self, key: str, value: str) -> Stepped:
        return await asyncio.to_thread(self.sync.provide, key, value)

    async def boundary(self, label: str | None = None) -> Stepped:
        return await asyncio.to_thread(self.sync.boundary, label)

    async def call(
        self, tool: str | Tool[Any], args: Mapping[str, Any] | None = None
    ) -> CallResult:
        return await asyncio.to_thread(self.sync.call, tool, args)

    async def exec(
        self,
        argv: Sequence[str],
        timeout: float | None = None,
        cwd: str | None = None,
        net: bool | Sequence[str] | None = None,
        *,
        unconfined: bool = False,
        memory: str | int | None = None,
        pids: int | None = None,
        cpu_seconds: int | None = None,
        max_bytes: str | int | None = None,
    ) -> ExecResult:
        return await asyncio.to_thread(
            lambda: self.sync.exec(
                argv,
                timeout,
                cwd,
                net,
                unconfined=unconfined,
                memory=memory,
                pids=pids,
                cpu_seconds=cpu_seconds,
                max_bytes=max_bytes,
            )
        )

    async def step_back(
        self, to: int, mode: str = "scoped", force: bool = False, keep_drift: bool = False
    ) -> StepBackReport:
        return await asyncio.to_thread(self.sync.step_back, to, mode, force, keep_drift)

    async def fork(self, at: int) -> ForkReport[Session]:
        return _enumeration(await asyncio.to_thread(self.sync.fork, at))

    async def fork_confirm(
        self, hash: str, into: PathLike | None = None, keep_drift: bool = False
    ) -> ForkReport[Session]:
        """Perform the enumerated fork; the result's ``branch`` is the branch as a
        :class:`revl.aio.Session` (holding this session's tools), its ``to_dict()`` the
        same document as :meth:`revl.Session.fork_confirm`'s."""
        report = await asyncio.to_thread(self.sync.fork_confirm, hash, into, keep_drift)
        if report.branch is None:
            return _enumeration(report)
        return ForkReport(report.to_dict(), branch=Session(report.branch, _store=self.store))

    async def fork_branch(
        self, at: int, into: PathLike, require_clean: bool = False
    ) -> ForkReport[Session]:
        """:meth:`revl.Session.fork_branch`; the result's ``branch`` is a
        :class:`revl.aio.Session`."""
        report = await asyncio.to_thread(self.sync.fork_branch, at, into, require_clean)
        if report.branch is None:
            return _enumeration(report)
        return ForkReport(report.to_dict(), branch=Session(report.branch, _store=self.store))

    async def commit(self) -> CommitPlan:
        return await asyncio.to_thread(self.sync.commit)

    async def commit_confirm(self, hash: str) -> CommitResult:
        return await asyncio.to_thread(self.sync.commit_confirm, hash)

    async def resend(self, seq: int) -> Resent:
        return await asyncio.to_thread(self.sync.resend, seq)

    async def abort(self, *, remove: bool = False) -> AbortReport:
        return await asyncio.to_thread(self.sync.abort, remove=remove)

    async def note_model(
        self,
        step: int,
        model: str,
        *,
        tokens_in: int,
        tokens_out: int,
        latency_seconds: float,
        attempts: int,
        attempt_ceiling: int,
        outcome: str,
        cost: float | None = None,
        currency: str | None = None,
    ) -> ModelNote:
        return await asyncio.to_thread(
            lambda: self.sync.note_model(
                step,
                model,
                tokens_in=tokens_in,
                tokens_out=tokens_out,
                latency_seconds=latency_seconds,
                attempts=attempts,
                attempt_ceiling=attempt_ceiling,
                outcome=outcome,
                cost=cost,
                currency=currency,
            )
        )

    async def fork_preview(self, at: int) -> ForkReport[Session]:
        return _enumeration(await asyncio.to_thread(self.sync.fork_preview, at))

    async def bind(self, checkpoint_id: str, at: int | None = None) -> Bound:
        return await asyncio.to_thread(self.sync.bind, checkpoint_id, at)

    async def position(self) -> Position:
        return await asyncio.to_thread(self.sync.position)


def _enumeration(report: ForkReport[Any]) -> ForkReport[Session]:
    """A fork report without a branch (an enumeration): the same object, typed for
    :mod:`revl.aio` (its ``branch`` is ``None``)."""
    assert report.branch is None
    return cast("ForkReport[Session]", report)


def _sync(s: Session | _session.Session | str | None) -> _session.Session | str | None:
    return s.sync if isinstance(s, Session) else s


def _sync_store(store: Store | _session.Store | None) -> _session.Store | None:
    return store.sync if isinstance(store, Store) else store


async def compare(
    a: Session | _session.Session | str,
    b: Session | _session.Session | str,
    *,
    store: Store | _session.Store | None = None,
    remote: str | None = None,
) -> Compare:
    """:func:`revl.compare` as a coroutine; ``a``, ``b`` and ``store`` may be the
    asyncio objects or the synchronous ones."""
    sa, sb = _sync(a), _sync(b)
    assert sa is not None and sb is not None
    return await asyncio.to_thread(
        _session.compare, sa, sb, store=_sync_store(store), remote=remote
    )


async def diff(
    a: Session | _session.Session | str,
    b: Session | _session.Session | str,
    path: str | None = None,
    *,
    at: tuple[int | None, int | None] = (None, None),
    store: Store | _session.Store | None = None,
    remote: str | None = None,
) -> Diff:
    """:func:`revl.diff` as a coroutine; ``a``, ``b`` and ``store`` may be the asyncio
    objects or the synchronous ones."""
    sa, sb = _sync(a), _sync(b)
    assert sa is not None and sb is not None
    return await asyncio.to_thread(
        _session.diff, sa, sb, path, at=at, store=_sync_store(store), remote=remote
    )


__all__ = ["Store", "Session", "compare", "diff"]
