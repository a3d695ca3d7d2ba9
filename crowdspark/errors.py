"""Errors a user can act on.

``InputError`` (bad labels or gold data) and ``ConfigError`` (bad parameters or configuration) carry a
message that says what is wrong, where, and how to fix it.  The command line prints the message without a
traceback and exits with :data:`EXIT_BAD_INPUT`; any other exception is a failure (:data:`EXIT_FAILURE`).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
    "CrowdsparkError", "InputError", "ConfigError", "IncompatibleModelError", "RUN_COLD", "EXIT_OK", "EXIT_FAILURE",
    "EXIT_BAD_INPUT", "one_line", "is_permission_error", "is_disk_full", "naming_disk_full", "disk_full_message",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2


class CrowdsparkError(ValueError):
    """Base of the errors caused by what the user gave us."""


class InputError(CrowdsparkError):
    """The labels or gold input cannot be used as given."""


class ConfigError(CrowdsparkError):
    """A parameter or configuration value is invalid."""


class IncompatibleModelError(CrowdsparkError):
    """A saved model cannot start this run (another algorithm, class set or number of levels).

    Its message ends with :data:`RUN_COLD`.
    """


class ModelContractError(TypeError):
    """A registered model broke the kernel protocol (:mod:`crowdspark.models.base`): a defect of the model's
    code, not of the user's input, so the command line exits 1 with it."""


RUN_COLD = ("run cold: without --warm-start, or with --set nightly.on_incompatible=cold to run such nights cold "
            "automatically")


def one_line(exc: BaseException) -> str:
    """What failed, in one line: a JVM failure's own exception and message, without its Java stack."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        root = java
        while root.getCause() is not None:
            root = root.getCause()
        return str(root.toString()).splitlines()[0]
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def is_permission_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the user may not write there: a local permission or read-only filesystem
    error, or Hadoop's ``AccessControlException`` through py4j."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS)
    text = one_line(exc)
    return "AccessControlException" in text or "Permission denied" in text or "Read-only file system" in text


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or the user's quota) is full: ``ENOSPC``/``EDQUOT``, or a JVM failure
    whose cause says so."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = one_line(exc) if getattr(exc, "java_exception", None) is not None else ""
    return "No space left on device" in text or "Disk quota exceeded" in text


@contextmanager
def naming_disk_full(path: str) -> Iterator[None]:
    """Give a disk-full error raised while ``path`` is written the path it lacks (pyarrow's and pandas' writers
    name no file): an ``OSError(ENOSPC)`` whose ``filename`` is ``path``; any other error passes unchanged."""
    try:
        yield
    except Exception as exc:
        if not is_disk_full(exc) or getattr(exc, "filename", None):
            raise
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path) from exc


def disk_full_message(exc: BaseException, fallback: str | None) -> str:
    """What a run stopped by a full disk says: the path it was writing (``exc``'s file, else ``fallback``),
    that the disk is full, and that a run with free space can succeed (it is a failure, exit 1, not bad input)."""
    where = getattr(exc, "filename", None) or fallback
    shown = f"writing {where!r}" if where else "writing its results"
    return (f"the disk is full (no space left on device) {shown}; free space there, or write elsewhere, and run "
            "again: a run with room to write can succeed")
