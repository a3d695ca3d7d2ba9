"""Errors a user can act on.

``InputError`` (bad labels or gold data) and ``ConfigError`` (bad parameters or configuration) carry a
message that says what is wrong, where, and how to fix it.  The command line prints the message without a
traceback and exits with :data:`EXIT_BAD_INPUT`; any other exception is a failure (:data:`EXIT_FAILURE`).
"""

from __future__ import annotations

__all__ = ["CrowdsparkError", "InputError", "ConfigError", "EXIT_OK", "EXIT_FAILURE", "EXIT_BAD_INPUT"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2


class CrowdsparkError(ValueError):
    """Base of the errors caused by what the user gave us."""


class InputError(CrowdsparkError):
    """The labels or gold input cannot be used as given."""


class ConfigError(CrowdsparkError):
    """A parameter or configuration value is invalid."""
