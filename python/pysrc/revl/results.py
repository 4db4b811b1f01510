"""Typed results of revl's verbs.

Each result wraps the JSON document the ``revl`` command prints with ``--json`` for the same
call: ``to_dict()`` returns exactly that document, and each of its keys is an attribute named
in snake_case (``afterStep`` is ``after_step``). A key the document leaves out (an optional
field) reads as ``None``. Nested values are plain ``dict``/``list`` values, as in the document.
"""

from __future__ import annotations

import base64
import copy
import re
from typing import TYPE_CHECKING, Any, Generic

if TYPE_CHECKING:
    # A type checker reads `ForkReport` alone as `ForkReport[revl.Session]` (PEP 696
    # default); `revl.aio` returns `ForkReport[revl.aio.Session]`. At run time the type
    # variable is a plain one, so `typing.get_type_hints` on every result class resolves
    # without importing the session module (which imports this one).
    from typing_extensions import TypeVar

    from ._session import Session

    BranchT = TypeVar("BranchT", default=Session)
else:
    from typing import TypeVar

    BranchT = TypeVar("BranchT")

_CAMEL = re.compile(r"_([a-z0-9])")


def _camel(name: str) -> str:
    return _CAMEL.sub(lambda m: m.group(1).upper(), name)


def _fields(cls: type) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        names.update(getattr(klass, "__annotations__", {}))
    return names


class Result:
    """A verb's result: its document's keys as attributes; ``to_dict()`` is the document."""

    repaired: list[dict[str, Any]] | None
    """What attaching repaired before the verb ran (absent when nothing needed repair)."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.__dict__["_doc"] = doc

    def to_dict(self) -> dict[str, Any]:
        """The CLI's ``--json`` document for the same call (a copy)."""
        return copy.deepcopy(self.__dict__["_doc"])

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        doc: dict[str, Any] = self.__dict__["_doc"]
        for key in (_camel(name), name):
            if key in doc:
                return doc[key]
        if name in _fields(type(self)):
            return None
        raise AttributeError(
            f"{type(self).__name__} has no field {name!r}; its document has: "
            + ", ".join(sorted(doc))
        )

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Result) and type(other) is type(self) and other.to_dict() == self.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        doc: dict[str, Any] = self.__dict__["_doc"]
        shown = ", ".join(f"{k}={doc[k]!r}" for k in list(doc)[:6])
        more = ", ..." if len(doc) > 6 else ""
        return f"{type(self).__name__}({shown}{more})"


class Stepped(Result):
    """A verb that recorded one step: a file effect, ``provide``, ``boundary``."""

    step: int
    seq: int
    label: str


class ExecResult(Result):
    """``exec``: the step it recorded and the command's outcome."""

    step: int
    exit_code: int | None
    stdout: str
    stderr: str
    signal: int | None
    timed_out: bool | None
    interrupted: bool | None
    """Interrupted at the terminal (Ctrl-C): what the command had changed by then is the step."""
    limit: str | None
    """The limit that stopped the command, where revl can tell (``timeout``, ``cpu``,
    ``bytes``, ``pids``)."""
    pids_limit: str | None
    """How ``pids`` held where no pids cgroup could be made: ``rlimit`` or ``none``."""
    stdout_truncated: bool | None
    stderr_truncated: bool | None
    changes: list[dict[str, Any]] | None
    sandbox: bool | None
    net_step: int | None
    """The emission step recording the connections the command made (declared egress,
    ``net=``); ``None`` when it made none."""
    net: dict[str, Any] | None
    """``{connections: [...], denied: [...]}`` when ``net=`` was given."""


class CallResult(Result):
    """``call``: a held send queued (``queued``, ``seq``, ``after_step``), or a tool that ran
    and was recorded (``step``, ``witness``, …)."""

    seq: int
    queued: bool | None
    after_step: int | None
    note: str | None
    step: int | None
    label: str | None
    key: str | None
    exit_code: int | None
    stdout: str | None
    stderr: str | None
    witness: Any
    approval_required: bool | None
    ticket: str | None
    tool: str | None
    args_digest: str | None
    hint: str | None


class Timeline(Result):
    session: str
    state: str
    head: int
    torn: bool
    steps: list[dict[str, Any]]
    accumulated: list[int]
    guarantee: str
    busy: bool | None
    corrupt: dict[str, Any] | None


class Inspect(Result):
    at: int
    at_label: str
    active_provisions: dict[str, str]
    accumulated: list[int]
    ahead_of_here: list[int]
    emissions_so_far: list[int]


class Status(Result):
    session: str
    state: str
    workspace: str
    wal: str
    head: int
    torn: bool
    provisions: dict[str, str]
    queue: list[dict[str, Any]]
    owed: list[dict[str, Any]]
    parent: str | None
    forked_at: int | None
    branch: str | None
    frozen_at: int | None
    abandoned_forks: list[dict[str, Any]] | None
    busy: bool | None
    repair_pending: str | None
    corrupt: dict[str, Any] | None


class Verify(Result):
    """``verify``: drift is data (an empty ``drift`` list: none), never an exception."""

    session: str
    drift: list[dict[str, Any]]
    note: str
    busy: bool | None


class Rewind(Result):
    """What a rewind reports (fork, step-back): what ran, what crossed, what is left."""

    emissions_crossed: list[dict[str, Any]]
    emissions_compensated: list[dict[str, Any]]
    unrestored: list[dict[str, Any]]
    dropped_deferred: list[dict[str, Any]]
    preserved: list[dict[str, Any]] | None
    beyond_tail: list[dict[str, Any]] | None
    """Witnessed paths the rewound steps never touched that changed outside revl:
    ``{path, change, outcome: "restored" | "kept" | "unrestored", why?}``."""
    failed: list[dict[str, Any]] | None
    guarantee: str


class ForkReport(Rewind, Generic[BranchT]):
    """``fork`` (an enumeration: ``hash`` to confirm with) and ``fork_confirm`` (a performed
    fork: ``branch`` is the branch as an attached session, a :class:`revl.Session` from
    :meth:`revl.Session.fork_confirm` and a :class:`revl.aio.Session` from
    :meth:`revl.aio.Session.fork_confirm`; ``branch_id`` its id)."""

    forked: bool
    at: int
    at_label: str
    parent: str
    rewound: dict[str, Any]
    would_cross_on_rewind: list[dict[str, Any]]
    drift: list[dict[str, Any]]
    residue: dict[str, Any]
    warning_emissions: str
    held_sends_by_mode: dict[str, Any] | None
    hash: str | None
    refused: bool | None
    reason: str | None
    lineage: dict[str, Any] | None
    mode: str | None
    into: str | None
    parent_keeps: dict[str, Any] | None
    clone: str | None
    bytes_copied: int | None
    layers: dict[str, Any] | None
    """With ``clone == "layers"``: ``{driver, lower, sharedLower}`` (docs/reference.md)."""
    fallback: str | None
    """With ``clone == "copy"`` where layers were tried: why they could not be mounted."""

    def __init__(self, doc: dict[str, Any], branch: BranchT | None = None) -> None:
        super().__init__(doc)
        self.__dict__["branch"] = branch

    branch: BranchT | None

    @property
    def branch_id(self) -> str | None:
        """The branch's session id (the document's ``branch``)."""
        value = self.__dict__["_doc"].get("branch")
        return value if isinstance(value, str) else None

    @property
    def clean(self) -> bool:
        """Whether nothing crossed or stayed unrestored (``residue.clean``)."""
        return bool(self.__dict__["_doc"].get("residue", {}).get("clean", False))


class StepBackReport(Rewind):
    to: int
    to_label: str
    turns_unwound: list[str] | None
    """The coding agents' turns it went back over (docs/agents.md); absent when none."""
    compensate: bool | None
    inverses_ran: list[dict[str, Any]]
    provisions_withdrawn: list[dict[str, Any]]
    compensations_ran: list[dict[str, Any]] | None
    would_cross_on_rewind: list[dict[str, Any]] | None
    live: bool


class AbortReport(Result):
    aborted: bool
    replayed: list[int]
    compensations_ran: list[dict[str, Any]]
    dropped_deferred: list[dict[str, Any]]
    failed: list[dict[str, Any]]
    preserved: list[dict[str, Any]]
    removed: dict[str, Any] | None


class CommitPlan(Result):
    """``commit``: the plan (nothing fires); confirm with ``commit_confirm(plan.hash)``."""

    session: str
    deferred: list[dict[str, Any]]
    witnessed: dict[str, Any]
    hash: str


class CommitResult(Result):
    """``commit_confirm``: the held sends that fired (``flushed``) and those that failed
    (``flush_residue``, each with its ``type`` and ``message``)."""

    committed: bool
    flushed: list[int]
    flush_residue: list[dict[str, Any]]
    discharged: list[int]
    refused: bool | None
    reason: str | None
    plan: dict[str, Any] | None


class Resent(Result):
    """``resend``: one owed or failed held send fired once more (``flushed``), or the
    failure it met this time (``error``, with its ``type`` and ``message``)."""

    resent: bool
    seq: int
    flushed: bool
    error: dict[str, Any] | None


class ModelNote(Result):
    recorded: bool
    step: int
    outcome: str
    llm: dict[str, Any]


class Listing(Result):
    path: str
    entries: list[dict[str, Any]]


class FileRead(Result):
    """The document of ``read`` (``Session.read`` returns the bytes themselves)."""

    path: str
    mode: str | None
    at: int | None
    digest: str | None
    content: str | None
    content_base64: str | None

    @property
    def data(self) -> bytes:
        """The file's bytes: ``content`` as UTF-8, or ``contentBase64`` decoded."""
        doc: dict[str, Any] = self.__dict__["_doc"]
        if doc.get("content") is not None:
            return str(doc["content"]).encode()
        return base64.b64decode(doc.get("contentBase64") or "")


class Created(Result):
    """``new``: the session made."""

    session: str
    workspace: str
    wal: str


class Sessions(Result):
    sessions: list[dict[str, Any]]


class Log(Result):
    """``log``: the lineage of the store's sessions."""

    sessions: list[dict[str, Any]]
    edges: list[dict[str, Any]]
    unreadable: list[dict[str, Any]] | None
    """With ``remote``: the remote's sessions refused (``{session, code, message}``)."""


class Bound(Result):
    """``bind``: a checkpoint id bound to the session's position (docs/langgraph.md)."""

    session: str
    checkpoint_id: str
    position: int


class Position(Result):
    """``position``: where a session stands: its life (``state``), ``head``, the branch
    that continues it when frozen (``frozen_into``), and its bound ``checkpoints``
    (``[{position, checkpointId}]``)."""

    session: str
    state: str
    head: int
    frozen_into: str | None
    checkpoints: list[dict[str, Any]]


class Compare(Result):
    """``compare``: two sessions of one lineage, side by side."""

    kind: str
    schema_version: str
    relation: str
    comparable: bool
    diverged_at: int | None
    left: dict[str, Any]
    right: dict[str, Any]
    not_comparable: list[dict[str, Any]]
    why: str | None
    delta: dict[str, Any] | None


class Diff(Result):
    """``diff``: differences are data (an empty ``paths`` list: none)."""

    left: str
    right: str
    paths: list[dict[str, Any]]


__all__ = [
    "Result",
    "Stepped",
    "ExecResult",
    "CallResult",
    "Timeline",
    "Inspect",
    "Status",
    "Verify",
    "Rewind",
    "ForkReport",
    "StepBackReport",
    "AbortReport",
    "CommitPlan",
    "CommitResult",
    "Resent",
    "ModelNote",
    "Listing",
    "FileRead",
    "Created",
    "Sessions",
    "Log",
    "Bound",
    "Position",
    "Compare",
    "Diff",
]
