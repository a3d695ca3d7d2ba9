"""What a run records about what it read, and the checks a scheduler relies on.

The manifest (``summary.json``'s ``inputs``) holds the run id and as-of date, the window and the labels of each
of its days, the files and bytes of the inputs, the run the warm start continued from, and the previous run of
the output root; :func:`check_new_data` compares it with that previous run, so a night without new data says so
(a warning, or exit 2 with ``nightly.on_no_new_data = "fail"``) instead of fitting the same labels again in
silence.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
from typing import Any

from crowdspark.errors import ConfigError, InputError
from crowdspark.io.files import files_for
from crowdspark.io.marker import RUN_ROOT, owned_kind
from crowdspark.io.paths import absolute_local, check_local_folder_writable, is_local
from crowdspark.io.runs import LATEST, latest_run_before
from crowdspark.pipeline.prepare import Prepared
from crowdspark.pipeline.window import Window

__all__ = ["check_checkpoint_dir", "resolve_warm_start", "run_manifest", "check_new_data", "record_inputs"]

log = logging.getLogger(__name__)


def check_checkpoint_dir(directory: str) -> None:
    """Refuse, before anything is read, an ``engine.checkpoint_dir`` the driver cannot write.

    Raises
    ------
    ConfigError
    """
    if not directory:
        return
    if not is_local(directory):
        raise ConfigError(
            f"engine.checkpoint_dir must be a path the driver can write (local disk or a shared mount), but got "
            f"{directory!r}; set engine.checkpoint_dir to such a path"
        )
    check_local_folder_writable(directory, f"engine.checkpoint_dir {directory!r}")


def _is_run_root(path: str, spark: Any) -> bool:
    files = files_for(path, spark, "--warm-start")
    return files.is_dir(path) and (owned_kind(files, path) == RUN_ROOT or files.exists(f"{path.rstrip('/')}/{LATEST}"))


def resolve_warm_start(path: str, as_of: _dt.date, spark: Any = None,
                       run_root: str | None = None) -> tuple[str | None, str | None]:
    """The folder a warm start reads, and why there is none.

    ``path`` itself, or for a run root (``--output`` of ``--run-id`` runs) its newest run older than ``as_of``.
    A run root with no such run, or ``path`` equal to this run's own ``run_root`` before its first run, gives
    ``(None, reason)``: the first night of a schedule runs cold with the same command as every other night (the
    caller logs the reason once: the checks before Spark starts resolve the warm start too).

    Raises
    ------
    InputError
        When ``path`` does not exist and is not this run's own run root.
    """
    files = files_for(path, spark, "--warm-start")
    if not files.exists(path):
        if run_root is not None and path.rstrip("/") == run_root.rstrip("/"):
            return None, f"--warm-start {path} holds no run yet: this first run starts cold"
        raise InputError(f"--warm-start {path!r} does not exist; give a previous run's output, the folder of "
                         "runs (--output of --run-id runs), or a saved model")
    if not _is_run_root(path, spark):
        return path, None
    run = latest_run_before(path, as_of, spark)
    if run is None:
        return None, f"--warm-start {path} holds no run older than {as_of}: this run starts cold"
    log.info("warm start from %s (the newest run of %s before %s)", run, path, as_of)
    return run, None


def _previous_manifest(run_path: str | None, spark: Any) -> dict[str, Any] | None:
    if not run_path:
        return None
    files = files_for(run_path, spark, "--warm-start")
    summary_path = f"{run_path.rstrip('/')}/summary.json"
    if not files.exists(summary_path):
        return None
    try:
        summary = json.loads(files.read_bytes(summary_path).decode("utf-8"))
    except (OSError, ValueError):
        return None
    inputs = summary.get("inputs") if isinstance(summary, dict) else None
    return inputs if isinstance(inputs, dict) else None


def _absolute_paths(inputs: dict[str, Any]) -> dict[str, str]:
    """The local input paths (``labels``, ``gold``) made absolute, so that the summary names them from anywhere."""
    paths = {}
    for what in ("labels", "gold"):
        path = inputs.get(what)
        if isinstance(path, str) and not path.startswith(("<", "table:")):  # "<DataFrame>": no path; a table
            paths[what] = absolute_local(path)
    return paths


def _data_begins(days: dict[str, int], previous: dict[str, Any] | None) -> str | None:
    """The first day with labels that this run or its previous runs saw (``data_begins``, carried from run to
    run), ``None`` when none has seen a label."""
    seen = [day for day, n in days.items() if n]
    if previous is not None:
        seen += [day for day, n in (previous.get("days") or {}).items() if n]
        if isinstance(previous.get("data_begins"), str):
            seen.append(previous["data_begins"])
    return min(seen) if seen else None


def _missing_days(manifest: dict[str, Any], window: Window, days: dict[str, int],
                  previous: dict[str, Any] | None) -> None:
    """The window's days without labels (``missing_days``, a warning).  The days before the first labelled day
    this run or its previous runs saw (``data_begins``) are the days before the data began (``days_before_data``,
    said once in the log), not gaps."""
    missing = [day for day in window.days() if day not in days]
    begins = _data_begins(days, previous)
    if begins is not None:
        manifest["data_begins"] = begins
        manifest["days_before_data"] = [day for day in missing if day < begins]
        missing = [day for day in missing if day > begins]
        if manifest["days_before_data"]:
            log.info("the labels begin on %s; the window starts before it, on %s (%d day(s) before the data)", begins,
                     window.start, len(manifest["days_before_data"]))
    manifest["missing_days"] = missing
    if missing:
        message = f"no labels for {len(missing)} day(s) of the window: {missing[:10]}"
        log.warning("%s", message)
        manifest["warnings"].append(message)


def run_manifest(
    prepared_inputs: dict[str, Any],
    signature: dict[str, Any],
    run_id: str | None,
    as_of: _dt.date,
    window: Window | None,
    warm_path: str | None,
    previous_path: str | None,
    spark: Any = None,
) -> dict[str, Any]:
    """``summary.json``'s ``inputs``: what the run read, and what it continues from (``previous_path``: the run
    it is compared with, its warm start or else the newest older run of its output root).

    ``warnings`` (popped by the caller into the summary's warnings) lists the days of the window without labels.
    """
    manifest: dict[str, Any] = {
        **prepared_inputs,
        **_absolute_paths(prepared_inputs),
        "run_id": run_id,
        "as_of": as_of.isoformat(),
        "files": {what: {k: v for k, v in entry.items() if k != "path"}
                  for what, entry in signature.items() if isinstance(entry, dict)},
        "warnings": [],
    }
    previous = _previous_manifest(previous_path, spark)
    if window is not None:
        manifest["window"] = {"column": window.column, "start": window.start and window.start.isoformat(),
                              "end": window.end.isoformat()}
        _missing_days(manifest, window, prepared_inputs.get("days", {}), previous)
    if warm_path:
        manifest["warm_start"] = warm_path
    if previous is not None:
        manifest["previous_run"] = {"run_id": previous.get("run_id"), "as_of": previous.get("as_of"),
                                    "path": previous_path, "newest_day": _newest_day(previous),
                                    "files": previous.get("files")}
    return manifest


def _newest_day(inputs: dict[str, Any]) -> str | None:
    days = [day for day, n in (inputs.get("days") or {}).items() if n]
    return max(days) if days else None


def _no_labels(manifest: dict[str, Any]) -> str:
    """What a run that read no label read: its window, or its as-of date."""
    window = manifest.get("window") or {}
    if window.get("start"):
        return f"its window ({window['start']} to {window['end']}) holds no labels"
    return f"it read no labels up to {manifest.get('as_of')}"


def _previous_name(previous: dict[str, Any]) -> str:
    """The previous run as a message names it: its run id, else its folder (a run without --run-id), and its
    as-of date when it recorded one."""
    run_id, as_of = previous.get("run_id"), previous.get("as_of")
    name = f"run {run_id!r}" if run_id else f"the previous run {previous.get('path')!r}"
    return f"{name} (as of {as_of})" if as_of else name


def check_new_data(manifest: dict[str, Any], policy: str, prepared: Prepared | None) -> None:
    """Warn (``policy = "warn"``) or stop (``"fail"``) when the run read nothing newer than its previous run.

    New data means a day with labels newer than the previous run's newest (with a window), else input files
    that differ from the previous run's (their number, bytes or modification time).

    Raises
    ------
    InputError
        With ``policy = "fail"`` and no new data (the engine of ``prepared``, when given, is closed).
    """
    previous = manifest.get("previous_run")
    if previous is None or manifest.get("late_days"):
        return
    if "days" in manifest and previous.get("newest_day") is not None:
        newest = _newest_day(manifest)
        stale = newest is None or newest <= previous["newest_day"]
        read = f"its newest labels are of {newest}" if newest is not None else _no_labels(manifest)
        detail = f"{read}, the previous run's of {previous['newest_day']}"
    else:
        stale = bool(previous.get("files")) and manifest.get("files") == previous.get("files")
        detail = "its input files are the previous run's (same number, bytes and times)"
    if not stale:
        return
    message = f"no new data since {_previous_name(previous)}: {detail}; the labels are fitted again"
    if policy == "fail":
        if prepared is not None:
            prepared.engine.close()
        raise InputError(message.replace("; the labels are fitted again", "") +
                         " (nightly.on_no_new_data = \"fail\"); check that the day's labels arrived")
    log.warning("%s", message)
    manifest.setdefault("warnings", []).append(message)


def record_inputs(summary: dict[str, Any], manifest: dict[str, Any], source: Any = None) -> None:
    """Put what a run read into its ``summary``: ``inputs`` (the ``manifest``), the manifest's warnings first
    among the summary's, and from the :class:`crowdspark.pipeline.source.Source` that read it ``small_input``
    and ``engine_choice`` when it has them."""
    summary["inputs"] = manifest
    summary["warnings"] = manifest.pop("warnings") + summary["warnings"]
    if source is not None and source.small_input is not None:
        summary["small_input"] = source.small_input
    if source is not None and source.choice is not None:
        summary["engine_choice"] = source.choice
