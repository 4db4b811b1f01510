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

from typing import TYPE_CHECKING, Any

from . import errors, names, results
from ._session import Session, Store, compare, diff
from .errors import *  # noqa: F403  (one exception class per error code)
from .errors import __all__ as _errors_all
from .names import fspath, name_of
from .tools import Tool, tool

if TYPE_CHECKING:
    from . import aio

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # `revl.aio` imports asyncio (most of a cold `import revl`): only when it is used.
    if name == "aio":
        import importlib

        return importlib.import_module(".aio", __name__)
    raise AttributeError(f"module 'revl' has no attribute {name!r}")

__all__ = [
    "Store",
    "Session",
    "compare",
    "diff",
    "tool",
    "Tool",
    "fspath",
    "name_of",
    "aio",
    "errors",
    "names",
    "results",
    *_errors_all,
]
