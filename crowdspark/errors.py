"""Errors a user can act on.

``InputError`` (bad labels or gold data) and ``ConfigError`` (bad parameters or configuration) carry a
message that says what is wrong, where, and how to fix it.  The command line prints the message without a
traceback and exits with :data:`EXIT_BAD_INPUT`; any other exception is a failure (:data:`EXIT_FAILURE`).
"""

from __future__ import annotations

import errno

__all__ = [
    "CrowdsparkError", "InputError", "ConfigError", "IncompatibleModelError", "RUN_COLD", "EXIT_OK", "EXIT_FAILURE",
    "EXIT_BAD_INPUT", "one_line", "is_permission_error",
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
