"""examples/tree_search (docs/langgraph.md): candidate fixes explored as parallel revl
branches from one LangGraph checkpoint, each scored by its tests run with `exec` in its own
workspace; the best commits, the rest abort and their directories are removed. Zero
residue: one report reaches the sink (the best's); the git-worktree and full-copy runs of
the same search leave their losers' reports out in the world."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

EXAMPLE = Path(os.environ.get("REVL_REPO") or Path(__file__).resolve().parents[2]) / "examples/tree_search/tree_search.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tree_search", EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["tree_search"] = mod  # LangGraph reads the state's type hints through it
    spec.loader.exec_module(mod)
    return mod


def test_tree_search_zero_residue(base: Path) -> None:
    if shutil.which("git") is None:
        pytest.fail("git is needed for the comparison")
    ts = load()
    rows: list[dict[str, Any]] = ts.run_all(base, len(ts.CANDIDATES), 60)
    by = {r["method"]: r for r in rows}
    r = by["revl"]
    assert r["branches"] == len(ts.CANDIDATES)
    assert r["best"] == "full-fix" and r["bestScore"] == 6
    assert r["sent"] == [{"candidate": "full-fix", "score": 6}], "exactly the best's report crossed"
    assert r["residue"] == {"sendsFromAbandoned": 0}
    assert r["dirsLeftAfterAbandon"] == 0, "abort(remove=True) takes each loser's directory down"
    # One thread session (live, the checkpoint's), one committed branch, the rest aborted.
    assert r["sessions"].count("committed") == 1
    assert r["sessions"].count("aborted") == len(ts.CANDIDATES) - 1
    for m in ("git", "copy"):
        assert by[m]["best"] == "full-fix"
        assert by[m]["residue"]["sendsFromAbandoned"] == len(ts.CANDIDATES) - 1
        assert by[m]["dirsLeftAfterAbandon"] == 0
    for row in rows:
        assert row["secondsPerBranch"] > 0 and row["peakDiskBytes"] > 0
