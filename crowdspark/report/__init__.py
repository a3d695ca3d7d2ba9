"""The run report: ``crowdspark report RUN_DIR`` and ``crowdspark aggregate --report``.

One self-contained HTML page (inline CSS and SVG, no script, no network) that draws what a run directory
holds and says what it lacks (``docs/report.md``).
"""

from __future__ import annotations

import os

from crowdspark.errors import ConfigError
from crowdspark.io.paths import is_local, strip_file_scheme

__all__ = ["REPORT_FILE", "build_report", "write_report", "check_report_target"]

#: the page's name in a result directory (part of its layout: :mod:`crowdspark.io.marker`)
REPORT_FILE = "report.html"


def check_report_target(output: str) -> None:
    """Refuse, before a run, an ``--output`` the report cannot be written beside, or a missing matplotlib.

    Raises
    ------
    ConfigError
    """
    from crowdspark.report.figures import pyplot

    if not is_local(output):
        raise ConfigError(f"--report writes the page into --output on the driver's disk, but --output is "
                          f"{output!r}; drop --report and run crowdspark report on a local copy of the result")
    pyplot()


def build_report(run_dir: str, gold: str | None = None) -> str:
    """The report page of the run in ``run_dir`` (a result, or a run root: its latest run), as HTML text.

    Parameters
    ----------
    run_dir : str
        Local result directory.
    gold : str, optional
        Gold file to calibrate against instead of the run's own ``--gold``.

    Raises
    ------
    ConfigError
        When matplotlib is missing or ``run_dir`` is not local.
    InputError
        When ``run_dir`` holds no run.
    """
    from crowdspark.report.facts import collect
    from crowdspark.report.figures import pyplot
    from crowdspark.report.page import render
    from crowdspark.report.tables import resolve_run_dir

    pyplot()
    return render(collect(resolve_run_dir(run_dir), gold))


def write_report(run_dir: str, out: str | None = None, gold: str | None = None) -> str:
    """Write the report of ``run_dir`` to ``out`` (default: ``report.html`` in the run directory); returns the
    path written."""
    from crowdspark.report.tables import resolve_run_dir

    local = resolve_run_dir(run_dir)
    target = strip_file_scheme(out) if out else os.path.join(local, REPORT_FILE)
    page = build_report(local, gold)
    staging = f"{target}.tmp-{os.getpid()}"
    with open(staging, "w", encoding="utf-8") as handle:
        handle.write(page)
    os.replace(staging, target)
    return target
