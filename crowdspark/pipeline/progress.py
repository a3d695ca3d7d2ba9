"""Progress lines for the long phases of a run: each phase says when it starts, and says again every
:data:`INTERVAL` seconds that it is still running, so that a log never goes quiet for minutes while the labels
are read, validated and grouped, a model is fitted or the results are written.

Phases nest (a night holds its fit); only the innermost open phase of the process reports, so nested phases
never print two lines at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["INTERVAL", "progress"]

log = logging.getLogger(__name__)

#: seconds between two "still running" lines of one phase
INTERVAL = 30.0

_open: list[_Phase] = []
_guard = threading.Lock()


class _Phase:
    """One open phase and the thread that reports it until it ends."""

    def __init__(self, name: str, interval: float) -> None:
        self.name = name
        self.since = time.perf_counter()
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._report, args=(interval,), daemon=True,
                                        name=f"crowdspark-progress-{name}")

    def start(self) -> None:
        self._thread.start()

    def _report(self, interval: float) -> None:
        while not self._ended.wait(interval):
            with _guard:
                innermost = bool(_open) and _open[-1] is self
            if innermost:
                log.info("%s: still running after %.0f s", self.name, time.perf_counter() - self.since)

    def end(self) -> None:
        self._ended.set()
        self._thread.join()


@contextmanager
def progress(name: str, what: str, interval: float | None = None) -> Iterator[None]:
    """Log ``what`` as the phase ``name`` starts, then ``"<name>: still running after N s"`` every ``interval``
    seconds (default :data:`INTERVAL`) until the block ends, however it ends.

    Parameters
    ----------
    name : str
        The phase, as the run's timings name it (``read``, ``fit``, ``write`` ...).
    what : str
        What the phase does, logged once at its start.
    interval : float, optional
        Seconds between two progress lines.
    """
    log.info("%s", what)
    phase = _Phase(name, INTERVAL if interval is None else interval)
    with _guard:
        _open.append(phase)
    phase.start()
    try:
        yield
    finally:
        with _guard:
            _open.remove(phase)
        phase.end()
