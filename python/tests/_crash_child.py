"""A Python agent process for test_crash.py (run as a script, so its tool is
`__main__:send` in both modes).

    _crash_child.py start STORE WORKSPACE URL    queue two held sends and commit; the send
                                                 POSTs to URL, then blocks (the test kills
                                                 this process there)
    _crash_child.py start-effect STORE WORKSPACE URL
                                                 call an effect whose function POSTs to URL,
                                                 then blocks (killed there, mid-call)
    _crash_child.py attach-effect STORE SESSION URL
                                                 attach WITH the effect and its undo (which
                                                 POSTs too), then status, fork(0) and
                                                 step_back(0); print what each said, as JSON
    _crash_child.py resend STORE SESSION URL SEQ
                                                 attach WITH the function and resend SEQ
                                                 (the operator's retry); print its document
    _crash_child.py attach STORE SESSION URL HASH
                                                 attach WITH the function (so a wrong re-fire
                                                 would reach URL), then status, commit,
                                                 commit_confirm(HASH: the interrupted plan's)
                                                 and abort; print what each said, as JSON
"""

from __future__ import annotations

import json
import sys
import threading
import urllib.request

import revl

MODE, STORE, WHERE, URL = sys.argv[1:5]
HASH = sys.argv[5] if len(sys.argv) > 5 else ""
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_forever = threading.Event()


@revl.tool(cls="deferred", scope=["mail"])
def send(n: int) -> dict[str, int]:
    req = urllib.request.Request(URL, data=json.dumps({"n": n}).encode(), method="POST")
    with _OPENER.open(req, timeout=10) as resp:
        resp.read()
    if MODE == "start":
        _forever.wait()  # the request went out; the process dies here, mid-commit
    return {"sent": n}


def _post(payload: dict[str, object]) -> None:
    req = urllib.request.Request(URL, data=json.dumps(payload).encode(), method="POST")
    with _OPENER.open(req, timeout=10) as resp:
        resp.read()


@revl.tool(cls="inverse", scope=["fs"])
def unreserve(args: dict[str, object], witness: object) -> None:
    _post({"undo": args})


@revl.tool(cls="effect", scope=["fs"], undo=unreserve)
def reserve(room: str) -> dict[str, str]:
    _post({"reserve": room})
    if MODE == "start-effect":
        _forever.wait()  # the effect went out; the process dies here, mid-call
    return {"room": room}


def main() -> None:
    store = revl.Store(STORE)
    if MODE == "start":
        s = store.new(WHERE, tools=[send])
        s.write("draft.txt", "draft")
        s.call(send, {"n": 1})
        s.call(send, {"n": 2})
        plan = s.commit()
        print(json.dumps({"session": s.id, "hash": plan.hash}), flush=True)
        s.commit_confirm(plan.hash)
        print(json.dumps({"unexpected": "commit_confirm returned"}), flush=True)
        return
    if MODE == "start-effect":
        s = store.new(WHERE, tools=[reserve, unreserve])
        s.write("draft.txt", "draft")
        print(json.dumps({"session": s.id}), flush=True)
        s.call(reserve, {"room": "12B"})
        print(json.dumps({"unexpected": "call returned"}), flush=True)
        return
    if MODE == "attach-effect":
        s = store.session(WHERE, tools=[reserve, unreserve])
        seen: dict[str, object] = {"status": s.status().to_dict()}
        seen["timeline"] = s.timeline().to_dict()
        try:
            seen["fork"] = s.fork(0).to_dict()
        except revl.RevlError as e:
            seen["fork"] = e.code
        seen["step_back"] = s.step_back(0).to_dict()
        print(json.dumps(seen), flush=True)
        return
    if MODE == "resend":
        s = store.session(WHERE, tools=[send])
        print(json.dumps(s.resend(int(HASH)).to_dict()), flush=True)
        return
    s = store.session(WHERE, tools=[send])
    out: dict[str, object] = {"status": s.status().to_dict()}
    out["status_again"] = s.status().to_dict()
    attempts = {
        "commit": s.commit,
        "commit_confirm": lambda: s.commit_confirm(HASH),
        "abort": s.abort,
    }
    for verb, attempt in attempts.items():
        try:
            out[verb] = attempt().to_dict()
        except revl.RevlError as e:
            out[verb] = e.code
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
