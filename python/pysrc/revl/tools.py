"""Python functions as tools (``@revl.tool``).

A decorated function is a manifest tool whose runner is the function itself: revl records
its calls in the WAL exactly as it records a manifest tool's (the tool name, the args as
JSON, the witness), and the session's manifest copy names it ``python = "module:qualname"``.
Only a process that passes the function in ``tools=`` (``Store.new`` or ``Store.session``)
can run it; any other (the ``revl`` command, the MCP server, a Python process without it)
refuses every verb that would run it with :class:`revl.ToolUnavailable`, recording nothing.

The rules (the class, the scope, what may have an undo or a compensation, ``approval``) are
checked by revl's core when the session is created, the same rules as a manifest's.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Generic, Literal, Mapping, Sequence, TypeVar, Union, overload

R = TypeVar("R")

Scope = Union[Sequence[str], Mapping[str, Any]]
ToolClass = Literal["deferred", "emission", "effect", "inverse", "opaque"]


class Tool(Generic[R]):
    """A Python function declared as a revl tool. Calling it calls the function directly
    (nothing is recorded); ``session.call(tool.name, {...})`` runs it through revl."""

    def __init__(
        self,
        fn: Callable[..., R],
        *,
        cls: ToolClass,
        scope: Scope | None,
        name: str | None,
        undo: Tool[Any] | str | None,
        compensate: Tool[Any] | str | None,
        approval: str | None,
        service: str | None,
        method: str | None,
        undo_idempotent: bool | None,
    ) -> None:
        if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
            raise TypeError(
                f"@revl.tool: {fn.__qualname__} is async; revl runs a tool as a plain call "
                "(a coroutine would never run): declare a def that does the work, e.g. "
                "with asyncio.run(...) inside"
            )
        self.fn = fn
        self.cls = cls
        self.scope = scope
        self.name: str = name or fn.__name__
        self.undo = undo
        self.compensate = compensate
        self.approval = approval
        self.service = service
        self.method = method
        self.undo_idempotent = undo_idempotent
        self.target = f"{fn.__module__}:{fn.__qualname__}"
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<revl.tool {self.name} ({self.cls}) = {self.target}>"

    def declaration(self) -> dict[str, Any]:
        """What the session's manifest copy records of this tool."""

        def name_of(t: Tool[Any] | str | None) -> str | None:
            return t.name if isinstance(t, Tool) else t

        return {
            "name": self.name,
            "class": self.cls,
            "scope": list(self.scope) if isinstance(self.scope, (list, tuple)) else (dict(self.scope) if isinstance(self.scope, Mapping) else self.scope),
            "python": self.target,
            "undo": name_of(self.undo),
            "compensate": name_of(self.compensate),
            "approval": self.approval,
            "service": self.service,
            "method": self.method,
            "undo_idempotent": self.undo_idempotent,
        }


@overload
def tool(
    fn: Callable[..., R],
) -> Tool[R]: ...


@overload
def tool(
    fn: None = None,
    *,
    cls: ToolClass = ...,
    scope: Scope | None = ...,
    name: str | None = ...,
    undo: Tool[Any] | str | None = ...,
    compensate: Tool[Any] | str | None = ...,
    approval: str | None = ...,
    service: str | None = ...,
    method: str | None = ...,
    undo_idempotent: bool | None = ...,
) -> Callable[[Callable[..., R]], Tool[R]]: ...


def tool(
    fn: Callable[..., R] | None = None,
    *,
    cls: ToolClass = "deferred",
    scope: Scope | None = None,
    name: str | None = None,
    undo: Tool[Any] | str | None = None,
    compensate: Tool[Any] | str | None = None,
    approval: str | None = None,
    service: str | None = None,
    method: str | None = None,
    undo_idempotent: bool | None = None,
) -> Tool[R] | Callable[[Callable[..., R]], Tool[R]]:
    """Declare a Python function as a revl tool.

    ``cls`` is ``"deferred"`` (a held send: it runs once, at a confirmed commit),
    ``"emission"`` (runs at the call after a human's approval unless ``approval="none"``;
    may name a ``compensate`` inverse), ``"effect"`` (runs at the call; needs an ``undo``
    inverse), ``"inverse"`` (an undo or compensation: it receives ``args=`` the forward
    call's args and ``witness=`` its return value) or ``"opaque"``. ``scope`` is the list of
    capability tokens it touches (``["mail"]``), or a table ``{"caps": [...], "confined":
    True}``. The function receives the call's args as keyword arguments; its return value
    must be JSON-serialisable: it is the witness (a value that is not is recorded as its
    ``repr()``).
    """

    def wrap(f: Callable[..., R]) -> Tool[R]:
        return Tool(
            f,
            cls=cls,
            scope=scope,
            name=name,
            undo=undo,
            compensate=compensate,
            approval=approval,
            service=service,
            method=method,
            undo_idempotent=undo_idempotent,
        )

    if fn is not None:
        return wrap(fn)
    return wrap


__all__ = ["Tool", "tool"]
