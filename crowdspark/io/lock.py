"""One writer per output: a run holds a lock on the directory it will write, from before it reads anything until
its result is committed.

The lock is a file beside the destination, ``_crowdspark-lock-<name>`` (the ``_`` prefix makes Spark's and
pandas' readers skip it).  Its JSON says who holds it (process id, host, start time, a random token) for the
message a second run stops with (:class:`~crowdspark.errors.OutputBusyError`, exit 75: it can succeed later).
Two protocols decide who holds it:

- **kernel** (local filesystems): the holder keeps an exclusive ``flock`` on the file.  The kernel releases it
  when the holder ends, however it ends, so nobody judges whether a lock is stale: a file nobody has locked is
  free, whatever its JSON says.  After locking, the holder checks that the path still names the file it
  locked (a holder that releases deletes the file, under its lock, and another process may have opened it
  just before).
- **exclusive create** (Hadoop filesystems): the lock is created only if absent (``create(overwrite=false)``:
  atomic on HDFS, not on object stores such as S3A).  A lock whose process is gone from this host, or older
  than ``stale_after`` seconds (a process on another host cannot be checked), is taken over by one run only:
  the one that creates ``_crowdspark-locktakeover-<digest>-<name>``, keyed by the content it judged; it
  renames the lock to a name of its own, checks that what it moved is what it judged, deletes it and creates
  its own.  An empty or half-written lock is never judged stale (its writer may be writing it).

Either way a file at the lock's path that is not crowdspark's lock (a user's file, a folder, a link) is never
overwritten or deleted: the run stops and names it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import math
import os
import socket
import stat
import time
import uuid
from typing import Any

from crowdspark.errors import ConfigError, OutputBusyError, is_permission_error, one_line
from crowdspark.io.files import Files
from crowdspark.io.paths import strip_file_scheme

try:
    import fcntl
except ImportError:  # not a POSIX system: the exclusive-create protocol everywhere
    fcntl = None

__all__ = ["OutputLock", "LOCK_PREFIX", "TAKEOVER_PREFIX", "lock_path", "process_alive"]

log = logging.getLogger(__name__)

LOCK_PREFIX = "_crowdspark-lock-"
TAKEOVER_PREFIX = "_crowdspark-locktakeover-"
MOVED_PREFIX = "_crowdspark-lockmoved-"

_HEADER = b'{"crowdspark": "lock"'  # how every lock crowdspark writes begins
_POLL = 0.01  # seconds between two tries of a lock another process holds
_TRIES = 100_000  # tries of the kernel protocol before giving up (each waits _POLL or sees the lock change)
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


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


def _classify(data: bytes) -> tuple[str, dict[str, Any] | None]:
    """What a lock file holds: ``"lock"`` (crowdspark's record, parsed), ``"unwritten"`` (empty, or the start
    of a record being written) or ``"foreign"`` (anything else: a user's file)."""
    if not data.strip() or _HEADER.startswith(data):
        return "unwritten", None
    if not data.startswith(_HEADER):
        return "foreign", None
    try:
        record = json.loads(data.decode("utf-8"))
    except ValueError:
        return "unwritten", None
    return ("lock", record) if isinstance(record, dict) else ("foreign", None)


def _is_pid(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _is_time(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _since(started: Any) -> str:
    if _is_time(started):
        try:
            return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started))
        except (OverflowError, OSError, ValueError):
            pass
    return f"an unreadable time {started!r}"


def _describe(record: dict[str, Any] | None) -> str:
    """Who holds a lock, for a message: ``process P on HOST, since TIME``."""
    if record is None:
        return "it has not written who it is yet"
    return f"process {record.get('pid')} on {record.get('host')}, since {_since(record.get('started'))}"


class OutputLock:
    """The lock of one output directory (a context manager).

    Parameters
    ----------
    files : Files
        The output's filesystem.
    destination : str
        The directory the run writes.
    stale_after : float
        Exclusive-create protocol: seconds after which a lock taken on another host counts as left by a killed
        run.
    kernel : bool, optional
        Whether to hold the lock with ``flock`` (default: on local filesystems of a POSIX system); ``False``
        uses the exclusive-create protocol of Hadoop filesystems (tests run it on a local filesystem).
    patience : float
        Kernel protocol: seconds to retry a lock another process holds before refusing (``check_free`` of
        another run holds it for an instant).
    """

    def __init__(self, files: Files, destination: str, stale_after: float = 12 * 3600, kernel: bool | None = None,
                 patience: float = 1.0) -> None:
        self.files = files
        self.destination = destination.rstrip("/")
        self.path = lock_path(self.destination)
        self._os_path = strip_file_scheme(self.path)  # the kernel protocol's (a local path)
        self.stale_after = stale_after
        self.kernel = (files.local and fcntl is not None) if kernel is None else kernel
        self.patience = patience
        self.token = uuid.uuid4().hex
        self.held = False
        self._descriptor: int | None = None

    def _document(self) -> bytes:
        return json.dumps({
            "crowdspark": "lock", "destination": self.destination, "pid": os.getpid(),
            "host": socket.gethostname(), "started": time.time(), "token": self.token,
        }).encode("utf-8")

    def acquire(self) -> None:
        """Take the lock.

        Raises
        ------
        ConfigError
            When another run holds it, when the lock's path holds something else than crowdspark's lock, or
            when it cannot be created.
        """
        if self.kernel:
            self._acquire_kernel()
        else:
            self._acquire_created(self._create(self._document()))

    def check_free(self) -> None:
        """Refuse early, without taking the lock, when another live run holds it.

        Raises
        ------
        ConfigError
        """
        if self.kernel:
            self._check_kernel()
            return
        data = self._read(self.path)
        if data is not None:
            self._judge(data)

    def release(self) -> None:
        """Delete the lock file if this run still holds it."""
        if not self.held:
            return
        self.held = False
        if self._descriptor is not None:
            descriptor, self._descriptor = self._descriptor, None
            try:
                if self._names(descriptor):
                    os.unlink(self._os_path)
            finally:
                os.close(descriptor)  # releases the flock
            return
        data = self._read(self.path)
        record = _classify(data)[1] if data is not None else None
        if record is not None and record.get("token") == self.token:
            self.files.delete(self.path, recursive=False)

    def __enter__(self) -> OutputLock:
        self.acquire()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.release()

    # the kernel protocol

    def _acquire_kernel(self) -> None:
        deadline = time.monotonic() + self.patience
        for _ in range(_TRIES):
            created = self._create(b"")
            descriptor = self._open(os.O_RDWR)
            if descriptor is None:  # deleted by a holder releasing it since: create it again
                continue
            try:
                outcome = self._lock(descriptor, fcntl.LOCK_EX)
                if outcome == "unsupported":
                    log.warning("the filesystem of %s has no file locks: exclusive create decides", self.path)
                    self.kernel = False
                    if created:
                        self.files.write_bytes(self.path, self._document())
                    self._acquire_created(created)
                    return
                if outcome == "locked" and self._names(descriptor):
                    self._take(descriptor)
                    self._descriptor, descriptor = descriptor, None
                    self.held = True
                    return
                if outcome == "busy" and time.monotonic() >= deadline:
                    raise self._held_by(_classify(self._read(self.path) or b"")[1])
            finally:
                if descriptor is not None:
                    os.close(descriptor)
            if outcome == "busy":
                time.sleep(_POLL)
        raise OutputBusyError(f"could not take the lock {self.path!r}: other runs keep taking and releasing it; "
                              "try again")

    def _take(self, descriptor: int) -> None:
        """Write this run's record into the lock file it has locked (a user's file is left as it is)."""
        data = _read_descriptor(descriptor)
        kind, record = _classify(data)
        if kind == "foreign":
            raise self._foreign("a file that is not crowdspark's lock")
        if kind == "lock":
            log.info("took the lock %s, no longer held by %s", self.path, _describe(record))
        document = self._document()
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, document, 0)

    def _check_kernel(self) -> None:
        descriptor = self._open(os.O_RDONLY)
        if descriptor is None:
            return
        try:
            kind, record = _classify(_read_descriptor(descriptor))
            if kind == "foreign":
                raise self._foreign("a file that is not crowdspark's lock")
            if self._lock(descriptor, fcntl.LOCK_SH) == "busy":
                raise self._held_by(record)
        finally:
            os.close(descriptor)

    def _open(self, flags: int) -> int | None:
        """A descriptor of the lock file (a regular file, links not followed), or ``None`` if it is gone."""
        try:
            descriptor = os.open(self._os_path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EISDIR):
                raise self._foreign("a symbolic link" if exc.errno == errno.ELOOP else "a directory") from None
            raise self._cannot_write(exc) from None
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            os.close(descriptor)
            raise self._foreign("not a regular file")
        return descriptor

    @staticmethod
    def _lock(descriptor: int, kind: int) -> str:
        """``flock`` without waiting: ``"locked"``, ``"busy"`` (another holds it) or ``"unsupported"``."""
        try:
            fcntl.flock(descriptor, kind | fcntl.LOCK_NB)
        except BlockingIOError:
            return "busy"
        except OSError as exc:
            if exc.errno in _NO_LOCKS:
                return "unsupported"
            raise
        return "locked"

    def _names(self, descriptor: int) -> bool:
        """Whether the lock's path still names the file open as ``descriptor``."""
        try:
            current = os.stat(self._os_path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        opened = os.fstat(descriptor)
        return (current.st_dev, current.st_ino) == (opened.st_dev, opened.st_ino)

    # the exclusive-create protocol

    def _acquire_created(self, created: bool) -> None:
        for _ in range(4):
            if created:
                self.held = True
                return
            data = self._read(self.path)
            if data is not None:
                self._judge(data)
                self._take_over(data)
            created = self._create(self._document())
        raise OutputBusyError(f"could not take the lock {self.path!r}: other runs took it meanwhile; try again")

    def _judge(self, data: bytes) -> None:
        """Return if the lock holding ``data`` was left by a run that is gone, else raise why it is kept."""
        kind, record = _classify(data)
        if kind == "foreign":
            raise self._foreign("a file that is not crowdspark's lock")
        if kind == "unwritten":
            raise ConfigError(
                f"another run is taking the lock of {self.destination!r}: {self.path!r} has no record yet; try "
                f"again. If no run is active (one was killed while it created the lock), delete {self.path!r}")
        pid, host, started = record.get("pid"), record.get("host"), record.get("started")
        if host == socket.gethostname() and _is_pid(pid):
            alive = process_alive(pid)
        elif _is_time(started):
            alive = time.time() - started <= self.stale_after
        else:
            raise ConfigError(
                f"the lock {self.path!r} of {self.destination!r} has a record that cannot be judged (pid {pid!r}, "
                f"host {host!r}, started {started!r}: a process of this host, or a start time in seconds, is "
                f"needed); if no run is writing {self.destination!r}, delete {self.path!r}")
        if alive:
            raise self._held_by(record)

    def _take_over(self, data: bytes) -> None:
        """Remove the stale lock holding ``data``, if no other run is taking it over and it is still there."""
        parent, _, name = self.path.rpartition("/")
        name = name[len(LOCK_PREFIX):]
        digest = hashlib.sha256(data).hexdigest()[:16]
        claim = f"{parent}/{TAKEOVER_PREFIX}{digest}-{name}"
        if not self.files.create_exclusive(claim, self._document()):
            raise ConfigError(
                f"another run is taking over the lock {self.path!r} of {self.destination!r} left by "
                f"{_describe(_classify(data)[1])}; try again. If no run is active, delete {claim!r}")
        try:
            if self._read(self.path) != data:
                return
            moved = f"{parent}/{MOVED_PREFIX}{self.token}-{name}"
            try:
                self.files.rename(self.path, moved)
            except OSError:
                return
            if self._read(moved) == data:
                log.warning("took over the lock %s left by %s, which is gone", self.path, _describe(_classify(data)[1]))
                self.files.delete(moved, recursive=False)
            else:
                self._put_back(moved)
        finally:
            self.files.delete(claim, recursive=False)

    def _put_back(self, moved: str) -> None:
        """Return a lock moved by mistake (its run released the judged one and another run created it)."""
        data = self._read(moved)
        if data is None or self.files.create_exclusive(self.path, data):
            if data is not None:
                self.files.delete(moved, recursive=False)
            return
        log.error("moved the lock %s of a live run to %s and could not put it back: another run took %s",
                  self.path, moved, self.path)

    def _read(self, path: str) -> bytes | None:
        """The bytes of ``path``, or ``None`` if there is no such file (it may be created again meanwhile: a
        failed read is retried while the file exists)."""
        if self.files.is_link(path):
            raise self._foreign("a symbolic link")
        for attempt in range(3):
            try:
                return self.files.read_bytes(path)
            except FileNotFoundError:
                return None
            except Exception:  # noqa: BLE001 - py4j wraps Hadoop's FileNotFoundException
                if self.files.is_dir(path):
                    raise self._foreign("a directory") from None
                if not self.files.exists(path):
                    return None
                if attempt == 2:
                    raise
        return None

    # both

    def _create(self, data: bytes) -> bool:
        """Create the lock file holding ``data`` if there is none; whether this did."""
        try:
            self.files.mkdirs(self.path.rpartition("/")[0] or ".")
            return self.files.create_exclusive(self.path, data)
        except Exception as exc:
            raise self._cannot_write(exc) from None

    def _cannot_write(self, exc: Exception) -> Exception:
        if not is_permission_error(exc):
            return exc
        return ConfigError(f"cannot write beside --output {self.destination!r} (the lock {self.path!r}): "
                           f"{one_line(exc)}; give an --output the job can write")

    def _foreign(self, what: str) -> ConfigError:
        return ConfigError(
            f"{self.path!r}, the lock of {self.destination!r}, is {what}; crowdspark neither overwrites nor "
            f"deletes it: move it elsewhere, or write another --output")

    def _held_by(self, record: dict[str, Any] | None) -> OutputBusyError:
        if self.kernel:
            after = " (the lock is released when that process ends)"
        else:
            after = f". If no run is active (it was killed on another machine), delete {self.path!r}"
        return OutputBusyError(f"another run is writing {self.destination!r} ({_describe(record)}); wait for it to "
                           f"finish{after}")


def _read_descriptor(descriptor: int) -> bytes:
    """Everything in the open file ``descriptor``, from its start."""
    chunks, offset = [], 0
    while True:
        chunk = os.pread(descriptor, 1 << 16, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)
