"""The reproduction's command line: arguments, run or re-render, write the report, update a document.

:func:`execute` does what parsed arguments ask and returns the exit code (0 success, 2 bad arguments or
data, with a one-line message in the log); the entry point ``jobs/reproduce_paper.py`` configures logging
and calls it.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crowdspark import __version__
from crowdspark.errors import EXIT_BAD_INPUT, EXIT_OK, ConfigError, CrowdsparkError
from crowdspark.io.marker import REPORT
from crowdspark.io.sink import check_output
from jobs.reproduce.datasets import DEFAULT_DATASETS
from jobs.reproduce.report import update_doc, write_report
from jobs.reproduce.runs import ReproduceConfig, Results, load_results, run_experiments

__all__ = ["build_parser", "config_from_args", "checkout_commit", "run_and_write", "execute", "command_line"]

log = logging.getLogger(__name__)

#: the checkout holding ``jobs/`` (and, in a clone, the ``crowdspark/`` package it measures)
REPOSITORY = Path(__file__).resolve().parents[2]


def _csv(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``jobs/reproduce_paper.py``."""
    parser = argparse.ArgumentParser(
        prog="reproduce_paper", description="Reproduce the IDBLA paper's experiments and write a report.")
    parser.add_argument("--output", default="reports/paper",
                        help="report directory, replaced atomically (default reports/paper)")
    parser.add_argument("--datasets", type=_csv, default=DEFAULT_DATASETS,
                        help=f"comma-separated datasets: folder names under --data-root, folder paths or "
                             f"'synthetic' (default {','.join(DEFAULT_DATASETS)})")
    parser.add_argument("--methods", type=_csv, default=(),
                        help="comma-separated methods, e.g. mv,ds,idbla,idbla:paper,idbla:random-init "
                             "(default: every registered algorithm, the paper presets and the ablation)")
    parser.add_argument("--runs", type=int, default=10,
                        help="runs (seeds 0..runs-1) per dataset and method (default 10)")
    parser.add_argument("--quick", action="store_true", help="short chains and few iterations (smoke tests)")
    parser.add_argument("--no-ablation", dest="ablation", action="store_false",
                        help="skip the init=random ablation (when --methods is not given)")
    parser.add_argument("--engine", choices=["local", "spark"], default="local", help="local (default) or spark")
    parser.add_argument("--master", default=None, help="Spark master with --engine spark (default local[*])")
    parser.add_argument("--data-root", default="data", help="folder of the bundled datasets (default data)")
    parser.add_argument("--synthetic-seed", type=int, default=0,
                        help="seed of the generated Synthetic set (default 0)")
    parser.add_argument("--render-only", metavar="RESULTS_JSON", default=None,
                        help="re-render the report from an earlier results.json instead of running")
    parser.add_argument("--update-doc", metavar="MARKDOWN", default=None,
                        help="also replace the generated block of this markdown file (e.g. docs/reproduce.md) "
                             "with the report's tables and claims")
    parser.add_argument("--quiet", action="store_true", help="only warnings and errors in the log")
    parser.add_argument("--verbose", action="store_true", help="also the models' per-iteration logs")
    return parser


def config_from_args(args: argparse.Namespace) -> ReproduceConfig:
    """The :class:`ReproduceConfig` of parsed arguments (validated)."""
    return ReproduceConfig(
        datasets=tuple(args.datasets), methods=tuple(args.methods), runs=args.runs, quick=args.quick,
        engine=args.engine, data_root=args.data_root, synthetic_seed=args.synthetic_seed, ablation=args.ablation,
    )


def checkout_commit() -> str | None:
    """The commit of the checkout, with ``+modified`` when tracked files of ``crowdspark/`` or ``jobs/`` differ.

    Read-only ``git rev-parse`` and ``git diff-index`` in :data:`REPOSITORY`; ``None`` outside a git clone.
    """
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                              cwd=REPOSITORY, check=False).stdout.strip()
        changed = subprocess.run(["git", "diff-index", "--quiet", "HEAD", "--", "crowdspark", "jobs"],
                                 capture_output=True, timeout=10, cwd=REPOSITORY, check=False).returncode == 1
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("+modified" if changed else "")) or None


def run_and_write(config: ReproduceConfig, output: str | Path, spark: Any = None, command: str = "") -> Results:
    """Run the experiments and write the report directory."""
    # before hours of fitting; a report a killed run left mid-commit is recovered first
    check_output(str(output), kind=REPORT, stale_after=12 * 3600)
    commit = checkout_commit()  # before the run: the code that is measured
    results = run_experiments(config, spark)
    results.meta = {"crowdspark": __version__, "commit": commit, "command": command}
    write_report(results, output, command)
    log.info("report written to %s (%.0f s)", Path(output) / "report.md", results.seconds)
    return results


def _rerender(path: str, output: str) -> Results:
    """The results of an earlier run, with its report written again to ``output``."""
    try:
        results = load_results(path)
    except ConfigError as exc:
        raise ConfigError(f"--render-only: {exc}") from exc
    write_report(results, output, results.meta.get("command", ""))
    log.info("report re-rendered to %s", Path(output) / "report.md")
    return results


def _run(args: argparse.Namespace, command: str, spark: Any) -> Results:
    """Run and write; with ``--engine spark`` and no ``spark``, a session is started and stopped here."""
    config = config_from_args(args)
    own = config.engine == "spark" and spark is None
    if own:
        from crowdspark.spark_session import build_session

        spark = build_session("crowdspark-reproduce", master=args.master)
        spark.sparkContext.setLogLevel("WARN")
    try:
        return run_and_write(config, args.output, spark, command)
    finally:
        if own:
            spark.stop()


def _update_doc(path: str | None, results: Results) -> int:
    """Splice the report summary into ``path`` between its markers; the exit code (2 without markers)."""
    if path is None:
        return EXIT_OK
    try:
        update_doc(path, results)
    except (CrowdsparkError, OSError) as exc:
        log.error("could not update %s: %s", path, exc)
        return EXIT_BAD_INPUT
    log.info("updated the generated block of %s", path)
    return EXIT_OK


def execute(args: argparse.Namespace, command: str = "", spark: Any = None) -> int:
    """Do what parsed ``args`` ask (run or re-render, write, update the doc); returns the exit code.

    Parameters
    ----------
    args : Namespace
        From :func:`build_parser`.
    command : str
        The command line, printed in the report.
    spark : SparkSession, optional
        With ``--engine spark``; started (and stopped) here when not given.
    """
    try:
        results = _rerender(args.render_only, args.output) if args.render_only else _run(args, command, spark)
    except CrowdsparkError as exc:
        log.error("%s", exc)
        return EXIT_BAD_INPUT
    return _update_doc(args.update_doc, results)


def command_line(prefix: str, argv: Sequence[str]) -> str:
    """``prefix`` and the shell-quoted arguments, for the report."""
    return " ".join([prefix, shlex.join(list(argv))]).strip()
