"""Helpers shared by the tests (imported by the test modules and conftest)."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any


def file_digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class Sink:
    """A `ThreadingHTTPServer` on 127.0.0.1:0 that counts the POSTs it receives."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bodies: list[Any] = []
        sink = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n)
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = raw
                with sink._lock:
                    sink.bodies.append(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "11")
                self.end_headers()
                self.wfile.write(b'{"ok":true}')

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.bodies)

    def wait_for(self, n: int, timeout: float = 30.0) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.count >= n:
                return True
            time.sleep(0.01)
        return self.count >= n

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# Loopback only: never through a proxy the environment may name.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def post(url: str, payload: Any) -> dict[str, Any]:
    """What a Python tool does to reach the world: one POST with urllib."""
    req = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with _OPENER.open(req, timeout=10) as resp:
        result: dict[str, Any] = json.loads(resp.read())
        return result
