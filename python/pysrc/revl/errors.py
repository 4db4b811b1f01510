"""revl's exceptions: one class per error code (the codes of `revl --json` error documents).

Every exception is a :class:`RevlError` with ``code``, ``message`` and ``hint`` (and ``step``
when a failed tool call was still recorded as a step). ``exit_code`` is what the ``revl``
command exits with for the same error (2: bad usage or input; 1: an honest negative).

Two refusals carry their own document (the result the CLI prints for the same call) as
``.document``: :class:`StaleHash` (a commit or fork confirm whose hash is stale: nothing ran)
and :class:`ApprovalRequired` (an emission without approval: nothing fired; ``.ticket`` is
what a human approves with ``revl approve SESSION --ticket T``).
"""

from __future__ import annotations

from typing import Any, ClassVar


class RevlError(Exception):
    """A revl verb failed: ``code`` says which way, ``message`` what was wrong, ``hint`` what
    to do."""

    code: ClassVar[str] = ""
    exit_code: ClassVar[int] = 1

    def __init__(self, message: str, hint: str = "", step: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.step = step

    def __str__(self) -> str:
        return f"{self.code}: {self.message} (hint: {self.hint})" if self.hint else f"{self.code}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """The error document, shaped like the CLI's ``--json`` one (``{"error": {code,
        message, hint[, step]}}``). ``code`` and ``message`` are the CLI's; ``hint`` is the
        binding's: where a remedy names a command-line flag, the CLI words it as flags and
        Python as the call to make."""
        inner: dict[str, Any] = {"code": self.code, "message": self.message, "hint": self.hint}
        if self.step is not None:
            inner["step"] = self.step
        return {"error": inner}

class Frozen(RevlError):
    """Code ``frozen``."""

    code = "frozen"
    exit_code = 1

class NotLive(RevlError):
    """Code ``not-live``."""

    code = "not-live"
    exit_code = 1

class KindOpaque(RevlError):
    """Code ``KIND_OPAQUE``."""

    code = "KIND_OPAQUE"
    exit_code = 1

class NonIdempotent(RevlError):
    """Code ``non-idempotent``."""

    code = "non-idempotent"
    exit_code = 1

class Undone(RevlError):
    """Code ``undone``."""

    code = "undone"
    exit_code = 1

class Irreversible(RevlError):
    """Code ``irreversible``."""

    code = "irreversible"
    exit_code = 1

class Live(RevlError):
    """Code ``live``."""

    code = "live"
    exit_code = 1

class WorkspaceBusy(RevlError):
    """Code ``workspace-busy``."""

    code = "workspace-busy"
    exit_code = 1

class NotCommitted(RevlError):
    """Code ``not-committed``."""

    code = "not-committed"
    exit_code = 1

class NoPendingFork(RevlError):
    """Code ``no-pending-fork``."""

    code = "no-pending-fork"
    exit_code = 1

class Busy(RevlError):
    """Code ``busy``."""

    code = "busy"
    exit_code = 1

class ToolFailed(RevlError):
    """Code ``tool-failed``."""

    code = "tool-failed"
    exit_code = 1

class Timeout(RevlError):
    """Code ``timeout``."""

    code = "timeout"
    exit_code = 1

class CorruptWal(RevlError):
    """Code ``corrupt-wal``."""

    code = "corrupt-wal"
    exit_code = 1

class MissingPreimage(RevlError):
    """Code ``missing-preimage``."""

    code = "missing-preimage"
    exit_code = 1

class Io(RevlError):
    """Code ``io``."""

    code = "io"
    exit_code = 1

class Usage(RevlError):
    """Code ``usage``."""

    code = "usage"
    exit_code = 2

class UnknownSession(RevlError):
    """Code ``unknown-session``."""

    code = "unknown-session"
    exit_code = 2

class AmbiguousSession(RevlError):
    """Code ``ambiguous-session``."""

    code = "ambiguous-session"
    exit_code = 2

class BadManifest(RevlError):
    """Code ``bad-manifest``."""

    code = "bad-manifest"
    exit_code = 2

class PathOutside(RevlError):
    """Code ``path-outside``."""

    code = "path-outside"
    exit_code = 2

class StoreInWorkspace(RevlError):
    """Code ``store-in-workspace``."""

    code = "store-in-workspace"
    exit_code = 2

class BadArgs(RevlError):
    """Code ``bad-args``."""

    code = "bad-args"
    exit_code = 2

class UnknownBlob(RevlError):
    """Code ``unknown-blob``."""

    code = "unknown-blob"
    exit_code = 1

class Absent(RevlError):
    """Code ``absent``."""

    code = "absent"
    exit_code = 1

class ExecFailed(RevlError):
    """Code ``exec-failed``."""

    code = "exec-failed"
    exit_code = 1

class SandboxUnavailable(RevlError):
    """Code ``sandbox-unavailable``."""

    code = "sandbox-unavailable"
    exit_code = 1

class NewerWal(RevlError):
    """Code ``newer-wal``."""

    code = "newer-wal"
    exit_code = 1

class LimitExceeded(RevlError):
    """Code ``limit-exceeded``."""

    code = "limit-exceeded"
    exit_code = 1

class ToolUnavailable(RevlError):
    """Code ``tool-unavailable``."""

    code = "tool-unavailable"
    exit_code = 1

class Fenced(RevlError):
    """Code ``fenced``."""

    code = "fenced"
    exit_code = 1

class CorruptRemote(RevlError):
    """Code ``corrupt-remote``: an object read from a remote breaks a rule every input passes
    (docs/fleet.md, "A remote is untrusted input"); nothing was written outside the store's
    cache, and only that object's session is unreadable."""

    code = "corrupt-remote"
    exit_code = 1

class NotAllowed(RevlError):
    """Code ``not-allowed``: a call asked for more than the operator allowed when starting
    ``revl mcp`` (docs/mcp.md, "Who decides what"). The MCP server raises it, never the
    Python package; here so that every code has its class."""

    code = "not-allowed"
    exit_code = 2

class StaleHash(RevlError):
    """Code ``stale-hash``: the confirm's hash no longer matches the plan or enumeration
    (something changed, or the hash is wrong); nothing ran. ``.document`` is the refusal's
    result (``refused: true``)."""

    code = "stale-hash"

    def __init__(self, message: str, hint: str = "", document: Any = None) -> None:
        super().__init__(message, hint)
        self.document = document


class ApprovalRequired(RevlError):
    """Code ``approval-required``: an emission was called without a usable approval; nothing
    fired. ``.ticket`` is the ticket a human approves (``revl approve SESSION --ticket T``);
    ``.document`` is the call's result (``approval_required`` true)."""

    code = "approval-required"

    def __init__(self, message: str, hint: str = "", document: Any = None, ticket: str = "") -> None:
        super().__init__(message, hint)
        self.document = document
        self.ticket = ticket


class ForkNotClean(RevlError):
    """Code ``fork-not-clean``: a fork was asked to proceed only if clean, and something had
    already crossed after its step. ``.report`` is the fork enumeration; nothing changed."""

    code = "fork-not-clean"

    def __init__(self, message: str, hint: str = "", report: Any = None) -> None:
        super().__init__(message, hint)
        self.report = report


_BY_CODE: dict[str, type[RevlError]] = {
    "frozen": Frozen,
    "not-live": NotLive,
    "KIND_OPAQUE": KindOpaque,
    "non-idempotent": NonIdempotent,
    "undone": Undone,
    "irreversible": Irreversible,
    "live": Live,
    "workspace-busy": WorkspaceBusy,
    "not-committed": NotCommitted,
    "no-pending-fork": NoPendingFork,
    "busy": Busy,
    "tool-failed": ToolFailed,
    "timeout": Timeout,
    "corrupt-wal": CorruptWal,
    "missing-preimage": MissingPreimage,
    "io": Io,
    "usage": Usage,
    "unknown-session": UnknownSession,
    "ambiguous-session": AmbiguousSession,
    "bad-manifest": BadManifest,
    "path-outside": PathOutside,
    "store-in-workspace": StoreInWorkspace,
    "bad-args": BadArgs,
    "unknown-blob": UnknownBlob,
    "absent": Absent,
    "exec-failed": ExecFailed,
    "sandbox-unavailable": SandboxUnavailable,
    "newer-wal": NewerWal,
    "limit-exceeded": LimitExceeded,
    "tool-unavailable": ToolUnavailable,
    "fenced": Fenced,
    "not-allowed": NotAllowed,
    "corrupt-remote": CorruptRemote,
}


def _from_native(code: str, message: str, hint: str, step: int | None) -> RevlError:
    """The exception for a core error (called by the native module)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        err = RevlError(message, hint, step)
        err.code = code  # type: ignore[misc]
        return err
    return cls(message, hint, step)


__all__ = [
    "RevlError",
    "Frozen",
    "NotLive",
    "KindOpaque",
    "NonIdempotent",
    "Undone",
    "Irreversible",
    "Live",
    "WorkspaceBusy",
    "NotCommitted",
    "NoPendingFork",
    "Busy",
    "ToolFailed",
    "Timeout",
    "CorruptWal",
    "MissingPreimage",
    "Io",
    "Usage",
    "UnknownSession",
    "AmbiguousSession",
    "BadManifest",
    "PathOutside",
    "StoreInWorkspace",
    "BadArgs",
    "UnknownBlob",
    "Absent",
    "ExecFailed",
    "SandboxUnavailable",
    "NewerWal",
    "LimitExceeded",
    "ToolUnavailable",
    "Fenced",
    "CorruptRemote",
    "NotAllowed",
    "StaleHash",
    "ApprovalRequired",
    "ForkNotClean",
]
