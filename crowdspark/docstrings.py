"""The documentation of dataclass fields, read from the classes' numpydoc ``Parameters`` and ``Attributes``
sections, so a field is documented once, in its class, and every face shows the same words."""

from __future__ import annotations

import inspect
import re

__all__ = ["field_docs"]

_SECTION = re.compile(r"^(Parameters|Attributes)\n-+\n", re.M)
_NEXT_SECTION = re.compile(r"^\w[\w ]*\n-+\n", re.M)
_ENTRY = re.compile(r"^(?P<names>[A-Za-z_][\w, ]*?)(?: : (?P<type>.*))?$")


def _sections(doc: str) -> list[str]:
    out = []
    for match in _SECTION.finditer(doc):
        rest = doc[match.end():]
        end = _NEXT_SECTION.search(rest)
        out.append(rest[: end.start()] if end else rest)
    return out


def _entries(section: str) -> dict[str, str]:
    """``name -> description`` of a numpydoc section (``a, b : int`` documents both names)."""
    out: dict[str, str] = {}
    names: list[str] = []
    lines: list[str] = []

    def flush() -> None:
        text = " ".join(" ".join(lines).split())
        if not text or text.startswith(("See ", "As ")):  # documented by another class
            return
        for name in names:
            out.setdefault(name, text)

    for line in section.splitlines():
        if line and not line[0].isspace():
            flush()
            match = _ENTRY.match(line.strip())
            names = [n.strip() for n in match.group("names").split(",") if n.strip().isidentifier()] if match else []
            lines = []
        elif line.strip():
            lines.append(line.strip())
    flush()
    return out


def field_docs(cls: type) -> dict[str, str]:
    """``field -> description`` for ``cls`` and its bases (the nearest class's words win)."""
    out: dict[str, str] = {}
    for klass in cls.__mro__:
        doc = inspect.cleandoc(klass.__dict__.get("__doc__") or "")
        for section in _sections(doc):
            for name, text in _entries(section).items():
                out.setdefault(name, text)
    return out
