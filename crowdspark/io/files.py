"""Filesystem access for what crowdspark writes and reads back (results, markers, saved models).

:class:`LocalFiles` uses the Python file API; :class:`HadoopFiles` uses Hadoop's ``FileSystem`` through a
SparkSession (HDFS, S3A, GCS ...); :func:`files_for` picks one for a path.

``write_bytes`` writes every file (markers, ``summary.json``, ``_LATEST.json``, ``chain.json``, saved-model
files) to a temporary name beside it and renames it over the final name, so a reader or a killed writer
finds the old file or the new one, never a truncated one.  The temporary name, :func:`temp_path`, starts
with ``_`` (readers skip it) and names the writer's host and process, so that recovery
(:func:`crowdspark.io.sink.recover`) can delete what a killed writer left without touching a live one's.
"""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from typing import Any, NamedTuple

from crowdspark.errors import ConfigError
from crowdspark.io.killpoint import kill_point
from crowdspark.io.paths import is_local, strip_file_scheme

__all__ = [
    "TEMP_PREFIX",
    "TempName",
    "temp_path",
    "parse_temp_name",
    "LocalFiles",
    "HadoopFiles",
    "Files",
    "files_for",
]


TEMP_PREFIX = "_crowdspark-tmp-"
#: a result being staged beside its destination (:mod:`crowdspark.io.sink`)
STAGING_PREFIX = "_crowdspark-staging-"
#: the previous result, moved aside while a commit replaces it (:mod:`crowdspark.io.sink`)
OLD_PREFIX = "_crowdspark-old-"


class TempName(NamedTuple):
    """What the name of a temporary file (:func:`temp_path`) says: the file it becomes and who wrote it."""

    name: str
    host: str
    pid: int


def temp_path(path: str) -> str:
    """A new temporary path beside ``path``: ``<folder>/_crowdspark-tmp-<name>@<host>@<pid>@<random>``."""
    folder, _, name = path.rpartition("/")
    token = f"{name}@{socket.gethostname()}@{os.getpid()}@{uuid.uuid4().hex[:8]}"
    return f"{folder}/{TEMP_PREFIX}{token}" if folder or path.startswith("/") else f"{TEMP_PREFIX}{token}"


def parse_temp_name(name: str) -> TempName | None:
    """The file, host and process a temporary file's ``name`` records, or ``None`` if it is not one."""
    if not name.startswith(TEMP_PREFIX):
        return None
    parts = name[len(TEMP_PREFIX):].rsplit("@", 3)
    if len(parts) != 4 or not parts[2].isdigit():
        return None
    return TempName(parts[0], parts[1], int(parts[2]))


def _is_checksum(name: str) -> bool:
    """Hadoop's local checksum files (``.name.crc``) beside the files it writes."""
    return name.startswith(".") and name.endswith(".crc")


class LocalFiles:
    """The local filesystem (paths with no scheme, or ``file://``)."""

    local = True

    def exists(self, path: str) -> bool:
        return os.path.lexists(strip_file_scheme(path))

    def is_dir(self, path: str) -> bool:
        path = strip_file_scheme(path)
        return os.path.isdir(path) and not os.path.islink(path)

    def is_link(self, path: str) -> bool:
        return os.path.islink(strip_file_scheme(path))

    def list(self, path: str) -> list[str]:
        """Names in the directory ``path``, without Hadoop checksum files."""
        return sorted(name for name in os.listdir(strip_file_scheme(path)) if not _is_checksum(name))

    def size(self, path: str) -> int:
        """The size of the file ``path`` in bytes."""
        return os.path.getsize(strip_file_scheme(path))

    def entries(self, path: str) -> list[tuple[str, bool]]:
        """``(name, is a directory)`` of the entries of the directory ``path``, without checksum files (a
        symbolic link is not a directory)."""
        with os.scandir(strip_file_scheme(path)) as scan:
            return sorted((e.name, e.is_dir(follow_symlinks=False)) for e in scan if not _is_checksum(e.name))

    def read_bytes(self, path: str) -> bytes:
        with open(strip_file_scheme(path), "rb") as handle:
            return handle.read()

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path``, creating the parent folders: to a temporary name (:func:`temp_path`),
        synced, then renamed over ``path`` (atomic on a POSIX filesystem: readers and a run killed at any
        point find the old file or the new one, and at worst a temporary file)."""
        target = strip_file_scheme(path)
        folder = os.path.dirname(target) or "."
        os.makedirs(folder, exist_ok=True)
        tmp = temp_path(target)
        try:
            with open(tmp, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            kill_point(f"temp-written:{target}")
            os.replace(tmp, target)
        except BaseException:
            if os.path.lexists(tmp):
                os.remove(tmp)
            raise
        _sync_folder(folder)

    def mkdirs(self, path: str) -> None:
        os.makedirs(strip_file_scheme(path), exist_ok=True)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Create the file ``path`` holding ``data`` only if it does not exist (atomic); whether it did."""
        try:
            descriptor = os.open(strip_file_scheme(path), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        return True

    def rename(self, source: str, target: str) -> None:
        os.rename(strip_file_scheme(source), strip_file_scheme(target))

    def replace(self, source: str, target: str) -> None:
        """Rename the file ``source`` over the file ``target``."""
        os.replace(strip_file_scheme(source), strip_file_scheme(target))

    def delete(self, path: str, recursive: bool) -> None:
        """Remove ``path``; a directory only if ``recursive`` or empty."""
        target = strip_file_scheme(path)
        if os.path.isdir(target) and not os.path.islink(target):
            if recursive:
                shutil.rmtree(target)
            else:
                os.rmdir(target)
        else:
            os.remove(target)


class HadoopFiles:
    """Any filesystem Hadoop knows (HDFS, S3A, GCS ...), through the SparkSession's JVM.

    Parameters
    ----------
    spark : SparkSession
    """

    local = False

    def __init__(self, spark: Any) -> None:
        sc = spark.sparkContext
        self._jvm = sc._jvm
        self._gateway = sc._gateway
        self._conf = sc._jsc.hadoopConfiguration()
        self._rename_options = getattr(self._jvm.org.apache.hadoop.fs, "Options$Rename")

    def _fs(self, path: str):
        jpath = self._jvm.org.apache.hadoop.fs.Path(path)
        return jpath.getFileSystem(self._conf), jpath

    def qualified(self, path: str) -> str:
        """``path`` with the scheme and authority of its filesystem (``hdfs:///x`` -> ``hdfs://nn:8020/x``)."""
        fs, jpath = self._fs(path)
        return str(fs.makeQualified(jpath).toString())

    def exists(self, path: str) -> bool:
        fs, jpath = self._fs(path)
        return bool(fs.exists(jpath))

    def is_dir(self, path: str) -> bool:
        fs, jpath = self._fs(path)
        return bool(fs.exists(jpath)) and bool(fs.getFileStatus(jpath).isDirectory())

    def is_link(self, path: str) -> bool:
        return False

    def list(self, path: str) -> list[str]:
        fs, jpath = self._fs(path)
        return sorted(
            name for name in (str(status.getPath().getName()) for status in fs.listStatus(jpath))
            if not _is_checksum(name)
        )

    def size(self, path: str) -> int:
        """The size of the file ``path`` in bytes."""
        fs, jpath = self._fs(path)
        return int(fs.getFileStatus(jpath).getLen())

    def entries(self, path: str) -> list[tuple[str, bool]]:
        """``(name, is a directory)`` of the entries of the directory ``path``, without checksum files (one
        ``listStatus``)."""
        fs, jpath = self._fs(path)
        found = ((str(status.getPath().getName()), bool(status.isDirectory())) for status in fs.listStatus(jpath))
        return sorted((name, is_dir) for name, is_dir in found if not _is_checksum(name))

    def read_bytes(self, path: str) -> bytes:
        fs, jpath = self._fs(path)
        stream = fs.open(jpath)
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path``: to a temporary name (:func:`temp_path`), then renamed over ``path``
        (:meth:`replace`: atomic on HDFS; on object stores the rename is a copy, see ``docs/security.md``)."""
        tmp = temp_path(path)
        fs, jtmp = self._fs(tmp)
        stream = fs.create(jtmp, True)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()
        kill_point(f"temp-written:{path}")
        try:
            self.replace(tmp, path)
        except BaseException:
            fs.delete(jtmp, False)
            raise

    def mkdirs(self, path: str) -> None:
        fs, jpath = self._fs(path)
        if not fs.mkdirs(jpath):
            raise OSError(f"could not create the directory {path}")

    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Create the file ``path`` holding ``data`` only if it does not exist; whether it did.  Atomic on
        filesystems whose ``create(overwrite=false)`` is (HDFS; not object stores such as S3A)."""
        fs, jpath = self._fs(path)
        try:
            stream = fs.create(jpath, False)
        except Exception as exc:  # noqa: BLE001 - py4j wraps Hadoop's FileAlreadyExistsException
            if "FileAlreadyExists" in str(exc) or fs.exists(jpath):
                return False
            raise
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()
        return True

    def rename(self, source: str, target: str) -> None:
        fs, jsource = self._fs(source)
        if not fs.rename(jsource, self._fs(target)[1]):
            raise OSError(f"could not rename {source} to {target}")

    def replace(self, source: str, target: str) -> None:
        """Rename the file ``source`` over the file ``target``: one ``FileContext.rename`` with ``OVERWRITE``
        where the filesystem has a ``FileContext`` binding (atomic on HDFS), else delete ``target`` and rename
        (a kill in between leaves no ``target`` and ``source`` complete)."""
        fs, jtarget = self._fs(target)
        jtarget, jsource = fs.makeQualified(jtarget), fs.makeQualified(self._fs(source)[1])
        try:
            context = self._jvm.org.apache.hadoop.fs.FileContext.getFileContext(jtarget.toUri(), self._conf)
        except Exception:  # noqa: BLE001 - py4j wraps UnsupportedFileSystemException: no FileContext binding
            context = None
        if context is not None:
            overwrite = self._gateway.new_array(self._rename_options, 1)
            overwrite[0] = self._rename_options.OVERWRITE
            context.rename(jsource, jtarget, overwrite)
            return
        if fs.exists(jtarget):
            fs.delete(jtarget, False)
        self.rename(source, target)

    def delete(self, path: str, recursive: bool) -> None:
        fs, jpath = self._fs(path)
        if not fs.delete(jpath, recursive) and fs.exists(jpath):
            raise OSError(f"could not delete {path}")


def _sync_folder(folder: str) -> None:
    """Make a rename in ``folder`` durable (``fsync`` of the folder; skipped where folders cannot be opened)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


Files = LocalFiles | HadoopFiles


def files_for(path: str, spark: Any = None, what: str = "--output") -> Files:
    """The filesystem of ``path``: local, or Hadoop's through ``spark``.

    Raises
    ------
    ConfigError
        For a non-local path without a SparkSession.
    """
    if is_local(path):
        return LocalFiles()
    if spark is None:
        raise ConfigError(
            f"{what} {path!r} is not a local path: writing there needs the spark engine (--engine spark), "
            "or give a local path"
        )
    return HadoopFiles(spark)
