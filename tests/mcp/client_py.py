"""End-to-end test of `revl mcp` through the official Python MCP client.

Usage: python client_py.py /path/to/revl

Runs its own loopback HTTP sink (127.0.0.1, an ephemeral port) that counts every request,
drives a revl session through `stdio_client` + `ClientSession`, approves an emission from
the terminal (`revl approve`) while the server runs, forks over that emission, commits the
branch, and checks real outcomes: bytes on disk and the sink's counts. Then the frozen
parent through a second server, and hostile input. Exits non-zero on the first failure.
"""

import asyncio
import base64
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

REVL = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("REVL_BIN", "revl")

EXPECTED_TOOLS = {
    "revl_new", "revl_write", "revl_delete", "revl_rename", "revl_mkdir", "revl_chmod",
    "revl_read", "revl_list", "revl_provide", "revl_boundary", "revl_call", "revl_exec",
    "revl_timeline", "revl_inspect_step", "revl_status", "revl_verify", "revl_sessions",
    "revl_step_back", "revl_fork", "revl_fork_confirm", "revl_commit",
    "revl_commit_confirm", "revl_abort", "revl_note_model", "revl_diff", "revl_log",
}
READ_ONLY = {"revl_read", "revl_list", "revl_timeline", "revl_inspect_step", "revl_status", "revl_diff", "revl_log",
             "revl_verify", "revl_sessions", "revl_commit"}
# Tools that overwrite or remove files (or run what may).
DESTRUCTIVE = {"revl_write", "revl_delete", "revl_rename", "revl_exec", "revl_call", "revl_step_back",
               "revl_fork_confirm", "revl_abort", "revl_commit_confirm"}
# Tools that can reach outside the machine: they fire manifest tools (or run a command
# unconfined, on the host).
# Open world: may fire a manifest tool, run a command on the host, or (the read tools'
# `remote`) read a bucket on another machine.
OPEN_WORLD = {"revl_call", "revl_exec", "revl_step_back", "revl_fork_confirm", "revl_abort",
              "revl_commit_confirm", "revl_read", "revl_timeline", "revl_status", "revl_log",
              "revl_diff"}

checks = 0


def check(cond, what, detail=None):
    global checks
    if not cond:
        raise AssertionError(f"{what}" + (f": {detail}" if detail is not None else ""))
    checks += 1


class Sink:
    """A loopback HTTP server that records every request it receives."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                with sink.lock:
                    sink.requests.append((self.path, json.loads(body or b"null")))
                out = b'{"ok": true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path):
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def bodies(self, path):
        with self.lock:
            return [b for (p, b) in self.requests if p == path]

    def count(self, path=None):
        with self.lock:
            return len([1 for (p, _) in self.requests if path is None or p == path])

    def close(self):
        self.server.shutdown()


def doc_of(result):
    """The structured content, checked to equal the JSON text content."""
    check(result.structured_content is not None, "a result carries structured content")
    texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    check(len(texts) >= 1, "a result carries the JSON as text")
    check(json.loads(texts[0]) == result.structured_content,
          "the text content is the same JSON as the structured content")
    return result.structured_content


async def ok(session, tool, args=None):
    r = await session.call_tool(tool, args or {})
    d = doc_of(r)
    check(not r.is_error, f"{tool} succeeds", d)
    return d


async def refused(session, tool, args=None):
    r = await session.call_tool(tool, args or {})
    d = doc_of(r)
    check(r.is_error is True, f"{tool} {args} is refused with isError", d)
    return d


def server(store, *args):
    return StdioServerParameters(command=REVL, args=["--store", str(store), "mcp", *args])


def on_disk(ws, rel):
    p = Path(ws) / rel
    return p.read_bytes() if p.exists() else None


async def scenario(tmp: Path, sink: Sink):
    store, ws = tmp / "store", tmp / "ws"
    manifest = tmp / "revl.toml"
    manifest.write_text(f"""
[[tool]]
name = "send_email"
class = "deferred"
service = "mail"
method = "send"
scope = ["mail"]
http = {{ method = "POST", url = "{sink.url('/send')}" }}

[[tool]]
name = "post_note"
class = "emission"
service = "notes"
method = "post"
scope = ["net"]
http = {{ method = "POST", url = "{sink.url('/emit')}" }}
""")

    # --root: the parallel sibling below (tmp / "sibling") is made where the operator allows.
    async with stdio_client(server(store, "--workspace", str(ws), "--manifest", str(manifest),
                                   "--root", str(tmp))) as (r, w):
        async with ClientSession(r, w) as s:
            init = await s.initialize()
            check(init.server_info.name == "revl", "server name", init.server_info)
            check(init.instructions and "approv" in init.instructions and "fork" in init.instructions,
                  "server instructions tell how to use revl", init.instructions)
            check("revl_exec" in init.instructions and "sandbox" in init.instructions,
                  "server instructions name exec as a way to change files", init.instructions)

            tools = (await s.list_tools()).tools
            names = {t.name for t in tools}
            check(names == EXPECTED_TOOLS, "docs/mcp.md's tool set", sorted(names ^ EXPECTED_TOOLS))
            check(not any("approve" in n or "resend" in n or "recover" in n for n in names),
                  "no operator tool (an agent cannot approve itself)")
            by_name = {t.name: t for t in tools}
            for n in READ_ONLY:
                check(by_name[n].annotations and by_name[n].annotations.read_only_hint is True,
                      f"{n} is read-only", by_name[n].annotations)
            for n in DESTRUCTIVE:
                a = by_name[n].annotations
                check(a and a.destructive_hint is True and not a.read_only_hint, f"{n} is destructive", a)
            for n in names - READ_ONLY - DESTRUCTIVE:
                a = by_name[n].annotations
                check(a and a.read_only_hint is False and a.destructive_hint is False,
                      f"{n} is neither read-only nor destructive", a)
            for n in names:
                a = by_name[n].annotations
                check(a and a.open_world_hint is (n in OPEN_WORLD),
                      f"{n} has openWorldHint {n in OPEN_WORLD}", a)
            write_schema = by_name["revl_write"].input_schema
            check(set(write_schema["properties"]) == {"path", "content", "contentBase64"},
                  "revl_write takes path, content | contentBase64", write_schema)
            check(all(p.get("description") for p in write_schema["properties"].values()),
                  "every argument is documented", write_schema)

            st = await ok(s, "revl_status")
            parent = st["session"]
            check(st["state"] == "live" and Path(st["workspace"]) == ws.resolve(), "a live session on the workspace", st)

            # Steps 1..3: the content the fork will return to.
            await ok(s, "revl_write", {"path": "a.txt", "content": "alpha v1\n"})
            await ok(s, "revl_write", {"path": "bin/b.dat", "contentBase64": base64.b64encode(b"\x00\xff\x01").decode()})
            k = (await ok(s, "revl_boundary", {"label": "plan"}))["step"]
            check(on_disk(ws, "a.txt") == b"alpha v1\n", "the write is on disk")
            check(on_disk(ws, "bin/b.dat") == b"\x00\xff\x01", "the base64 write is on disk")
            rd = await ok(s, "revl_read", {"path": "bin/b.dat"})
            check(rd.get("contentBase64") == base64.b64encode(b"\x00\xff\x01").decode(), "read returns bytes as base64", rd)

            # After k: a provision, more writes, a held send, an approved emission.
            await ok(s, "revl_provide", {"key": "api_token", "value": "t-123"})
            await ok(s, "revl_write", {"path": "a.txt", "content": "alpha v2\n"})
            await ok(s, "revl_write", {"path": "notes/c.txt", "content": "draft\n"})
            await ok(s, "revl_rename", {"from": "bin/b.dat", "to": "bin/renamed.dat"})
            # A command in the sandbox: its change set becomes one rewindable step.
            ex = await ok(s, "revl_exec", {"argv": ["sh", "-c", "echo built > out.txt; mkdir -p gen && echo g > gen/g"],
                                           "timeout": 30})
            check(ex.get("sandbox") is True and [(c["path"], c["change"]) for c in ex["changes"]]
                  == [("gen", "dir-created"), ("gen/g", "created"), ("out.txt", "created")],
                  "revl_exec reports its change set, a new tree entry by entry", ex)
            check(on_disk(ws, "out.txt") == b"built\n", "the change set is applied to the workspace")
            await ok(s, "revl_exec", {"argv": ["sh", "-c", "pwd > here"], "cwd": "gen"})
            check(on_disk(ws, "gen/here") == (str(ws.resolve()) + "/gen\n").encode(), "revl_exec runs in cwd")
            bad = await refused(s, "revl_exec", {"argv": ["true"], "cwd": "../.."})
            check(bad["error"]["code"] == "path-outside", "a cwd outside the workspace is refused", bad)
            held = await ok(s, "revl_call", {"tool": "send_email", "args": {"to": "ops@example.test", "subject": "parent"}})
            check(held.get("queued") is True, "a deferred call is held", held)
            check(sink.count() == 0, "a held send has not arrived", sink.requests)

            need = await refused(s, "revl_call", {"tool": "post_note", "args": {"text": "hello"}})
            check(need.get("approvalRequired") is True and need.get("ticket"), "an emission needs approval", need)
            check(sink.count("/emit") == 0, "an unapproved emission fires nothing")

            # A human approves from the terminal while the server runs.
            ap = subprocess.run([REVL, "--store", str(store), "--json", "approve", parent, "--tool", "post_note"],
                                capture_output=True, text=True, timeout=60)
            check(ap.returncode == 0, "revl approve from the terminal works while the server runs", ap.stderr)
            emitted = await ok(s, "revl_call", {"tool": "post_note", "args": {"text": "hello"}})
            emission_step = emitted["step"]
            check(sink.count("/emit") == 1 and sink.bodies("/emit")[0] == {"text": "hello"},
                  "the approved emission arrived once", sink.requests)

            tl = await ok(s, "revl_timeline")
            check(tl["head"] == emission_step and tl["steps"][k]["label"] == "plan/boundary", "timeline", tl["head"])
            insp = await ok(s, "revl_inspect_step", {"at": k})
            check(insp["activeProvisions"] == {} and emission_step in insp["aheadOfHere"], "inspect at k", insp)

            # Fork at k: the report, then the files are still untouched.
            report = await ok(s, "revl_fork", {"at": k})
            crossed = [e["index"] for e in report["emissionsCrossed"]]
            check(emission_step in crossed, "the fork report lists the emission in emissionsCrossed", report["emissionsCrossed"])
            check(report["residue"]["clean"] is False and emission_step in report["residue"]["outstanding"],
                  "residue is not clean over a crossed emission", report["residue"])
            check([d["tool"] for d in report["droppedDeferred"]] == ["send_email"], "the held send will be dropped",
                  report["droppedDeferred"])
            check(len(report["rewound"]["provisionsWithdrawn"]) == 1, "the provision will be withdrawn", report["rewound"])
            check(on_disk(ws, "a.txt") == b"alpha v2\n", "enumerating a fork changes no file")

            stale = await refused(s, "revl_fork_confirm", {"hash": "0" * 64})
            check(stale.get("refused") is True, "a stale fork hash is refused with its own document", stale)
            report = await ok(s, "revl_fork", {"at": k})
            before = sink.count()
            forked = await ok(s, "revl_fork_confirm", {"hash": report["hash"]})
            branch = forked["branch"]
            check(forked["forked"] is True and branch != parent, "the fork is confirmed", forked)

            check(on_disk(ws, "a.txt") == b"alpha v1\n", "a.txt is back at its step-k bytes on disk")
            check(on_disk(ws, "bin/b.dat") == b"\x00\xff\x01", "b.dat is back at its step-k bytes on disk")
            check(on_disk(ws, "bin/renamed.dat") is None, "the rename is undone on disk")
            check(on_disk(ws, "out.txt") is None and not (ws / "gen").exists(), "the fork rewound the commands")
            check(on_disk(ws, "notes/c.txt") is None and not (ws / "notes").exists(),
                  "the file and directory created after k are gone")
            check(sink.count() == before, "the rewind sent nothing", sink.requests)

            # The server now serves the branch.
            st = await ok(s, "revl_status")
            check(st["session"] == branch and st.get("parent") == parent and st["queue"] == [],
                  "the server continues on the branch, whose queue is empty", st)
            check(st["provisions"] == {}, "the provision was withdrawn", st["provisions"])
            sess = await ok(s, "revl_sessions")
            states = {x["session"]: x["state"] for x in sess["sessions"]}
            check(states.get(parent) == "frozen" and states.get(branch) == "live", "the parent is frozen", states)

            # Hostile input on the live branch: each a clean error, and the server still answers.
            try:
                await s.call_tool("revl_approve", {"ticket": "x"})
                check(False, "an unknown tool is an error")
            except MCPError as e:
                check("unknown tool" in str(e), "an unknown tool is a JSON-RPC error naming it", e)
            bad = await refused(s, "revl_write", {"path": 5, "content": ["x"]})
            check(bad["error"]["code"] == "bad-args", "wrong argument types: bad-args", bad)
            bad = await refused(s, "revl_step_back", {"to": "three"})
            check(bad["error"]["code"] == "bad-args", "a non-integer step: bad-args", bad)
            bad = await refused(s, "revl_write", {"path": "x.txt"})
            check(bad["error"]["code"] == "bad-args", "neither content nor contentBase64: bad-args", bad)
            esc = await refused(s, "revl_write", {"path": "../x", "content": "escape"})
            check(esc["error"]["code"] == "path-outside", "a path escaping the workspace", esc)
            check(not (tmp / "x").exists(), "nothing was written outside the workspace")
            esc = await refused(s, "revl_read", {"path": "/etc/passwd"})
            check(esc["error"]["code"] == "path-outside", "an absolute path elsewhere", esc)
            huge = "x" * (16 * 1024 * 1024 + 1)
            big = await refused(s, "revl_write", {"path": "huge.txt", "content": huge})
            check(big["error"]["code"] == "bad-args" and "16 MiB" in big["error"]["message"],
                  "content over 16 MiB is refused", big)
            check(on_disk(ws, "huge.txt") is None, "the huge write left nothing")
            need = await refused(s, "revl_call", {"tool": "post_note", "args": {"text": "again"}})
            check(need.get("approvalRequired") is True, "a branch starts with no approvals", need)
            st = await ok(s, "revl_status")
            check(st["session"] == branch, "the server still answers after hostile input")

            # Work in the branch, then commit: exactly the branch's sends arrive.
            await ok(s, "revl_write", {"path": "a.txt", "content": "alpha branch\n"})
            # A parallel sibling from the branch's start, in its own directory: the server
            # keeps serving the branch; revl_diff shows what differs.
            pf = await ok(s, "revl_fork", {"at": 0})
            sib_dir = tmp / "sibling"
            par = await ok(s, "revl_fork_confirm", {"hash": pf["hash"], "into": str(sib_dir)})
            check(par.get("mode") == "parallel" and par.get("into") == str(sib_dir.resolve()), "a parallel fork", par)
            check(on_disk(sib_dir, "a.txt") == b"alpha v1\n" and on_disk(ws, "a.txt") == b"alpha branch\n",
                  "the sibling is at step 0's content; the branch's workspace is untouched")
            st = await ok(s, "revl_status")
            check(st["session"] == branch and st["state"] == "live", "the server still serves the live branch", st)
            d = await ok(s, "revl_diff", {"right": par["branch"]})
            check([p["path"] for p in d["paths"]] == ["a.txt"] and "+alpha v1" in d["paths"][0].get("diff", ""),
                  "revl_diff lists the one differing file with a unified diff", d)
            lg = await ok(s, "revl_log")
            modes = {(e["parent"], e["branch"]): (e["at"], e["mode"]) for e in lg["edges"]}
            check(modes.get((branch, par["branch"])) == (0, "parallel")
                  and any(m == "serial" for (_, m) in modes.values()),
                  "revl_log shows the serial fork and the parallel sibling, with their steps", lg)
            me = [x for x in lg["sessions"] if x["session"] == branch]
            check(len(me) == 1 and me[0]["state"] == "live" and me[0]["mode"] == "serial",
                  "revl_log lists this branch as live, made by a serial fork", lg)
            await ok(s, "revl_call", {"tool": "send_email", "args": {"to": "a@example.test", "subject": "branch 1"}})
            await ok(s, "revl_call", {"tool": "send_email", "args": {"to": "b@example.test", "subject": "branch 2"}})
            check(sink.count("/send") == 0, "held sends have not arrived before commit")
            plan = await ok(s, "revl_commit")
            check(len(plan["deferred"]) == 2, "the plan lists the branch's two held sends", plan)
            check(sink.count("/send") == 0, "a commit plan fires nothing")
            stale = await refused(s, "revl_commit_confirm", {"hash": "f" * 64})
            check(stale.get("refused") is True and sink.count("/send") == 0, "a stale commit hash fires nothing", stale)
            done = await ok(s, "revl_commit_confirm", {"hash": plan["hash"]})
            check(done["committed"] is True and len(done["flushed"]) == 2, "committed", done)
            sends = sink.bodies("/send")
            check([b["subject"] for b in sends] == ["branch 1", "branch 2"],
                  "the sink received exactly the branch's sends, in order", sends)
            check(sink.count("/emit") == 1, "the emission fired once in all")
            check(on_disk(ws, "a.txt") == b"alpha branch\n", "the branch's write is the deliverable")
            after = await refused(s, "revl_write", {"path": "late.txt", "content": "late"})
            check(after["error"]["code"] == "not-live", "a committed session takes no more effects", after)

    # The frozen parent, through a second server.
    async with stdio_client(server(store, "--session", parent)) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            st = await ok(s, "revl_status")
            check(st["session"] == parent and st["state"] == "frozen" and st.get("branch") == branch,
                  "a second server on the parent sees it frozen", st)
            for tool, args in [("revl_write", {"path": "p.txt", "content": "no"}),
                               ("revl_delete", {"path": "a.txt"}),
                               ("revl_provide", {"key": "k", "value": "v"}),
                               ("revl_step_back", {"to": 0}),
                               ("revl_fork", {"at": 0}),
                               ("revl_abort", {})]:
                d = await refused(s, tool, args)
                check(d["error"]["code"] == "frozen" and "frozen" in d["error"]["message"] and branch in d["error"]["message"],
                      f"{tool} on the frozen parent refuses with `frozen` naming the branch", d)
            rd = await ok(s, "revl_read", {"path": "a.txt"})
            check(rd["content"] == "alpha branch\n", "reads still work on the frozen parent", rd)
    check(on_disk(ws, "p.txt") is None, "the frozen parent wrote nothing")
    check(sink.count() == 3, "three requests reached the sink in all: one emission, two branch sends", sink.requests)

    # Another machine reads both from a shared-directory remote, through its own server's
    # read tools and its store's verified cache of the remote (docs/fleet.md).
    bucket, other, ws_b = tmp / "bucket", tmp / "store-b", tmp / "ws-b"
    bucket.mkdir()
    ws_b.mkdir()
    for st in (store, other):
        add = subprocess.run([REVL, "--store", str(st), "--json", "remote", "add", "origin", f"file://{bucket}"],
                             capture_output=True, text=True)
        check(add.returncode == 0, "remote add", add.stderr)
    pushed = subprocess.run([REVL, "--store", str(store), "--json", "push"], capture_output=True, text=True)
    check(pushed.returncode == 0, "push", pushed.stderr)
    async with stdio_client(server(other, "--workspace", str(ws_b))) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            log = await ok(s, "revl_log", {"remote": "origin"})
            check({parent, branch} <= {x["session"] for x in log["sessions"]},
                  "revl_log with remote lists the remote's sessions", log)
            tl = await ok(s, "revl_timeline", {"remote": "origin", "session": branch})
            rd = await ok(s, "revl_read", {"remote": "origin", "session": branch, "path": "a.txt", "at": tl["head"]})
            check(rd["content"] == "alpha branch\n", "a remote session's file read at its head", rd)
            st = await ok(s, "revl_status", {"remote": "origin", "session": parent[:8]})
            check(st["state"] == "frozen" and st.get("branch") == branch, "a remote parent's status", st)
            now = await refused(s, "revl_read", {"remote": "origin", "session": parent, "path": "a.txt"})
            check(now["error"]["code"] == "bad-args", "a remote session is read at a step, not now", now)
            own = await ok(s, "revl_status")
            check(own["head"] == 0 and own["session"] not in (parent, branch), "the server's own session is untouched", own)


def unmount_under(base: Path) -> None:
    """The parallel branch's directory is a layered mount where the machine has no snapshot
    or reflink (docs/reference.md, "Serial and parallel branches"): unmounted before the
    temp tree is removed (the kernel's overlay as root, else fuse-overlayfs's)."""
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            p = line.split(" ")[4].encode().decode("unicode_escape")
            if p.startswith(str(base.resolve()) + "/"):
                points.append(p)
    for p in sorted(points, key=len, reverse=True):
        for cmd in (["umount", "-l", p], ["fusermount3", "-uz", p]):
            if subprocess.run(cmd, capture_output=True).returncode == 0:
                break


def main():
    started = time.monotonic()
    sink = Sink()
    try:
        with tempfile.TemporaryDirectory(prefix="revl-mcp-py-") as tmp:
            try:
                asyncio.run(scenario(Path(tmp), sink))
            finally:
                unmount_under(Path(tmp))
    except BaseException as e:  # report, then fail
        print(f"client_py: FAILED after {checks} checks: {e!r}", file=sys.stderr)
        print(f"0 passed, 1 failed")
        sys.exit(1)
    finally:
        sink.close()
    print(f"client_py: {checks} checks passed in {time.monotonic() - started:.1f}s")
    print("1 passed, 0 failed")


if __name__ == "__main__":
    main()
