"""Names that are not UTF-8, and text that is not Unicode.

A Linux file name is bytes; revl carries every path as text (docs/wal-format.md, "Names that
are not UTF-8"). A name that is UTF-8 is its text. Each byte that is not part of a UTF-8
character is the character U+10FF00 + byte (one of U+10FF80..U+10FFFF), and a name that
really holds one of those 128 reserved characters has each of that character's four UTF-8
bytes written the same way, so the text gives back the exact bytes.

:func:`fspath` turns such a text (a path from a result: ``verify()``, ``list()``, an exec's
``changes``, a fork report) into the bytes the filesystem knows; :func:`name_of` turns a
filesystem name (bytes, or a ``str`` from ``os.listdir``/``os.fsdecode``, whose bytes that
are not UTF-8 are lone surrogates) into the text revl's verbs take.
"""

from __future__ import annotations

import os
import re
from typing import Union

from .errors import BadArgs

_BASE = 0x10FF00
# A reserved character (it stands for one byte) and a lone surrogate (a str that is not
# Unicode text; os.fsdecode writes byte b that is not UTF-8 as U+DC00 + b).
_RESERVED = re.compile("[\U0010ff80-\U0010ffff]")
_SURROGATE = re.compile("[\ud800-\udfff]")

OsPath = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


def fspath(name: str) -> bytes:
    """The filesystem bytes of a name (or relative path) as revl writes it:
    ``fspath("caf\\U0010ffe9.txt") == b"caf\\xe9.txt"``. Join it to the workspace's
    ``os.fsencode(...)`` path, or give ``os.fsdecode(fspath(name))`` to ``open``.

    A ``str`` holding a lone surrogate is not a revl name (it is how ``os.fsdecode``
    writes bytes that are not UTF-8): :class:`revl.BadArgs`; convert such a path with
    :func:`name_of` first."""
    if not isinstance(name, str):
        raise TypeError(f"fspath takes the str revl gave, not {type(name).__name__}")
    check_text("fspath", name, "name", verb=False)
    if not _RESERVED.search(name):
        return name.encode()
    out = bytearray()
    for ch in name:
        o = ord(ch)
        if o >= _BASE + 0x80:
            out.append(o - _BASE)
        else:
            out += ch.encode()
    return bytes(out)


def name_of(path: OsPath) -> str:
    """The text revl uses for a filesystem name or relative path: ``name_of(b"caf\\xe9.txt")
    == "caf\\U0010ffe9.txt"``. ``path`` is bytes, a path-like, or a ``str`` as ``os``
    gives it (``os.listdir``, ``os.fsdecode``: a byte that is not UTF-8 is a lone
    surrogate there). A UTF-8 name comes back unchanged. The inverse of :func:`fspath`:
    ``fspath(name_of(b)) == b`` for every ``b``."""
    raw = os.fsencode(path)
    text = raw.decode("utf-8", "surrogateescape")
    if not (_SURROGATE.search(text) or _RESERVED.search(text)):
        return text
    out: list[str] = []
    for ch in text:
        o = ord(ch)
        if 0xDC80 <= o <= 0xDCFF:  # a byte that is not part of a UTF-8 character
            out.append(chr(_BASE + o - 0xDC00))
        elif o >= _BASE + 0x80:  # a reserved character named by the name itself
            out.extend(chr(_BASE + b) for b in ch.encode())
        else:
            out.append(ch)
    return "".join(out)


def not_unicode(what: str, text: str, at: int, where: str = "", verb: bool = True) -> BadArgs:
    """The :class:`revl.BadArgs` for a ``str`` that is not Unicode text: it holds a lone
    surrogate at index ``at`` (which no UTF-8 encoder, so no revl verb, can take)."""
    lo = max(0, at - 16)
    excerpt = ("…" if lo else "") + text[lo : at + 16] + ("…" if at + 16 < len(text) else "")
    place = f"{where} " if where else ""
    return BadArgs(
        f"{what}: {place}{excerpt!r} holds a lone surrogate (U+{ord(text[at]):04X} at index "
        f"{at}), which is not Unicode text" + ("; nothing was recorded" if verb else ""),
        "pass valid Unicode text (bytes for binary write() content); for a file name that is "
        "not UTF-8, as os.listdir or os.fsdecode give it, pass revl.name_of(name)",
    )


def _first_surrogate(value: object, where: str) -> tuple[str, str, int] | None:
    """Where the first lone surrogate of ``value`` (a str, or JSON-like lists and dicts of
    them, keys included) is: ``(where, text, index)``."""
    if isinstance(value, str):
        m = _SURROGATE.search(value)
        return (where, value, m.start()) if m else None
    if isinstance(value, dict):
        for k, v in value.items():
            found = _first_surrogate(k, f"{where} key") or _first_surrogate(v, f"{where}[{k!r}]")
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _first_surrogate(v, f"{where}[{i}]")
            if found:
                return found
    return None


def check_text(what: str, value: object, where: str = "", verb: bool = True) -> None:
    """Raise :class:`revl.BadArgs` (see :func:`not_unicode`) if a ``str`` in ``value``
    (nested lists, tuples and dicts included) holds a lone surrogate."""
    found = _first_surrogate(value, where)
    if found is not None:
        raise not_unicode(what, found[1], found[2], found[0], verb)


__all__ = ["fspath", "name_of"]
