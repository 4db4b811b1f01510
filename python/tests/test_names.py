"""Names that are not UTF-8 (docs/python.md, "Names that are not UTF-8"; the text form is
docs/wal-format.md's): every result carries them as text without raising, and
`revl.fspath` / `revl.name_of` convert between that text and the filesystem's bytes exactly
as revl's core does."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import revl

LATIN1 = b"caf\xe9.txt"  # a Latin-1 name: not UTF-8
LATIN1_TEXT = "caf\U0010ffe9.txt"


def test_the_mapping_on_known_names() -> None:
    assert revl.name_of(LATIN1) == LATIN1_TEXT
    assert revl.fspath(LATIN1_TEXT) == LATIN1
    # A UTF-8 name is its own text, whatever form it is given in.
    for name in ("a/b c.txt", "é€😀", ""):
        assert revl.name_of(name) == name
        assert revl.name_of(name.encode()) == name
        assert revl.fspath(name) == name.encode()
    # A str as os.listdir / os.fsdecode give it (a lone surrogate per byte), and path-likes.
    assert revl.name_of(os.fsdecode(LATIN1)) == LATIN1_TEXT
    assert revl.name_of(Path(os.fsdecode(LATIN1))) == LATIN1_TEXT
    assert revl.name_of(b"d\xff/" + LATIN1) == "d\U0010ffff/" + LATIN1_TEXT
    # A name that really holds a reserved character: each of its four bytes is escaped.
    real = "\U0010ffe9".encode()
    assert real == b"\xf4\x8f\xbf\xa9"
    assert revl.name_of(real) == "".join(chr(0x10FF00 + b) for b in real)
    assert revl.fspath(revl.name_of(real)) == real
    # A UTF-8 sequence cut short, an encoded surrogate: bytes, one character each.
    assert revl.name_of(b"ok\xc3(") == "ok\U0010ffc3("
    assert revl.name_of(b"\xed\xa0\x80") == "\U0010ffed\U0010ffa0\U0010ff80"
    # Distinct names, distinct text.
    assert len({revl.name_of(b"\xe9"), revl.name_of("\U0010ffe9".encode()), revl.name_of("é")}) == 3


def test_every_two_byte_name_round_trips() -> None:
    for a in range(256):
        for b in range(256):
            for raw in (bytes([a, b]), bytes([0x6E, a, b])):
                text = revl.name_of(raw)
                assert revl.fspath(text) == raw, raw
                text.encode()  # always Unicode text


def test_what_is_not_a_name_is_refused() -> None:
    with pytest.raises(revl.BadArgs) as exc:
        revl.fspath(os.fsdecode(LATIN1))  # an os str, not revl's text
    assert "lone surrogate" in exc.value.message and "name_of" in exc.value.hint
    with pytest.raises(TypeError):
        revl.fspath(LATIN1)  # type: ignore[arg-type]


def test_results_carry_such_names_and_the_helpers_agree_with_the_core(
    store: revl.Store, base: Path
) -> None:
    ws = base / "ws"
    s = store.new(ws)
    # A command makes names that are not UTF-8 (and one that holds a reserved character).
    script = (
        "printf 1 > \"$(printf 'caf\\351.txt')\" && mkdir \"$(printf 'd\\377')\" && "
        "printf 2 > \"$(printf 'd\\377/x\\376')\" && printf 3 > \"$(printf '\\364\\217\\277\\251')\""
    )
    ran = s.exec(["sh", "-c", script])
    assert ran.exit_code == 0, ran.stderr
    made = {b"caf\xe9.txt", b"d\xff", b"d\xff/x\xfe", b"\xf4\x8f\xbf\xa9"}
    assert ran.changes is not None
    assert {c["path"] for c in ran.changes} == {revl.name_of(m) for m in made}
    names = {e["name"] for e in s.list().entries}
    assert {revl.name_of(m) for m in made if b"/" not in m} <= names
    assert {revl.name_of(m) for m in made if m.startswith(b"d\xff/")} == {
        "d\U0010ffff/" + e["name"] for e in s.list(revl.name_of(b"d\xff")).entries
    }
    # The verbs take the text; the file on disk has the real bytes.
    s.write(LATIN1_TEXT, "written by revl")
    root = os.fsencode(ws)
    assert Path(os.fsdecode(os.path.join(root, revl.fspath(LATIN1_TEXT)))).read_bytes() == b"written by revl"
    assert s.read(LATIN1_TEXT) == b"written by revl"
    assert s.read_doc(LATIN1_TEXT).path == LATIN1_TEXT
    # Changed by hand: verify() names it (drift is data, never an exception).
    with open(os.path.join(root, b"d\xff", b"x\xfe"), "wb") as f:
        f.write(b"by hand")
    drift = s.verify().drift
    assert [d["path"] for d in drift] == [revl.name_of(b"d\xff/x\xfe")]
    # Every other result and document that names them: timeline, diff, rewinds, repr, JSON.
    docs: list[revl.results.Result] = [s.timeline(), s.status(), s.inspect(1), s.verify()]
    head = s.head
    plan = s.fork(1)
    docs.append(plan)
    assert plan.hash is not None
    done = s.fork_confirm(plan.hash, into=base / "alt")
    docs.append(done)
    branch = done.branch
    assert branch is not None
    docs.append(revl.diff(s, branch, at=(head, None)))
    back = s.step_back(0)
    docs.append(back)
    assert revl.name_of(b"d\xff/x\xfe") in json.dumps(back.to_dict(), ensure_ascii=False)
    for d in docs:
        text = json.dumps(d.to_dict(), ensure_ascii=False)
        text.encode()
        repr(d).encode()
    assert not os.path.exists(os.path.join(root, b"caf\xe9.txt")), "rewound: the names are data"
    assert os.path.exists(os.path.join(os.fsencode(base / "alt"), b"caf\xe9.txt"))
    assert revl.name_of(b"caf\xe9.txt") in {e["name"] for e in branch.list().entries}
