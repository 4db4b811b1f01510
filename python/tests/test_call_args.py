"""A call's args are checked against the tool's declaration at the call (docs/python.md,
`@revl.tool`): args a Python function's signature does not take are refused with
`revl.BadArgs` before anything is queued or run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import revl


def test_a_held_send_whose_args_do_not_fit_the_signature_is_refused_at_the_call(
    store: revl.Store, base: Path
) -> None:
    ran: list[dict[str, Any]] = []

    @revl.tool(cls="deferred", scope=["mail"])
    def send_email(to: str, body: str) -> dict[str, Any]:
        ran.append({"to": to, "body": body})
        return {"delivered": to}

    s = store.new(base / "ws", tools=[send_email])
    with pytest.raises(revl.BadArgs) as missing:
        s.call(send_email, {"to": "ana@example.com"})
    assert "body" in str(missing.value)
    with pytest.raises(revl.BadArgs) as unknown:
        s.call(send_email, {"to": "ana@example.com", "body": "hi", "cc": "bo@example.com"})
    assert "cc" in str(unknown.value)
    assert s.status().queue == [], "nothing was queued"
    ok = s.call(send_email, {"to": "ana@example.com", "body": "hi"})
    assert ok.queued is True
    assert ran == [], "a held send runs nothing at the call"


def test_an_effect_whose_args_do_not_fit_runs_nothing(store: revl.Store, base: Path) -> None:
    ran: list[int] = []

    @revl.tool(cls="inverse", scope=["fs"])
    def unbump(args: dict[str, Any], witness: Any) -> None:
        pass

    @revl.tool(cls="effect", scope=["fs"], undo=unbump)
    def bump(n: int) -> int:
        ran.append(n)
        return n

    s = store.new(base / "ws", tools=[unbump, bump])
    head = s.head
    with pytest.raises(revl.BadArgs):
        s.call(bump, {"m": 1})
    assert ran == [] and s.head == head, "nothing ran, no step recorded"


def test_status_lists_held_args_exactly_on_every_call_and_a_caller_cannot_change_them(
    store: revl.Store, base: Path
) -> None:
    @revl.tool(cls="deferred", scope=["mail"])
    def send_email(to: str, body: str) -> dict[str, Any]:
        return {"delivered": to}

    s = store.new(base / "ws", tools=[send_email])
    big = "x" * (1 << 20)
    s.call(send_email, {"to": "ana@example.com", "body": big})
    first = s.status().queue
    assert [q["args"] for q in first] == [{"to": "ana@example.com", "body": big}]
    # What a caller does to the list it got never reaches the next status.
    first[0]["args"]["body"] = "changed"
    s.call(send_email, {"to": "bo@example.com", "body": "second"})
    again = s.status().queue
    assert [q["args"] for q in again] == [
        {"to": "ana@example.com", "body": big},
        {"to": "bo@example.com", "body": "second"},
    ]
    # Another handle (a fresh read of the WAL) agrees, field for field.
    fresh = store.session(s.id).status().queue
    assert fresh == again
