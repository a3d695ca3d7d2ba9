"""A test hook: kill this process right after a named step of writing a result.

The fault-injection tests (``tests/test_commit_kill.py``) set :data:`KILL_AFTER`
(``CROWDSPARK_TEST_KILL_AFTER``) in the environment of a run; every step that can be interrupted calls
:func:`kill_point` with its name, and the process sends itself ``SIGKILL`` (no cleanup, no ``finally``, no
exit handler: what a kill or a lost machine leaves) when the variable names that step.  Unset, the hook does
nothing.

The steps are those of the commit (:data:`crowdspark.io.sink.COMMIT_STEPS`), those of a run root
(:data:`crowdspark.io.runs.RUN_ROOT_STEPS`), and ``temp-written:<path>``: the temporary file of the metadata
file ``<path>`` is written and not yet renamed over it (:meth:`crowdspark.io.files.LocalFiles.write_bytes`).
The value is a shell-style pattern (``temp-written:*/out/_CROWDSPARK.json``), optionally followed by ``#<n>``
to kill at the ``n``-th step it matches rather than the first.
"""

from __future__ import annotations

import logging
import os
import signal
from fnmatch import fnmatchcase

__all__ = ["KILL_AFTER", "kill_point"]

log = logging.getLogger(__name__)

KILL_AFTER = "CROWDSPARK_TEST_KILL_AFTER"

#: how many steps matched the pattern so far, by pattern
_matched: dict[str, int] = {}


def kill_point(step: str) -> None:
    """Kill this process with ``SIGKILL`` if ``CROWDSPARK_TEST_KILL_AFTER`` names ``step`` (a test hook)."""
    wanted = os.environ.get(KILL_AFTER)
    if not wanted:
        return
    pattern, _, nth = wanted.partition("#")
    if not fnmatchcase(step, pattern):
        return
    _matched[wanted] = _matched.get(wanted, 0) + 1
    if _matched[wanted] == int(nth or 1):
        log.warning("%s=%s: killing process %d after %s", KILL_AFTER, wanted, os.getpid(), step)
        os.kill(os.getpid(), signal.SIGKILL)
