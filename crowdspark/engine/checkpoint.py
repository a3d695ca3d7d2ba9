"""Checkpoints of a running fit, so that a killed driver restarted with the same command resumes.

Every ``every`` sweeps the fit loop saves, into ``directory``:

* ``states-<sweep>/``: the per-item state of every block (stateful models only), written by the engine
  (the Spark engine with ``saveAsPickleFile``, keyed by each block's first item id);
* ``driver.pkl``: the sweep number, the global parameters, the history, the initialization statistics and
  counts, and a *fingerprint* of the run (algorithm, parameters, seed, inputs, block layout), written to a
  temporary name and renamed, so it always describes a complete checkpoint.

There is no random-stream position to save: every draw is a function of (seed, sweep, item key)
(:mod:`crowdspark.rng`), so resuming at sweep ``s + 1`` draws exactly what an uninterrupted run draws.  A
checkpoint whose fingerprint differs from the current run's is refused with an error (the data or the
configuration changed; delete it to start over).  The directory is removed when the fit completes.

The driver file is written with Python's file API: ``directory`` must be a path the driver can write
(local disk, or a shared mount in cluster mode); the states go wherever Spark can write.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import shutil
from typing import Any

from crowdspark.errors import ConfigError

__all__ = ["Checkpointer"]

log = logging.getLogger(__name__)


class Checkpointer:
    """Saves and finds the checkpoint of one run.

    Parameters
    ----------
    directory : str
    every : int
        Save after every ``every``-th sweep.
    fingerprint : dict
        JSON-serializable description of the run; a checkpoint is resumed only if it matches.
    """

    def __init__(self, directory: str, every: int, fingerprint: dict[str, Any]) -> None:
        self.directory = directory
        self.every = every
        self.fingerprint = json.loads(json.dumps(fingerprint, sort_keys=True, default=str))

    @property
    def _driver_file(self) -> str:
        return os.path.join(self.directory, "driver.pkl")

    def load(self) -> dict[str, Any] | None:
        """The saved driver state, or ``None`` when there is no checkpoint.

        Raises
        ------
        ConfigError
            If the checkpoint belongs to another run.
        """
        if not os.path.exists(self._driver_file):
            return None
        with open(self._driver_file, "rb") as handle:
            saved = pickle.load(handle)
        if saved["fingerprint"] != self.fingerprint:
            changed = sorted(
                k for k in set(saved["fingerprint"]) | set(self.fingerprint)
                if saved["fingerprint"].get(k) != self.fingerprint.get(k)
            )
            raise ConfigError(
                f"the checkpoint in {self.directory!r} belongs to a different run (changed: {', '.join(changed)}); "
                "delete that directory to start over, or set another engine.checkpoint_dir"
            )
        log.info("resuming from the checkpoint of sweep %d in %s", saved["sweep"], self.directory)
        return saved

    def due(self, sweep: int) -> bool:
        return self.every > 0 and sweep % self.every == 0

    def save(self, sweep: int, driver_state: dict[str, Any], engine: Any, stateful: bool) -> None:
        """Save the states (if any) and then the driver state of ``sweep``; drop the older checkpoint."""
        os.makedirs(self.directory, exist_ok=True)
        states_dir = None
        if stateful:
            states_dir = os.path.join(self.directory, f"states-{sweep}")
            if os.path.exists(states_dir):
                shutil.rmtree(states_dir)
            engine.save_states(states_dir)
        previous = self._previous_states()
        payload = dict(driver_state, sweep=sweep, states=states_dir, fingerprint=self.fingerprint)
        tmp = self._driver_file + ".tmp"
        with open(tmp, "wb") as handle:
            pickle.dump(payload, handle, protocol=5)
        os.replace(tmp, self._driver_file)
        if previous and previous != states_dir:
            shutil.rmtree(previous, ignore_errors=True)
        log.info("checkpoint of sweep %d saved in %s", sweep, self.directory)

    def _previous_states(self) -> str | None:
        if not os.path.exists(self._driver_file):
            return None
        with open(self._driver_file, "rb") as handle:
            return pickle.load(handle).get("states")

    def clear(self) -> None:
        """Remove the checkpoint (the fit completed)."""
        shutil.rmtree(self.directory, ignore_errors=True)
