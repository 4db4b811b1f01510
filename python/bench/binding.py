"""The binding's cost per call, measured from Python. `cargo bench -p revl --bench revl --
python` starts this script and drives it round by round, alternating with the same calls
through the Rust library, so both see the same disk.

    python python/bench/binding.py DIR
    stdin:  "write N" | "enqueue N"     (one per line)
    stdout: the call's wall time in seconds, one per line

    python python/bench/binding.py DIR --incremental
    prints the cost of a call as the session grows (docs/architecture.md, "Incremental
    attach"): the 10th, 1,000th and 10,000th 4 KiB write through one `Session` (medians of
    15 calls at each), and `status` of a session holding a 50 MB held-send argument next
    to one without (medians of 15, after the first call)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import revl


@revl.tool(cls="deferred", scope=["mail"])
def send(n: int, to: str) -> None:
    raise AssertionError("a held send does not run before a commit")


def median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def incremental(base: Path) -> None:
    store = revl.Store(base / "inc-store")
    s = store.new(base / "inc-ws")
    content = bytes(i % 251 for i in range(4096))
    n = 0
    at: dict[int, float] = {}
    for mark in (10, 1_000, 10_000):
        while n + 1 < mark:
            n += 1
            s.write("f.bin", n.to_bytes(8, "little") + content[8:])
        times = []
        for _ in range(15):
            n += 1
            t = time.perf_counter()
            s.write("f.bin", n.to_bytes(8, "little") + content[8:])
            times.append(time.perf_counter() - t)
        at[mark] = median(times)
        print(f"4 KiB write at call {mark}: {at[mark] * 1e3:.2f} ms", flush=True)
    for mark in (1_000, 10_000):
        print(f"  call {mark} / call 10 (goal: at most 1.2): {at[mark] / at[10]:.2f}")
    sessions = []
    for name, to in (("small", "a@b.c"), ("big", "x" * (50 << 20))):
        h = store.new(base / f"inc-ws-{name}", tools=[send])
        h.call(send, {"n": 1, "to": to})
        sessions.append(h)
    st: list[list[float]] = [[], []]
    for round in range(16):
        for i, h in enumerate(sessions):
            t = time.perf_counter()
            h.status()
            if round > 0:
                st[i].append(time.perf_counter() - t)
    small, big = median(st[0]), median(st[1])
    print(f"status, no large argument: {small * 1e3:.2f} ms")
    print(f"status, a 50 MB held-send argument: {big * 1e3:.2f} ms")
    print(f"  ratio (goal: at most 1.2): {big / small:.2f}")


def main() -> None:
    base = Path(sys.argv[1])
    if sys.argv[2:] == ["--incremental"]:
        incremental(base)
        return
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
