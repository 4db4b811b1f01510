"""The package's types hold for a type checker and at run time: every result class can be
introspected (`typing.get_type_hints`), and `mypy --strict` over code that uses the package
catches what the signatures promise it catches (a missing `note_model` field, a misspelt
`revl.aio` keyword) and sees `revl.aio`'s fork branch as a `revl.aio.Session`."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import pytest

import revl
import revl.aio
import revl.results


@pytest.mark.parametrize("name", revl.results.__all__)
def test_every_result_class_has_resolvable_type_hints(name: str) -> None:
    cls = getattr(revl.results, name)
    hints = typing.get_type_hints(cls)
    assert "repaired" in hints


def test_fork_report_hints_in_a_fresh_interpreter() -> None:
    """Without anything else imported first (no import cycle, no forward reference left
    unresolved): `ForkReport.branch` is the branch session's type variable."""
    code = (
        "import typing, revl.results as r\n"
        "h = typing.get_type_hints(r.ForkReport)\n"
        "assert 'branch' in h and 'emissions_crossed' in h, h\n"
        "import revl, revl.aio\n"
        "print(r.ForkReport[revl.aio.Session].__origin__ is r.ForkReport)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


GOOD = '''
from __future__ import annotations

import revl
import revl.aio
from revl.results import ForkReport


def sync_use(s: revl.Session, h: str) -> int:
    s.note_model(
        1, "m", tokens_in=1, tokens_out=1, latency_seconds=0.1, attempts=1,
        attempt_ceiling=1, outcome="validated",
    )
    r: ForkReport = s.fork_confirm(h)
    assert r.branch is not None
    return r.branch.write("f", "x").step


async def aio_use(s: revl.aio.Session, st: revl.Store, h: str) -> int:
    await s.note_model(
        1, "m", tokens_in=1, tokens_out=1, latency_seconds=0.1, attempts=1,
        attempt_ceiling=1, outcome="validated", cost=0.1, currency="USD",
    )
    await s.exec(["true"], timeout=1.0, unconfined=False, memory="1G", pids=10, cpu_seconds=1, max_bytes=1)
    r = await s.fork_confirm(h)
    assert r.branch is not None
    step = (await r.branch.write("f", "x")).step
    await revl.aio.compare(s, r.branch, store=st)
    await revl.aio.diff(s.sync, r.branch, store=revl.aio.Store(st))
    head: int = await s.head
    store: revl.aio.Store = s.store
    return step + head + len(s.tools) + (0 if s.created is None else 1) + len(store.path)
'''

# Each line marked `# E` must be reported by mypy; nothing else may be.
BAD = '''
from __future__ import annotations

import revl
import revl.aio


def sync_missing(s: revl.Session) -> None:
    s.note_model(1, "m", tokens_in=1, tokens_out=1, latency_seconds=0.1, attempts=1, attempt_ceiling=1)  # E


async def aio_missing(s: revl.aio.Session) -> None:
    await s.note_model(1, "m", tokens_in=1, tokens_out=1, latency_seconds=0.1, attempts=1, outcome="validated")  # E


async def aio_typo(s: revl.aio.Session) -> None:
    await s.exec(["true"], memroy="1G")  # E


async def aio_branch_is_not_sync(s: revl.aio.Session) -> None:
    r = await s.fork_confirm("h")
    assert r.branch is not None
    r.branch.write("f", "x").step  # E
'''


def test_mypy_strict_sees_the_signatures(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(textwrap.dedent(GOOD))
    (tmp_path / "bad.py").write_text(textwrap.dedent(BAD))
    flagged = {i + 1 for i, line in enumerate(BAD.splitlines()) if line.endswith("# E")}
    assert len(flagged) == 4
    # This interpreter's mypy finds `revl` where this interpreter does (the installed
    # package, typed by its `py.typed`).
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull,
         "--show-error-codes", "good.py", "bad.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    out = done.stdout + done.stderr
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert not [e for e in errors if e.startswith("good.py")], out
    got = {int(e.split(":")[1]) for e in errors if e.startswith("bad.py")}
    assert got == flagged, out
    assert 'Missing named argument "outcome"' in out, out
    assert 'Missing named argument "attempt_ceiling"' in out, out
    assert 'Unexpected keyword argument "memroy"' in out, out


@pytest.mark.parametrize("page", ["python.md", "langgraph.md"])
def test_the_docs_examples_pass_mypy_strict_as_written(tmp_path: Path, page: str) -> None:
    """The ```python blocks of docs/python.md and docs/langgraph.md, in order (each page
    runs as one program: test_docs.py), type-check with `mypy --strict` as a reader would
    paste them: typed tools, no `Optional` used as if it were set, no name reused with
    another type."""
    import re

    doc = Path(os.environ.get("REVL_REPO", Path(__file__).parents[2])) / "docs" / page
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S)
    assert len(blocks) >= 2, f"{doc} lost its examples"
    (tmp_path / "page.py").write_text("\n".join(blocks))
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull,
         "--show-error-codes", "page.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "Success" in out, out
