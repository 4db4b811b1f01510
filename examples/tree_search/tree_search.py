"""Tree search over candidate fixes, three ways (docs/langgraph.md; docs/performance.md).

The task: a small Python project (``PROJECT`` below, plus a ``vendor/`` tree so that copying
it costs something) whose test suite fails. A scripted policy (standing in for a model)
proposes several candidate fixes. Each candidate is explored as its own branch: the fix is
applied, the test suite is run, the branch is scored by the tests that pass, and the branch
"reports" its result to a reviewer (an HTTP POST to a loopback sink). The best branch is
kept; the others are abandoned.

- ``revl``: a LangGraph graph on ``revl.langgraph.RevlSaver`` sets the project up and asks the
  policy (one checkpoint); every candidate is a parallel revl branch from that checkpoint
  (``saver.branch``), scored with ``exec`` in its own workspace; its report is a held send
  (a deferred Python tool). The best branch commits (its report fires); the rest abort (their
  reports are dropped, their files rewound).
- ``git``: a repository with the project; a ``git worktree add`` per candidate, the tests run
  directly; the report is sent when the candidate is scored (nothing holds it); the losing
  worktrees are removed.
- ``copy``: a full copy of the project per candidate (``shutil.copytree``); otherwise as git.

Each reports: time per branch (make it, apply, score, report) and time to abandon one, timed
the same way for all three (revl: ``abort(remove=True)``, the abort and the directory taken
down; git: ``git worktree remove --force``; copy: deleting the tree), the disk the branches
used at their peak (for revl: the store's growth, its layers included, and the branch
directories, mounts not crossed), the residue (reports that reached the sink from abandoned
branches) and how many abandoned branch directories are left after abandoning (0 for all
three: like for like).

Run: ``python examples/tree_search/tree_search.py [--candidates N] [--vendor-files N] [--runs N]``
(needs ``pip install ./python`` with the ``langgraph`` extra, and git). The table prints the
load average and, over ``--runs`` runs (default 3), each time as a range.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import http.server
import json
import operator
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Annotated, Any, Callable, TypedDict

import revl
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from revl.langgraph import RevlSaver, session

# ---- the task ----

BUGGY = '''"""Money arithmetic for invoices."""


def total(lines):
    """The sum of quantity * unit price (cents), minus a percentage discount, rounded half up."""
    gross = sum(q * p for q, p in lines)
    return gross - gross * 10 // 100


def split(amount, n):
    """Split amount (cents) into n parts that differ by at most one cent and sum to amount."""
    return [amount // n] * n
'''

TESTS = '''import sys

from invoice import split, total


def check(name, got, want):
    ok = got == want
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else f": got {got!r}, want {want!r}"))
    return ok


def main():
    results = [
        check("total-plain", total([(2, 500)], discount=0), 1000),
        check("total-discount", total([(1, 1000)], discount=10), 900),
        check("total-rounds-half-up", total([(1, 105)], discount=10), 94),
        check("split-even", split(900, 3), [300, 300, 300]),
        check("split-remainder", split(1000, 3), [334, 333, 333]),
        check("split-sums", sum(split(1001, 7)), 1001),
    ]
    print(f"passed {sum(results)}/{len(results)}")
    sys.exit(0 if all(results) else 1)


main()
'''

# The scripted policy: candidate rewrites of invoice.py, of varying quality.
CANDIDATES: list[tuple[str, str]] = [
    (
        "discount-param",
        BUGGY.replace("def total(lines):", "def total(lines, discount=10):").replace(
            "gross * 10 // 100", "gross * discount // 100"
        ),
    ),
    (
        "discount-and-rounding",
        BUGGY.replace("def total(lines):", "def total(lines, discount=10):").replace(
            "return gross - gross * 10 // 100",
            "return gross - (gross * discount) // 100 if discount == 0 else gross - (gross * discount + 50) // 100",
        ),
    ),
    (
        "full-fix",
        '''"""Money arithmetic for invoices."""


def total(lines, discount=10):
    """The sum of quantity * unit price (cents), minus a percentage discount, rounded half up."""
    gross = sum(q * p for q, p in lines)
    return gross - (gross * discount + 50) // 100


def split(amount, n):
    """Split amount (cents) into n parts that differ by at most one cent and sum to amount."""
    base, extra = divmod(amount, n)
    return [base + 1] * extra + [base] * (n - extra)
''',
    ),
    (
        "split-only",
        BUGGY.replace(
            "return [amount // n] * n",
            "base, extra = divmod(amount, n)\n    return [base + 1] * extra + [base] * (n - extra)",
        ),
    ),
    ("rewrite-broken", BUGGY.replace("def split(amount, n):", "def split(amount, n, *):")),
    (
        "float-math",
        BUGGY.replace("def total(lines):", "def total(lines, discount=10):").replace(
            "return gross - gross * 10 // 100", "return round(gross * (1 - discount / 100))"
        ),
    ),
]


SOURCES = {
    "invoice.py": BUGGY.encode(),
    "test_invoice.py": TESTS.encode(),
    "README.md": b"# invoice\n\nRun `python3 test_invoice.py`.\n",
}

# Vendored data: what makes a real checkout cost something to copy (4 KiB a file). The same
# code makes it for every method; under revl it runs as one `exec` (one step, like a checkout).
VENDOR = """
import hashlib, os, sys
for i in range(int(sys.argv[1])):
    d = f"vendor/pkg{i // 50:03d}"
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/data{i:05d}.txt", "wb") as f:
        f.write(hashlib.sha256(str(i).encode()).hexdigest().encode() * 64)
"""


def project_files(vendor_files: int) -> dict[str, bytes]:
    files = dict(SOURCES)
    for i in range(vendor_files):
        body = hashlib.sha256(str(i).encode()).hexdigest().encode() * 64
        files[f"vendor/pkg{i // 50:03d}/data{i:05d}.txt"] = body
    return files


TEST_ARGV = ["python3", "-B", "test_invoice.py"]


def score_of(stdout: str) -> int:
    for line in stdout.splitlines():
        if line.startswith("passed "):
            return int(line.split()[1].split("/")[0])
    return 0  # it did not even import


# ---- a loopback sink: the reviewer the branches report to ----


class Sink:
    def __init__(self) -> None:
        self.bodies: list[Any] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with outer._lock:
                    outer.bodies.append(json.loads(raw))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def post(url: str, payload: Any) -> None:
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with _OPENER.open(req, timeout=10) as r:
        r.read()


# ---- measuring ----


def du(*paths: Path) -> int:
    """Bytes of disk the paths use (allocated blocks, as du counts them; hard links once;
    mounts under them, a layered branch's directory, not crossed: its layers are in the
    store)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for p in paths:
        if not p.exists():
            continue
        for root, dirs, files in os.walk(p):
            dirs[:] = [d for d in dirs if not os.path.ismount(os.path.join(root, d))]
            for name in dirs + files:
                st = os.lstat(os.path.join(root, name))
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def tree(path: Path) -> dict[str, str]:
    """Every file under path (but .git) with its content's digest."""
    out: dict[str, str] = {}
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != ".git"]
        for f in files:
            if f == ".git":  # a worktree's link to its repository
                continue
            full = Path(root) / f
            out[str(full.relative_to(path))] = hashlib.sha256(full.read_bytes()).hexdigest()
    return out


def tree_of(files: dict[str, bytes]) -> dict[str, str]:
    return {k: hashlib.sha256(v).hexdigest() for k, v in files.items()}


def result(method: str, made: list[float], abandon: list[float], peak: int, sends_abandoned: int,
           dirs_left: int, best: str, score: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    n = len(made)
    return {
        "method": method,
        "branches": n,
        "best": best,
        "bestScore": score,
        "secondsPerBranch": round(sum(made) / n, 4),
        "secondsPerAbandon": round(sum(abandon) / max(1, len(abandon)), 4),
        "peakDiskBytes": peak,
        "residue": {"sendsFromAbandoned": sends_abandoned},
        "dirsLeftAfterAbandon": dirs_left,
        **(extra or {}),
    }


# ---- revl ----


class SearchState(TypedDict):
    candidates: Annotated[list[str], operator.add]


def run_revl(base: Path, n: int, vendor_files: int, sink: Sink) -> dict[str, Any]:
    @revl.tool(cls="deferred", scope=["review"])
    def report(candidate: str, score: int) -> dict[str, Any]:
        post(sink.url, {"candidate": candidate, "score": score})
        return {"reported": candidate}

    store = base / "store"
    saver = RevlSaver(store=store, workspace_root=base / "threads", tools=[report])
    def setup(state: SearchState, config: RunnableConfig) -> dict[str, list[str]]:
        s = session(config)
        for path, body in SOURCES.items():
            s.write(path, body)
        s.exec(["python3", "-B", "-c", VENDOR, str(vendor_files)])
        return {"candidates": []}

    def propose(state: SearchState) -> dict[str, list[str]]:
        return {"candidates": [name for name, _ in CANDIDATES[:n]]}  # the scripted policy

    g = StateGraph(SearchState)
    g.add_node("setup", setup)
    g.add_node("propose", propose)
    g.add_edge(START, "setup")
    g.add_edge("setup", "propose")
    g.add_edge("propose", END)
    app = g.compile(checkpointer=saver)
    cfg: RunnableConfig = {"configurable": {"thread_id": "search"}}
    t0 = time.perf_counter()
    app.invoke({"candidates": []}, cfg)
    setup_seconds = time.perf_counter() - t0
    checkpoint = app.get_state(cfg)  # the one checkpoint every branch starts from
    ws = Path(saver.workspace_of("search"))
    at_checkpoint = tree(ws)
    assert at_checkpoint == tree_of(project_files(vendor_files)), "the same project every way"
    store_before = du(store)
    code = dict(CANDIDATES)

    def explore(i: int, name: str) -> tuple[revl.Session, int, float]:
        t0 = time.perf_counter()
        b = saver.branch(checkpoint.config, base / "branches" / f"{i}-{name}")
        b.write("invoice.py", code[name])
        r = b.exec(TEST_ARGV)
        score = score_of(r.stdout)
        b.call(report, {"candidate": name, "score": score})  # held: fires only if it commits
        return b, score, time.perf_counter() - t0

    names = list(checkpoint.values["candidates"])
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(4, len(names))) as pool:
        explored = list(pool.map(lambda a: explore(*a), enumerate(names)))
    peak = du(base / "branches") + du(store) - store_before
    best_i = max(range(len(names)), key=lambda i: explored[i][1])
    best, best_score, _ = explored[best_i]
    plan = best.commit()
    best.commit_confirm(plan.hash)
    abandon: list[float] = []
    dirs_left = 0
    for i, (b, _, _) in enumerate(explored):
        if i == best_i:
            continue
        where = Path(b.status().to_dict()["workspace"])
        t0 = time.perf_counter()
        b.abort(remove=True)  # the abort, and the directory (its layers) taken down
        abandon.append(time.perf_counter() - t0)
        dirs_left += where.exists()
    sends_abandoned = sum(1 for body in sink.bodies if body["candidate"] != names[best_i])
    states = sorted(s["state"] for s in store_log(saver))
    return result("revl", [e[2] for e in explored], abandon, peak, sends_abandoned, dirs_left,
                  names[best_i], best_score,
                  {"setupSeconds": round(setup_seconds, 3), "sessions": states, "sent": list(sink.bodies)})


def store_log(saver: RevlSaver) -> list[dict[str, Any]]:
    sessions: list[dict[str, Any]] = saver.store.log().to_dict()["sessions"]
    return sessions


# ---- git worktree, full copy ----


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for path, body in files.items():
        p = root / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(body)


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})


def run_plain(method: str, base: Path, n: int, vendor_files: int, sink: Sink) -> dict[str, Any]:
    repo = base / "repo"
    t0 = time.perf_counter()
    write_tree(repo, project_files(vendor_files))
    if method == "git":
        git("init", "-q", "-b", "main", cwd=repo)
        git("add", "-A", cwd=repo)
        git("commit", "-qm", "checkpoint", cwd=repo)
    setup_seconds = time.perf_counter() - t0
    repo_before = du(repo)
    code = dict(CANDIDATES)
    lock = threading.Lock()

    def explore(i: int, name: str) -> tuple[Path, int, float]:
        t0 = time.perf_counter()
        d = base / "branches" / f"{i}-{name}"
        if method == "git":
            with lock:  # git worktree add takes the repository's lock
                git("worktree", "add", "-q", "--detach", str(d), "HEAD", cwd=repo)
        else:
            shutil.copytree(repo, d, symlinks=True)
        (d / "invoice.py").write_text(code[name])
        r = subprocess.run(TEST_ARGV, cwd=d, capture_output=True, text=True)
        score = score_of(r.stdout)
        post(sink.url, {"candidate": name, "score": score})  # an agent's tool fires when called
        return d, score, time.perf_counter() - t0

    names = [name for name, _ in CANDIDATES[:n]]
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(4, len(names))) as pool:
        explored = list(pool.map(lambda a: explore(*a), enumerate(names)))
    peak = du(base / "branches") + du(repo) - repo_before
    best_i = max(range(len(names)), key=lambda i: explored[i][1])
    abandon: list[float] = []
    dirs_left = 0
    for i, (d, _, _) in enumerate(explored):
        if i == best_i:
            continue
        t0 = time.perf_counter()
        if method == "git":
            git("worktree", "remove", "--force", str(d), cwd=repo)
        else:
            shutil.rmtree(d)
        abandon.append(time.perf_counter() - t0)
        dirs_left += d.exists()
    sends_abandoned = sum(1 for body in sink.bodies if body["candidate"] != names[best_i])
    return result(method, [e[2] for e in explored], abandon, peak, sends_abandoned, dirs_left,
                  names[best_i], explored[best_i][1],
                  {"setupSeconds": round(setup_seconds, 3), "sent": list(sink.bodies)})


def run_all(base: Path, n: int, vendor_files: int) -> list[dict[str, Any]]:
    out = []
    runners: dict[str, Callable[[Path, int, int, Sink], dict[str, Any]]] = {
        "revl": run_revl,
        "git": lambda b, k, v, s: run_plain("git", b, k, v, s),
        "copy": lambda b, k, v, s: run_plain("copy", b, k, v, s),
    }
    for name, run in runners.items():
        sink = Sink()
        try:
            d = base / name
            d.mkdir(parents=True)
            out.append(run(d, n, vendor_files, sink))
        finally:
            sink.close()
    return out


def unmount_under(base: Path) -> None:
    """The kept winner's directory is a layered mount where revl made it so (no snapshot or
    reflink here): unmounted before the temp tree is deleted (the kernel's overlay as root,
    else fuse-overlayfs's)."""
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            p = line.split(" ")[4].encode().decode("unicode_escape")
            if p.startswith(str(base) + "/"):
                points.append(p)
    for p in sorted(points, key=len, reverse=True):
        for cmd in (["umount", "-l", p], ["fusermount3", "-uz", p]):
            if subprocess.run(cmd, capture_output=True).returncode == 0:
                break


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--candidates", type=int, default=len(CANDIDATES))
    ap.add_argument("--vendor-files", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3, help="runs; each time is shown as a range")
    ap.add_argument("--dir", type=Path, default=None, help="where to work (default: a temp dir)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    runs: list[list[dict[str, Any]]] = []
    load_before = os.getloadavg()
    for n in range(max(1, a.runs)):
        base = (a.dir / f"run-{n}") if a.dir else Path(tempfile.mkdtemp(prefix="revl-tree-search-"))
        try:
            runs.append(run_all(base, min(a.candidates, len(CANDIDATES)), a.vendor_files))
        finally:
            unmount_under(base)
            if a.dir is None:
                shutil.rmtree(base, ignore_errors=True)
    load_after = os.getloadavg()
    if a.json:
        print(json.dumps(runs if len(runs) > 1 else runs[0], indent=2))
        return

    def span(method: str, key: str) -> str:
        vals = [r[key] for rows in runs for r in rows if r["method"] == method]
        lo, hi = min(vals), max(vals)
        return f"{lo:.3f}" if lo == hi else f"{lo:.3f}-{hi:.3f}"

    print(f"{len(CANDIDATES[:a.candidates])} candidates, project of {a.vendor_files + 3} files, "
          f"{len(runs)} run(s): ranges over the runs")
    print("load average (1, 5, 15 min): before "
          + " ".join(f"{x:.2f}" for x in load_before)
          + ", after " + " ".join(f"{x:.2f}" for x in load_after)
          + f" ({os.cpu_count()} cores)")
    print(f"{'method':6} {'best':22} {'score':>5} {'setup s':>13} {'s/branch':>13} {'s/abandon':>13} "
          f"{'peak disk':>10} {'sends from abandoned':>20} {'dirs left':>9}")
    for r in runs[-1]:
        m = r["method"]
        print(f"{m:6} {r['best']:22} {r['bestScore']:>5} {span(m, 'setupSeconds'):>13} "
              f"{span(m, 'secondsPerBranch'):>13} {span(m, 'secondsPerAbandon'):>13} "
              f"{r['peakDiskBytes'] / 2**20:>8.1f}Mi "
              f"{r['residue']['sendsFromAbandoned']:>20} {r['dirsLeftAfterAbandon']:>9}")


if __name__ == "__main__":
    main()
