""""What if I had answered differently?": fork a session at a step, answer again, compare.

    python examples/python/what_if.py [DIR]

DIR is a new or empty directory (default: a fresh temporary one).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import revl


def main() -> int:
    base = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="revl-example-"))
    if base.exists() and any(base.iterdir()):
        print(f"{base} is not empty: give a new or empty directory", file=sys.stderr)
        return 2
    store = revl.Store(base / "store")
    s = store.new(base / "workspace")
    s.write("answer.txt", "first answer\n")          # step 1
    s.exec(["sh", "-c", "wc -c answer.txt > size.txt"])  # step 2

    enum = s.fork(0)  # back to before the answer: what would be restored, dropped, reported
    assert enum.hash is not None
    forked = s.fork_confirm(enum.hash)
    branch = forked.branch
    assert branch is not None and forked.clean
    branch.write("answer.txt", "a better answer\n")

    old = s.read("answer.txt", at=1)  # the frozen parent: what its step 1 wrote
    new = branch.read("answer.txt")  # a serial branch goes on in the same workspace
    print(f"parent: {old!r}\nbranch: {new!r}")
    cmp = revl.compare(s, branch)
    print(f"relation: {cmp.relation}, diverged at step {cmp.diverged_at}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
