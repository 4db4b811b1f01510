"""revl for asyncio: the same verbs as :mod:`revl`, as coroutines.

Each verb runs the synchronous one in a worker thread (``asyncio.to_thread``); the native
call releases the GIL, so the event loop and other sessions go on while a command runs or a
WAL record is made durable.
"""

from __future__ import annotations

import asyncio
from typing import Any, Mapping, Sequence

from . import _session
from ._session import PathLike
from .results import (
    AbortReport,
    Bound,
    CallResult,
    CommitPlan,
    CommitResult,
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
    """:class:`revl.Store` with coroutine verbs."""

    def __init__(self, path: PathLike | None = None) -> None:
        self.sync = _session.Store(path)

    @property
    def path(self) -> str:
        return self.sync.path

    async def new(
        self,
        workspace: PathLike,
        manifest: PathLike | None = None,
        tools: Sequence[Tool[Any]] = (),
    ) -> Session:
        return Session(await asyncio.to_thread(self.sync.new, workspace, manifest, tools))

    async def session(self, id_or_prefix: str, tools: Sequence[Tool[Any]] = ()) -> Session:
        return Session(await asyncio.to_thread(self.sync.session, id_or_prefix, tools))

    async def sessions(self) -> Sessions:
        return await asyncio.to_thread(self.sync.sessions)

    async def log(self, session: Session | str | None = None) -> Log:
        s = session.sync if isinstance(session, Session) else session
        return await asyncio.to_thread(self.sync.log, s)


class Session:
    """:class:`revl.Session` with coroutine verbs; ``.sync`` is the synchronous session."""

    def __init__(self, sync: _session.Session) -> None:
        self.sync = sync

    @property
    def id(self) -> str:
        return self.sync.id

    def __repr__(self) -> str:
        return f"revl.aio.Session({self.id!r})"

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
        **limits: Any,
    ) -> ExecResult:
        return await asyncio.to_thread(self.sync.exec, argv, timeout, cwd, net, **limits)

    async def step_back(self, to: int, mode: str = "scoped", force: bool = False) -> StepBackReport:
        return await asyncio.to_thread(self.sync.step_back, to, mode, force)

    async def fork(self, at: int) -> ForkReport:
        return await asyncio.to_thread(self.sync.fork, at)

    async def fork_confirm(self, hash: str, into: PathLike | None = None) -> ForkReport:
        """The result's ``branch`` is a synchronous :class:`revl.Session`; wrap it in
        :class:`revl.aio.Session` to await its verbs."""
        return await asyncio.to_thread(self.sync.fork_confirm, hash, into)

    async def commit(self) -> CommitPlan:
        return await asyncio.to_thread(self.sync.commit)

    async def commit_confirm(self, hash: str) -> CommitResult:
        return await asyncio.to_thread(self.sync.commit_confirm, hash)

    async def resend(self, seq: int) -> Resent:
        return await asyncio.to_thread(self.sync.resend, seq)

    async def abort(self) -> AbortReport:
        return await asyncio.to_thread(self.sync.abort)

    async def note_model(self, step: int, model: str, **fields: Any) -> ModelNote:
        return await asyncio.to_thread(self.sync.note_model, step, model, **fields)

    async def fork_preview(self, at: int) -> ForkReport:
        return await asyncio.to_thread(self.sync.fork_preview, at)

    async def bind(self, checkpoint_id: str, at: int | None = None) -> Bound:
        return await asyncio.to_thread(self.sync.bind, checkpoint_id, at)

    async def position(self) -> Position:
        return await asyncio.to_thread(self.sync.position)


async def compare(a: Session | str, b: Session | str, *, store: Store | None = None) -> Compare:
    sa = a.sync if isinstance(a, Session) else a
    sb = b.sync if isinstance(b, Session) else b
    return await asyncio.to_thread(
        _session.compare, sa, sb, store=store.sync if store is not None else None
    )


async def diff(
    a: Session | str,
    b: Session | str,
    path: str | None = None,
    *,
    at: tuple[int | None, int | None] = (None, None),
    store: Store | None = None,
) -> Diff:
    sa = a.sync if isinstance(a, Session) else a
    sb = b.sync if isinstance(b, Session) else b
    return await asyncio.to_thread(
        _session.diff,
        sa,
        sb,
        path,
        at=at,
        store=store.sync if store is not None else None,
    )


__all__ = ["Store", "Session", "compare", "diff"]
