"""The deletion rule: a run deletes only what carries crowdspark's own marker.

Every directory crowdspark creates and may later delete holds a small JSON file, :data:`MARKER`
(``_CROWDSPARK.json``; the ``_`` prefix makes Spark's and pandas' readers skip it), that says what the
directory is::

    {"crowdspark": "marker", "kind": "result", "version": "0.1.0", "created_at": "2026-11-25T02:00:00+00:00"}

plus what its kind needs (a spill folder's owner ``pid`` and ``host``, a checkpoint's ``run``).  The marker
of a directory written through :class:`crowdspark.io.sink.StagedOutput` (a result, a report, an ``items
--out`` folder) also lists every folder and file the writer put there (``"written"``: paths relative to the
directory, taken at the commit by :func:`written_files`); a later writer into it (``crowdspark report``'s
``report.html``) adds its file (:func:`add_written_file`).

:func:`delete_owned` is the one function that removes such a directory: it reads the marker first, checks
the kind, and for a marker with a listing also checks that the directory holds nothing but the listed
entries and crowdspark's own names (:func:`owned_kind`); anything else is refused with a
:class:`ConfigError` that says what is there (the first few entries crowdspark did not write, and their
count), why it is kept and what to do.

Directories of these kinds written by earlier versions (a marker without a listing, or no marker at all)
are recognised by their layout: every file below each folder must be what crowdspark writes there
(:data:`_LAYOUTS`, :func:`legacy_kind`), so that upgrading crowdspark does not stop a nightly job that
replaces its own previous result; ``docs/security.md`` states the rule and
``docs/decisions/0246-writer-listing.md`` why.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
from datetime import datetime, timezone
from fnmatch import fnmatchcase
from typing import Any
from urllib.parse import urlsplit

from crowdspark.version import __version__
from crowdspark.errors import ConfigError
from crowdspark.io.files import Files, HadoopFiles, LocalFiles
from crowdspark.io.paths import is_local, strip_file_scheme

__all__ = [
    "MARKER",
    "RESULT",
    "RUN_ROOT",
    "STAGING",
    "REPORT",
    "CHECKPOINT",
    "CHECKPOINT_DIR",
    "SPILL",
    "DATASET",
    "ITEMS",
    "marker_document",
    "write_marker",
    "read_marker",
    "legacy_kind",
    "owned_kind",
    "written_files",
    "add_written_file",
    "enclosing_owned",
    "is_empty_dir",
    "describe",
    "delete_owned",
    "path_components",
    "overlap",
]

log = logging.getLogger(__name__)


MARKER = "_CROWDSPARK.json"


#: an aggregate run's output directory (``--output``, or ``run_id=<id>/`` below a run root)
RESULT = "result"


#: an ``--output`` used with ``--run-id``: holds ``run_id=*/`` folders and ``_LATEST.json``
RUN_ROOT = "run-root"


#: a result or report being written; its marker becomes the final kind just before the rename
STAGING = "staging"


#: ``crowdspark reproduce``'s report directory
REPORT = "report"


#: one saved checkpoint (``crowdspark-checkpoint-<sweep>/`` in ``engine.checkpoint_dir``)
CHECKPOINT = "checkpoint"


#: ``engine.checkpoint_dir`` when crowdspark created it (removed once empty)
CHECKPOINT_DIR = "checkpoint-dir"


#: the resident blocks' spill folder of one Spark engine
SPILL = "spill"


#: a synthetic data set written by ``jobs/generate.py``
DATASET = "synthetic-dataset"


#: a ``crowdspark items --out`` folder (``items/``)
ITEMS = "items-output"


#: what Spark's and crowdspark's table writers put in a table folder
_TABLE: dict[str, Any] = {"part-*": None, "_SUCCESS": None}


#: a saved model's folder (:mod:`crowdspark.io.saved_model`)
_MODEL: dict[str, Any] = {"model.json": None, "*.npz": None}


#: what a directory of these kinds holds when its marker lists no files (written by an earlier version):
#: name pattern -> ``None`` for a file, or the layout of a folder
_LAYOUTS: dict[str, dict[str, Any]] = {
    RESULT: {"items": _TABLE, "workers": _TABLE, "relabel": _TABLE, "_model": _MODEL, "model": _MODEL,
             "_incremental": {"items": _TABLE, "index": _TABLE, "index.arrow": None, "chain.json": None},
             "summary.json": None, "report.html": None},
    REPORT: {"report.md": None, "results.json": None, "*.png": None},
    ITEMS: {"items": _TABLE},
}


#: the entries such a directory must hold to be recognised by its layout
_REQUIRED: dict[str, tuple[str, ...]] = {
    RESULT: ("items", "workers", "summary.json"),
    REPORT: ("report.md", "results.json"),
    ITEMS: ("items",),
}


#: how many unexpected entries a message names
_SHOWN = 5


_GLOB = re.compile(r"[*?[]")


#: ``summary.json`` keys every crowdspark version has written
_SUMMARY_KEYS = ("algorithm", "engine", "version", "counts", "iterations")


def _join(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}"


def marker_document(kind: str, **extra: Any) -> dict[str, Any]:
    """The marker of a directory of ``kind`` (with ``extra`` fields such as ``pid`` and ``host``)."""
    return {
        "crowdspark": "marker",
        "kind": kind,
        "version": __version__,
        "created_at": datetime.now(timezone.utc).isoformat(),
        **extra,
    }


def write_marker(files: Files, directory: str, kind: str, **extra: Any) -> None:
    """Write (or replace) the marker of ``directory``, saying it is a ``kind``."""
    payload = json.dumps(marker_document(kind, **extra), indent=2) + "\n"
    files.write_bytes(_join(directory, MARKER), payload.encode("utf-8"))


def read_marker(files: Files, directory: str) -> dict[str, Any] | None:
    """The marker of ``directory``, or ``None`` if there is none (or it is not crowdspark's)."""
    path = _join(directory, MARKER)
    try:
        if not files.exists(path):
            return None
        document = json.loads(files.read_bytes(path).decode("utf-8"))
    except (OSError, ValueError) as exc:
        log.debug("no readable marker in %s: %s", directory, exc)
        return None
    if not isinstance(document, dict) or document.get("crowdspark") != "marker" or not isinstance(document.get("kind"), str):
        return None
    return document


def _leftover(name: str) -> bool:
    """Whether ``name`` is one of crowdspark's own names, never listed and accepted anywhere in a crowdspark
    directory: its marker and temporary names (``_CROWDSPARK.json*``, ``_crowdspark-*``, any case) and Hadoop's
    ``_SUCCESS`` (checksum files ``.*.crc`` are never seen: :meth:`Files.entries` leaves them out)."""
    return name.lower().startswith("_crowdspark") or name == "_SUCCESS"


def _below(files: Files, directory: str, prefix: str = "") -> list[str]:
    """Every folder (ending with ``/``) and file below ``directory``, as paths relative to it, parents first,
    without crowdspark's own names (:func:`_leftover`)."""
    out = []
    for name, is_dir in files.entries(directory):
        if _leftover(name):
            continue
        relative = f"{prefix}{name}/" if is_dir else f"{prefix}{name}"
        out.append(relative)
        if is_dir:
            out += _below(files, _join(directory, name), relative)
    return out


def written_files(files: Files, directory: str) -> dict[str, list[str]]:
    """What a writer puts in the marker of ``directory`` once everything is written there: ``{"written":
    [...]}``, every folder (``items/``) and file (``items/part-00000.parquet``) below it, relative to it,
    sorted, without crowdspark's own names (the marker, temporary names, ``_SUCCESS``).

    Call it on the complete directory (Spark's part files have random names, so the listing can only be
    taken after writing) and pass the result to :func:`write_marker`.
    """
    return {"written": sorted(_below(files, directory.rstrip("/")))}


def add_written_file(files: Files, directory: str, name: str) -> None:
    """Add the file ``name`` (relative to ``directory``) and its folders to the listing in the marker of
    ``directory``, before a later writer puts it there (``crowdspark report``'s ``report.html``).  A marker
    without a listing (an earlier version's) is left as it is: its layout already allows what crowdspark
    writes there."""
    marker = read_marker(files, directory)
    if marker is None or not isinstance(marker.get("written"), list):
        return
    parts = name.split("/")
    added = {"/".join(parts[:i]) + "/" for i in range(1, len(parts))} | {name}
    fields = {key: value for key, value in marker.items() if key not in ("crowdspark", "kind")}
    fields["written"] = sorted(set(marker["written"]) | added)
    write_marker(files, directory, marker["kind"], **fields)


_REFUSED = object()


def _strays(files: Files, directory: str, rule: Any, state: Any, prefix: str = "") -> list[str]:
    """The entries below ``directory`` that ``rule`` refuses, as paths relative to the start (folders end with
    ``/``; a refused folder is named, not what it holds), skipping crowdspark's own names.

    ``rule(state, relative, name, is_dir)`` returns :data:`_REFUSED`, or the state a folder's entries are
    judged with.
    """
    out = []
    for name, is_dir in files.entries(directory):
        if _leftover(name):
            continue
        relative = f"{prefix}{name}/" if is_dir else f"{prefix}{name}"
        inner = rule(state, relative, name, is_dir)
        if inner is _REFUSED:
            out.append(relative)
        elif is_dir:
            out += _strays(files, _join(directory, name), rule, inner, relative)
    return out


def _in_listing(listed: frozenset[str], relative: str, name: str, is_dir: bool) -> Any:
    return listed if relative in listed else _REFUSED


def _in_layout(layout: dict[str, Any], relative: str, name: str, is_dir: bool) -> Any:
    matches = [inner for pattern, inner in layout.items() if fnmatchcase(name, pattern)]
    if not matches or (matches[0] is None) == is_dir:  # an unknown name, or a folder where a file belongs
        return _REFUSED
    return matches[0]


def _json(files: Files, path: str) -> Any:
    try:
        return json.loads(files.read_bytes(path).decode("utf-8"))
    except (OSError, ValueError):
        return None


def _laid_out(files: Files, directory: str, kind: str, names: list[str]) -> bool:
    """Whether the unmarked ``directory`` (holding ``names``) is a ``kind`` of an earlier version: the entries
    that kind must hold, nothing outside its layout, and for a result a ``summary.json`` with the keys every
    version wrote."""
    if not all(n in names for n in _REQUIRED[kind]):
        return False
    if kind == RESULT:
        summary = _json(files, _join(directory, "summary.json"))
        if not isinstance(summary, dict) or not all(key in summary for key in _SUMMARY_KEYS):
            return False
    return not _strays(files, directory, _in_layout, _LAYOUTS[kind])


def legacy_kind(files: Files, directory: str) -> str | None:
    """The kind of an unmarked directory written by an earlier crowdspark, recognised by its layout.

    * ``result``: ``items/``, ``workers/`` and ``summary.json`` (with the keys every version wrote:
      ``algorithm``, ``engine``, ``version``, ``counts``, ``iterations``), and nothing but what crowdspark
      writes in a result (:data:`_LAYOUTS`: table folders of ``part-*`` files, model folders of
      ``model.json`` and ``*.npz`` ...);
    * ``report``: only ``report.md``, ``results.json`` and ``*.png`` figures;
    * ``run-root``: only ``run_id=*`` folders that are (legacy or marked) results, ``_LATEST.json``
      naming a run, and crowdspark's own leftovers (``*.crowdspark-staging-*``, ``*.crowdspark-old-*``,
      ``_LATEST.json.tmp-*``), with at least one run or ``_LATEST.json``.

    Returns ``None`` for anything else.
    """
    names = files.list(directory)
    if not names or MARKER in names:
        return None
    for kind in (RESULT, REPORT):
        if _laid_out(files, directory, kind, names):
            return kind
    if _legacy_run_root(files, directory, names):
        return RUN_ROOT
    return None


def _legacy_run_root(files: Files, directory: str, names: list[str]) -> bool:
    runs = [n for n in names if n.startswith("run_id=") and ".crowdspark-" not in n]
    leftovers = [n for n in names if ".crowdspark-staging-" in n or ".crowdspark-old-" in n or n.startswith("_LATEST.json.tmp-")]
    if set(names) - set(runs) - set(leftovers) - {"_LATEST.json"}:
        return False
    if "_LATEST.json" in names:
        latest = _json(files, _join(directory, "_LATEST.json"))
        if not isinstance(latest, dict) or not {"run_id", "path"} <= set(latest):
            return False
    elif not runs:
        return False
    return all(owned_kind(files, _join(directory, run)) == RESULT for run in runs)


def _examine(files: Files, directory: str, marker: dict[str, Any]) -> tuple[str, list[str]]:
    """The kind the marked ``directory`` is, and what in it crowdspark did not write there.

    A marker with a listing (``"written"``) accepts only the listed entries; one without (written by an
    earlier version) only what the layout of its kind allows (a ``result`` marker on a folder of ``items/``
    alone is an ``items`` output of an earlier version); other kinds have no listing and accept anything.
    """
    kind = marker["kind"]
    written = marker.get("written")
    if written is not None:
        listed = frozenset(w for w in written if isinstance(w, str)) if isinstance(written, list) else frozenset()
        return kind, _strays(files, directory, _in_listing, listed)
    if kind == RESULT and [n for n in files.list(directory) if not _leftover(n)] == ["items"]:
        kind = ITEMS
    if kind in _LAYOUTS:
        return kind, _strays(files, directory, _in_layout, _LAYOUTS[kind])
    return kind, []


def owned_kind(files: Files, directory: str) -> str | None:
    """The kind of crowdspark directory ``directory`` is, or ``None`` when it is not (only) crowdspark's.

    A marked directory counts only while it holds nothing crowdspark did not write there (its listing, or
    for a marker of an earlier version the layout of its kind); an unmarked one only if :func:`legacy_kind`
    recognises it.
    """
    if not files.is_dir(directory):
        return None
    marker = read_marker(files, directory)
    if marker is None:
        return legacy_kind(files, directory)
    kind, strays = _examine(files, directory, marker)
    return None if strays else kind


def is_empty_dir(files: Files, directory: str) -> bool:
    """Whether ``directory`` is a directory with no entries (checksum files aside)."""
    return files.is_dir(directory) and not files.list(directory)


def _few(names: list[str]) -> str:
    """The first few of ``names`` and how many there are in all, for messages."""
    more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    return ", ".join(names[:_SHOWN]) + more


def _count(names: list[str]) -> str:
    return "1 entry" if len(names) == 1 else f"{len(names)} entries"


def describe(files: Files, path: str) -> str:
    """What is at ``path``, for messages: a file, a link, or a directory and a few of its entries (for a
    crowdspark directory, the first few entries crowdspark did not write there and their count)."""
    if files.is_link(path):
        return "a symbolic link"
    if not files.is_dir(path):
        return "a file"
    names = files.list(path)
    marker = read_marker(files, path)
    if marker is not None:
        kind, strays = _examine(files, path, marker)
        if strays:
            return f"a crowdspark {kind} holding {_count(strays)} crowdspark did not write ({_few(strays)})"
        return f"a crowdspark {kind} directory"
    if all(n in names for n in _REQUIRED[RESULT]):
        strays = _strays(files, path, _in_layout, _LAYOUTS[RESULT])
        if strays:
            return (f"a result of an earlier crowdspark (without crowdspark's marker) holding {_count(strays)} "
                    f"crowdspark does not write there ({_few(strays)})")
    return f"a directory with {_count(names)} without crowdspark's marker ({_few(names)})"


def _legacy_parent(files: Files, folder: str) -> str | None:
    try:
        return legacy_kind(files, folder)
    except OSError:  # a folder this user cannot list is not one crowdspark wrote for them
        return None


def enclosing_owned(path: str) -> tuple[str, str] | None:
    """The nearest folder above the local ``path`` that is a crowdspark directory, and its kind: a folder with
    crowdspark's marker, or a parent recognised as written by an earlier version (:func:`legacy_kind`).

    Symbolic links are resolved first, so a link into a result is inside it.  Returns ``None`` when no
    folder above ``path`` is crowdspark's.
    """
    files = LocalFiles()
    folder = os.path.dirname(os.path.realpath(strip_file_scheme(path)))
    parent = True
    while True:
        if os.path.isdir(folder):
            marker = read_marker(files, folder)
            kind = marker["kind"] if marker is not None else _legacy_parent(files, folder) if parent else None
            if kind is not None:
                return folder, kind
        parent = False
        above = os.path.dirname(folder)
        if above == folder:
            return None
        folder = above


def delete_owned(files: Files, directory: str, kinds: tuple[str, ...], fix: str) -> None:
    """Remove ``directory`` and everything in it if it is a crowdspark directory of one of ``kinds``.

    Parameters
    ----------
    files : LocalFiles or HadoopFiles
    directory : str
    kinds : tuple of str
        The kinds that may be deleted here.
    fix : str
        What the user can do when it is refused (ends the message).

    Raises
    ------
    ConfigError
        When ``directory`` is not one of ``kinds`` (it is left as it is).
    """
    kind = owned_kind(files, directory)
    if kind not in kinds:
        raise ConfigError(
            f"not deleting {directory!r}: it is {describe(files, directory)}, and crowdspark deletes only "
            f"directories it wrote ({' or '.join(kinds)}, with its {MARKER} marker). {fix}"
        )
    files.delete(directory, recursive=True)
    log.debug("deleted %s (crowdspark %s)", directory, kind)


def path_components(path: str, files: Files | None = None) -> list[str]:
    """``path`` as a list of components for comparisons: its filesystem first, then the folders.

    Local paths are resolved (symbolic links, ``..``) up to the first glob character; remote URIs are
    normalized (lower-case scheme, no ``.``, ``..`` or repeated slashes) and, with :class:`HadoopFiles`,
    qualified with their filesystem's authority.
    """
    if is_local(path):
        local = strip_file_scheme(path)
        glob_at = min((local.find(ch) for ch in "*?[" if ch in local), default=-1)
        if glob_at >= 0:
            static = os.path.dirname(local[:glob_at])
            rest = local[len(static) :].lstrip("/")
        else:
            static, rest = local, ""
        resolved = os.path.realpath(static or ".")
        parts = [p for p in resolved.split(os.sep) if p] + [p for p in rest.split("/") if p]
        return ["file://"] + parts
    if isinstance(files, HadoopFiles):
        path = files.qualified(path)
    parts = urlsplit(path)
    normal = posixpath.normpath("/" + parts.path)
    return [f"{parts.scheme}://{parts.netloc}"] + [p for p in normal.split("/") if p]


def overlap(output: list[str], other: list[str]) -> str | None:
    """How the path ``output`` and the path or glob ``other`` (both from :func:`path_components`) overlap.

    Returns ``"equal"``, ``"inside"`` (``output`` is below ``other``, or is or is below what it matches),
    ``"contains"`` (``other`` is below ``output``) or ``None``.
    """
    for i, pattern in enumerate(other):
        if pattern == "**":
            return "inside" if len(output) > i else "contains"
        if i >= len(output):
            return "contains"
        if not fnmatchcase(output[i], pattern):
            return None
    if len(output) == len(other) and not any(_GLOB.search(pattern) for pattern in other):
        return "equal"
    return "inside"
