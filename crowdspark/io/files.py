"""Filesystem access for what crowdspark writes and reads back (results, markers, saved models).

:class:`LocalFiles` uses the Python file API; :class:`HadoopFiles` uses Hadoop's ``FileSystem`` through a
SparkSession (HDFS, S3A, GCS ...); :func:`files_for` picks one for a path.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from crowdspark.errors import ConfigError
from crowdspark.io.paths import is_local, strip_file_scheme

__all__ = [
    "LocalFiles",
    "HadoopFiles",
    "Files",
    "files_for",
]


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
        """Write ``data`` to ``path`` (replacing it), creating the parent folders."""
        target = strip_file_scheme(path)
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        with open(target, "wb") as handle:
            handle.write(data)

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
        self._conf = sc._jsc.hadoopConfiguration()

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
        fs, jpath = self._fs(path)
        stream = fs.create(jpath, True)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()

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
        fs, jtarget = self._fs(target)
        if fs.exists(jtarget):
            fs.delete(jtarget, False)
        self.rename(source, target)

    def delete(self, path: str, recursive: bool) -> None:
        fs, jpath = self._fs(path)
        if not fs.delete(jpath, recursive) and fs.exists(jpath):
            raise OSError(f"could not delete {path}")


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
