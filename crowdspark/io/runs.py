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
import os
import re
import unicodedata
from typing import Any

from crowdspark.errors import ConfigError, InputError
from crowdspark.io.files import OLD_PREFIX, STAGING_PREFIX, Files, files_for
from crowdspark.io.lock import LOCK_PREFIX
from crowdspark.io.marker import RESULT, owned_kind
from crowdspark.io.paths import is_local, strip_file_scheme

__all__ = [
    "LATEST",
    "NAME_MAX",
    "RUN_ROOT_STEPS",
    "check_run_id",
    "run_directory",
    "resolves_beside",
    "parse_as_of",
    "default_as_of",
    "read_latest",
    "write_latest",
    "latest_run_before",
    "committed_runs",
    "run_as_of",
    "read_runs",
]

log = logging.getLogger(__name__)

LATEST = "_LATEST.json"

#: the steps of a run root after a run's commit (:func:`crowdspark.pipeline.run.aggregate`), in order:
#: ``_LATEST.json`` written (:func:`write_latest`), then the runs beyond ``nightly.keep_runs`` pruned
#: (:func:`crowdspark.io.chain.prune_runs`); each ends at a :func:`crowdspark.io.killpoint.kill_point` of its name (a test hook)
RUN_ROOT_STEPS = ("latest-written", "runs-pruned")
_RUN = re.compile(r"run_id=(?P<id>[^/]+)")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


#: the longest name of one folder or file on the filesystems crowdspark writes (local, HDFS, object stores), bytes
NAME_MAX = 255


def _longest_sibling(name: str) -> int:
    """Bytes of the longest name crowdspark gives a path beside the folder ``name``: its staging and set-aside
    folders (``<prefix><name>-<12 hex>``, :mod:`crowdspark.io.sink`) and its lock (:mod:`crowdspark.io.lock`)."""
    size = len(name.encode("utf-8"))
    return max(size, len(LOCK_PREFIX) + size, max(len(STAGING_PREFIX), len(OLD_PREFIX)) + size + 13)


def check_run_id(run_id: Any) -> None:
    """Refuse a run id that cannot name a run folder ``run_id=<id>`` and its siblings.

    A run id is a plain name: not blank, no space at either end, no control character (a newline, a tab), no
    ``/``, ``\\`` or ``=``, not starting with ``.`` or ``_`` (hidden and staging names), and short enough that
    ``run_id=<id>`` and the staging, set-aside and lock names beside it fit in :data:`NAME_MAX` bytes.

    Raises
    ------
    ConfigError
    """
    shown = run_id if not isinstance(run_id, str) or len(run_id) <= 60 else f"{run_id[:60]}..."
    if not isinstance(run_id, str) or not run_id.strip():
        problem = "a plain name such as 2026-11-25, not blank"
    elif run_id != run_id.strip():
        problem = "a plain name such as 2026-11-25, without spaces at either end"
    elif any(unicodedata.category(ch).startswith("C") for ch in run_id):
        problem = "a plain name such as 2026-11-25, without control characters (newline, tab)"
    elif any(ch in run_id for ch in "/\\=") or run_id.startswith((".", "_")):
        problem = "a plain name such as 2026-11-25 (no '/', '\\', '=', leading '.' or '_')"
    elif _longest_sibling(f"run_id={run_id}") > NAME_MAX:
        longest = NAME_MAX - _longest_sibling("run_id=")
        problem = (f"at most {longest} bytes (a folder name holds {NAME_MAX} bytes, with the run_id= prefix and the "
                   f"names of its staging and lock siblings), but is {len(run_id.encode('utf-8'))} bytes long")
    else:
        return
    raise ConfigError(f"--run-id must be {problem}, but got {shown!r}")


def run_directory(output_dir: str, run_id: str) -> str:
    """Where run ``run_id`` writes: ``<output_dir>/run_id=<run_id>`` (``run_id`` checked by :func:`check_run_id`).

    Raises
    ------
    ConfigError
    """
    check_run_id(run_id)
    return f"{output_dir.rstrip('/')}/run_id={run_id}"


def resolves_beside(folder: str, path: str) -> bool:
    """Whether the local ``path`` resolves (symbolic links followed) to an entry of the folder ``folder``; other
    filesystems have no links to follow, and their paths are checked by name."""
    if not (is_local(folder) and is_local(path)):
        return True
    real = os.path.realpath(strip_file_scheme(path).rstrip("/"))
    return os.path.dirname(real) == os.path.realpath(strip_file_scheme(folder).rstrip("/") or "/")


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
    """``_LATEST.json`` of the run root ``root`` with ``path`` made ``<root>/run_id=<run_id>``, or ``None`` when
    there is none.

    The run id locates the run; ``path`` must name that run (``run_id=<run_id>``, or a path ending in it
    without ``..``, as older pointers held), and the run must resolve to a folder of ``root`` (no symbolic link
    out of it).

    Raises
    ------
    InputError
        When it cannot be read, holds the wrong types, or names a run outside ``root``.
    """
    files = files_for(root, spark)
    path = f"{root.rstrip('/')}/{LATEST}"
    if not files.exists(path):
        return None
    fix = "delete it, and the next run writes it again (or give the run's own folder)"
    try:
        latest = json.loads(files.read_bytes(path).decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path!r} is not a readable crowdspark pointer ({exc}); {fix}") from exc
    problem = _pointer_problem(latest)
    if problem:
        raise InputError(f"{path!r} is not a crowdspark pointer: {problem}; {fix}")
    run = run_directory(root, latest["run_id"])
    if not resolves_beside(root, run):
        raise InputError(f"{path!r} names the run {run!r}, which resolves to "
                         f"{os.path.realpath(strip_file_scheme(run))!r}, outside the folder of runs {root!r}; a "
                         f"reader follows no run out of the folder it reads: {fix}")
    return {**latest, "path": run}


def _pointer_problem(latest: Any) -> str | None:
    """What is wrong with a parsed ``_LATEST.json``, or ``None``."""
    if not isinstance(latest, dict):
        return f"it must be a JSON object, but holds {type(latest).__name__}"
    run_id, path, as_of = latest.get("run_id"), latest.get("path"), latest.get("as_of")
    if not isinstance(run_id, str):
        return f"run_id must be a string such as \"2026-11-25\", but got {run_id!r}"
    try:
        check_run_id(run_id)
    except ConfigError as exc:
        return f"its run_id is not a run's name ({str(exc).replace('--run-id ', '')})"
    if not isinstance(path, str):
        return f"path must be the run's folder \"run_id={run_id}\", but got {path!r}"
    parts = path.replace("\\", "/").rstrip("/").split("/")
    if parts[-1] != f"run_id={run_id}" or ".." in parts:
        return f"path {path!r} is not the folder of its run_id {run_id!r} in this folder (run_id={run_id})"
    if as_of is not None and not (isinstance(as_of, str) and _DATE.fullmatch(as_of)):
        return f"as_of must be a date such as \"2026-11-25\", but got {as_of!r}"
    return None


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


def run_as_of(files: Files, run_path: str) -> str:
    """The as-of date a run recorded (its ``summary.json``), or ``""`` when it recorded none."""
    try:
        summary = json.loads(files.read_bytes(f"{run_path}/summary.json").decode("utf-8"))
    except (OSError, ValueError):
        return ""
    return str((summary.get("inputs") or {}).get("as_of") or "")


def committed_runs(root: str, spark: Any = None) -> dict[str, str]:
    """``run id -> path`` of the committed results in the run root ``root`` (none when it does not exist)."""
    return _runs(files_for(root, spark), root)


def latest_run_before(root: str, as_of: _dt.date, spark: Any = None) -> str | None:
    """The path of the run of ``root`` that a run as of ``as_of`` continues from: ``_LATEST.json``'s run when it is
    older than ``as_of``, else the newest committed run older than ``as_of`` (a backfill continues from the night
    before it, not from a newer one)."""
    files = files_for(root, spark)
    latest = read_latest(root, spark)
    if latest is not None and latest.get("as_of", "") < as_of.isoformat() and files.is_dir(latest["path"]):
        return latest["path"]
    older = [(date, path) for path in _runs(files, root).values()
             if (date := run_as_of(files, path)) and date < as_of.isoformat()]
    return max(older)[1] if older else None


def read_runs(root: str, spark: Any = None, folder: str = "items") -> Any:
    """Every committed run's ``folder`` table of the run root ``root``, with the run id as a text column
    ``run_id`` (each run's own rows: an incremental night's ``items/`` holds the items it fitted).

    Lists the runs (:func:`committed_runs`: no staging folder, no failed run) and reads each by its path, so
    Spark neither globs (a glob makes it log a Java stack while it looks for a streaming sink's metadata) nor
    infers the type of ``run_id`` from the folder names (it would make ``2026-11-25`` a date).

    Parameters
    ----------
    root : str
        A folder of runs (an ``--output`` used with ``--run-id``).
    spark : SparkSession, optional
        Read with Spark (a Spark DataFrame); else with pandas (local paths only).
    folder : str
        ``items`` (default), ``workers`` ...

    Raises
    ------
    InputError
        When ``root`` holds no committed run.
    """
    runs = sorted(committed_runs(root, spark).items())
    if not runs:
        raise InputError(f"{root!r} holds no committed run (run_id=<id>/ folders written with --run-id); give the "
                         "--output of the runs")
    if spark is not None:
        from pyspark.sql import functions as F

        frames = [spark.read.parquet(f"{path}/{folder}").withColumn("run_id", F.lit(run_id).cast("string"))
                  for run_id, path in runs]
        whole = frames[0]
        for frame in frames[1:]:
            whole = whole.unionByName(frame, allowMissingColumns=True)
        return whole
    import pandas as pd

    return pd.concat([pd.read_parquet(strip_file_scheme(f"{path}/{folder}")).assign(run_id=run_id)
                      for run_id, path in runs], ignore_index=True)
