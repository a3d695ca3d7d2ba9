"""One writer per output: a run holds a lock on the directory it will write, from before it reads anything until
its result is committed.

The lock is a file beside the destination, ``_crowdspark-lock-<name>`` (the ``_`` prefix makes Spark's and
pandas' readers skip it), created only if it does not exist (``O_EXCL`` locally, ``create(overwrite=false)``
on Hadoop filesystems: atomic on HDFS, not on object stores such as S3A), holding who took it: process id,
host, start time and a random token.  A second run of the same output finds it and stops with exit 2, saying
who holds it.  A lock left by a killed run is taken over when its process is gone from this host, or when it is
older than ``stale_after`` seconds (a run on another host cannot be checked).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from typing import Any

from crowdspark.errors import ConfigError, is_permission_error, one_line
from crowdspark.io.files import Files

__all__ = ["OutputLock", "LOCK_PREFIX", "lock_path", "process_alive"]

log = logging.getLogger(__name__)

LOCK_PREFIX = "_crowdspark-lock-"


def lock_path(destination: str) -> str:
    """The lock file of ``destination``: ``<parent>/_crowdspark-lock-<name>``."""
    parent, _, name = destination.rstrip("/").rpartition("/")
    return f"{parent or '.'}/{LOCK_PREFIX}{name}"


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this host (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class OutputLock:
    """The lock of one output directory (a context manager).

    Parameters
    ----------
    files : Files
        The output's filesystem.
    destination : str
        The directory the run writes.
    stale_after : float
        Seconds after which a lock taken on another host counts as left by a killed run.
    """

    def __init__(self, files: Files, destination: str, stale_after: float = 12 * 3600) -> None:
        self.files = files
        self.destination = destination.rstrip("/")
        self.path = lock_path(self.destination)
        self.stale_after = stale_after
        self.token = uuid.uuid4().hex
        self.held = False

    def _document(self) -> bytes:
        return json.dumps({
            "crowdspark": "lock", "destination": self.destination, "pid": os.getpid(),
            "host": socket.gethostname(), "started": time.time(), "token": self.token,
        }).encode("utf-8")

    def _holder(self) -> dict[str, Any] | None:
        try:
            holder = json.loads(self.files.read_bytes(self.path).decode("utf-8"))
        except (OSError, ValueError):
            return None
        return holder if isinstance(holder, dict) else None

    def _stale(self, holder: dict[str, Any] | None) -> bool:
        if holder is None:  # unreadable: a writer killed while writing it
            return True
        if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
            return not process_alive(holder["pid"])
        return time.time() - float(holder.get("started", 0)) > self.stale_after

    def acquire(self) -> None:
        """Take the lock, or take over a stale one.

        Raises
        ------
        ConfigError
            When another run holds it.
        """
        for _ in range(2):
            if self._create():
                self.held = True
                return
            holder = self._holder()
            if not self._stale(holder):
                raise self._held_by(holder)
            log.warning("taking over the lock %s left by a run that is gone (%s)", self.path, holder)
            self.files.delete(self.path, recursive=False)
        raise ConfigError(f"could not take the lock {self.path!r}: another run took it meanwhile; try again")

    def _create(self) -> bool:
        try:
            self.files.mkdirs(self.path.rpartition("/")[0] or ".")
            return self.files.create_exclusive(self.path, self._document())
        except Exception as exc:
            if not is_permission_error(exc):
                raise
            raise ConfigError(f"cannot write beside --output {self.destination!r} (the lock {self.path!r}): "
                              f"{one_line(exc)}; give an --output the job can write") from None

    def check_free(self) -> None:
        """Refuse early, without taking the lock, when another live run holds it.

        Raises
        ------
        ConfigError
        """
        if not self.files.exists(self.path):
            return
        holder = self._holder()
        if not self._stale(holder):
            raise self._held_by(holder)

    def _held_by(self, holder: dict[str, Any]) -> ConfigError:
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(holder.get("started", 0))))
        return ConfigError(
            f"another run is writing {self.destination!r} (process {holder.get('pid')} on {holder.get('host')}, "
            f"since {since}); wait for it to finish. If no run is active (it was killed on another machine), "
            f"delete {self.path!r}"
        )

    def release(self) -> None:
        """Delete the lock file if this run still holds it."""
        if not self.held:
            return
        holder = self._holder()
        if holder is not None and holder.get("token") == self.token:
            self.files.delete(self.path, recursive=False)
        self.held = False

    def __enter__(self) -> OutputLock:
        self.acquire()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.release()
