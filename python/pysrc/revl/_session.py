"""``revl.Store`` and ``revl.Session``: revl's verbs from Python.

Every method is one call into revl's core (``revl._revl``) with the GIL released; results are
the typed objects of :mod:`revl.results`, errors the exceptions of :mod:`revl.errors`.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar, Union, cast

from . import _revl
from .errors import ApprovalRequired, BadArgs, RevlError, StaleHash
from .names import check_text, not_unicode
from .results import (
    AbortReport,
    CallResult,
    CommitPlan,
    CommitResult,
    Resent,
    Compare,
    Created,
    Diff,
    ExecResult,
    FileRead,
    ForkReport,
    Inspect,
    Listing,
    Bound,
    Log,
    ModelNote,
    Position,
    Result,
    Sessions,
    Status,
    StepBackReport,
    Stepped,
    Timeline,
    Verify,
)
from .tools import Tool

PathLike = Union[str, "os.PathLike[str]"]
T = TypeVar("T", bound=Result)


N = TypeVar("N")


def _converted(what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call into the native layer: the one gate every argument crosses. An argument it
    cannot take (a number past 64 bits, a string that is not Unicode text) is
    :class:`revl.BadArgs`, as the CLI's would be, raised before the verb runs."""
    try:
        return call(*args, **kwargs)
    except OverflowError as e:
        raise BadArgs(
            f"{what}: a number is out of range ({e})",
            "give steps, sequence numbers and limits as non-negative integers below 2**64",
        ) from None
    except UnicodeEncodeError as e:
        # A str that UTF-8 cannot encode: it holds a lone surrogate.
        if isinstance(e.object, str):
            raise not_unicode(what, e.object, e.start) from None
        raise BadArgs(
            f"{what}: a string is not valid Unicode ({e.reason} at index {e.start})",
            "pass valid Unicode text (no lone surrogates)",
        ) from None


class _Guarded:
    """A native object whose methods raise :class:`revl.BadArgs` for arguments the
    conversion to Rust refuses (see :func:`_converted`)."""

    __slots__ = ("_raw",)

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._raw, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return _converted(name, attr, *args, **kwargs)

        return call


def _guard(raw: N) -> N:
    return cast(N, _Guarded(raw))


def _with_inverses(tools: Iterable[Tool[Any]]) -> tuple[Tool[Any], ...]:
    """``tools`` and the decorated functions their ``undo=``/``compensate=`` name: an
    inverse passed by object is held without being listed again."""
    out: list[Tool[Any]] = []
    seen: set[int] = set()
    todo = list(tools)
    while todo:
        t = todo.pop(0)
        if isinstance(t, Tool):
            # the same object once; two objects with one name stay two (a bad manifest)
            if id(t) in seen:
                continue
            seen.add(id(t))
            todo.extend(x for x in (t.undo, t.compensate) if isinstance(x, Tool))
        out.append(t)
    return tuple(out)


def _host(tools: Iterable[Tool[Any]]) -> _revl.NativeHost | None:
    held: dict[str, tuple[str, Any]] = {}
    for t in tools:
        if not isinstance(t, Tool):
            raise TypeError(
                f"tools= takes functions decorated with @revl.tool, not {type(t).__name__}"
            )
        held[t.name] = (t.target, t.fn)
    return _converted("tools", _revl.NativeHost, held) if held else None


def _result(cls: type[T], answer: _revl.Answer) -> T:
    """The typed result of a verb; a refusal with its own document is raised with it, in the
    core's words."""
    text, refusal = answer
    result = cls(json.loads(text))
    if refusal is None:
        return result
    code, message, hint, ticket = refusal
    if code == StaleHash.code:
        raise StaleHash(message, hint, document=result)
    if code == ApprovalRequired.code:
        raise ApprovalRequired(message, hint, document=result, ticket=ticket or "")
    raise RevlError(message, hint)


class Store:
    """A revl store: where sessions, their WALs and the content they witnessed live.

    ``path`` defaults as the ``revl`` command's ``--store`` does: ``$REVL_STORE``, else
    ``$XDG_STATE_HOME/revl``, else ``~/.local/state/revl``. Nothing is created until a
    session is.
    """

    def __init__(self, path: PathLike | None = None) -> None:
        self._raw = _converted(
            "Store", _revl.NativeStore, os.fspath(path) if path is not None else None
        )
        self._native: _revl.NativeStore = _guard(self._raw)

    @property
    def path(self) -> str:
        return self._native.root

    def __repr__(self) -> str:
        return f"revl.Store({self.path!r})"

    def new(
        self,
        workspace: PathLike,
        manifest: PathLike | None = None,
        tools: Sequence[Tool[Any]] = (),
    ) -> Session:
        """Create a session on ``workspace`` (created if missing) and return it.

        ``manifest`` is a ``revl.toml`` (default: the workspace's own, if any); ``tools`` are
        Python functions decorated with :func:`revl.tool`, recorded in the session's
        manifest beside the file's tools and runnable by this process.
        """
        tools = _with_inverses(tools)
        # (_host refuses what is not a Tool, with a TypeError)
        declarations = [t.declaration() for t in tools if isinstance(t, Tool)]
        check_text("new", declarations, "tools")
        host = _host(tools)
        decls = json.dumps(declarations, ensure_ascii=False)
        text, _ = self._native.new_session(
            os.fspath(workspace),
            os.fspath(manifest) if manifest is not None else None,
            decls,
            host,
        )
        created = Created(json.loads(text))
        return Session(self, created.session, tools, _host_obj=host, created=created)

    def session(self, id_or_prefix: str, tools: Sequence[Tool[Any]] = ()) -> Session:
        """Attach to a session by id or unique prefix; ``tools`` are the Python functions
        its manifest names that this process may run."""
        full = self._native.resolve(id_or_prefix)
        return Session(self, full, tuple(tools))

    def sessions(self) -> Sessions:
        return _result(Sessions, self._native.sessions())

    def log(self, session: Session | str | None = None, *, remote: str | None = None) -> Log:
        """The lineage of the store's sessions (or of one session's family). With
        ``remote`` (a name ``revl remote add`` gave), the remote's sessions, fetched and
        verified into the store's cache of it (``revl --remote NAME log``); sessions refused
        there are listed under ``unreadable``."""
        sid = session.id if isinstance(session, Session) else session
        return _result(Log, self._native.log(sid, remote))

    def read_at(
        self, session: Session | str, path: str, at: int, *, remote: str | None = None
    ) -> FileRead:
        """The document of ``revl [--remote NAME] read SESSION PATH --at K``: the file right
        after step ``at`` of a session of this store, or of ``remote`` (fetched and verified
        into the store's cache of it). ``FileRead.data`` gives the bytes."""
        return _result(FileRead, self._native.read_at(_session_id(session), path, at, remote))

    def timeline(self, session: Session | str, *, remote: str | None = None) -> Timeline:
        """The steps of a session of this store, or of ``remote`` (``revl --remote NAME
        timeline SESSION``)."""
        return _result(Timeline, self._native.timeline(_session_id(session), remote))


class Session:
    """One revl session, named by its id. Each call attaches (takes the session's lock,
    rebuilds from the WAL, repairs an interrupted operation), runs one verb and lets go, so a
    ``revl approve`` from a terminal works while this object is alive."""

    def __init__(
        self,
        store: Store,
        id: str,
        tools: Sequence[Tool[Any]] = (),
        *,
        _host_obj: _revl.NativeHost | None = None,
        created: Created | None = None,
    ) -> None:
        self.store = store
        self.tools: tuple[Tool[Any], ...] = _with_inverses(tools)
        host = _host_obj if _host_obj is not None else _host(self.tools)
        self._native: _revl.NativeSession = _guard(
            _converted("Session", _revl.NativeSession, store._raw, id, host)
        )
        self._host = host
        self.created = created
        # The arguments of the held sends `status` listed, by seq (see `status`).
        self._held_args: dict[int, Any] = {}

    @property
    def id(self) -> str:
        """The session's 32-hex id."""
        return self._native.id

    def __repr__(self) -> str:
        return f"revl.Session({self.id!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Session)
            and other.id == self.id
            and other.store.path == self.store.path
        )

    def __hash__(self) -> int:
        return hash((self.store.path, self.id))

    # ---- file effects ----

    def write(self, path: str, content: str | bytes) -> Stepped:
        """Write a file (text is written as UTF-8): one witnessed, rewindable step.

        ``content`` is at most 16 MiB (``revl.BadArgs`` above it, nothing written): put a
        larger file in place with :meth:`exec` (``["cp", SOURCE, path]``). Text with a lone
        surrogate is not Unicode and is ``revl.BadArgs`` too; pass bytes for binary data."""
        if isinstance(content, str):
            try:
                data = content.encode()
            except UnicodeEncodeError as e:
                raise not_unicode("write", content, e.start, "content") from None
        elif isinstance(content, (bytes, bytearray, memoryview)):
            data = bytes(content)
        else:
            raise TypeError(
                f"write: content must be str or bytes, not {type(content).__name__}"
            )
        return _result(Stepped, self._native.write(path, data))

    def delete(self, path: str) -> Stepped:
        return _result(Stepped, self._native.delete(path))

    def rename(self, src: str, dst: str) -> Stepped:
        return _result(Stepped, self._native.rename(src, dst))

    def mkdir(self, path: str) -> Stepped:
        return _result(Stepped, self._native.mkdir(path))

    def chmod(self, path: str, mode: int | str) -> Stepped:
        """``mode``: an int such as ``0o644``, or the CLI's octal string (``"644"``)."""
        text = format(mode, "o") if isinstance(mode, int) and not isinstance(mode, bool) else str(mode)
        return _result(Stepped, self._native.chmod(path, text))

    # ---- reads (record nothing) ----

    def read(self, path: str, at: int | None = None) -> bytes:
        """The file's bytes now, or right after step ``at`` (``-1``: before every step)."""
        return self._native.read(path, at)

    def read_doc(self, path: str, at: int | None = None) -> FileRead:
        """The document of ``revl read [--at K] --json`` (text or base64, mode, digest)."""
        return _result(FileRead, self._native.read_doc(path, at))

    def list(self, path: str | None = None) -> Listing:
        return _result(Listing, self._native.list(path))

    def timeline(self) -> Timeline:
        return _result(Timeline, self._native.timeline())

    def inspect(self, at: int) -> Inspect:
        return _result(Inspect, self._native.inspect(at))

    def status(self) -> Status:
        # A held send's arguments never change: they are read once, kept here by seq, and
        # given back as a copy (a caller may change what it got), so a large one costs its
        # parse once, not on every call.
        text, _ = self._native.status(list(self._held_args))
        doc = json.loads(text)
        held: dict[int, Any] = {}
        for item in doc.get("queue") or []:
            seq = item["seq"]
            if seq in self._held_args:
                held[seq] = self._held_args[seq]
            else:
                held[seq] = item["args"]
            item["args"] = copy.deepcopy(held[seq])
        self._held_args = held
        return Status(doc)

    def verify(self) -> Verify:
        """Compare the workspace with what revl witnessed: drift is data, not an error."""
        return _result(Verify, self._native.verify())

    # ---- other steps ----

    def provide(self, key: str, value: str) -> Stepped:
        return _result(Stepped, self._native.provide(key, value))

    def boundary(self, label: str | None = None) -> Stepped:
        return _result(Stepped, self._native.boundary(label))

    def call(self, tool: str | Tool[Any], args: Mapping[str, Any] | None = None) -> CallResult:
        """Call a declared tool by its class: a held send is queued, an effect or emission
        runs and is recorded. An emission without approval raises
        :class:`revl.ApprovalRequired` (nothing fired)."""
        name = tool.name if isinstance(tool, Tool) else tool
        return _result(CallResult, self._native.call(name, _call_args(name, args)))

    def exec(
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
        """Run a command in revl's sandbox; its file changes are one rewindable step."""
        if isinstance(argv, str):
            raise TypeError("exec takes an argv list, e.g. ['sh', '-c', 'make test'], not a string")
        return _result(
            ExecResult,
            self._native.exec(
                [str(a) for a in argv],
                timeout,
                cwd,
                unconfined,
                None if memory is None else str(memory),
                pids,
                cpu_seconds,
                None if max_bytes is None else str(max_bytes),
                _net(net),
            ),
        )

    # ---- rewinds ----

    def step_back(
        self, to: int, mode: str = "scoped", force: bool = False, keep_drift: bool = False
    ) -> StepBackReport:
        """Rewind this session to step ``to``; ``mode`` is ``"scoped"`` or
        ``"compensating"``. Witnessed paths the rewound steps never touched that were
        changed outside revl are preserved, then put back to step ``to``; with
        ``keep_drift=True`` they are left as they are (listed in ``beyond_tail``)."""
        return _result(StepBackReport, self._native.step_back(to, mode, force, keep_drift))

    def fork(self, at: int) -> ForkReport:
        """Enumerate a fork at step ``at``: what it would restore, drop and report, and the
        ``hash`` to confirm it with. Nothing changes."""
        return _result(ForkReport, self._native.fork(at))

    def fork_preview(self, at: int) -> ForkReport:
        """The report ``fork(at)`` would give, with its hash, recording nothing (not even
        the pending fork): for deciding, before asking, whether a fork is acceptable."""
        return _result(ForkReport, self._native.fork_preview(at))

    def bind(self, checkpoint_id: str, at: int | None = None) -> Bound:
        """Bind a checkpoint id (a LangGraph checkpoint's) to position ``at`` (default: the
        session's current position, its head), durably (a ``bind`` WAL record; ``revl log``
        shows it). Allowed on a live, committed or aborted session; a frozen one refuses
        (:class:`revl.Frozen`)."""
        return _result(Bound, self._native.bind(checkpoint_id, at))

    def position(self) -> Position:
        """The session's life, head and bound checkpoints (reads only)."""
        return _result(Position, self._native.position())

    @property
    def head(self) -> int:
        """The index of the session's last step (its current position)."""
        return int(self.position().head)

    def fork_confirm(
        self, hash: str, into: PathLike | None = None, keep_drift: bool = False
    ) -> ForkReport:
        """Perform the enumerated fork (``into``: a parallel branch in that directory). The
        result's ``branch`` is the branch, attached with this session's tools.
        ``keep_drift``: as :meth:`step_back`'s."""
        report = _result(
            ForkReport,
            self._native.fork_confirm(
                hash, os.fspath(into) if into is not None else None, keep_drift
            ),
        )
        if report.branch_id is None:
            return report
        branch = Session(self.store, report.branch_id, self.tools, _host_obj=self._host)
        return ForkReport(report.to_dict(), branch=branch)

    def fork_branch(
        self, at: int, into: PathLike, require_clean: bool = False
    ) -> ForkReport:
        """:meth:`fork` at ``at`` and :meth:`fork_confirm` into ``into`` in one call, the
        workspace scanned once (the confirm's check is that enumeration; the session stays
        locked between them): a parallel branch, ``.branch``, for a caller that decides on
        the report itself. ``into``'s missing parents are made. With
        ``require_clean=True``, an enumeration whose residue is not clean comes back
        unconfirmed (``.branch`` is ``None``, ``.hash`` set; nothing is made): the fork stays
        pending, as after :meth:`fork`."""
        report = _result(
            ForkReport, self._native.fork_branch(at, os.fspath(into), require_clean)
        )
        if report.branch_id is None:
            return report
        branch = Session(self.store, report.branch_id, self.tools, _host_obj=self._host)
        return ForkReport(report.to_dict(), branch=branch)

    def commit(self) -> CommitPlan:
        """The commit plan (nothing fires); confirm with ``commit_confirm(plan.hash)``."""
        return _result(CommitPlan, self._native.commit())

    def commit_confirm(self, hash: str) -> CommitResult:
        """Fire the held sends once each, in order; a stale hash raises
        :class:`revl.StaleHash` (nothing fired)."""
        return _result(CommitResult, self._native.commit_confirm(hash))

    def resend(self, seq: int) -> Resent:
        """Fire one owed or failed held send of a committed session once more (``revl
        resend --seq``), explicitly: an operator's retry. A Python tool's send needs this
        process to have its function (the ``revl`` command cannot run it)."""
        return _result(Resent, self._native.resend(seq))

    def abort(self, *, remove: bool = False) -> AbortReport:
        """Drop the held sends and run every remaining inverse. With ``remove=True`` (a
        parallel branch only), its workspace goes too: a layered one is unmounted and its
        layers removed (``revl abort --remove``); ``removed`` says what went."""
        return _result(AbortReport, self._native.abort(remove))

    def note_model(
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
        """Record which model decided step ``step`` and what it cost (metadata only).

        Every decision field is required, as ``revl note-model`` requires it; ``cost`` and
        ``currency`` are optional. ``outcome`` is ``"validated"`` or ``"exhausted"``."""
        for field, text in (("model", model), ("outcome", outcome), ("currency", currency)):
            check_text("note_model", text, field)
        fields = {
            "step": step,
            "model": model,
            "tokensIn": tokens_in,
            "tokensOut": tokens_out,
            "latencySeconds": latency_seconds,
            "attempts": attempts,
            "attemptCeiling": attempt_ceiling,
            "outcome": outcome,
            "cost": cost,
            "currency": currency,
        }
        try:
            text = json.dumps(fields, allow_nan=False, ensure_ascii=False)
        except (TypeError, ValueError) as e:
            raise BadArgs(
                f"note_model: {e}",
                "give numbers as finite ints or floats and names as strings",
            ) from None
        return _result(ModelNote, self._native.note_model(text))


def _call_args(tool: str, args: object) -> str:
    """A call's args as the JSON object the core takes; anything else is
    :class:`revl.BadArgs` (as ``revl call --args`` with bad JSON is), before anything is
    recorded."""
    check_text("call", tool, "tool")
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        raise BadArgs(
            f"call {tool}: args must be a mapping of argument names to values, "
            f"not {type(args).__name__}",
            'pass a dict, e.g. {"to": "a@example.com"} (or None for no args)',
        )
    check_text(f"call {tool}", dict(args), "args")
    try:
        # Not ASCII-escaped: a surrogate the check missed still reaches the native gate as
        # a character (and is refused there), never as a JSON escape.
        return json.dumps(dict(args), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise BadArgs(
            f"call {tool}: args are not JSON-serialisable ({e})",
            "pass string keys and JSON values (str, int, finite float, bool, None, "
            "lists and dicts of them)",
        ) from None


def _net(net: bool | Sequence[str] | None) -> list[str] | None:
    """``net=True``: the whole declared set (``[]``); a list: those destinations."""
    if net is None or net is False:
        return None
    if net is True:
        return []
    dests = [net] if isinstance(net, str) else [str(d) for d in net]
    if not dests or any(not d.strip() for d in dests):
        # never read as "everything": an empty part is a mistake, as `--net=` is
        raise BadArgs(
            "net= names no destination (an empty list or string)",
            "give net=True for the manifest's whole [exec] net, or net=[\"HOST:PORT\", ...]",
        )
    return dests


def _session_id(s: Session | str) -> str:
    return s.id if isinstance(s, Session) else s


def _store_of(*sides: Session | str, store: Store | None) -> Store:
    if store is not None:
        return store
    for s in sides:
        if isinstance(s, Session):
            return s.store
    return Store()


def compare(
    a: Session | str, b: Session | str, *, store: Store | None = None, remote: str | None = None
) -> Compare:
    """Compare two sessions of one lineage (``revl compare``), read from their WALs; with
    ``remote``, two sessions of that remote of ``store`` (fetched and verified)."""
    st = _store_of(a, b, store=store)
    return _result(Compare, st._native.compare(_session_id(a), _session_id(b), remote))


def diff(
    a: Session | str,
    b: Session | str,
    path: str | None = None,
    *,
    at: tuple[int | None, int | None] = (None, None),
    store: Store | None = None,
    remote: str | None = None,
) -> Diff:
    """Differences between two sessions' content (``revl diff``); ``at`` picks a step on
    either side (default: each side's head); with ``remote``, two sessions of that remote of
    ``store`` (fetched and verified). Differences are data."""
    st = _store_of(a, b, store=store)

    def side(s: Session | str, k: int | None) -> str:
        sid = _session_id(s)
        return sid if k is None else f"{sid}@{k}"

    return _result(Diff, st._native.diff(side(a, at[0]), side(b, at[1]), path, remote))


__all__ = ["Store", "Session", "compare", "diff"]
