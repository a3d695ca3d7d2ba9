"""Writing a run's result directory so that a failed or killed run never leaves a directory that looks
complete, and the next run of the same output finishes or rolls back what a killed one left.

Everything is first written into a staging directory beside the destination
(``<parent>/_crowdspark-staging-<name>-<id>``, marked as ``staging`` from its creation; readers skip ``_``
names); ``summary.json`` is written last, then the commit (:meth:`StagedOutput.commit`) is a journaled switch
in the steps of :data:`COMMIT_STEPS` that :func:`recover` completes or rolls back after a kill at any of them.
:func:`check_output` runs that recovery, under the destination's lock, before it checks anything about the
destination, so what a kill leaves is never refused.  Local paths use ``os.rename``; other filesystems (HDFS,
S3A ...) use Hadoop's ``FileSystem.rename`` through the SparkContext (docs/security.md, "The commit and its
recovery", says what is atomic where).

What may be replaced follows the deletion rule of :mod:`crowdspark.io.marker`: :func:`check_output` refuses,
before a run reads anything, an ``--output`` that is a file, a directory that is neither empty nor a
crowdspark result (or, with ``--run-id``, a run root), and one that is, is inside or contains an input;
:meth:`StagedOutput.commit` checks the destination again before it moves it aside.

A result holds ``items/`` and ``workers/`` (:mod:`crowdspark.io.tables`), ``_model/``
(:mod:`crowdspark.io.saved_model`) and ``summary.json``.  With a run id, results go to
``<output>/run_id=<id>/`` and ``<output>/_LATEST.json`` is moved to the new run only after it is complete.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import uuid
from typing import Any

from crowdspark.errors import ConfigError
from crowdspark.io.files import OLD_PREFIX, STAGING_PREFIX, Files, HadoopFiles, files_for, parse_temp_name
from crowdspark.io.killpoint import kill_point
from crowdspark.io.lock import OutputLock, process_alive
from crowdspark.io.marker import (
    ITEMS,
    RESULT,
    RUN_ROOT,
    STAGING,
    delete_owned,
    describe,
    enclosing_owned,
    is_empty_dir,
    overlap,
    owned_kind,
    path_components,
    read_marker,
    write_marker,
    written_files,
)
from crowdspark.io.paths import is_local, strip_file_scheme
from crowdspark.io.runs import run_directory
from crowdspark.io.tables import to_jsonable

__all__ = [
    "STAGING_PREFIX",
    "OLD_PREFIX",
    "COMMIT_STEPS",
    "StagedOutput",
    "recover",
    "recover_pending",
    "check_replaceable",
    "check_run_root",
    "make_run_root",
    "check_output",
    "check_outside_owned",
    "check_items_out",
]

log = logging.getLogger(__name__)


#: the steps of :meth:`StagedOutput.commit`, in order: the staging marker records that the staged result is
#: complete; the existing destination is moved aside (or there was none); the staging directory is renamed to
#: the destination; the destination's final marker is written; the moved-aside result is deleted.  Each ends
#: at a :func:`crowdspark.io.killpoint.kill_point` of its name (a test hook).
COMMIT_STEPS = ("staged-complete", "old-moved-aside", "staging-renamed", "final-marker", "old-deleted")


def _sibling(destination: str, prefix: str) -> str:
    """A new path beside ``destination``: ``<parent>/<prefix><name>-<random>``."""
    parent, _, name = destination.rpartition("/")
    return f"{parent or '.'}/{prefix}{name}-{uuid.uuid4().hex[:12]}"


#: the names crowdspark 0.1 gave the same directories (``<name>.crowdspark-staging-<id>``), recovered too
_LEGACY_INFIX = {STAGING_PREFIX: ".crowdspark-staging-", OLD_PREFIX: ".crowdspark-old-"}


def _siblings(files: Files, destination: str, prefix: str) -> list[str]:
    """The paths beside ``destination`` made with :func:`_sibling` and ``prefix`` (or named as by 0.1)."""
    parent, _, name = destination.rpartition("/")
    parent = parent or "."
    if not files.is_dir(parent):
        return []
    stems = (f"{prefix}{name}-", f"{name}{_LEGACY_INFIX[prefix]}")
    return [f"{parent}/{n}" for n in files.list(parent)
            if any(n.startswith(stem) and len(n) == len(stem) + 12 for stem in stems)]


class StagedOutput:
    """A staging directory that becomes ``destination`` on :meth:`commit`.

    The staging directory, ``<parent>/_crowdspark-staging-<name>-<id>`` (Spark, Hive and pandas skip names
    that start with ``_``, so a killed run never looks like a result to readers), carries crowdspark's marker
    (kind ``staging``, the destination, the writer's process and host) from its creation.  :meth:`commit` is a
    journaled switch: the marker records that the staged result is complete; an existing destination is moved
    aside (``_crowdspark-old-<name>-<id>``); the staging directory is renamed to the destination and marked as
    ``kind``; the old one is deleted.  A run killed anywhere in between leaves a state that :func:`recover`
    completes or rolls back on the next run of the same output, so ``destination`` is always either the old or
    the new result.  An existing destination is replaced only if it is empty or a crowdspark directory of
    ``kind`` (:func:`check_replaceable`).

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
        self.staging = _sibling(self.destination, STAGING_PREFIX)
        self._spark = spark
        self._files = files_for(self.destination, spark)
        if self.local:
            os.makedirs(strip_file_scheme(self.staging), exist_ok=False)
        else:
            self._files.mkdirs(self.staging)
        self._mark(complete=False)

    def _mark(self, complete: bool) -> None:
        write_marker(self._files, self.staging, STAGING, destination=self.destination, final_kind=self.kind,
                     complete=complete, pid=os.getpid(), host=socket.gethostname())

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
        """Make the staged result the destination, in the steps of :data:`COMMIT_STEPS` (see the class
        docstring; :func:`recover` completes or rolls back a commit killed after any of them).

        Raises
        ------
        ConfigError
            If the destination is no longer empty or a crowdspark directory of this kind; the destination
            is kept (and, used as a context manager, the staging directory removed).
        """
        files, dest = self._files, self.destination
        check_replaceable(files, dest, self.kind)
        self._mark(complete=True)
        kill_point("staged-complete")
        old = None
        if files.exists(dest):
            if is_empty_dir(files, dest):
                files.delete(dest, recursive=False)
            else:
                old = _sibling(dest, OLD_PREFIX)
                files.rename(dest, old)
        kill_point("old-moved-aside")
        files.rename(self.staging, dest)
        kill_point("staging-renamed")
        write_marker(files, dest, self.kind, **written_files(files, dest))
        kill_point("final-marker")
        if old is not None:
            _delete_leftover(files, old, self.kind)
        kill_point("old-deleted")
        log.info("results written to %s", self.destination)

    def abort(self) -> None:
        """Remove the staging directory (best effort; marker checked)."""
        try:
            if self._files.exists(self.staging):
                delete_owned(self._files, self.staging, (STAGING, self.kind), "Delete it by hand.")
        except Exception:  # pragma: no cover - best effort on a failing run
            log.warning("could not remove staging directory %s", self.staging)

    def __enter__(self) -> StagedOutput:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()


def _delete_leftover(files: Files, path: str, kind: str) -> None:
    try:
        delete_owned(files, path, (kind, STAGING), f"Delete {path!r} by hand.")
    except (ConfigError, OSError) as exc:
        log.warning("kept %s: %s", path, exc)


def _complete_staging(files: Files, destination: str) -> str | None:
    """A staging directory of ``destination`` whose result is complete (the newest), if any."""
    complete = []
    for path in _siblings(files, destination, STAGING_PREFIX):
        marker = read_marker(files, path) or {}
        if marker.get("kind") == STAGING and marker.get("complete") and marker.get("destination") == destination:
            complete.append((marker.get("created_at", ""), path))
    return max(complete)[1] if complete else None


def _parent(destination: str) -> str:
    return destination.rpartition("/")[0] or "."


def _temps(files: Files, folder: str, only_gone: bool = False) -> list[str]:
    """The temporary files (:func:`crowdspark.io.files.temp_path`) in ``folder``; with ``only_gone``, only
    those whose writer is a process gone from this host (a writer on another host cannot be checked)."""
    if not files.is_dir(folder):
        return []
    found = []
    for name in files.list(folder):
        temp = parse_temp_name(name)
        if temp is None:
            continue
        if only_gone and (temp.host != socket.gethostname() or process_alive(temp.pid)):
            continue
        found.append(f"{folder}/{name}")
    return found


def _is_bare_staging(files: Files, path: str) -> bool:
    """Whether the staging directory ``path`` holds nothing but temporary files (a run killed between creating
    it and putting its marker in place)."""
    return read_marker(files, path) is None and all(parse_temp_name(n) for n in files.list(path))


def _pending(files: Files, destination: str) -> bool:
    """Whether a run killed while writing ``destination`` left anything for :func:`recover`."""
    marker = read_marker(files, destination) if files.is_dir(destination) else None
    return bool(
        (marker is not None and marker.get("kind") == STAGING)
        or _temps(files, destination)
        or _siblings(files, destination, STAGING_PREFIX)
        or _siblings(files, destination, OLD_PREFIX)
        or _temps(files, _parent(destination), only_gone=True)
    )


def recover(destination: str, spark: Any = None, kind: str = RESULT) -> str | None:
    """Complete or roll back the commit of a run of ``destination`` that was killed, and remove its leftovers.

    Call it while holding the destination's lock (:class:`crowdspark.io.lock.OutputLock`): every staging or
    moved-aside directory and every temporary file of ``destination`` then belongs to a run that is gone.  What
    a kill after each step of :data:`COMMIT_STEPS` leaves, and what is done:

    * temporary files in the destination (a kill while its final marker was written): deleted;
    * the destination still carries the staging marker (``staging-renamed``): the final marker is written;
    * no destination, a complete staging directory (``old-moved-aside``): the switch is finished;
    * no destination, no complete staging, a moved-aside old result: rolled back to it;
    * then the other staging directories (``staged-complete`` and earlier: the destination is the previous
      result, kept) and moved-aside results (``final-marker``) of ``destination`` are deleted, marker checked
      (a staging directory without a marker only when it holds nothing but temporary files);
    * temporary files beside the destination whose writer is a process gone from this host (a run root's
      ``_LATEST.json`` or marker) are deleted.

    Every step above is one of the commit's own states, so a kill during the recovery is recovered by the
    next run the same way.

    Returns
    -------
    str or None
        What was done (for the log and the run summary), ``None`` when there was nothing to do.
    """
    destination = destination.rstrip("/")
    files = files_for(destination, spark)
    done = []
    for path in _temps(files, destination):
        files.delete(path, recursive=False)
        done.append(f"removed {path}")
    marker = read_marker(files, destination) if files.is_dir(destination) else None
    if marker is not None and marker.get("kind") == STAGING and marker.get("complete"):
        write_marker(files, destination, marker.get("final_kind", kind), **written_files(files, destination))
        done.append("marked the committed result")
    olds = _siblings(files, destination, OLD_PREFIX)
    for old in olds:
        for path in _temps(files, old):
            files.delete(path, recursive=False)
    if not files.exists(destination):
        staged = _complete_staging(files, destination)
        if staged is not None:
            files.rename(staged, destination)
            write_marker(files, destination, kind, **written_files(files, destination))
            done.append(f"finished an interrupted commit ({staged})")
        elif olds:
            newest = max(olds, key=lambda path: (read_marker(files, path) or {}).get("created_at", ""))
            files.rename(newest, destination)
            done.append(f"restored the previous result moved aside by an interrupted commit ({newest})")
    for path in _siblings(files, destination, STAGING_PREFIX):
        if _is_bare_staging(files, path):
            files.delete(path, recursive=True)
        else:
            _delete_leftover(files, path, kind)
        done.append(f"removed {path}")
    for path in _siblings(files, destination, OLD_PREFIX):
        _delete_leftover(files, path, kind)
        done.append(f"removed {path}")
    for path in _temps(files, _parent(destination), only_gone=True):
        files.delete(path, recursive=False)
        done.append(f"removed {path}")
    if not done:
        return None
    report = f"recovered {destination}: " + "; ".join(done)
    log.warning("%s", report)
    return report


def recover_pending(destination: str, spark: Any = None, stale_after: float = 12 * 3600,
                    kind: str = RESULT) -> str | None:
    """:func:`recover` ``destination`` under its lock, if a killed run left anything there; what was done.

    Raises
    ------
    ConfigError
        When a live run holds the lock (what is there is that run's, in progress).
    """
    destination = destination.rstrip("/")
    files = files_for(destination, spark)
    if not _pending(files, destination):
        return None
    with OutputLock(files, destination, stale_after):
        return recover(destination, spark, kind)


def check_replaceable(files: Files, destination: str, kind: str = RESULT, flag: str = "--output") -> None:
    """Refuse a destination a writer must not replace.

    It may be missing, an empty directory, or a crowdspark directory of ``kind`` holding nothing but what
    crowdspark wrote there (the files its marker lists, or for a directory of an earlier version what the
    layout of its kind allows: :func:`crowdspark.io.marker.owned_kind`).  ``flag`` names the option that gave
    the path, for the messages.

    Raises
    ------
    ConfigError
        For a file, a symbolic link, a crowdspark directory of another kind (with ``--output``, a run root of
        ``--run-id`` runs), or a directory holding anything crowdspark did not write there (named, with their
        count).
    """
    refusals = {
        None: f"is {{what}}: crowdspark replaces only an empty directory or a previous crowdspark {kind} holding "
              f"only what crowdspark wrote there, so nothing there is deleted. Choose a new or empty {flag}, or "
              "move those entries out of it",
    }
    if kind == RESULT:
        refusals[RUN_ROOT] = ("holds the runs written with --run-id (run_id=*/ and _LATEST.json): replacing it would "
                              f"delete them all. Pass --run-id ID to add a run, or choose another {flag}")
    _accept_only(files, destination, kind, flag, refusals)


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
    the message of ``refusals`` for the kind found (``None``: not crowdspark's; a kind it does not name: a
    message saying so), where ``{what}`` says what is there."""
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
    other = (f"is {{what}}, not a previous crowdspark {kind}: replacing it would delete what another crowdspark "
             f"command wrote. Choose a new or empty {flag}")
    message = refusals.get(found, refusals[None] if found is None else other)
    raise ConfigError(f"{flag} {path!r} " + message.replace("{what}", describe(files, path)))


def check_outside_owned(path: str, flag: str, fix: str, own_file: str | None = None) -> None:
    """Refuse a local ``path`` to write that is inside a crowdspark directory (:func:`enclosing_owned`): such a
    directory holds only what crowdspark wrote there, and anything else in it stops the next run that
    replaces it.  ``own_file`` names the one file a result may get from this writer (``report.html``).

    Raises
    ------
    ConfigError
        Naming the directory, its kind and ``fix``.
    """
    found = enclosing_owned(path)
    if found is None:
        return
    folder, kind = found
    resolved = os.path.realpath(strip_file_scheme(path))
    if own_file is not None and kind == RESULT and resolved == os.path.join(folder, own_file):
        return
    raise ConfigError(f"{flag} {path!r} is inside the crowdspark {kind} {folder!r}, which holds only what "
                      f"crowdspark wrote there (a file put there would stop the next run that replaces it). {fix}")


def check_items_out(out: str) -> None:
    """Refuse, before anything is read, an ``items --out`` folder the table must not replace: one that is not
    missing, empty or a previous ``items --out`` folder (never a result, a run root or a user's folder), or one
    inside a crowdspark directory.

    Raises
    ------
    ConfigError
    """
    if not is_local(out):
        raise ConfigError(f"--out {out!r} is not a local path: crowdspark items writes the table on this machine's "
                          "disk; give a local folder")
    check_outside_owned(out, "--out", "Choose an --out outside it.")
    check_replaceable(files_for(out), out.rstrip("/"), ITEMS, "--out")


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
    stale_after: float | None = None,
) -> str | None:
    """Refuse, before anything is read, an ``--output`` that a run must not write or replace.

    With ``stale_after``, what a killed run left in the destination (a commit cut short, temporary files) is
    recovered first, under the destination's lock (:func:`recover_pending`), so that it is never refused.

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
    stale_after : float, optional
        Recover first, taking over a lock left on another host after this many seconds.

    Returns
    -------
    str or None
        What the recovery did, ``None`` when nothing (or with no ``stale_after``).

    Raises
    ------
    ConfigError
    """
    if not output_dir.strip():
        raise ConfigError("--output is empty; give the folder the results go to (created if missing)")
    files = files_for(output_dir, spark)
    if len(path_components(output_dir, files)) == 1:
        raise ConfigError(f"--output {output_dir!r} is the root of a file system; give a folder inside it")
    _check_no_overlap(output_dir, inputs or {}, files, spark)
    destination = output_dir.rstrip("/") if run_id is None else run_directory(output_dir, run_id)
    recovered = recover_pending(destination, spark, stale_after, kind) if stale_after is not None else None
    if run_id is not None:
        check_run_root(files, output_dir.rstrip("/"))
    check_replaceable(files, destination, kind)
    return recovered


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
