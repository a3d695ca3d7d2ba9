"""Reproduce the IDBLA paper's experiments and write a report (``report.md``, ``results.json``, PNGs).

Examples::

    python jobs/reproduce_paper.py --output reports/paper --update-doc docs/reproduce.md   # everything
    python jobs/reproduce_paper.py --quick --runs 2 --datasets rte,temp --methods mv,ds,idbla --output /tmp/r
    spark-submit jobs/reproduce_paper.py --engine spark --output reports/paper-spark

Datasets are folder names under ``--data-root`` (default ``data``; run from the repository root), paths to
folders with ``labels.csv``/``truth.csv``, or ``synthetic``.  Methods are ``<algorithm>``,
``<algorithm>:paper`` (preset) or ``<algorithm>:random-init``; the default is every registered algorithm,
the paper presets and the initialization ablation.  Exit codes: 0 success, 2 bad arguments or data.
The work is done by the package :mod:`jobs.reproduce` (``cli.build_parser``, ``cli.execute``); this file
puts the repository root on ``sys.path`` (``python jobs/...`` and ``spark-submit jobs/...`` put only
``jobs/`` there) and configures logging.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path

REPOSITORY = str(Path(__file__).resolve().parents[1])
if REPOSITORY not in sys.path:
    sys.path.insert(0, REPOSITORY)

from jobs.reproduce.cli import build_parser, command_line, execute  # noqa: E402

__all__ = ["build_parser", "log_levels", "main"]

#: the loggers of the reproduction's progress lines
PROGRESS_LOGGERS = ("jobs.reproduce", "crowdspark.io.sink")


def log_levels(quiet: bool, verbose: bool) -> dict[str, int]:
    """Logger levels: progress lines at INFO, the models' per-iteration logs only if ``verbose``.

    Returns
    -------
    dict
        Logger name -> level.
    """
    if verbose:
        return {"crowdspark": logging.DEBUG if not quiet else logging.WARNING}
    levels = {"crowdspark": logging.WARNING}
    if not quiet:
        levels.update({name: logging.INFO for name in PROGRESS_LOGGERS})
    return levels


def configure_logging(quiet: bool, verbose: bool) -> None:
    """Progress lines at INFO on stderr; the models' per-iteration logs only with ``--verbose``."""
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for name, level in log_levels(quiet, verbose).items():
        logging.getLogger(name).setLevel(level)
    for noisy in ("py4j", "matplotlib", "PIL"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.captureWarnings(True)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse -> configure logging -> run (or re-render) -> write; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    configure_logging(args.quiet, args.verbose)
    return execute(args, command_line("python jobs/reproduce_paper.py", argv))


if __name__ == "__main__":
    sys.exit(main())
