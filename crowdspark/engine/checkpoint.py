"""Checkpoints of a running fit, so that a killed driver restarted with the same command resumes.

Every ``every`` sweeps the fit loop saves, into ``directory`` (``engine.checkpoint_dir``):

* ``crowdspark-checkpoint-<sweep>/``: a folder with crowdspark's marker (kind ``checkpoint``, and a
  digest of the run's fingerprint), holding ``driver.npz`` (the global parameters, the history, the
  initialization statistics and counts, :mod:`crowdspark.io.datatree`) and, for stateful models,
  ``states/``: the per-item state of every block keyed by the block's first item id, written by the
  engine (the local engine: one ``states.npz``; the Spark engine: a Parquet table of (block, npz bytes));
* ``crowdspark-checkpoint.json``: which sweep is the checkpoint, and the run's *fingerprint*
  (algorithm, parameters, seed, inputs, block layout); written to a temporary name and renamed, after the
  folder is complete, so it always names a complete checkpoint.  The older folder is deleted after.

Nothing read back is a pickle: a checkpoint directory on a shared mount cannot make the job run code.  A
``driver.pkl`` (the pickle format of earlier versions) is refused with an error and never opened.

There is no random-stream position to save: every draw is a function of (seed, sweep, item key)
(:mod:`crowdspark.rng`), so resuming at sweep ``s + 1`` draws exactly what an uninterrupted run draws.  A
checkpoint whose fingerprint differs from the current run's is refused with an error (the data or the
configuration changed; delete it to start over).  When the fit completes, :meth:`Checkpointer.clear`
deletes this run's checkpoint files (marker checked), and ``directory`` itself only if crowdspark created
it and nothing else is left in it.

``directory`` must be a path the driver can write (local disk, or a shared mount in cluster mode, which
the executors then also write the states to).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from typing import Any

from crowdspark.errors import ConfigError
from crowdspark.io.datatree import load_tree, save_tree
from crowdspark.io.files import LocalFiles
from crowdspark.io.marker import CHECKPOINT, CHECKPOINT_DIR, MARKER, delete_owned, read_marker, write_marker
from crowdspark.io.paths import is_local, strip_file_scheme

__all__ = ["Checkpointer", "POINTER", "LEGACY_DRIVER_FILE"]

log = logging.getLogger(__name__)

#: the file naming the current checkpoint
POINTER = "crowdspark-checkpoint.json"
#: the driver state of checkpoints written by earlier versions (a pickle: never loaded)
LEGACY_DRIVER_FILE = "driver.pkl"
FORMAT = 2
_FOLDER = re.compile(r"crowdspark-checkpoint-(\d+)")


class Checkpointer:
    """Saves and finds the checkpoint of one run.

    Parameters
    ----------
    directory : str
        A local path (or ``file://`` URI) the driver can write.
    every : int
        Save after every ``every``-th sweep.
    fingerprint : dict
        JSON-serializable description of the run; a checkpoint is resumed only if it matches.

    Raises
    ------
    ConfigError
        If ``directory`` is not a local path.
    """

    def __init__(self, directory: str, every: int, fingerprint: dict[str, Any]) -> None:
        if not is_local(directory):
            raise ConfigError(
                f"engine.checkpoint_dir must be a path the driver can write (local disk or a shared mount), "
                f"but got {directory!r}; set engine.checkpoint_dir to such a path"
            )
        self.directory = strip_file_scheme(directory)
        self.every = every
        self.fingerprint = json.loads(json.dumps(fingerprint, sort_keys=True, default=str))
        self.run = hashlib.sha256(json.dumps(self.fingerprint, sort_keys=True).encode("utf-8")).hexdigest()[:16]
        self._files = LocalFiles()

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    @staticmethod
    def _folder(sweep: int) -> str:
        return f"crowdspark-checkpoint-{sweep}"

    def load(self) -> dict[str, Any] | None:
        """The saved driver state (with ``sweep`` and the ``states`` folder), or ``None`` when there is none.

        Raises
        ------
        ConfigError
            If the checkpoint belongs to another run, is damaged, or was written by an earlier version.
        """
        self._refuse_legacy()
        pointer = self._read_pointer()
        if pointer is None:
            return None
        saved_fingerprint = pointer.get("fingerprint")
        if saved_fingerprint != self.fingerprint:
            saved_fingerprint = saved_fingerprint if isinstance(saved_fingerprint, dict) else {}
            changed = sorted(
                k for k in set(saved_fingerprint) | set(self.fingerprint)
                if saved_fingerprint.get(k) != self.fingerprint.get(k)
            )
            raise ConfigError(
                f"the checkpoint in {self.directory!r} belongs to a different run (changed: {', '.join(changed)}); "
                f"delete {POINTER} and the crowdspark-checkpoint-* folders there to start over, or set another "
                "engine.checkpoint_dir"
            )
        sweep = pointer["sweep"]
        folder = self._path(self._folder(sweep))
        marker = read_marker(self._files, folder)
        try:
            if marker is None or marker.get("kind") != CHECKPOINT:
                raise ValueError(f"{folder} has no checkpoint marker")
            driver = load_tree(os.path.join(folder, "driver.npz"))
            if not isinstance(driver, dict):
                raise ValueError("driver.npz does not hold a driver state")
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"the checkpoint of sweep {sweep} in {self.directory!r} cannot be read ({exc}); delete {POINTER} "
                "and the crowdspark-checkpoint-* folders there to start over"
            ) from exc
        log.info("resuming from the checkpoint of sweep %d in %s", sweep, self.directory)
        return dict(driver, sweep=sweep, states=os.path.join(folder, "states"))

    def _refuse_legacy(self) -> None:
        legacy = self._path(LEGACY_DRIVER_FILE)
        if os.path.lexists(legacy):
            raise ConfigError(
                f"{legacy!r} is a checkpoint written by an older version of crowdspark, as a pickle; this version "
                "never loads pickles (loading one can run any code). Delete it and the states-* folders beside it "
                "(the fit then starts from the beginning), or set another engine.checkpoint_dir"
            )

    def _read_pointer(self) -> dict[str, Any] | None:
        path = self._path(POINTER)
        if not os.path.exists(path):
            return None
        try:
            with open(path, "rb") as handle:
                pointer = json.loads(handle.read().decode("utf-8"))
            if not isinstance(pointer, dict) or pointer.get("kind") != CHECKPOINT or pointer.get("format") != FORMAT:
                raise ValueError("not a crowdspark checkpoint of this format")
            sweep = pointer.get("sweep")
            if not isinstance(sweep, int) or isinstance(sweep, bool) or sweep < 0:
                raise ValueError(f"sweep {sweep!r} is not a sweep number")
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"{path!r} is not a readable crowdspark checkpoint ({exc}); delete it to start over, or set "
                "another engine.checkpoint_dir"
            ) from exc
        return pointer

    def due(self, sweep: int) -> bool:
        return self.every > 0 and sweep % self.every == 0

    def save(self, sweep: int, driver_state: dict[str, Any], engine: Any, stateful: bool) -> None:
        """Save the states (if any) and the driver state of ``sweep``; then point at it, drop the older one."""
        self._make_directory()
        folder = self._path(self._folder(sweep))
        if os.path.lexists(folder):  # left by a run killed while saving this sweep
            delete_owned(self._files, folder, (CHECKPOINT,), f"Move it out of {self.directory!r}.")
        os.makedirs(folder)
        write_marker(self._files, folder, CHECKPOINT, run=self.run, sweep=sweep)
        if stateful:
            engine.save_states(os.path.join(folder, "states"))
        save_tree(os.path.join(folder, "driver.npz"), driver_state)
        previous = self._current_sweep()
        pointer = {"kind": CHECKPOINT, "format": FORMAT, "sweep": sweep, "run": self.run, "fingerprint": self.fingerprint}
        tmp = self._path(POINTER + ".tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(pointer, handle, indent=2, sort_keys=True)
        os.replace(tmp, self._path(POINTER))
        if previous is not None and previous != sweep:
            self._delete_folder(previous)
        log.info("checkpoint of sweep %d saved in %s", sweep, self.directory)

    def _make_directory(self) -> None:
        """Create ``directory`` if needed, marking it as created by crowdspark (so that :meth:`clear` may
        remove it once it is empty)."""
        if os.path.isdir(self.directory):
            return
        os.makedirs(self.directory)
        write_marker(self._files, self.directory, CHECKPOINT_DIR)

    def _current_sweep(self) -> int | None:
        """The sweep the pointer names, if it is this run's."""
        try:
            pointer = self._read_pointer()
        except ConfigError:
            return None
        return pointer["sweep"] if pointer is not None and pointer.get("run") == self.run else None

    def _ours(self, sweep: int) -> bool:
        """Whether ``crowdspark-checkpoint-<sweep>/`` carries the checkpoint marker of this run."""
        marker = read_marker(self._files, self._path(self._folder(sweep)))
        return marker is not None and marker.get("kind") == CHECKPOINT and marker.get("run") == self.run

    def _delete_folder(self, sweep: int) -> None:
        folder = self._path(self._folder(sweep))
        if not self._ours(sweep):
            log.warning("kept %s: it is not a checkpoint of this run", folder)
            return
        delete_owned(self._files, folder, (CHECKPOINT,), f"Move it out of {self.directory!r}.")

    def clear(self) -> None:
        """Delete this run's checkpoint (the fit completed): its folders and pointer, nothing else.

        ``directory`` itself goes only if crowdspark created it and nothing else is left in it.
        """
        if not os.path.isdir(self.directory):
            return
        for name in os.listdir(self.directory):
            match = _FOLDER.fullmatch(name)
            if match and name == self._folder(int(match.group(1))) and self._ours(int(match.group(1))):
                self._delete_folder(int(match.group(1)))
        for name in (POINTER, POINTER + ".tmp"):
            if self._pointer_is_ours(self._path(name)):
                os.remove(self._path(name))
        self._remove_directory_if_created()
        log.info("checkpoint in %s cleared", self.directory)

    def _pointer_is_ours(self, path: str) -> bool:
        try:
            with open(path, "rb") as handle:
                pointer = json.loads(handle.read().decode("utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(pointer, dict) and pointer.get("kind") == CHECKPOINT and pointer.get("run") == self.run

    def _remove_directory_if_created(self) -> None:
        marker = read_marker(self._files, self.directory)
        if marker is None or marker.get("kind") != CHECKPOINT_DIR or os.listdir(self.directory) != [MARKER]:
            return
        os.remove(self._path(MARKER))
        try:
            os.rmdir(self.directory)
        except OSError:  # something appeared meanwhile: it stays
            write_marker(self._files, self.directory, CHECKPOINT_DIR)
