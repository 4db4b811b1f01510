"""A held send committed from a Python function: the example of docs/python.md.

Run it with the package installed (``pip install ./python``)::

    python examples/python/held_send.py [DIR]

DIR is a new or empty directory (default: a fresh temporary one).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import revl

BASE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="revl-example-"))
OUTBOX = BASE / "outbox.jsonl"


@revl.tool(cls="deferred", scope=["mail"])
def send_email(to: str, subject: str, body: str) -> dict[str, str]:
    """Deliver an email (here: append it to an outbox file outside the workspace)."""
    OUTBOX.parent.mkdir(parents=True, exist_ok=True)
    with OUTBOX.open("a") as f:
        f.write(json.dumps({"to": to, "subject": subject, "body": body}) + "\n")
    return {"delivered": to}


def main() -> int:
    base = BASE
    if base.exists() and any(base.iterdir()):
        print(f"{base} is not empty: give a new or empty directory", file=sys.stderr)
        return 2
    store = revl.Store(base / "store")
    session = store.new(base / "workspace", tools=[send_email])

    session.write("reply.md", "Thanks, the fix is in.\n")
    queued = session.call(send_email, {"to": "ana@example.com", "subject": "Fixed", "body": "Thanks"})
    assert queued.queued and not OUTBOX.exists(), "held: nothing is sent before the commit"

    plan = session.commit()
    print(f"commit plan: {len(plan.deferred)} held send(s), hash {plan.hash[:12]}")
    done = session.commit_confirm(plan.hash)
    print(f"flushed: {done.flushed}; residue: {done.flush_residue}")
    print(OUTBOX.read_text(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
