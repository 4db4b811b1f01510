"""`revl.langgraph.RevlSaver` against LangGraph's own checkpointer conformance suite
(`langgraph-checkpoint-conformance`, pinned in python/requirements-langgraph.txt): every base
capability passes, and of the extended ones delete_for_runs and prune pass while copy_thread
is not offered (docs/langgraph.md says why). Also: checkpoints survive a new process (they
are records of the sessions' WALs, docs/langgraph.md "What is kept where")."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, AsyncIterator

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES

from revl.langgraph import RevlSaver

OFFERED_EXTENDED = {"delete_for_runs", "prune"}
NOT_OFFERED = {"copy_thread"}


def test_conformance_base_and_extended(base: Path) -> None:
    made: list[RevlSaver] = []

    @checkpointer_test(name="RevlSaver")
    async def revl_saver() -> AsyncIterator[RevlSaver]:
        saver = RevlSaver(store=base / f"store{len(made)}", workspace_root=base / "threads")
        made.append(saver)
        yield saver

    report = asyncio.run(validate(revl_saver))
    report.print_report()
    doc: dict[str, Any] = report.to_dict()["results"]
    for cap in BASE_CAPABILITIES:
        r = doc[cap.value]
        assert r["detected"] and r["passed"] is True, (cap.value, r["failures"][:3])
    for cap in OFFERED_EXTENDED:
        r = doc[cap]
        assert r["detected"] and r["passed"] is True, (cap, r["failures"][:3])
    for cap in NOT_OFFERED:
        assert not doc[cap]["detected"], cap
    assert report.passed_all_base()
    assert report.passed_all()
    assert made, "the suite made no saver"


def test_checkpoints_survive_a_new_process(base: Path) -> None:
    store = base / "store"
    script = textwrap.dedent(
        f"""
        import operator, sys
        from typing import Annotated, TypedDict
        from langgraph.graph import StateGraph, START, END
        from revl.langgraph import RevlSaver

        class S(TypedDict):
            xs: Annotated[list[str], operator.add]

        g = StateGraph(S)
        g.add_node("a", lambda s: {{"xs": ["a"]}})
        g.add_edge(START, "a")
        g.add_edge("a", END)
        app = g.compile(checkpointer=RevlSaver(store={str(store)!r}, workspace_root={str(base / "t")!r}))
        cfg = {{"configurable": {{"thread_id": "t1"}}}}
        if sys.argv[1] == "write":
            app.invoke({{"xs": ["x"]}}, cfg)
        print(app.get_state(cfg).values["xs"], len(list(app.get_state_history(cfg))))
        """
    )
    first = subprocess.run([sys.executable, "-c", script, "write"], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    again = subprocess.run([sys.executable, "-c", script, "read"], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    assert again.stdout.strip() == "['x', 'a'] 3"
