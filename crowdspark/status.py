"""The status of a run for a scheduler or a monitor: ``crowdspark aggregate --status-file PATH``.

One JSON document, written atomically (a temporary file beside it, then a rename) at the end of every run that
got past its arguments, successful or not, so that a monitor reads either the previous run's status or this
one's, never half of one.  Its fields (``docs/operations.md``, "The status file"; version :data:`VERSION`):

``schema``, ``version``
    ``"crowdspark-status"`` and the version of this layout; a reader checks both.
``status``, ``exit_code``, ``retryable``
    ``"succeeded"`` or ``"failed"``, the command's exit code (:mod:`crowdspark.errors`) and whether the same
    command can succeed later (exit 75).
``error``
    ``null``, or ``{"kind", "class", "message"}`` (:class:`crowdspark.errors.Failure`).
``run_id``, ``as_of``, ``output``, ``result``
    The night (``null`` without ``--run-id``), its as-of date when known, ``--output`` and the result's folder.
``started``, ``finished``, ``seconds``, ``crowdspark_version``
``algorithm``, ``engine``, ``counts`` (``labels``, ``items``, ``workers``)
    From the run's ``summary.json``; ``null`` when the run failed.
``gold``
    ``{"error_rate", "n_gold"}`` when the run had gold, else ``null``.
``missing_days``
    The days of the run's window without labels (``summary.json``'s ``inputs.missing_days``); ``null`` when
    the run has no window or failed.
``drift``
    ``{"checked", "nights", "series", "workers", "reason"}``: for a ``--run-id`` night of a local run root, the
    series (``error_rate``, ``krippendorff_alpha``) and the workers whose value this night drifts, by the rule of
    the history page (:func:`crowdspark.report.history.collect_history`); ``checked`` is false, with the
    ``reason``, otherwise.
``warnings``
    The run's warnings (``summary.json``'s).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
from typing import Any

from crowdspark.errors import EXIT_OK, Failure
from crowdspark.io.files import LocalFiles
from crowdspark.io.paths import is_local, strip_file_scheme
from crowdspark.version import __version__

__all__ = ["SCHEMA", "VERSION", "run_status", "drift_of", "write_status", "read_status"]

log = logging.getLogger(__name__)

SCHEMA = "crowdspark-status"
VERSION = 1


def _utc(seconds: float) -> str:
    return _dt.datetime.fromtimestamp(seconds, _dt.timezone.utc).isoformat(timespec="seconds")


def run_status(
    *,
    failure: Failure | None,
    summary: dict[str, Any] | None,
    output: str | None,
    result: str | None,
    run_id: str | None,
    as_of: str | None,
    started: float,
    finished: float,
) -> dict[str, Any]:
    """The status document of a run (see the module docstring).

    Parameters
    ----------
    failure : Failure, optional
        How the run failed; ``None`` when it succeeded.
    summary : dict, optional
        The succeeded run's ``summary.json``.
    output, result : str, optional
        ``--output``, and the folder of the result (``OUTPUT/run_id=ID`` with ``--run-id``).
    run_id, as_of : str, optional
        ``--run-id`` and ``--as-of`` as given (a succeeded run's as-of date is its summary's).
    started, finished : float
        Seconds since the epoch.
    """
    summary = summary or {}
    inputs = summary.get("inputs") or {}
    metrics = summary.get("metrics") or {}
    counts = summary.get("counts") or {}
    gold = None
    if metrics.get("error_rate") is not None:
        gold = {"error_rate": metrics["error_rate"], "n_gold": metrics.get("n_gold")}
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "status": "failed" if failure else "succeeded",
        "exit_code": failure.code if failure else EXIT_OK,
        "retryable": failure.retryable if failure else False,
        "error": {"kind": failure.kind, "class": failure.error_class, "message": failure.message} if failure else None,
        "run_id": run_id,
        "as_of": inputs.get("as_of") or as_of,
        "output": output,
        "result": result,
        "started": _utc(started),
        "finished": _utc(finished),
        "seconds": round(finished - started, 3),
        "crowdspark_version": __version__,
        "algorithm": summary.get("algorithm"),
        "engine": summary.get("engine"),
        "counts": {key: counts.get(key) for key in ("labels", "items", "workers")} if counts else None,
        "gold": gold,
        "missing_days": inputs.get("missing_days"),
        "drift": _unchecked("the run failed") if failure else drift_of(output, run_id),
        "warnings": list(summary.get("warnings") or []),
    }


def _unchecked(reason: str) -> dict[str, Any]:
    return {"checked": False, "nights": None, "series": [], "workers": [], "reason": reason}


def drift_of(root: str | None, run_id: str | None) -> dict[str, Any]:
    """The drift of night ``run_id`` among the committed nights of the run root ``root`` (the ``drift`` field):
    the series and workers the history page flags for it."""
    if run_id is None or root is None:
        return _unchecked("not a --run-id night: drift compares the nights of a run root")
    if not is_local(root):
        return _unchecked(f"the run root {root!r} is not local (crowdspark report --history reads local roots)")
    from crowdspark.report.history import collect_history

    try:
        history = collect_history(strip_file_scheme(root))
    except Exception as exc:  # noqa: BLE001 - the run's outcome stands; the status says why drift is unknown
        log.warning("the drift of %s could not be computed: %s", root, exc, exc_info=True)
        return _unchecked(f"the history of {root!r} could not be read: {exc}")
    if run_id not in history.drift.index:
        return _unchecked(f"run_id={run_id} is not among the committed nights of {root!r}")
    row = history.drift.loc[run_id]
    flagged = [str(name) for name in row.index[row.to_numpy(dtype=bool)]]
    series = [name for name in flagged if name in ("error_rate", "krippendorff_alpha")]
    return {"checked": True, "nights": len(history.nights), "series": series,
            "workers": [name for name in flagged if name not in series], "reason": None}


def write_status(path: str, status: dict[str, Any]) -> None:
    """Write ``status`` to the local file ``path`` atomically
    (:meth:`crowdspark.io.files.LocalFiles.write_bytes`: a synced temporary file renamed over it)."""
    LocalFiles().write_bytes(path, (json.dumps(status, indent=2, default=str) + "\n").encode("utf-8"))


def read_status(path: str) -> dict[str, Any]:
    """A status file, checked to be of this schema and version.

    Raises
    ------
    ValueError
        For another document or version.
    """
    with open(strip_file_scheme(path), encoding="utf-8") as handle:
        status = json.load(handle)
    if not isinstance(status, dict) or status.get("schema") != SCHEMA or status.get("version") != VERSION:
        raise ValueError(f"{path!r} is not a crowdspark status file of version {VERSION}")
    return status
