"""Errors a user can act on, and the exit code of every failure.

``InputError`` (bad labels or gold data) and ``ConfigError`` (bad parameters or configuration) carry a
message that says what is wrong, where, and how to fix it.  :func:`classify_failure` gives any exception the
exit code a scheduler acts on (``docs/operations.md``, "Exit codes"):

=====  ==========================  =====================================================================
code   name                        what failed
=====  ==========================  =====================================================================
0      :data:`EXIT_OK`             nothing
2      :data:`EXIT_BAD_INPUT`      what a person must fix: input, configuration, incompatible history, the
                                   executors' Python environment; the same command fails again
75     :data:`EXIT_RETRYABLE`      what passes: a full disk, lost executors, another live run holding the
                                   output; the same command can succeed later (``EX_TEMPFAIL`` of sysexits.h)
1      :data:`EXIT_FAILURE`        anything else (a defect, or a failure crowdspark does not recognise)
=====  ==========================  =====================================================================
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = [
    "CrowdsparkError", "InputError", "ConfigError", "IncompatibleModelError", "OutputBusyError", "RUN_COLD",
    "EXIT_OK", "EXIT_FAILURE", "EXIT_BAD_INPUT", "EXIT_RETRYABLE", "Failure", "classify_failure", "one_line",
    "is_permission_error", "is_disk_full", "is_executor_lost", "executor_missing_module", "naming_disk_full",
    "disk_full_message",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_RETRYABLE = 75


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


class OutputBusyError(ConfigError):
    """Another run that is alive holds the lock of the output (or of a folder the run writes): this run wrote
    nothing, and the same command can succeed once that run ends (:data:`EXIT_RETRYABLE`)."""


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
    that the disk is full, and that a run with free space can succeed (:data:`EXIT_RETRYABLE`)."""
    where = getattr(exc, "filename", None) or fallback
    shown = f"writing {where!r}" if where else "writing its results"
    return (f"the disk is full (no space left on device) {shown}; free space there, or write elsewhere, and run "
            "again: a run with room to write can succeed")


#: what Spark says when it lost executors (a node or container went away, a shuffle's files with it) rather than
#: when a task's own code failed
_EXECUTOR_LOST = ("ExecutorLostFailure", "FetchFailedException", "MetadataFetchFailedException",
                  "Executor heartbeat timed out", "Container killed by YARN", "Container from a bad node",
                  "Worker lost", "Slave lost", "decommission")
_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '(?P<name>[^']+)'")


def _full_text(exc: BaseException) -> str:
    """Everything ``exc`` says: its text, and with a JVM failure each cause's own text (a Python worker's
    traceback is the message of Spark's ``PythonException``, below the Java stack)."""
    parts = []
    try:
        parts.append(str(exc))
    except Exception:  # noqa: BLE001 - a py4j error whose JVM is gone
        parts.append(type(exc).__name__)
    java = getattr(exc, "java_exception", None)
    seen = 0
    while java is not None and seen < 20:
        try:
            parts.append(str(java.toString()))
            java = java.getCause()
        except Exception:  # noqa: BLE001 - the JVM is gone: what was read is what there is
            break
        seen += 1
    return "\n".join(parts)


def _from_spark(exc: BaseException) -> bool:
    """Whether ``exc`` comes from Spark: a py4j error, or one of PySpark's own exceptions."""
    module = type(exc).__module__ or ""
    return getattr(exc, "java_exception", None) is not None or module.startswith(("py4j", "pyspark"))


def executor_missing_module(exc: BaseException) -> str | None:
    """The module a Python worker of Spark could not import (``ModuleNotFoundError`` on an executor, seen by the
    driver as a JVM failure whose text holds the worker's traceback), or ``None``."""
    if not _from_spark(exc):  # a ModuleNotFoundError of the driver's own import is no executor's
        return None
    text = _full_text(exc)
    if "PythonException" not in text and "Python worker" not in text:
        return None
    match = _MISSING_MODULE.search(text)
    return match.group("name") if match else None


def is_executor_lost(exc: BaseException) -> bool:
    """Whether a Spark job failed because executors were lost (:data:`_EXECUTOR_LOST`), not because of its code."""
    if not _from_spark(exc):
        return False
    text = _full_text(exc)
    return any(sign in text for sign in _EXECUTOR_LOST)


@dataclass(frozen=True)
class Failure:
    """How a run failed, for the exit code, the message and ``status.json``.

    Attributes
    ----------
    code : int
        The exit code (:data:`EXIT_BAD_INPUT`, :data:`EXIT_RETRYABLE` or :data:`EXIT_FAILURE`).
    kind : str
        ``bad_input``, ``bad_config``, ``incompatible_history``, ``executor_environment`` (code 2),
        ``output_busy``, ``disk_full``, ``executor_lost`` (code 75) or ``failure`` (code 1).
    message : str
        One paragraph: what failed, where, and what to do.
    error_class : str
        The exception's class name.
    """

    code: int
    kind: str
    message: str
    error_class: str

    @property
    def retryable(self) -> bool:
        """Whether the same command can succeed later without a change."""
        return self.code == EXIT_RETRYABLE


def classify_failure(exc: BaseException, output: str | None = None) -> Failure:
    """The exit code, kind and message of a run stopped by ``exc`` (``output``: the path a full disk is named by
    when the error names none); see the module docstring for the table."""
    name = type(exc).__name__
    if isinstance(exc, OutputBusyError):
        return Failure(EXIT_RETRYABLE, "output_busy", str(exc), name)
    if isinstance(exc, CrowdsparkError):
        kind = ("incompatible_history" if isinstance(exc, IncompatibleModelError)
                else "bad_input" if isinstance(exc, InputError) else "bad_config")
        return Failure(EXIT_BAD_INPUT, kind, str(exc), name)
    if is_disk_full(exc):
        return Failure(EXIT_RETRYABLE, "disk_full", disk_full_message(exc, output), name)
    module = executor_missing_module(exc)
    if module is not None:
        package = module.split(".")[0]
        fix = ("ship crowdspark with the job: spark-submit --py-files crowdspark.zip, or the PEX of "
               "scripts/pack.sh (--files crowdspark.pex, PYSPARK_PYTHON=./crowdspark.pex) that has it and its "
               "dependencies" if package == "crowdspark" else
               f"install {package} in the executors' Python, or ship the PEX of scripts/pack.sh that has it")
        return Failure(EXIT_BAD_INPUT, "executor_environment",
                       f"the executors' Python cannot import {module!r} (ModuleNotFoundError in a Spark task; the "
                       f"driver imports it, the executors' interpreter does not): {fix}; see docs/cluster.md", name)
    if is_executor_lost(exc):
        return Failure(EXIT_RETRYABLE, "executor_lost",
                       f"Spark lost executors while the run was computing ({one_line(exc)}); nothing was committed, "
                       "and a run with its executors can succeed: run again", name)
    return Failure(EXIT_FAILURE, "failure", one_line(exc), name)
