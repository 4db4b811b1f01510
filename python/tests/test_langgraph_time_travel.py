"""docs/langgraph.md end to end: a real LangGraph tool-calling agent (a StateGraph with the prebuilt
ToolNode) driven by a scripted chat model (no network, no LLM) on `revl.langgraph.RevlSaver`.

The agent writes a reply, runs a command through `exec`, and queues an email (a deferred
Python tool that POSTs to a loopback sink). The user travels back to the checkpoint before
the write; the model answers differently; the new line commits through `session(config)`.
Exactly one email (the new one) reaches the sink, the workspace holds the new reply byte for
byte, the old reply is readable with `revl read --at`, and `revl log` shows both lines with
their checkpoint ids. Under every durability mode. Plus: reading history never forks; a fork
over a crossed emission raises `ForkNotClean` and changes nothing, or proceeds and keeps the
report; a clean travel names the held sends it dropped; a checkpoint of an abandoned line is
refused as unreachable.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest
from _support import Sink, post
from conftest import CliRun
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool as lc_tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

import revl
from revl.langgraph import CheckpointUnreachable, RevlSaver, session

OLD = "Hi Ann, sure thing. Bob\n"
NEW = "Dear Ann,\nThank you for your message. I will attend.\nKind regards,\nBob\n"


class Script:
    """What the scripted model says, in order: each call takes the next message."""

    def __init__(self) -> None:
        self.queue: list[AIMessage] = []
        self.calls = 0

    def add(self, *messages: AIMessage) -> None:
        self.queue.extend(messages)


class ScriptedChat(BaseChatModel):
    """A chat model that answers from a script (tool calls included); `bind_tools` keeps it."""

    script: Any

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.script.calls += 1
        assert self.script.queue, "the scripted model ran out of answers"
        msg: AIMessage = self.script.queue.pop(0)
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> "ScriptedChat":  # type: ignore[override]
        return self


def call(name: str, n: int, **args: Any) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call-{name}-{n}"}])


def draft_script(reply: str, n: int, commit: bool) -> list[AIMessage]:
    out = [
        call("write_reply", n, text=reply),
        call("run_command", n, argv=["sh", "-c", "wc -c < reply.txt > size.txt"]),
        call("queue_email", n, to="ann@example.com", body=reply),
    ]
    if commit:
        out.append(call("send_all", n))
    out.append(AIMessage(content="done"))
    return out


def build(saver: RevlSaver, script: Script, sink: Sink, extra: Sequence[Any] = ()) -> Any:
    @lc_tool
    def write_reply(text: str, config: RunnableConfig) -> str:
        """Write the reply file."""
        session(config).write("reply.txt", text)
        return "written"

    @lc_tool
    def run_command(argv: list[str], config: RunnableConfig) -> str:
        """Run a command in the workspace."""
        r = session(config).exec(argv)
        return f"exit {r.exit_code}"

    @lc_tool
    def queue_email(to: str, body: str, config: RunnableConfig) -> str:
        """Queue an email (it is sent when the session commits)."""
        session(config).call("send_email", {"to": to, "body": body})
        return "queued"

    @lc_tool
    def send_all(config: RunnableConfig) -> str:
        """Commit: send what is queued."""
        s = session(config)
        plan = s.commit()
        s.commit_confirm(plan.hash)
        return "sent"

    tools = [write_reply, run_command, queue_email, send_all, *extra]
    model = ScriptedChat(script=script)

    def agent(state: MessagesState) -> dict[str, list[AnyMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode(tools))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile(checkpointer=saver)


def mail_tool(sink: Sink) -> revl.Tool[Any]:
    @revl.tool(cls="deferred", scope=["mail"])
    def send_email(to: str, body: str) -> dict[str, Any]:
        post(sink.url, {"to": to, "body": body})
        return {"delivered": to}

    return send_email


def notify_tool(sink: Sink) -> revl.Tool[Any]:
    @revl.tool(cls="emission", scope=["chat"], approval="none")
    def notify(text: str) -> dict[str, Any]:
        post(sink.url, {"notify": text})
        return {"posted": True}

    return notify


def human(text: str) -> dict[str, list[HumanMessage]]:
    return {"messages": [HumanMessage(content=text)]}


def log_doc(cli: Callable[..., CliRun]) -> dict[str, Any]:
    run = cli("log")
    assert run.rc == 0, run.stderr
    doc: dict[str, Any] = run.doc
    return doc


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_travel_back_answer_differently_commit(
    base: Path, sink: Sink, cli: Callable[..., CliRun], store_dir: Path, durability: str
) -> None:
    saver = RevlSaver(store=store_dir, workspace_root=base / "threads", tools=[mail_tool(sink)])
    script = Script()
    app = build(saver, script, sink)
    cfg: RunnableConfig = {"configurable": {"thread_id": "ann"}}

    # Run 1: small talk, no tools. Its last checkpoint is where we will travel back to.
    script.add(AIMessage(content="Hello! What should I draft?"))
    app.invoke(human("hello"), cfg, durability=durability)
    before_write = app.get_state(cfg)
    assert before_write.next == ()

    # Run 2: the draft: write, exec, queue an email. Not committed.
    script.add(*draft_script(OLD, 1, commit=False))
    app.invoke(human("Draft a reply to Ann"), cfg, durability=durability)
    ws = Path(saver.workspace_of("ann"))
    assert (ws / "reply.txt").read_bytes() == OLD.encode()
    assert (ws / "size.txt").read_text().strip() == str(len(OLD.encode()))
    old = saver.thread_session("ann")
    assert old is not None
    assert len(old.status().to_dict()["queue"]) == 1
    write_step = next(s["index"] for s in old.timeline().to_dict()["steps"] if s["label"] == "fs.write reply.txt")

    # Reading history never forks.
    history = list(app.get_state_history(cfg))
    app.get_state(before_write.config)
    assert saver.thread_session("ann") == old
    assert len(saver.thread_sessions("ann")) == 1
    assert sink.count == 0

    # Travel back to before the write; the model answers differently; the new line commits.
    script.add(*draft_script(NEW, 2, commit=True))
    app.invoke(human("Draft a reply to Ann, formally"), before_write.config, durability=durability)

    assert sink.wait_for(1)
    assert sink.bodies == [{"to": "ann@example.com", "body": NEW}], "exactly one email: the new one"
    assert (ws / "reply.txt").read_bytes() == NEW.encode()
    assert (ws / "size.txt").read_text().strip() == str(len(NEW.encode()))
    new = saver.thread_session("ann")
    assert new is not None and new != old
    assert [s.id for s in saver.thread_sessions("ann")] == [old.id, new.id]
    assert new.status().to_dict()["state"] == "committed"

    # The abandoned line's reply, with `revl read --at`.
    run = cli("read", old.id, "reply.txt", "--at", str(write_step))
    assert run.rc == 0, run.stderr
    assert run.doc["content"] == OLD
    assert old.read("reply.txt", at=write_step) == OLD.encode()

    # `revl log` shows both lines, each with its checkpoint ids.
    doc = log_doc(cli)
    by_id = {s["session"]: s for s in doc["sessions"]}
    assert by_id[old.id]["state"] == "frozen"
    assert by_id[new.id]["state"] == "committed"
    assert {"parent": old.id, "branch": new.id, "at": by_id[new.id]["at"], "mode": "serial"} in doc["edges"]
    old_ids = {c["checkpointId"] for c in by_id[old.id]["checkpoints"]}
    new_ids = {c["checkpointId"] for c in by_id[new.id]["checkpoints"]}
    assert before_write.config["configurable"]["checkpoint_id"] in old_ids
    latest = app.get_state(cfg).config["configurable"]["checkpoint_id"]
    assert latest in new_ids and latest not in old_ids
    # Every checkpoint of the history is bound on the old line (the world it saw).
    for h in history:
        assert h.config["configurable"]["checkpoint_id"] in old_ids
    text = cli("log", json_out=False).stdout
    assert f"checkpoint {latest}" in text
    # `revl view` shows them too.
    out = base / "view.html"
    assert cli("view", "--out", str(out), json_out=False).rc == 0
    assert latest in out.read_text()


def test_replay_from_before_the_write_forks_first(
    base: Path, sink: Sink, cli: Callable[..., CliRun], store_dir: Path
) -> None:
    """`graph.invoke(None, old_config)`: the re-executed run's first effect forks first."""
    saver = RevlSaver(store=store_dir, workspace_root=base / "threads", tools=[mail_tool(sink)])
    script = Script()
    app = build(saver, script, sink)
    cfg: RunnableConfig = {"configurable": {"thread_id": "t"}}
    script.add(*draft_script(OLD, 1, commit=False))
    app.invoke(human("Draft"), cfg)
    # The checkpoint whose next step is the model's first call.
    target = next(h for h in app.get_state_history(cfg) if h.next == ("agent",) and len(h.values["messages"]) == 1)
    script.add(*draft_script(NEW, 2, commit=True))
    app.invoke(None, target.config)
    assert sink.wait_for(1)
    assert sink.bodies == [{"to": "ann@example.com", "body": NEW}]
    ws = Path(saver.workspace_of("t"))
    assert (ws / "reply.txt").read_bytes() == NEW.encode()
    lines = saver.thread_sessions("t")
    assert len(lines) == 2
    assert lines[0].status().to_dict()["state"] == "frozen"
    assert target.config["configurable"]["checkpoint_id"] in {
        c["checkpointId"] for c in lines[1].position().checkpoints
    }


def test_update_state_on_an_old_checkpoint_forks(base: Path, sink: Sink, store_dir: Path) -> None:
    saver = RevlSaver(store=store_dir, workspace_root=base / "threads", tools=[mail_tool(sink)])
    script = Script()
    app = build(saver, script, sink)
    cfg: RunnableConfig = {"configurable": {"thread_id": "u"}}
    script.add(AIMessage(content="Hello!"))
    app.invoke(human("hello"), cfg)
    k1 = app.get_state(cfg)
    script.add(*draft_script(OLD, 1, commit=False))
    app.invoke(human("Draft"), cfg)
    ws = Path(saver.workspace_of("u"))
    assert (ws / "reply.txt").exists()
    # update_state on the old config: the world goes back to k1 right away.
    app.update_state(k1.config, {"messages": [HumanMessage(content="never mind")]}, as_node="agent")
    assert not (ws / "reply.txt").exists()
    assert not (ws / "size.txt").exists()
    lines = saver.thread_sessions("u")
    assert len(lines) == 2
    assert lines[1].status().to_dict()["queue"] == []
    # The abandoned line stays readable, at the step its write left.
    step = next(t["index"] for t in lines[0].timeline().to_dict()["steps"] if t["label"] == "fs.write reply.txt")
    assert lines[0].read("reply.txt", at=step) == OLD.encode()


def crossed_setup(base: Path, sink: Sink, store_dir: Path, on_crossed: Any) -> tuple[RevlSaver, Any, Any, Script]:
    saver = RevlSaver(
        store=store_dir,
        workspace_root=base / "threads",
        tools=[mail_tool(sink), notify_tool(sink)],
        on_crossed=on_crossed,
    )

    @lc_tool
    def announce(text: str, config: RunnableConfig) -> str:
        """Post to the team chat now (crosses at once)."""
        session(config).call("notify", {"text": text})
        return "posted"

    script = Script()
    app = build(saver, script, sink, extra=[announce])
    cfg: RunnableConfig = {"configurable": {"thread_id": "x"}}
    script.add(AIMessage(content="Hello!"))
    app.invoke(human("hello"), cfg)
    k1 = app.get_state(cfg)
    script.add(call("write_reply", 1, text=OLD), call("announce", 1, text="drafted"), AIMessage(content="ok"))
    app.invoke(human("Draft and tell the team"), cfg)
    assert sink.count == 1  # the emission crossed
    return saver, app, k1, script


def test_fork_not_clean_raises_and_changes_nothing(
    base: Path, sink: Sink, cli: Callable[..., CliRun], store_dir: Path
) -> None:
    saver, app, k1, script = crossed_setup(base, sink, store_dir, "raise")
    cfg: RunnableConfig = {"configurable": {"thread_id": "x"}}
    ws = Path(saver.workspace_of("x"))
    before_files = sorted(os.listdir(ws))
    before_log = log_doc(cli)
    before_history = [h.config["configurable"]["checkpoint_id"] for h in app.get_state_history(cfg)]
    script.add(call("write_reply", 2, text=NEW), AIMessage(content="ok"))
    with pytest.raises(revl.ForkNotClean) as exc:
        app.invoke(human("again"), k1.config)
    report = exc.value.report
    assert report is not None and report.clean is False
    assert report.to_dict()["emissionsCrossed"], report.to_dict()
    # Nothing changed: no session, file, held send or checkpoint added or changed.
    after_log = log_doc(cli)
    assert [s["session"] for s in after_log["sessions"]] == [s["session"] for s in before_log["sessions"]]
    assert after_log == before_log
    assert sorted(os.listdir(ws)) == before_files
    assert (ws / "reply.txt").read_bytes() == OLD.encode()
    assert [h.config["configurable"]["checkpoint_id"] for h in app.get_state_history(cfg)] == before_history
    assert len(saver.thread_sessions("x")) == 1


def test_a_branch_enumerates_its_fork_once(
    base: Path, sink: Sink, store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`saver.branch` (tree search) enumerates and confirms its fork in one call
    (`fork_branch`): every enumeration checks each witnessed path of the workspace, so a
    preview, or a confirm's second scan, cost a whole scan per branch. What `on_crossed`
    reads comes from that one enumeration: a branch over a crossed emission still raises,
    before its directory is made, and the fork stays pending."""
    saver, app, k1, _ = crossed_setup(base, sink, store_dir, "raise")
    calls: list[str] = []
    for name in ("fork_preview", "fork", "fork_confirm", "fork_branch"):
        real = getattr(revl.Session, name)

        def spy(self: revl.Session, *a: Any, _name: str = name, _real: Any = real, **kw: Any) -> Any:
            calls.append(_name)
            return _real(self, *a, **kw)

        monkeypatch.setattr(revl.Session, name, spy)
    latest = app.get_state({"configurable": {"thread_id": "x"}})
    b = saver.branch(latest.config, base / "b1")
    assert calls == ["fork_branch"], calls
    assert (base / "b1" / "reply.txt").read_bytes() == OLD.encode()
    assert b.status().parent == saver.thread_session("x").id  # type: ignore[union-attr]
    calls.clear()
    with pytest.raises(revl.ForkNotClean) as exc:
        saver.branch(k1.config, base / "later" / "b2")
    assert calls == ["fork_branch"], calls
    assert exc.value.report is not None and exc.value.report.to_dict()["emissionsCrossed"]
    assert not (base / "later").exists(), "refused before anything was made"
    assert sink.count == 1


def run_checkpoints(app: Any, cfg: RunnableConfig, since: Any) -> list[Any]:
    """The checkpoints from the thread's latest back to (not including) `since`."""
    by_id = {h.config["configurable"]["checkpoint_id"]: h for h in app.get_state_history(cfg)}
    stop = since.config["configurable"]["checkpoint_id"]
    out = []
    h = app.get_state(cfg)
    while h.config["configurable"]["checkpoint_id"] != stop:
        out.append(h)
        assert h.parent_config is not None, "the run's checkpoints descend from `since`"
        h = by_id[h.parent_config["configurable"]["checkpoint_id"]]
    return out


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_fork_not_clean_proceeds_and_keeps_the_report(
    base: Path, sink: Sink, cli: Callable[..., CliRun], store_dir: Path, durability: str
) -> None:
    saver, app, k1, script = crossed_setup(base, sink, store_dir, "proceed")
    cfg: RunnableConfig = {"configurable": {"thread_id": "x"}}
    ws = Path(saver.workspace_of("x"))
    script.add(call("write_reply", 2, text=NEW), AIMessage(content="fine"))
    app.invoke(human("again"), k1.config, durability=durability)
    assert (ws / "reply.txt").read_bytes() == NEW.encode()  # the new line's, not OLD
    travel = saver.last_travel("x")
    assert travel is not None and travel["residueClean"] is False
    assert travel["report"]["emissionsCrossed"]
    # The run's result shows it: the latest state after the run, and every checkpoint the
    # run put after the fork (docs/langgraph.md, "Time travel": "the report is kept where
    # the run and the store show it").
    latest = app.get_state(cfg)
    fork = (latest.metadata or {}).get("revl", {}).get("fork")
    assert fork is not None, latest.metadata
    assert fork["residueClean"] is False and fork["branch"] == travel["branch"]
    assert fork["checkpointId"] == k1.config["configurable"]["checkpoint_id"]
    assert fork["residue"]["clean"] is False
    ran = run_checkpoints(app, cfg, k1)
    assert len(ran) >= (1 if durability == "exit" else 4), [h.metadata for h in ran]
    for h in ran:
        assert (h.metadata or {}).get("revl", {}).get("fork") == fork, h.metadata
    # `revl log` shows the branch as not clean.
    by_id = {s["session"]: s for s in log_doc(cli)["sessions"]}
    assert by_id[travel["branch"]]["residueClean"] is False
    assert sink.count == 1  # nothing fired again
    # A later run on the thread is not the travel's: its checkpoints do not carry the report.
    after = app.get_state(cfg)
    script.add(AIMessage(content="more"))
    app.invoke(human("and now?"), cfg, durability=durability)
    later = run_checkpoints(app, cfg, after)
    assert later and all("revl" not in (h.metadata or {}) for h in later), [h.metadata for h in later]
    assert saver.last_travel("x") == travel
    assert len(saver.thread_sessions("x")) == 2


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_a_clean_travel_names_the_held_sends_it_dropped(
    base: Path, sink: Sink, store_dir: Path, durability: str
) -> None:
    """A travel back to a checkpoint drops the whole queue of the line it leaves, the sends
    the target checkpoint itself had queued included. Clean or not, it says so:
    `last_travel(...)["droppedDeferred"]` and `metadata["revl"]["fork"]["droppedDeferred"]`
    on the run's checkpoints name each one (docs/langgraph.md, "Time travel")."""
    saver = RevlSaver(store=store_dir, workspace_root=base / "threads", tools=[mail_tool(sink)])
    script = Script()
    app = build(saver, script, sink)
    cfg: RunnableConfig = {"configurable": {"thread_id": "d"}}
    # Run 1 queues a note: the checkpoint after it (k1) has a held send.
    script.add(call("queue_email", 1, to="team@example.com", body="Ann wrote in"), AIMessage(content="noted"))
    app.invoke(human("hello"), cfg, durability=durability)
    k1 = app.get_state(cfg)
    s1 = saver.thread_session("d")
    assert s1 is not None
    [team] = s1.status().queue
    # Run 2 drafts and queues the reply.
    script.add(*draft_script(OLD, 1, commit=False))
    app.invoke(human("Draft"), cfg, durability=durability)
    [_, draft] = s1.status().queue
    # Back to k1: clean (nothing crossed), and both held sends are dropped.
    script.add(call("write_reply", 2, text=NEW), AIMessage(content="ok"))
    app.invoke(human("formally"), k1.config, durability=durability)
    travel = saver.last_travel("d")
    assert travel is not None and travel["residueClean"] is True
    dropped = travel["droppedDeferred"]
    assert [d["seq"] for d in dropped] == [team["seq"], draft["seq"]], dropped
    assert [d["args"]["to"] for d in dropped] == ["team@example.com", "ann@example.com"]
    assert dropped == travel["report"]["droppedDeferred"]
    fork = (app.get_state(cfg).metadata or {}).get("revl", {}).get("fork")
    assert fork is not None, app.get_state(cfg).metadata
    assert fork["droppedDeferred"] == dropped and fork["residueClean"] is True
    assert fork["checkpointId"] == k1.config["configurable"]["checkpoint_id"]
    for h in run_checkpoints(app, cfg, k1):
        assert (h.metadata or {}).get("revl", {}).get("fork") == fork, h.metadata
    # The new line starts empty; what it commits is its own.
    new = saver.thread_session("d")
    assert new is not None and new != s1 and new.status().queue == []
    new.commit_confirm(new.commit().hash)
    assert sink.count == 0, "the dropped sends never fire"
    # A clean travel that drops nothing leaves the metadata as LangGraph made it.
    other: RunnableConfig = {"configurable": {"thread_id": "e"}}
    script.add(call("write_reply", 3, text=OLD), AIMessage(content="ok"))
    app.invoke(human("one"), other, durability=durability)
    e1 = app.get_state(other)
    script.add(call("write_reply", 4, text=NEW), AIMessage(content="ok"))
    app.invoke(human("two"), other, durability=durability)
    script.add(call("write_reply", 5, text="three"), AIMessage(content="ok"))
    app.invoke(human("three"), e1.config, durability=durability)
    quiet = saver.last_travel("e")
    assert quiet is not None and quiet["droppedDeferred"] == [] and quiet["residueClean"] is True
    assert all("revl" not in (h.metadata or {}) for h in app.get_state_history(other))


def test_a_checkpoint_of_an_abandoned_line_is_unreachable(base: Path, sink: Sink, store_dir: Path) -> None:
    saver = RevlSaver(store=store_dir, workspace_root=base / "threads", tools=[mail_tool(sink)])
    script = Script()
    app = build(saver, script, sink)
    cfg: RunnableConfig = {"configurable": {"thread_id": "z"}}
    script.add(AIMessage(content="Hello!"))
    app.invoke(human("hello"), cfg)
    k1 = app.get_state(cfg)
    script.add(*draft_script(OLD, 1, commit=False))
    app.invoke(human("Draft"), cfg)
    abandoned = app.get_state(cfg)
    script.add(AIMessage(content="ok"))
    app.invoke(human("other"), k1.config)  # travel: the draft line is abandoned
    assert len(saver.thread_sessions("z")) == 2
    # (LangGraph may call the model before its put of the run's first checkpoint is
    # refused: re-executing a model call is LangGraph's, not revl's, to undo.)
    script.add(AIMessage(content="ok"))
    with pytest.raises(CheckpointUnreachable):
        app.invoke(human("back to the draft"), abandoned.config)
    assert len(saver.thread_sessions("z")) == 2


def test_async_graph_and_asession(base: Path, sink: Sink, store_dir: Path) -> None:
    import asyncio

    from revl.langgraph import asession

    saver = RevlSaver(store=store_dir, workspace_root=base / "threads", tools=[mail_tool(sink)])

    async def writer(state: MessagesState, config: RunnableConfig) -> dict[str, list[AnyMessage]]:
        s = await asession(config)
        text = str(state["messages"][-1].content)
        await s.write("note.txt", text)
        return {"messages": [AIMessage(content="noted")]}

    g = StateGraph(MessagesState)
    g.add_node("writer", writer)
    g.add_edge(START, "writer")
    g.add_edge("writer", END)
    app = g.compile(checkpointer=saver)
    cfg: RunnableConfig = {"configurable": {"thread_id": "a"}}

    async def main() -> None:
        await app.ainvoke(human("one"), cfg)
        k1 = await app.aget_state(cfg)
        await app.ainvoke(human("two"), cfg)
        await app.ainvoke(human("three"), k1.config)

    asyncio.run(main())
    ws = Path(saver.workspace_of("a"))
    assert (ws / "note.txt").read_text() == "three"
    lines = saver.thread_sessions("a")
    assert len(lines) == 2
    step = max(t["index"] for t in lines[0].timeline().to_dict()["steps"] if t["label"] == "fs.write note.txt")
    assert lines[0].read("note.txt", at=step) == b"two"
    assert json.dumps(saver.last_travel("a"))  # a plain document


def test_a_new_saver_on_the_same_store_travels_back(base: Path, sink: Sink, store_dir: Path) -> None:
    """Checkpoints and their positions survive the process: a fresh RevlSaver reads the
    WALs' checkpoint and bind records, and time travel from it rewinds as before."""
    first = RevlSaver(store=store_dir, workspace_root=base / "threads", tools=[mail_tool(sink)])
    script = Script()
    app = build(first, script, sink)
    cfg: RunnableConfig = {"configurable": {"thread_id": "r"}}
    script.add(AIMessage(content="Hello!"))
    app.invoke(human("hello"), cfg)
    k1 = app.get_state(cfg)
    script.add(*draft_script(OLD, 1, commit=False))
    app.invoke(human("Draft"), cfg)
    old = first.thread_session("r")
    assert old is not None
    # No journal beside the WAL: the checkpoints are records of the session's WAL.
    assert not (Path(store_dir) / "langgraph").exists()
    wal = (Path(store_dir) / "sessions" / old.id / "wal.jsonl").read_text()
    assert '"record":"checkpoint"' in wal

    second = RevlSaver(store=store_dir, workspace_root=base / "threads", tools=[mail_tool(sink)])
    app2 = build(second, script, sink)
    assert [h.config for h in app2.get_state_history(cfg)] == [h.config for h in app.get_state_history(cfg)]
    assert second.thread_session("r") == old
    script.add(*draft_script(NEW, 2, commit=True))
    app2.invoke(human("formally"), k1.config)
    assert sink.wait_for(1)
    assert sink.bodies == [{"to": "ann@example.com", "body": NEW}]
    assert (Path(second.workspace_of("r")) / "reply.txt").read_bytes() == NEW.encode()
    assert [s.id for s in second.thread_sessions("r")][0] == old.id


def test_any_thread_id_gets_a_workspace_name() -> None:
    """A thread id is LangGraph's: any str, one that is not Unicode text too (it never
    reaches revl's core as it is, only through `safe_name`)."""
    from revl.langgraph import safe_name

    names = {safe_name(t) for t in ("t\ud800", "t\udc80", "t_", "t/")}
    assert len(names) == 4
    assert all(n.isascii() and "/" not in n for n in names)
