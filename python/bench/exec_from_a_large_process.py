"""What a sandboxed ``exec`` costs a large calling process (docs/performance.md, "`exec` from
a large process costs more").

    python python/bench/exec_from_a_large_process.py DIR [--langgraph] [--heap-mb N]

DIR is made afresh (sessions on a store in it). The process first grows: ``--langgraph``
imports LangGraph and ``revl.langgraph`` (an agent framework's process), ``--heap-mb N``
touches N MB more of heap. Then it prints two lines:

- ``single``: ``Session.exec(["true"])`` twenty times from one thread: the process's own CPU
  and its children's per exec (``getrusage``), and the median wall time;
- ``threads``: four threads, each on its own session, run a command that spends 40 ms of
  CPU four times each, sandboxed and then ``unconfined=True``: the wall time of all sixteen
  and the children's CPU, and what the sandbox added to both.

A fork copies the caller's page tables, so what grows with the caller's memory is the
sandbox's start (docs/architecture.md, "The exec sandbox").
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib
import os
import resource
import shutil
import sys
import time
from pathlib import Path

import revl

SPIN = [
    sys.executable,
    "-S",
    "-c",
    "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.04: pass",
]


def cpu() -> tuple[float, float]:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def rss_mb() -> int:
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) // 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("--langgraph", action="store_true")
    ap.add_argument("--heap-mb", type=int, default=0)
    a = ap.parse_args()
    if a.langgraph:
        importlib.import_module("revl.langgraph")
    heap = [bytearray(os.urandom(1)) * (1 << 20) for _ in range(a.heap_mb)]
    shutil.rmtree(a.dir, ignore_errors=True)
    store = revl.Store(a.dir / "store")
    sessions = [store.new(a.dir / f"ws{i}") for i in range(4)]
    for s in sessions:
        s.write("a", "b")
        s.exec(["true"])

    n = 20
    walls = []
    me0, kids0 = cpu()
    for _ in range(n):
        t = time.perf_counter()
        sessions[0].exec(["true"])
        walls.append(time.perf_counter() - t)
    me1, kids1 = cpu()
    walls.sort()
    print(
        f"single: RSS {rss_mb()} MB, per exec: itself {(me1 - me0) / n * 1e3:.1f} ms CPU, "
        f"children {(kids1 - kids0) / n * 1e3:.1f} ms CPU, wall median {walls[n // 2] * 1e3:.1f} ms"
    )

    def four(unconfined: bool) -> tuple[float, float]:
        def run(s: revl.Session) -> None:
            for _ in range(4):
                s.exec(SPIN, unconfined=unconfined)

        _, kids0 = cpu()
        t = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(run, sessions))
        wall = time.perf_counter() - t
        _, kids1 = cpu()
        return wall, kids1 - kids0

    boxed, plain = four(False), four(True)
    print(
        f"threads: 16 commands of 40 ms CPU in 4 threads: sandboxed {boxed[0] * 1e3:.0f} ms "
        f"wall, children {boxed[1] * 1e3:.0f} ms CPU; unconfined {plain[0] * 1e3:.0f} ms, "
        f"{plain[1] * 1e3:.0f} ms; the sandbox added {(boxed[0] - plain[0]) * 1e3:.0f} ms "
        f"wall, {(boxed[1] - plain[1]) * 1e3:.0f} ms CPU"
    )
    del heap


if __name__ == "__main__":
    main()
