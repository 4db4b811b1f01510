"""Declared egress from Python (docs/user-guide.md §8): ``exec(..., net=True | [...])`` reaches a
loopback server the manifest declares, through revl's proxy, and the connection is an
emission step; a destination outside the declared set is refused before anything runs."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path
from typing import Iterator

import pytest

import revl


class _Handler(http.server.BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        type(self).seen.append(self.path)
        body = b"from-the-server"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[http.server.ThreadingHTTPServer]:
    _Handler.seen = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()


FETCH = (
    "import urllib.request,sys\n"
    "open('got.txt','w').write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())\n"
)


def test_exec_net(store: revl.Store, base: Path, server: http.server.ThreadingHTTPServer) -> None:
    port = server.server_address[1]
    ws = base / "egress-ws"
    ws.mkdir()
    (ws / "fetch.py").write_text(FETCH)
    manifest = base / "egress.toml"
    manifest.write_text(f'[exec]\nnet = ["127.0.0.1:{port}"]\n')
    s = store.new(ws, manifest=manifest)
    url = f"http://127.0.0.1:{port}/pkg"
    r = s.exec(["python3", "fetch.py", url], net=True)
    assert r.exit_code == 0, r.stderr
    assert (ws / "got.txt").read_text() == "from-the-server"
    assert _Handler.seen == ["/pkg"]
    assert r.net_step == r.step - 1
    assert r.net["connections"][0]["port"] == port
    em = s.timeline().steps[r.net_step]
    assert em["kind"] == "emission" and em["label"] == "exec.net python3"
    # A part of the set, by list.
    r2 = s.exec(["python3", "fetch.py", url], net=[f"127.0.0.1:{port}"])
    assert r2.net_step is not None
    # Outside the set: bad-args, nothing runs.
    head = s.timeline().head
    with pytest.raises(revl.errors.BadArgs):
        s.exec(["python3", "fetch.py", url], net=["127.0.0.1:1"])
    assert s.timeline().head == head
    # Without net=: no network (the command fails to connect), no emission.
    r3 = s.exec(["python3", "fetch.py", url])
    assert r3.exit_code != 0 and r3.net_step is None
