"""A folder of nightly runs (a *run root*): ``<root>/run_id=<id>/`` per run, ``<root>/_LATEST.json`` naming the
newest complete run, and what a scheduler needs from them: the as-of date of a run, the pointer that only moves
forward, the run a warm start continues from, and retention.

``_LATEST.json`` holds ``run_id``, ``as_of`` (the date whose data the run covers), ``path`` (relative to the
root: ``run_id=<id>``, so it does not depend on the working directory) and ``completed_at``.  It moves to a run
only when the run's as-of date is not older than the one it names: a backfill (re-running an older night) writes
its own ``run_id=<id>/`` and leaves the pointer on the newest night.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import re
from typing import Any

from crowdspark.errors import ConfigError, InputError
from crowdspark.io.files import Files, files_for
from crowdspark.io.marker import RESULT, delete_owned, owned_kind

__all__ = [
    "LATEST",
    "RUN_ROOT_STEPS",
    "run_directory",
    "parse_as_of",
    "default_as_of",
    "read_latest",
    "write_latest",
    "latest_run_before",
    "prune_runs",
]

log = logging.getLogger(__name__)

LATEST = "_LATEST.json"

#: the steps of a run root after a run's commit (:func:`crowdspark.pipeline.run.aggregate`), in order:
#: ``_LATEST.json`` written (:func:`write_latest`), then the runs beyond ``nightly.keep_runs`` pruned
#: (:func:`prune_runs`); each ends at a :func:`crowdspark.io.killpoint.kill_point` of its name (a test hook)
RUN_ROOT_STEPS = ("latest-written", "runs-pruned")
_RUN = re.compile(r"run_id=(?P<id>[^/]+)")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def run_directory(output_dir: str, run_id: str) -> str:
    """Where run ``run_id`` writes: ``<output_dir>/run_id=<run_id>``."""
    if not run_id or any(ch in run_id for ch in "/\\=") or run_id.startswith((".", "_")):
        raise ConfigError(f"--run-id must be a plain name such as 2026-11-25 (no '/', '=', leading '.' or '_'), but "
                          f"got {run_id!r}")
    return f"{output_dir.rstrip('/')}/run_id={run_id}"


def parse_as_of(text: str, what: str = "--as-of") -> _dt.date:
    """A date given as ``YYYY-MM-DD``.

    Raises
    ------
    ConfigError
    """
    try:
        if not _DATE.fullmatch(text):
            raise ValueError(text)
        return _dt.date.fromisoformat(text)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} must be a date such as 2026-11-25, but got {text!r}") from None


def default_as_of(run_id: str | None, today: _dt.date | None = None) -> _dt.date:
    """The as-of date of a run without ``--as-of``: its run id when that is a date, else today (UTC)."""
    if run_id and _DATE.fullmatch(run_id):
        return parse_as_of(run_id, "--run-id")
    return today or _dt.datetime.now(_dt.timezone.utc).date()


def read_latest(root: str, spark: Any = None) -> dict[str, Any] | None:
    """``_LATEST.json`` of the run root ``root`` (with ``path`` made absolute), or ``None`` when there is none.

    Raises
    ------
    InputError
        When it cannot be read.
    """
    files = files_for(root, spark)
    path = f"{root.rstrip('/')}/{LATEST}"
    if not files.exists(path):
        return None
    try:
        latest = json.loads(files.read_bytes(path).decode("utf-8"))
        run_id = latest["run_id"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path!r} is not a readable crowdspark pointer ({exc}); delete it, the next run writes "
                         "it again") from exc
    # the run id locates the run (a 0.1 pointer's path was relative to that run's working directory)
    return {**latest, "path": run_directory(root, run_id)}


def write_latest(root: str, run_id: str, as_of: _dt.date, spark: Any = None) -> bool:
    """Point ``<root>/_LATEST.json`` at the completed run ``run_id``, unless it names a newer night.

    Returns
    -------
    bool
        Whether the pointer moved.
    """
    files = files_for(root, spark)
    current = read_latest(root, spark)
    if current is not None and current.get("as_of") and current["as_of"] > as_of.isoformat():
        log.info("%s stays at run %s (as of %s, newer than this run's %s)", LATEST, current["run_id"],
                 current["as_of"], as_of)
        return False
    payload = json.dumps({
        "run_id": run_id, "as_of": as_of.isoformat(), "path": f"run_id={run_id}",
        "completed_at": _dt.datetime.now(_dt.timezone.utc).isoformat(),
    }, indent=2).encode("utf-8")
    final = f"{root.rstrip('/')}/{LATEST}"
    files.write_bytes(final, payload)  # to a temporary name, renamed over the pointer
    log.info("%s now points at run %s (as of %s)", final, run_id, as_of)
    return True


def _runs(files: Files, root: str) -> dict[str, str]:
    """``run id -> path`` of the committed results in the run root ``root``."""
    if not files.is_dir(root):
        return {}
    out = {}
    for name in files.list(root):
        match = _RUN.fullmatch(name)
        if match and owned_kind(files, f"{root.rstrip('/')}/{name}") == RESULT:
            out[match.group("id")] = f"{root.rstrip('/')}/{name}"
    return out


def _as_of_of(files: Files, run_path: str) -> str:
    """The as-of date a run recorded (its ``summary.json``), or ``""`` when it recorded none."""
    try:
        summary = json.loads(files.read_bytes(f"{run_path}/summary.json").decode("utf-8"))
    except (OSError, ValueError):
        return ""
    return str((summary.get("inputs") or {}).get("as_of") or "")


def latest_run_before(root: str, as_of: _dt.date, spark: Any = None) -> str | None:
    """The path of the run of ``root`` that a run as of ``as_of`` continues from: ``_LATEST.json``'s run when it is
    older than ``as_of``, else the newest committed run older than ``as_of`` (a backfill continues from the night
    before it, not from a newer one)."""
    files = files_for(root, spark)
    latest = read_latest(root, spark)
    if latest is not None and latest.get("as_of", "") < as_of.isoformat() and files.is_dir(latest["path"]):
        return latest["path"]
    older = [(date, path) for path in _runs(files, root).values()
             if (date := _as_of_of(files, path)) and date < as_of.isoformat()]
    return max(older)[1] if older else None


def prune_runs(root: str, keep: int, spark: Any = None) -> list[str]:
    """Delete the oldest committed runs of ``root`` beyond the newest ``keep`` (by as-of date, then run id),
    never the one ``_LATEST.json`` names nor a run the chain of a kept run builds on (an incremental night's
    answer, :mod:`crowdspark.io.chain`); returns the deleted paths."""
    from crowdspark.io.chain import chain_runs

    if keep <= 0:
        return []
    files = files_for(root, spark)
    latest = read_latest(root, spark)
    runs = sorted(((_as_of_of(files, path), run_id, path) for run_id, path in _runs(files, root).items()),
                  reverse=True)
    kept = [path for _, run_id, path in runs[:keep]] + ([latest["path"]] if latest is not None else [])
    needed = {run.rstrip("/").rpartition("/")[2] for path in kept for run in chain_runs(path, spark, check=False)}
    deleted = []
    for _, run_id, path in runs[keep:]:
        if (latest is not None and run_id == latest["run_id"]) or f"run_id={run_id}" in needed:
            continue
        delete_owned(files, path, (RESULT,), "Delete it by hand.")
        deleted.append(path)
    if deleted:
        log.info("retention: deleted %d run(s) older than the newest %d: %s", len(deleted), keep, deleted)
    return deleted
