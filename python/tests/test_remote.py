"""Reading a remote from Python (docs/python.md, docs/fleet.md "Reading a remote"): the read
methods take ``remote=``, and read a session another store pushed through this store's
verified cache of that remote, with the documents the store that ran it gives."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Callable

import pytest

import revl
import revl.aio

from conftest import REVL_CLI, CliRun


def _pushed(
    session: revl.Session, cli: Callable[..., CliRun], base: Path
) -> tuple[str, revl.Store]:
    """``session`` (two writes) pushed to a ``file://`` remote; a second store that knows the
    remote as ``origin``."""
    session.write("a.txt", "one")
    session.write("a.txt", b"\xff\x00two")
    bucket = base / "bucket"
    bucket.mkdir()
    url = f"file://{bucket}"
    assert cli("remote", "add", "origin", url).rc == 0
    run = cli("push")
    assert run.rc == 0, run.stderr
    other = base / "store-b"
    cp = subprocess.run(
        [str(REVL_CLI), "--store", str(other), "remote", "add", "origin", url],
        capture_output=True,
        text=True,
    )
    assert cp.returncode == 0, cp.stderr
    return url, revl.Store(other)


def test_the_read_methods_read_a_remote_session_through_the_verified_cache(
    session: revl.Session, store: revl.Store, cli: Callable[..., CliRun], base: Path
) -> None:
    _, b = _pushed(session, cli, base)
    sid = session.id
    # The file after each step, as the store that ran the session reads it.
    for k in (-1, 1, 2):
        if k == -1:
            with pytest.raises(revl.RevlError) as here:
                store.read_at(sid, "a.txt", k)
            with pytest.raises(revl.RevlError) as there:
                b.read_at(sid[:8], "a.txt", k, remote="origin")
            assert there.value.code == here.value.code
            continue
        got = b.read_at(sid[:8], "a.txt", k, remote="origin")
        assert got.to_dict() == store.read_at(sid, "a.txt", k).to_dict()
        assert got.data == session.read("a.txt", at=k)
    assert got.data == b"\xff\x00two"
    assert b.timeline(sid, remote="origin").steps == session.timeline().steps
    log = b.log(remote="origin")
    assert [s["session"] for s in log.sessions] == [sid]
    assert log.unreadable is None
    d = revl.diff(sid, sid, at=(1, 2), store=b, remote="origin")
    assert d.to_dict()["paths"] == revl.diff(session, sid, at=(1, 2)).to_dict()["paths"]
    far, near = (
        revl.compare(sid, sid, store=b, remote="origin").to_dict(),
        revl.compare(session, sid).to_dict(),
    )
    for side in ("left", "right"):  # local file paths aside
        assert far[side].pop("wal") != near[side].pop("wal")
    assert far == near
    # Store B ran nothing: the remote's session is read in its cache, not made one of its own.
    assert b.sessions().sessions == []


def test_an_unknown_remote_or_session_is_one_clear_error(
    session: revl.Session, cli: Callable[..., CliRun], base: Path
) -> None:
    _, b = _pushed(session, cli, base)
    with pytest.raises(revl.RevlError) as e:
        b.log(remote="nowhere")
    assert e.value.code == "usage" and "nowhere" in str(e.value)
    with pytest.raises(revl.RevlError) as e:
        b.timeline("0123456789abcdef0123456789abcdef", remote="origin")
    assert e.value.code == "unknown-session"


def test_revl_aio_reads_a_remote_the_same_way(
    session: revl.Session, cli: Callable[..., CliRun], base: Path
) -> None:
    _, b = _pushed(session, cli, base)
    ab = revl.aio.Store(b)

    async def read() -> tuple[bytes, int]:
        got = await ab.read_at(session.id, "a.txt", 1, remote="origin")
        log = await ab.log(session.id[:8], remote="origin")
        return got.data, len(log.sessions)

    assert asyncio.run(read()) == (b"one", 1)
