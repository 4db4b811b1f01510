"""Shared fixtures for the tests of the installed `revl` package (docs/python.md).

The suite runs against the package as pip installed it into a virtual environment, never
against the build tree: the first thing this file does is check where `revl` came from.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import revl

# The helpers beside this file (`_support`, `conftest` itself) import in any import mode.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _support import Sink  # noqa: E402

BUILD_TREE = Path(__file__).resolve().parent.parent / "pysrc"

_revl_file = Path(revl.__file__).resolve()
for _tree in (BUILD_TREE, Path("/work/main/python/pysrc")):
    assert not _revl_file.is_relative_to(_tree), (
        f"the tests must run against the INSTALLED package, not the build tree: "
        f"revl was imported from {_revl_file}"
    )

# When the Rust test drives this suite it names the fresh venv it installed the package into.
if os.environ.get("REVL_TEST_VENV"):
    assert Path(sys.prefix).resolve() == Path(os.environ["REVL_TEST_VENV"]).resolve(), sys.prefix
    assert _revl_file.is_relative_to(Path(os.environ["REVL_TEST_VENV"]).resolve()), _revl_file

# The `revl` command installed with the package (the venv's console script).
REVL_CLI = Path(sys.executable).parent / "revl"
assert REVL_CLI.exists(), f"the package's `revl` command is not installed next to {sys.executable}"


# ---- where sessions live ----


@pytest.fixture
def base(tmp_path: Path) -> Iterator[Path]:
    """A fresh directory for a test's store and workspaces: in /dev/shm when it is writable
    (fsync is free there), else pytest's tmp_path."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        d = Path(tempfile.mkdtemp(prefix="revl-pytest-", dir=shm))
        try:
            yield d
        finally:
            unmount_under(d)
            shutil.rmtree(d, ignore_errors=True)
    else:
        try:
            yield tmp_path
        finally:
            unmount_under(tmp_path)


def unmount_under(root: Path) -> None:
    """A parallel branch's directory is a layered mount where the filesystem has no snapshot
    or reflink (docs/reference.md, "Serial and parallel branches"): every mount under root is
    unmounted, deepest first, before the tree is deleted, so no test leaves one behind."""
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    points = [ln.split(" ")[4].encode().decode("unicode_escape") for ln in lines]
    for p in sorted((p for p in points if p.startswith(f"{root}/")), key=len, reverse=True):
        for cmd in (["umount", "-l", p], ["fusermount3", "-uz", p]):
            if subprocess.run(cmd, capture_output=True).returncode == 0:
                break


@pytest.fixture
def store_dir(base: Path) -> Path:
    return base / "store"


@pytest.fixture
def store(store_dir: Path) -> revl.Store:
    return revl.Store(store_dir)


@pytest.fixture
def session(store: revl.Store, base: Path) -> revl.Session:
    return store.new(base / "ws")


# ---- the installed CLI ----


@dataclass
class CliRun:
    rc: int
    stdout: str
    stderr: str

    @property
    def doc(self) -> Any:
        return json.loads(self.stdout)


@pytest.fixture
def cli(store_dir: Path) -> Callable[..., CliRun]:
    """Run the installed `revl` command on the test's store, with `--json`."""

    def run(*args: str, json_out: bool = True, timeout: float = 60) -> CliRun:
        argv = [str(REVL_CLI), "--store", str(store_dir)]
        if json_out:
            argv.append("--json")  # before any `--` (exec's argv follows it)
        argv += args
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return CliRun(cp.returncode, cp.stdout, cp.stderr)

    return run


# ---- a loopback HTTP sink: where Python tools "send" ----


@pytest.fixture
def sink() -> Iterator[Sink]:
    s = Sink()
    try:
        yield s
    finally:
        s.close()
