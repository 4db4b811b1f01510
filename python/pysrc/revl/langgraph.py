"""``revl.langgraph``: a LangGraph checkpointer whose time travel rewinds the world
(docs/langgraph.md).

::

    from revl.langgraph import RevlSaver, session

    saver = RevlSaver(store="/tmp/revl-store", workspace_root="/tmp/threads", tools=[send_email])
    graph = builder.compile(checkpointer=saver)

    def write_reply(state, config):          # a node (or a tool taking ``config``)
        session(config).write("reply.txt", state["draft"])

Each thread is one revl session (its workspace is ``workspace_root/<thread>``), made at the
thread's first checkpoint (or when a node or tool first asks for it through :func:`session`).
Each checkpoint of the root namespace is bound to the position its session's timeline had when
the checkpoint was taken (its ``checkpoint`` WAL record; ``revl log`` shows it). A run that resumes from a checkpoint that is not the
thread's latest (``graph.invoke(None, old_config)``, ``update_state`` on an old config, a
replay from ``get_state_history``) forks the session at that checkpoint's position before
any effect of the new run: the files are back, the held sends of the old line are dropped,
the old line is frozen and stays readable. Reading history never forks.

Checkpoints themselves are kept in memory (LangGraph's ``InMemorySaver`` does the lookups)
and in the store: each checkpoint's content (and each batch of pending writes) is a blob,
named by a ``checkpoint`` (``checkpoint-writes``) record in the WAL of the thread's session,
fsynced before ``put`` returns, so a new process finds every acknowledged checkpoint again,
``revl gc`` keeps them and ``revl push`` carries them. The session is made at the thread's
first checkpoint. See docs/langgraph.md for what this guarantees and what it does not.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence, Union, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.memory import InMemorySaver

from . import aio
from ._session import Session, Store
from .errors import ForkNotClean, RevlError
from .results import ForkReport
from .tools import Tool

PathLike = Union[str, "os.PathLike[str]"]
OnCrossed = Literal["raise", "proceed"]

_CHECKPOINTER_KEY = "__pregel_checkpointer"
_DURABILITY_KEY = "__pregel_durability"
_RUNTIME_KEY = "__pregel_runtime"
# How long a resumed run's first effect waits for LangGraph's own (background) put of the
# run's first checkpoint, which tells the travel target exactly, before it forks at the
# checkpoint the run addressed. Not used under ``durability="exit"`` (nothing is put).
_PUT_WAIT_SECONDS = 5.0


class CheckpointUnreachable(RevlError):
    """Code ``checkpoint-unreachable``: a run resumed from a checkpoint whose world revl
    cannot bring back. A serial fork freezes the line it leaves and a branch starts at its
    fork point, so a checkpoint taken on an abandoned line after the point where the
    current line forked from it (or before that point, with steps in between) is not a
    position of the live session. Nothing was changed; resume from a checkpoint of the
    current line (``get_state_history`` lists them)."""

    code = "checkpoint-unreachable"


def _b64(typed: tuple[str, bytes]) -> list[str]:
    return [typed[0], base64.b64encode(typed[1]).decode()]


def _unb64(v: list[str]) -> tuple[str, bytes]:
    return (v[0], base64.b64decode(v[1]))


_SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")


def safe_name(thread_id: str) -> str:
    """A file name for a thread id: the id itself when it is already a plain file name
    (letters, digits, ``._-``, at most 100, not starting with a dot); otherwise its readable
    part and a hash of the whole id (so distinct ids never share a workspace)."""
    if _SAFE.fullmatch(thread_id):
        return thread_id
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", thread_id)[:48].lstrip(".") or "thread"
    # surrogatepass: any str is a thread id, one with a lone surrogate too.
    digest = hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{readable}-{digest}"


@dataclass
class _Thread:
    """What the saver knows of one thread's revl side."""

    session_id: str | None = None
    lines: list[str] = field(default_factory=list)
    # The latest checkpoint of the root namespace on the current line.
    tip: str | None = None
    # checkpoint id -> [(session id or None (no session yet: before every effect), position)]
    bound: dict[str, list[tuple[str | None, int]]] = field(default_factory=dict)
    # A checkpoint a task ran from before it was put: the position before its first effect.
    pending: dict[str, int] = field(default_factory=dict)
    # The report of the last fork that left something in the world (on_crossed="proceed")
    # or dropped held sends, put into the metadata (under "revl") of every root checkpoint
    # the run that made the fork puts, so the run's latest state shows it.
    unreported: dict[str, Any] | None = None
    # The run that made that fork (see _run_of: the run of the first checkpoint put after
    # it), and how many checkpoints carried it.
    unreported_run: object | None = None
    unreported_puts: int = 0
    travels: list[dict[str, Any]] = field(default_factory=list)


class RevlSaver(InMemorySaver):
    """A LangGraph checkpointer (``BaseCheckpointSaver``, sync and async) that binds each
    thread to a revl session and each root checkpoint to a position on its timeline.

    ``store``: a :class:`revl.Store` or its path (default: the CLI's default store).
    ``workspace_root``: where threads' workspaces are made (``<root>/<thread>``; default:
    ``<store>-threads``, beside the store), unless
    ``workspace`` (a callable from thread id to path) says otherwise. ``tools``: the Python
    tools (``@revl.tool``) the threads' sessions may run. ``on_crossed``: what a time travel
    does when the fork is not clean (something crossed after the checkpoint): ``"raise"``
    raises :class:`revl.ForkNotClean` (with ``.report``) and changes nothing; ``"proceed"``
    forks and keeps the report (``last_travel``, ``metadata["revl"]`` of every checkpoint the
    resumed run puts, so ``get_state`` after the run shows it, and ``revl log``). A travel
    drops every held send of the line it leaves (the target checkpoint's own too): a clean
    one that dropped any names them the same way (``droppedDeferred``).

    ``copy_thread`` is not offered: a thread's checkpoints are bound to what its revl
    session witnessed, and a copy under another thread would claim a world (files, held
    sends) that no session of that thread ever made.
    """

    def __init__(
        self,
        store: Store | PathLike | None = None,
        workspace_root: PathLike | None = None,
        workspace: Callable[[str], PathLike] | None = None,
        tools: Sequence[Tool[Any]] = (),
        on_crossed: OnCrossed = "raise",
    ) -> None:
        super().__init__()
        if on_crossed not in ("raise", "proceed"):
            raise ValueError(f'on_crossed must be "raise" or "proceed", not {on_crossed!r}')
        self.store = store if isinstance(store, Store) else Store(store)
        if workspace_root is None and workspace is None:
            # Beside the store, never in it (a workspace may not hold or sit in a store).
            workspace_root = self.store.path.rstrip("/") + "-threads"
        self.workspace_root = os.fspath(workspace_root) if workspace_root is not None else None
        self._workspace = workspace
        self.tools: tuple[Tool[Any], ...] = tuple(tools)
        self.on_crossed: OnCrossed = on_crossed
        self._lock = threading.RLock()
        self._threads: dict[str, _Thread] = {}
        self._sessions: dict[str, Session] = {}
        # (thread, ns, channel, version) -> the blob of the checkpoint that holds that value.
        self._value_blob: dict[tuple[str, str, str, Any], str] = {}
        self._load()

    # ---- where things are ----

    def workspace_of(self, thread_id: str) -> str:
        """The workspace of a thread's session."""
        if self._workspace is not None:
            return os.fspath(self._workspace(thread_id))
        assert self.workspace_root is not None
        return os.path.join(self.workspace_root, safe_name(thread_id))

    # ---- the store: checkpoint records in the thread's session's WAL, content as blobs ----

    def _record_checkpoint(self, s: Session, thread_id: str, ns: str, cid: str, at: int | None,
                           versions: ChannelVersions, new_versions: ChannelVersions) -> int | None:
        """Keep checkpoint ``cid`` (already in memory) in the store: its content (state,
        metadata, the channel values it introduced) as a blob, then a ``checkpoint`` record
        naming it and the blobs of the earlier checkpoints whose channel values it uses.
        Returns the position a root checkpoint was bound to."""
        c, m, parent = self.storage[thread_id][ns][cid]
        values: list[tuple[str, str | int | float, list[str]]] = []
        for ch, ver in new_versions.items():
            blob = self.blobs.get((thread_id, ns, ch, ver))
            if blob is not None:
                values.append((ch, ver, _b64(blob)))
        content = json.dumps({"c": _b64(c), "m": _b64(m), "values": values},
                             separators=(",", ":")).encode()
        uses: set[str] = set()
        for ch, ver in versions.items():
            d = self._value_blob.get((thread_id, ns, ch, ver))
            if d is not None and ch not in new_versions:
                uses.add(d)
        text, _ = s._native.checkpoint_put(
            _wire(thread_id), ns, cid, parent, content, ns == "", at, sorted(uses))
        doc = json.loads(text)
        for ch, ver, _b in values:
            self._value_blob[(thread_id, ns, ch, ver)] = doc["blob"]
        pos = doc.get("position")
        return int(pos) if pos is not None else None

    def _load(self) -> None:
        """Every thread's checkpoints, from the checkpoint records of the store's sessions
        (docs/langgraph.md, "What is kept where"); each blob is verified as it is read."""
        legacy = os.path.join(self.store.path, "langgraph")
        if os.path.isdir(legacy) and any(n.endswith(".jsonl") for n in os.listdir(legacy)):
            raise RevlError(
                f"{legacy} holds checkpoints in the journal format of an earlier revl; this "
                "revl keeps them in the sessions' WALs and does not read that journal",
                "finish or drop those threads with the revl that wrote them, then remove "
                f"{legacy} (docs/langgraph.md, \"What is kept where\")",
            )
        found = self.store._native.checkpoint_sessions()
        docs: dict[str, tuple[dict[str, Any], list[bytes | None]]] = {}
        threads: dict[str, list[str]] = {}
        for text, contents in found:
            doc = json.loads(text)
            docs[doc["session"]] = (doc, contents)
            for r in doc["records"]:
                t = _unwire(r["thread"])
                if doc["session"] not in threads.setdefault(t, []):
                    threads[t].append(doc["session"])
        for thread_id, sids in threads.items():
            st = self._threads.setdefault(thread_id, _Thread())
            # The thread's line: from the session that is no branch of another of its
            # sessions, along the serial branches that continue each frozen one.
            mine = set(sids)
            roots = [sid for sid in sids if docs[sid][0].get("parent") not in mine]
            line: list[str] = []
            sid: str | None = roots[-1] if roots else sids[-1]
            while sid is not None and sid not in line:
                line.append(sid)
                sid = docs[sid][0].get("frozenInto") if sid in docs else None
            st.lines = line
            st.session_id = line[-1]
            for sid in line:
                if sid not in docs:
                    continue
                doc, contents = docs[sid]
                for r, content in zip(doc["records"], contents):
                    if _unwire(r["thread"]) == thread_id:
                        self._replay(thread_id, r, content)
            self._reload_bindings(thread_id)

    def _replay(self, thread_id: str, r: dict[str, Any], content: bytes | None) -> None:
        kind = r["record"]
        st = self._threads.setdefault(thread_id, _Thread())
        if kind == "checkpoint":
            if content is None:
                return  # forgotten later in the same WAL
            doc = json.loads(content)
            ns = r["ns"]
            for ch, ver, v in doc["values"]:
                self.blobs[(thread_id, ns, ch, ver)] = _unb64(v)
                self._value_blob[(thread_id, ns, ch, ver)] = r["blob"]
            self.storage[thread_id][ns][r["id"]] = (_unb64(doc["c"]), _unb64(doc["m"]), r.get("parent"))
            if ns == "":
                st.tip = r["id"]
        elif kind == "checkpoint-writes":
            if content is None:
                return
            key = (thread_id, r["ns"], r["checkpoint"])
            for task, idx, chan, val, path in json.loads(content)["writes"]:
                self.writes.setdefault(key, {})[(task, idx)] = (task, chan, _unb64(val), path)
        elif kind == "checkpoint-forget":
            if r.get("ns") is None:
                InMemorySaver.delete_thread(self, thread_id)
                st.tip = None
            else:
                for cid in r.get("ids", []):
                    self._forget(thread_id, r["ns"], cid)
        elif kind == "checkpoint-tip":
            st.tip = r["id"]

    def _reload_bindings(self, thread_id: str) -> None:
        """The positions of the thread's checkpoints, from its sessions' WALs (the truth)."""
        st = self._threads[thread_id]
        for sid in st.lines:
            pos = self._session(sid).position()
            for c in pos.checkpoints:
                entries = [e for e in st.bound.get(c["checkpointId"], []) if e[0] is not None]
                entries.append((sid, int(c["position"])))
                st.bound[c["checkpointId"]] = entries

    def _forget(self, thread_id: str, ns: str, cid: str) -> None:
        self.storage.get(thread_id, {}).get(ns, {}).pop(cid, None)
        self.writes.pop((thread_id, ns, cid), None)

    # ---- sessions ----

    def _session(self, sid: str) -> Session:
        s = self._sessions.get(sid)
        if s is None:
            s = self.store.session(sid, tools=self.tools)
            self._sessions[sid] = s
        return s

    def _ensure_session(self, thread_id: str) -> Session:
        st = self._threads.setdefault(thread_id, _Thread())
        if st.session_id is not None:
            return self._session(st.session_id)
        s = self.store.new(self.workspace_of(thread_id), tools=self.tools)
        self._sessions[s.id] = s
        st.session_id = s.id
        st.lines.append(s.id)
        return s

    def _untouched(self, s: Session) -> bool:
        """Whether nothing was done in the world through the thread's only session yet (no
        step, no held send): a travel then has nothing to rewind."""
        if s.head != 0:
            return False
        return not s.status().to_dict().get("queue")

    def _root_ids(self, thread_id: str) -> list[str]:
        return sorted(self.storage.get(thread_id, {}).get("", {}))

    def _known(self, thread_id: str, cid: str | None) -> bool:
        return cid is not None and cid in self.storage.get(thread_id, {}).get("", {})

    def _position_on_line(self, st: _Thread, cid: str) -> int | None:
        for sid, pos in st.bound.get(cid, []):
            if sid == st.session_id:
                return pos
        return None

    def _travel(self, thread_id: str, target: str) -> None:
        """Make the world match checkpoint ``target``: fork the thread's session at its
        position (raise or proceed by ``on_crossed``). Called with the lock held."""
        st = self._threads.setdefault(thread_id, _Thread())
        live = self._ensure_session(thread_id)
        if len(st.lines) == 1 and self._untouched(live):
            # Nothing was done in the world yet: nothing to rewind.
            live._native.checkpoint_tip(_wire(thread_id), target)
            st.tip = target
            return
        pos = self._position_on_line(st, target)
        if pos is None:
            raise CheckpointUnreachable(
                f"checkpoint {target} of thread {thread_id!r} is not a position of its live "
                f"session {st.session_id} (it lies on a line an earlier time travel abandoned, "
                "past the point where the current line forked from it); nothing was changed",
                "resume from a checkpoint of the current line (get_state_history lists them)",
            )
        s = live
        preview = s.fork_preview(pos)
        if not preview.clean and self.on_crossed == "raise":
            raise ForkNotClean(
                f"resuming thread {thread_id!r} from checkpoint {target} would fork session "
                f"{s.id} at step {pos} over what already left the host "
                f"({preview.to_dict().get('warning_emissions', '')}); nothing was changed",
                'pass on_crossed="proceed" to fork anyway (the report is kept), or resume from '
                "a later checkpoint",
                report=preview,
            )
        plan = s.fork(pos)
        if plan.hash != preview.hash and not plan.clean and self.on_crossed == "raise":
            raise ForkNotClean(
                f"resuming thread {thread_id!r} from checkpoint {target}: the session changed "
                "and the fork is not clean; nothing was changed",
                "resume again",
                report=plan,
            )
        assert plan.hash is not None
        done = s.fork_confirm(plan.hash)
        branch = done.branch
        assert branch is not None
        self._sessions[branch.id] = branch
        # The checkpoints that stood at the fork point stand at the branch's hinge too.
        moved: list[str] = []
        for cid, entries in st.bound.items():
            if any(sid == s.id and p == pos for sid, p in entries):
                branch.bind(cid, 0)
                entries.append((branch.id, 0))
                moved.append(cid)
        st.session_id = branch.id
        st.lines.append(branch.id)
        # The branch continues the thread: say so in its WAL.
        branch._native.checkpoint_tip(_wire(thread_id), target)
        st.tip = target
        # A serial fork drops the whole queue: the sends queued after the target and the
        # ones the target itself had queued. They never fire; say which.
        dropped: list[dict[str, Any]] = list(done.dropped_deferred or [])
        summary = {
            "checkpointId": target,
            "parent": s.id,
            "branch": branch.id,
            "at": pos,
            "residueClean": done.clean,
            "droppedDeferred": dropped,
            "report": done.to_dict(),
        }
        st.travels.append(summary)
        st.unreported, st.unreported_run, st.unreported_puts = None, None, 0
        if not done.clean or dropped:
            # What the run could otherwise miss: something stayed out in the world, or
            # held sends (the target's own included) will never fire.
            st.unreported = {k: v for k, v in summary.items() if k != "report"} | {
                "residue": done.to_dict().get("residue"),
                "warning_emissions": done.to_dict().get("warning_emissions"),
            }

    # ---- what nodes and tools call ----

    def _resolve(self, config: RunnableConfig, may_wait: bool) -> Session | float:
        """The session for a task's config, forking first when the task belongs to a run
        resumed from a checkpoint that is not the latest. Returns a deadline instead when it
        should wait for LangGraph's put of the run's first checkpoint."""
        conf = config.get("configurable") or {}
        thread_id = conf.get("thread_id")
        if thread_id is None:
            raise ValueError("session(config): the run's config has no thread_id")
        thread_id = str(thread_id)
        here_any = (conf.get("checkpoint_map") or {}).get("")
        here = str(here_any) if here_any is not None else None
        addressed_any = (config.get("metadata") or {}).get("checkpoint_id") or conf.get("checkpoint_id")
        addressed = str(addressed_any) if addressed_any is not None else None
        with self._lock:
            st = self._threads.setdefault(thread_id, _Thread())
            if here is not None and self._known(thread_id, here):
                if here != st.tip:
                    self._travel(thread_id, here)
            elif addressed is not None and self._known(thread_id, addressed) and addressed != st.tip:
                if may_wait and conf.get(_DURABILITY_KEY) != "exit":
                    return time.monotonic() + _PUT_WAIT_SECONDS
                self._travel(thread_id, addressed)
            s = self._ensure_session(thread_id)
            if here is not None and not self._known(thread_id, here) and here not in st.pending:
                st.pending[here] = s.head
            return s

    def session_for(self, config: RunnableConfig) -> Session:
        """The thread's session for a task's config (see :func:`session`)."""
        deadline: float | None = None
        while True:
            got = self._resolve(config, may_wait=deadline is None or time.monotonic() < deadline)
            if isinstance(got, Session):
                return got
            deadline = got if deadline is None else deadline
            time.sleep(0.01)

    async def asession_for(self, config: RunnableConfig) -> aio.Session:
        deadline: float | None = None
        while True:
            may_wait = deadline is None or time.monotonic() < deadline
            got = await asyncio.to_thread(self._resolve, config, may_wait)
            if isinstance(got, Session):
                return aio.Session(got)
            deadline = got if deadline is None else deadline
            await asyncio.sleep(0.01)

    def position_of(self, config: RunnableConfig) -> tuple[Session, int]:
        """The live session of the config's thread and the position its checkpoint is
        bound to (:class:`CheckpointUnreachable` if it is not a position of that session)."""
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        cid = conf.get("checkpoint_id")
        with self._lock:
            st = self._threads.setdefault(thread_id, _Thread())
            cid = str(cid) if cid is not None else st.tip
            s = self._ensure_session(thread_id)
            pos = self._position_on_line(st, cid) if cid is not None else s.head
            if pos is None:
                raise CheckpointUnreachable(
                    f"checkpoint {cid} of thread {thread_id!r} is not a position of its live session {s.id}",
                    "branch from a checkpoint of the current line (get_state_history lists them)",
                )
            return s, pos

    def branch(self, config: RunnableConfig, into: PathLike) -> Session:
        """A parallel branch (docs/user-guide.md §6) of the thread's session at the
        checkpoint the config names (default: the latest), in its own workspace ``into``:
        for exploring several alternatives from one checkpoint at once. The thread, its line
        and its checkpoints are unchanged. A branch over something that crossed follows
        ``on_crossed``."""
        with self._lock:
            s, pos = self.position_of(config)
            # One call, one scan: each scan checks every witnessed path of the workspace, so
            # the fork is enumerated and confirmed together (``fork_branch``: the confirm's
            # check is that enumeration). What the policy reads (``clean``) comes from the
            # timeline alone; refused, the enumerated fork is left pending, unconfirmed
            # (nothing in any workspace changed; the next fork replaces it).
            plan = s.fork_branch(pos, into, require_clean=self.on_crossed == "raise")
            if plan.branch is None:
                raise ForkNotClean(
                    f"a branch of session {s.id} at step {pos} would start over what already "
                    "left the host; nothing was changed (the fork stays enumerated, unconfirmed)",
                    'pass on_crossed="proceed" to branch anyway',
                    report=plan,
                )
            return plan.branch

    def thread_session(self, thread_id: str) -> Session | None:
        """The live line's session of a thread (``None`` before its first effect)."""
        st = self._threads.get(thread_id)
        return self._session(st.session_id) if st and st.session_id else None

    def thread_sessions(self, thread_id: str) -> list[Session]:
        """Every session a thread has had, oldest first (abandoned lines are frozen)."""
        st = self._threads.get(thread_id)
        return [self._session(sid) for sid in st.lines] if st else []

    def last_travel(self, thread_id: str) -> dict[str, Any] | None:
        """The last time travel of a thread: ``{checkpointId, parent, branch, at,
        residueClean, droppedDeferred, report}`` (``droppedDeferred``: the held sends the
        fork dropped, ``{seq, tool, service, method, args}`` each, the target checkpoint's
        own queue included; ``report``: the fork's whole document)."""
        st = self._threads.get(thread_id)
        return st.travels[-1] if st and st.travels else None

    # ---- BaseCheckpointSaver ----

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "")
        parent_any = conf.get("checkpoint_id")
        parent = str(parent_any) if parent_any is not None else None
        cid = checkpoint["id"]
        with self._lock:
            st = self._threads.setdefault(thread_id, _Thread())
            run = _run_of(config)
            if ns == "" and parent is not None and self._known(thread_id, parent) and parent != st.tip:
                self._travel(thread_id, parent)  # raises before anything is stored
            if ns == "" and st.unreported is not None:
                # Every root checkpoint put by the run that forked carries the report, so
                # the run's result (its latest state) shows it. The first checkpoint after
                # the fork is that run's (a thread runs one run at a time); outside a run
                # (update_state) only that one carries it. A later run's do not.
                if st.unreported_puts == 0:
                    st.unreported_run = run
                if st.unreported_puts == 0 or (run is not None and run is st.unreported_run):
                    extended: dict[str, Any] = {**metadata, "revl": {"fork": st.unreported}}
                    metadata = cast(CheckpointMetadata, extended)
                    st.unreported_puts += 1
                else:
                    st.unreported, st.unreported_run, st.unreported_puts = None, None, 0
            out = super().put(config, checkpoint, metadata, new_versions)
            try:
                s = self._ensure_session(thread_id)
                at: int | None = None
                if ns == "":
                    later = [v for k, v in st.pending.items() if k >= cid]
                    at = min(later) if later else None
                pos = self._record_checkpoint(
                    s, thread_id, ns, cid, at, checkpoint.get("channel_versions") or {}, new_versions)
            except BaseException:
                self._forget(thread_id, ns, cid)  # not kept: not acknowledged
                raise
            if ns == "":
                assert pos is not None
                st.bound.setdefault(cid, []).append((s.id, pos))
                st.pending = {k: v for k, v in st.pending.items() if k > cid}
                st.tip = cid
            return out

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        key = (thread_id, conf.get("checkpoint_ns", ""), conf["checkpoint_id"])
        with self._lock:
            before = dict(self.writes.get(key, {}))
            super().put_writes(config, writes, task_id, task_path)
            changed = [[task, idx, w[1], _b64(w[2]), w[3]]
                       for (task, idx), w in self.writes.get(key, {}).items()
                       if before.get((task, idx)) != w]
            if not changed:
                return
            try:
                s = self._ensure_session(thread_id)
                content = json.dumps({"writes": changed}, separators=(",", ":")).encode()
                s._native.checkpoint_writes(_wire(thread_id), key[1], str(key[2]), content)
            except BaseException:
                self.writes[key] = before  # not kept: not acknowledged
                raise

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        with self._lock:
            return super().get_tuple(config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        with self._lock:
            found = [*super().list(config, filter=filter, before=before, limit=limit)]
        yield from found

    def delete_thread(self, thread_id: str) -> None:
        """Forget a thread's checkpoints (its revl sessions, the world's record, stay)."""
        with self._lock:
            super().delete_thread(thread_id)
            self._forget_thread(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Forget the checkpoints (and their writes) whose metadata names one of
        ``run_ids``."""
        runs = set(run_ids)
        if not runs:
            return
        with self._lock:
            touched: dict[tuple[str, str], list[str]] = {}
            for thread_id, nss in self.storage.items():
                for ns, cps in nss.items():
                    for cid, (_, m, _) in list(cps.items()):
                        if self.serde.loads_typed(m).get("run_id") in runs:
                            self._forget(thread_id, ns, cid)
                            touched.setdefault((thread_id, ns), []).append(cid)
            for (thread_id, ns), ids in touched.items():
                self._record_forget(thread_id, ns, ids)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's latest checkpoint (and its writes);
        ``delete``: forget the threads' checkpoints. Bindings on the sessions stay (the
        WAL is append-only); a pruned checkpoint can no longer be resumed from."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f'prune strategy must be "keep_latest" or "delete", not {strategy!r}')
        with self._lock:
            for thread_id in thread_ids:
                if thread_id not in self.storage:
                    continue
                if strategy == "delete":
                    super().delete_thread(thread_id)
                    self._forget_thread(thread_id)
                else:
                    for ns, cps in list(self.storage[thread_id].items()):
                        keep = max(cps) if cps else None
                        gone = [c for c in cps if c != keep]
                        for cid in gone:
                            self._forget(thread_id, ns, cid)
                        if gone:
                            self._record_forget(thread_id, ns, gone)

    def _forget_thread(self, thread_id: str) -> None:
        """A ``checkpoint-forget`` of the whole thread on its live session (the sessions
        and the world's record stay, and the thread goes on on the same line)."""
        st = self._threads.get(thread_id)
        if st is None or st.session_id is None:
            return
        self._session(st.session_id)._native.checkpoint_forget(_wire(thread_id))
        st.tip, st.bound, st.pending = None, {}, {}
        st.unreported, st.unreported_run, st.unreported_puts = None, None, 0

    def _record_forget(self, thread_id: str, ns: str, ids: Sequence[str]) -> None:
        st = self._threads.get(thread_id)
        if st is None or st.session_id is None:
            return
        self._session(st.session_id)._native.checkpoint_forget(_wire(thread_id), ns, sorted(ids))

    # ---- async: the same, off the event loop ----

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(
            lambda: [*self.list(config, filter=filter, before=before, limit=limit)]
        )
        for t in found:
            yield t

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(lambda: self.prune(thread_ids, strategy=strategy))


_UNICODE_ESCAPE = "\x00surrogates:"


def _wire(thread_id: str) -> str:
    """A thread id as a WAL record holds it: itself when it is Unicode text; otherwise (a
    lone surrogate) a marked hex form of its ``surrogatepass`` bytes."""
    try:
        thread_id.encode("utf-8")
        return thread_id
    except UnicodeEncodeError:
        return _UNICODE_ESCAPE + thread_id.encode("utf-8", "surrogatepass").hex()


def _unwire(wire: str) -> str:
    if wire.startswith(_UNICODE_ESCAPE):
        return bytes.fromhex(wire[len(_UNICODE_ESCAPE):]).decode("utf-8", "surrogatepass")
    return wire



def _run_of(config: RunnableConfig) -> object | None:
    """What names one run of a graph in the config LangGraph passes ``put``: the run's
    ``RunControl`` (one per ``invoke``/``stream``), else its ``Runtime`` (the same object in
    every ``put`` of one run); ``None`` outside a run (``update_state``)."""
    runtime: object | None = (config.get("configurable") or {}).get(_RUNTIME_KEY)
    if runtime is None:
        return None
    control: object | None = getattr(runtime, "control", None)
    return control if control is not None else runtime


def _saver(config: RunnableConfig) -> RevlSaver:
    saver = (config.get("configurable") or {}).get(_CHECKPOINTER_KEY)
    if not isinstance(saver, RevlSaver):
        raise TypeError(
            "session(config) needs the config LangGraph passes to a node or tool of a graph "
            "compiled with checkpointer=RevlSaver(...)"
        )
    return saver


def session(config: RunnableConfig) -> Session:
    """The revl session of the run's thread, from the config LangGraph passes a node or a
    tool (made on first use). In a run resumed from a checkpoint that is not the latest,
    the first call forks the session there first (docs/langgraph.md). In an ``async`` node use
    :func:`asession`."""
    return _saver(config).session_for(config)


async def asession(config: RunnableConfig) -> aio.Session:
    """:func:`session` for async nodes and tools: a :class:`revl.aio.Session`."""
    return await _saver(config).asession_for(config)


__all__ = [
    "RevlSaver",
    "CheckpointUnreachable",
    "ForkNotClean",
    "ForkReport",
    "session",
    "asession",
    "safe_name",
]
