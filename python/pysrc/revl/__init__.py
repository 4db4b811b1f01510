"""revl: branch and rewind agent sessions without leaving residue in the world.

::

    import revl

    @revl.tool(cls="deferred", scope=["mail"])
    def send_email(to: str, body: str) -> dict[str, str]:
        ...  # really send it
        return {"sent": to}

    store = revl.Store("/tmp/revl-store")
    s = store.new("/tmp/ws", tools=[send_email])
    s.write("reply.txt", "hello")
    s.call(send_email, {"to": "a@example.com", "body": "hello"})   # held, not sent
    plan = s.commit()
    s.commit_confirm(plan.hash)                                     # sent, once

See docs/python.md for every class and method.
"""

from __future__ import annotations

from . import aio, errors, results
from ._session import Session, Store, compare, diff
from .errors import *  # noqa: F403  (one exception class per error code)
from .errors import __all__ as _errors_all
from .tools import Tool, tool

__version__ = "0.1.0"

__all__ = [
    "Store",
    "Session",
    "compare",
    "diff",
    "tool",
    "Tool",
    "aio",
    "errors",
    "results",
    *_errors_all,
]
