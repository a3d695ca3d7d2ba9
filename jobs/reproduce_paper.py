"""Reproduce the IDBLA paper's experiments and write a report (``report.md``, ``results.json``, PNGs).

Examples::

    python jobs/reproduce_paper.py --output reports/paper --update-doc docs/reproduce.md   # everything
    python jobs/reproduce_paper.py --quick --runs 2 --datasets rte,temp --methods mv,ds,idbla --output /tmp/r
    spark-submit jobs/reproduce_paper.py --engine spark --output reports/paper-spark

Datasets are folder names under ``--data-root`` (default ``data``; run from the repository root), paths to
folders with ``labels.csv``/``truth.csv``, or ``synthetic``.  Methods are ``<algorithm>``,
``<algorithm>:paper`` (preset) or ``<algorithm>:random-init``; the default is every registered algorithm,
the paper presets and the initialization ablation.  Exit codes: 0 success, 2 bad arguments or data.
The work is done by :mod:`crowdspark.reproduce` (``build_parser``, ``execute``); this file only configures
logging.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from crowdspark.reproduce import build_parser, command_line, execute, log_levels

__all__ = ["build_parser", "main"]


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
