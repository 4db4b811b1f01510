"""The binding's cost per call, measured from Python. `cargo bench -p revl --bench revl --
python` starts this script and drives it round by round, alternating with the same calls
through the Rust library, so both see the same disk.

    python python/bench/binding.py DIR
    stdin:  "write N" | "enqueue N"     (one per line)
    stdout: the call's wall time in seconds, one per line
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import revl


@revl.tool(cls="deferred", scope=["mail"])
def send(n: int, to: str) -> None:
    raise AssertionError("a held send does not run before a commit")


def main() -> None:
    base = Path(sys.argv[1])
    s = revl.Store(base / "py-store").new(base / "py-ws", tools=[send])
    content = bytes(i % 251 for i in range(4096))
    s.write("f.bin", content)
    print("ready", flush=True)
    for line in sys.stdin:
        verb, n = line.split()
        i = int(n)
        t = time.perf_counter()
        if verb == "write":
            s.write("f.bin", bytes([i % 256]) + content[1:])
        else:
            s.call(send, {"n": i, "to": "a@b.c"})
        print(time.perf_counter() - t, flush=True)


if __name__ == "__main__":
    main()
