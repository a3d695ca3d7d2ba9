"""Writing a run's result directory so that a failed run never leaves a directory that looks complete.

Everything is first written into a staging directory beside the destination
(``<dir>.crowdspark-staging-<id>``, marked as ``staging`` from its creation); ``summary.json`` is written
last, and only then is the staging directory marked as a ``result`` and renamed to the destination (an
existing destination is moved aside first and deleted after).  A failed run removes its staging
directory; a killed one leaves only a directory whose name and marker say it is staging, without being
mistaken for a result.  Local paths use ``os.rename``; other filesystems (HDFS, S3A ...) use Hadoop's
``FileSystem.rename`` through the SparkContext.

What may be replaced follows the deletion rule of :mod:`crowdspark.io.marker`: :func:`check_output` refuses,
before a run reads anything, an ``--output`` that is a file, a directory that is neither empty nor a
crowdspark result (or, with ``--run-id``, a run root), and one that is, is inside or contains an input;
:meth:`StagedOutput.commit` checks the destination again before it moves it aside.

A result holds ``items/`` and ``workers/`` (:mod:`crowdspark.io.tables`), ``model/``
(:mod:`crowdspark.io.saved_model`) and ``summary.json``.  With a run id, results go to
``<output>/run_id=<id>/`` and ``<output>/_LATEST.json`` is moved to the new run only after it is complete.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from typing import Any

from crowdspark.errors import ConfigError
from crowdspark.io.files import Files, HadoopFiles, files_for
from crowdspark.io.marker import (
    RESULT,
    RUN_ROOT,
    STAGING,
    delete_owned,
    describe,
    is_empty_dir,
    overlap,
    owned_kind,
    path_components,
    read_marker,
    write_marker,
)
from crowdspark.io.paths import is_local, strip_file_scheme
from crowdspark.io.tables import to_jsonable

__all__ = [
    "StagedOutput",
    "check_replaceable",
    "check_run_root",
    "make_run_root",
    "check_output",
    "run_directory",
    "write_latest",
]

log = logging.getLogger(__name__)


class StagedOutput:
    """A staging directory that becomes ``destination`` on :meth:`commit`.

    The staging directory carries crowdspark's marker (kind ``staging``) from its creation; at commit the
    marker becomes ``kind`` and the directory is renamed to ``destination``.  An existing destination is
    replaced only if it is empty or a crowdspark directory of ``kind`` (:func:`check_replaceable`).

    Parameters
    ----------
    destination : str
        The output directory (local path or any Hadoop filesystem URI).
    spark : SparkSession, optional
        Needed for non-local destinations.
    kind : str
        What the directory is once committed: ``"result"`` (default) or ``"report"``.
    """

    def __init__(self, destination: str, spark: Any = None, kind: str = RESULT) -> None:
        self.destination = destination.rstrip("/")
        self.local = is_local(self.destination)
        self.kind = kind
        self.staging = f"{self.destination}.crowdspark-staging-{uuid.uuid4().hex[:12]}"
        self._spark = spark
        self._files = files_for(self.destination, spark)
        if self.local:
            os.makedirs(strip_file_scheme(self.staging), exist_ok=False)
        else:
            self._files.mkdirs(self.staging)
        write_marker(self._files, self.staging, STAGING, destination=self.destination, final_kind=kind)

    def path(self, name: str) -> str:
        """Path of ``name`` inside the staging directory."""
        return f"{self.staging}/{name}"

    def write_json(self, name: str, payload: dict[str, Any]) -> None:
        """Write ``payload`` as JSON to ``name`` (a path relative to the output directory)."""
        text = json.dumps(to_jsonable(payload), indent=2, sort_keys=False) + "\n"
        self.write_bytes(name, text.encode("utf-8"))

    def write_bytes(self, name: str, data: bytes) -> None:
        """Write ``data`` to ``name`` (a path relative to the output directory), creating folders."""
        self._files.write_bytes(self.path(name), data)

    def commit(self) -> None:
        """Make the staged result the destination (moving an older result aside, then deleting it).

        Raises
        ------
        ConfigError
            If the destination is no longer empty or a crowdspark directory of this kind; the destination
            is kept (and, used as a context manager, the staging directory removed).
        """
        files, dest = self._files, self.destination
        check_replaceable(files, dest, self.kind)
        old = None
        if files.exists(dest):
            if is_empty_dir(files, dest):
                files.delete(dest, recursive=False)
            else:
                old = f"{dest}.crowdspark-old-{uuid.uuid4().hex[:12]}"
                files.rename(dest, old)
        write_marker(files, self.staging, self.kind)
        files.rename(self.staging, dest)
        if old is not None:
            try:
                delete_owned(files, old, (self.kind,), f"Delete {old!r} by hand.")
            except (ConfigError, OSError) as exc:
                log.warning("the previous %s was moved aside to %s and kept: %s", self.kind, old, exc)
        log.info("results written to %s", self.destination)

    def abort(self) -> None:
        """Remove the staging directory (best effort; marker checked)."""
        try:
            if self._files.exists(self.staging):
                delete_owned(self._files, self.staging, (STAGING, self.kind), "Delete it by hand.")
        except Exception:  # pragma: no cover - best effort on a failing run
            log.warning("could not remove staging directory %s", self.staging)

    def __enter__(self) -> "StagedOutput":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()


def check_replaceable(files: Files, destination: str, kind: str = RESULT, flag: str = "--output") -> None:
    """Refuse a destination a run must not replace.

    It may be missing, an empty directory, or a crowdspark directory of ``kind`` (marked, or recognised
    as written by an earlier version, :func:`crowdspark.io.marker.legacy_kind`).  ``flag`` names the option
    that gave the path, for the messages.

    Raises
    ------
    ConfigError
        For a file, a symbolic link, a run root (``--output`` of runs with ``--run-id``) or a directory
        with anything else in it.
    """
    _accept_only(files, destination, kind, flag, {
        RUN_ROOT: "holds the runs written with --run-id (run_id=*/ and _LATEST.json): replacing it would "
                  f"delete them all. Pass --run-id ID to add a run, or choose another {flag}",
        None: f"is {{what}}: crowdspark replaces only an empty directory or a previous crowdspark {kind}, so "
              f"nothing there is deleted. Choose a new or empty {flag}, or move those files away",
    })


def check_run_root(files: Files, root: str) -> None:
    """Refuse an ``--output`` for ``--run-id`` runs that is not empty and not a run root.

    Raises
    ------
    ConfigError
    """
    _accept_only(files, root, RUN_ROOT, "--output", {
        RESULT: "is a crowdspark result written without --run-id; with --run-id, --output names the folder "
                "that holds the runs: choose another --output (or drop --run-id to replace the result)",
        None: "is {what}: with --run-id it must be a new or empty directory or one that already holds "
              "crowdspark runs, so nothing is written there. Choose another --output",
    })


def _accept_only(files: Files, path: str, kind: str, flag: str, refusals: dict[str | None, str]) -> None:
    """Accept a missing ``path``, an empty directory or a crowdspark directory of ``kind``; otherwise raise
    the message of ``refusals`` for the kind found (``None``: not crowdspark's), where ``{what}`` says
    what is there."""
    if not files.exists(path):
        return
    if files.is_link(path) or not files.is_dir(path):
        raise ConfigError(
            f"{flag} {path!r} is {describe(files, path)}, not a directory crowdspark can write; give the path "
            f"of a new or empty directory, or of a previous crowdspark {kind}"
        )
    if is_empty_dir(files, path):
        return
    found = owned_kind(files, path)
    if found == kind:
        return
    message = refusals.get(found, refusals[None])
    raise ConfigError(f"{flag} {path!r} " + message.replace("{what}", describe(files, path)))


def make_run_root(root: str, spark: Any = None) -> None:
    """Create the run root ``root`` if needed and mark it (kind ``run-root``)."""
    files = files_for(root, spark)
    files.mkdirs(root)
    marker = read_marker(files, root)
    if marker is None or marker.get("kind") != RUN_ROOT:
        write_marker(files, root, RUN_ROOT)


def check_output(
    output_dir: str,
    *,
    run_id: str | None = None,
    inputs: dict[str, str | None] | None = None,
    spark: Any = None,
    kind: str = RESULT,
) -> None:
    """Refuse, before anything is read, an ``--output`` that a run must not write or replace.

    Parameters
    ----------
    output_dir : str
        ``--output`` (local path or Hadoop URI).
    run_id : str, optional
        With a run id, ``output_dir`` is a run root and ``output_dir/run_id=<run_id>`` the result.
    inputs : dict of str to str
        Paths the output must neither be, be inside nor contain, by what they are (``"labels"``,
        ``"gold"``, ``"engine.checkpoint_dir"``); ``None`` values are skipped.
    spark : SparkSession, optional
        Needed for non-local paths.
    kind : str
        ``"result"`` or ``"report"``.

    Raises
    ------
    ConfigError
    """
    files = files_for(output_dir, spark)
    _check_no_overlap(output_dir, inputs or {}, files, spark)
    if run_id is None:
        check_replaceable(files, output_dir.rstrip("/"), kind)
    else:
        check_run_root(files, output_dir.rstrip("/"))
        check_replaceable(files, run_directory(output_dir, run_id), kind)


def _check_no_overlap(output_dir: str, inputs: dict[str, str | None], files: Files, spark: Any) -> None:
    out = path_components(output_dir, files)
    for what, path in inputs.items():
        if not path:
            continue
        other_files = HadoopFiles(spark) if spark is not None and not is_local(path) else None
        relation = overlap(out, path_components(path, other_files))
        if relation is None:
            continue
        how = {
            "equal": f"is the {what} path",
            "inside": f"is inside the {what} path {path!r}",
            "contains": f"contains the {what} path {path!r}",
        }[relation]
        raise ConfigError(
            f"--output {output_dir!r} {how}: the run would replace or mix with what it reads. "
            f"Choose an --output outside {path!r} that does not contain it"
        )


def run_directory(output_dir: str, run_id: str) -> str:
    """Where run ``run_id`` writes: ``<output_dir>/run_id=<run_id>``."""
    if not run_id or any(ch in run_id for ch in "/\\=") or run_id.startswith((".", "_")):
        raise ConfigError(f"--run-id must be a plain name such as 2026-11-25 (no '/', '=', leading '.' or '_'), but got {run_id!r}")
    return f"{output_dir.rstrip('/')}/run_id={run_id}"


def write_latest(output_dir: str, run_id: str, run_path: str, spark: Any = None) -> None:
    """Point ``<output_dir>/_LATEST.json`` at a completed run (written aside, then renamed over the old one)."""
    from datetime import datetime, timezone

    payload = json.dumps(
        {"run_id": run_id, "path": run_path, "completed_at": datetime.now(timezone.utc).isoformat()}, indent=2
    ).encode("utf-8")
    final = f"{output_dir.rstrip('/')}/_LATEST.json"
    tmp = f"{final}.tmp-{uuid.uuid4().hex[:8]}"
    files = files_for(output_dir, spark)
    files.write_bytes(tmp, payload)
    files.replace(tmp, final)
    log.info("%s now points at run %s", final, run_id)
