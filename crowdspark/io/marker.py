"""The deletion rule: a run deletes only what carries crowdspark's own marker.

Every directory crowdspark creates and may later delete holds a small JSON file, :data:`MARKER`
(``_CROWDSPARK.json``; the ``_`` prefix makes Spark's and pandas' readers skip it), that says what the
directory is::

    {"crowdspark": "marker", "kind": "result", "version": "0.1.0", "created_at": "2026-11-25T02:00:00+00:00"}

plus what its kind needs (a spill folder's owner ``pid`` and ``host``, a checkpoint's ``run``).
:func:`delete_owned` is the one function that removes such a directory: it reads the marker first, checks
the kind, and for kinds with a fixed layout (a result, a report) also checks that the directory holds
nothing but what crowdspark writes there; anything else is refused with a :class:`ConfigError` that says
what is there, why it is kept and what to do.

Results and reports written before markers existed are recognised by their exact layout
(:func:`legacy_kind`), so that upgrading crowdspark does not stop a nightly job that replaces its own
previous result; ``docs/security.md`` states the rule and ``docs/decisions.md`` why.
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

from crowdspark import __version__
from crowdspark.errors import ConfigError
from crowdspark.io.files import Files, HadoopFiles
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
    "marker_document",
    "write_marker",
    "read_marker",
    "legacy_kind",
    "owned_kind",
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


#: the entries a directory of these kinds may hold (besides the marker), and those it must hold
_LAYOUTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    RESULT: (("items", "workers", "relabel", "_model", "_incremental", "model", "summary.json", "report.html"),
             ("items", "workers", "summary.json")),
    REPORT: (("report.md", "results.json", "*.png"), ("report.md", "results.json")),
}


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


def _unexpected(kind: str, names: list[str]) -> list[str]:
    """The entries ``names`` a directory of ``kind`` does not hold (all of them for unknown layouts)."""
    allowed, _ = _LAYOUTS[kind]
    return [n for n in names if n != MARKER and not any(fnmatchcase(n, pattern) for pattern in allowed)]


def _json(files: Files, path: str) -> Any:
    try:
        return json.loads(files.read_bytes(path).decode("utf-8"))
    except (OSError, ValueError):
        return None


def legacy_kind(files: Files, directory: str) -> str | None:
    """The kind of an unmarked directory written by an older crowdspark, recognised by its exact layout.

    * ``result``: only ``items/``, ``workers/``, ``summary.json`` and optionally ``model/``, where
      ``summary.json`` holds the keys every version wrote (``algorithm``, ``engine``, ``version``,
      ``counts``, ``iterations``);
    * ``report``: only ``report.md``, ``results.json`` and ``*.png`` figures;
    * ``run-root``: only ``run_id=*`` folders that are (legacy or marked) results, ``_LATEST.json``
      naming a run, and crowdspark's own leftovers (``*.crowdspark-staging-*``, ``*.crowdspark-old-*``,
      ``_LATEST.json.tmp-*``), with at least one run or ``_LATEST.json``.

    Returns ``None`` for anything else.
    """
    names = files.list(directory)
    if not names or MARKER in names:
        return None
    if not _unexpected(RESULT, names) and all(n in names for n in _LAYOUTS[RESULT][1]):
        summary = _json(files, _join(directory, "summary.json"))
        if isinstance(summary, dict) and all(key in summary for key in _SUMMARY_KEYS):
            return RESULT
        return None
    if not _unexpected(REPORT, names) and all(n in names for n in _LAYOUTS[REPORT][1]):
        return REPORT
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


def owned_kind(files: Files, directory: str) -> str | None:
    """The kind of crowdspark directory ``directory`` is, or ``None`` when it is not (only) crowdspark's.

    A marked directory of a kind with a fixed layout (result, report) counts only while it holds nothing
    else; an unmarked one only if :func:`legacy_kind` recognises it.
    """
    if not files.is_dir(directory):
        return None
    marker = read_marker(files, directory)
    if marker is None:
        return legacy_kind(files, directory)
    kind = marker["kind"]
    if kind in _LAYOUTS and _unexpected(kind, files.list(directory)):
        return None
    return kind


def is_empty_dir(files: Files, directory: str) -> bool:
    """Whether ``directory`` is a directory with no entries (checksum files aside)."""
    return files.is_dir(directory) and not files.list(directory)


def describe(files: Files, path: str) -> str:
    """What is at ``path``, for messages: a file, a link, or a directory and a few of its entries."""
    if files.is_link(path):
        return "a symbolic link"
    if not files.is_dir(path):
        return "a file"
    names = files.list(path)
    marker = read_marker(files, path)
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    if marker is not None:
        kind = marker["kind"]
        extra = _unexpected(kind, names) if kind in _LAYOUTS else []
        if extra:
            return f"a crowdspark {kind} holding entries crowdspark did not write ({', '.join(extra[:5])})"
        return f"a crowdspark {kind} directory"
    entries = "1 entry" if len(names) == 1 else f"{len(names)} entries"
    return f"a directory with {entries} without crowdspark's marker ({shown})"


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
