"""The command line: ``crowdspark aggregate ...`` (also ``python -m crowdspark`` and ``jobs/aggregate.py``).

Exit codes (:mod:`crowdspark.errors`, ``docs/operations.md``): 0 success; 2 what a person must fix (input,
configuration, incompatible history, the executors' environment: a one-paragraph message, no traceback unless
``--debug``); 75 what a later try can get past (a full disk, lost executors, another live run on the output);
1 any other failure.  ``aggregate --status-file PATH`` also writes the outcome as JSON (:mod:`crowdspark.status`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Sequence

from crowdspark.version import __version__
from crowdspark.errors import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    ConfigError,
    Failure,
    classify_failure,
    one_line,
)

__all__ = ["main", "build_parser", "run_aggregate"]

log = logging.getLogger("crowdspark.cli")


def _top_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    parser = argparse.ArgumentParser(
        prog="crowdspark", description="Infer true labels from noisy crowd labels, on numpy or Spark."
    )
    parser.add_argument("--version", action="version", version=f"crowdspark {__version__}")
    return parser, parser.add_subparsers(dest="command", required=True)


def _add_report_parser(sub: argparse._SubParsersAction) -> None:
    rep = sub.add_parser("report", help="write a run's report: one self-contained HTML page of its numbers and plots")
    rep.add_argument("run_dir", metavar="RUN_DIR",
                     help="a local result directory (an aggregate --output), or a folder of --run-id runs (its latest)")
    rep.add_argument("--out", metavar="FILE", help="where to write the page (default: RUN_DIR/report.html)")
    rep.add_argument("--gold", metavar="FILE",
                     help="gold to draw the calibration from, instead of the run's own --gold")
    rep.add_argument("--history", action="store_true",
                     help="RUN_DIR is a folder of --run-id runs: write its history page, night by night with drift "
                          "flagged (default: RUN_DIR/history.html)")
    rep.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")


def _report_parser() -> argparse.ArgumentParser:
    """The parser of ``crowdspark report`` alone: it parses a report's arguments as :func:`build_parser` does,
    without importing the configuration and the model registry its other commands need."""
    parser, sub = _top_parser()
    _add_report_parser(sub)
    return parser


def build_parser() -> argparse.ArgumentParser:
    from crowdspark.config import RunConfig, parse_value
    from crowdspark.models.registry import algorithm_names

    parser, sub = _top_parser()

    agg = sub.add_parser("aggregate", help="aggregate labels and write items/, workers/, summary.json")
    agg.add_argument("--labels", required=True,
                     help="labels: CSV/Parquet/JSON file, folder or glob, or a catalog table table:<db>.<name>")
    agg.add_argument("--gold", help="optional gold labels (columns item, truth) for evaluation: a path, or "
                                    "table:<db>.<name>")
    agg.add_argument("--algorithm", help=f"one of {', '.join(algorithm_names())} (default: {RunConfig.algorithm})")
    agg.add_argument("--engine", choices=["spark", "local"], help="spark (default) or local (numpy, one process)")
    agg.add_argument(
        "--seed", type=parse_value, help="seed of every random choice, an integer >= 0 (default 0); read as --set seed="
    )
    agg.add_argument("--config", action="append", default=[], help="TOML configuration file (repeatable)")
    agg.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a configuration key, e.g. ds.max_iter=50 or input.item=task (repeatable)",
    )
    agg.add_argument("--output", required=True, help="output directory (replaced atomically)")
    agg.add_argument("--run-id", help="write into OUTPUT/run_id=ID/ and point OUTPUT/_LATEST.json at it when complete "
                                      "(unless it names a newer night)")
    agg.add_argument("--as-of", metavar="YYYY-MM-DD",
                     help="the day the run's data ends (input.window_days counts back from it); default: the run id "
                          "when it is a date, else today (UTC)")
    agg.add_argument("--warm-start", metavar="PATH",
                     help="start from a previous run's output, from the folder of runs (the OUTPUT of --run-id runs: "
                          "its newest run before this one), or from a saved model")
    agg.add_argument("--initial-workers", metavar="PATH",
                     help="start the workers a worker table lists from their matrices (a previous run's output or its "
                          "workers/, or a CSV/Parquet/JSON-lines table with columns worker and confusion or "
                          "accuracy); the other workers start as usual. Not with --warm-start")
    agg.add_argument("--full-refit", action="store_true",
                     help="with incremental.mode = \"on\": fit every day up to the as-of date instead of continuing "
                          "the previous run incrementally (the next nights continue from this one)")
    agg.add_argument("--report", action="store_true",
                     help="also write the run report, report.html, into the result directory (a local --output)")
    agg.add_argument("--status-file", metavar="PATH",
                     help="also write the run's outcome there as JSON, atomically, whether it succeeds or fails "
                          "(status, exit code, retryable, error, counts, error vs gold, missing days, drift): "
                          "for schedulers and monitors (docs/operations.md)")
    agg.add_argument("--master", help="Spark master when not run by spark-submit (default local[*])")
    agg.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    agg.add_argument("--quiet", action="store_true", help="only warnings and errors in the log")

    _add_report_parser(sub)
    items = sub.add_parser("items", help="write or print a run's whole answer, one row per item (an incremental "
                                         "night's items/ holds only the items it fitted)")
    items.add_argument("output", metavar="OUTPUT",
                       help="a local result directory (an aggregate --output), or a folder of --run-id runs (its latest)")
    items.add_argument("--out", metavar="DIR", help="write the table there as Parquet (one file) instead of printing "
                                                    "item, label and confidence as CSV")
    items.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    algorithms = sub.add_parser("algorithms", help="list the algorithms; with a NAME, its parameters, defaults and "
                                                   "documentation")
    algorithms.add_argument("name", metavar="NAME", nargs="?", choices=algorithm_names(),
                            help="one algorithm to describe in full")
    algorithms.add_argument("--json", action="store_true",
                            help="print every algorithm's description as JSON (for scripts)")
    sub.add_parser("defaults", help="print every configuration key with its default and meaning (TOML)")
    return parser


def configure_logging(debug: bool, quiet: bool) -> None:
    level = logging.DEBUG if debug else logging.WARNING if quiet else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    logging.captureWarnings(True)


def run_aggregate(args: argparse.Namespace, spark=None) -> dict:
    """Run ``aggregate`` with parsed arguments; returns the summary.  Starts Spark only if needed."""
    from crowdspark.config import load_config
    from crowdspark.io.runs import parse_as_of
    from crowdspark.pipeline.fit import RunOptions
    from crowdspark.pipeline.run import aggregate, preflight
    from crowdspark.pipeline.source import needs_spark

    config = load_config(args.config, args.overrides, algorithm=args.algorithm, seed=args.seed, engine_name=args.engine)
    as_of = parse_as_of(args.as_of) if args.as_of else None
    preflight(config, args.labels, args.output, args.gold, args.warm_start, args.run_id, as_of, args.full_refit,
              args.initial_workers)
    if args.report:
        from crowdspark.report import check_report_target

        check_report_target(args.output)
    own_session = False
    if spark is None and needs_spark(config, args.labels, args.gold, args.output,
                                     args.warm_start or args.initial_workers, master=args.master):
        from crowdspark.spark_session import build_session

        spark = build_session("crowdspark-aggregate", master=args.master)
        own_session = True
    try:
        result = aggregate(
            config, args.labels, args.output, gold_path=args.gold, spark=spark,
            warm_start=args.warm_start, run_id=args.run_id, as_of=as_of, full_refit=args.full_refit,
            initial_workers=args.initial_workers, options=RunOptions(master=args.master),
        )
    finally:
        if own_session:
            spark.stop()
    return result.summary


def _algorithm_table(listing: dict[str, dict]) -> str:
    """``crowdspark algorithms``: one line per algorithm (name, title, parameters with their defaults)."""
    rows = [("ALGORITHM", "TITLE", "PARAMETERS (default)")]
    for name, entry in listing.items():
        rows.append((name, entry["title"], _parameter_cell(entry["parameters"])))
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    lines = [f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]}" for row in rows]
    lines.append("\ncrowdspark algorithms NAME describes one algorithm in full; --json prints every description as "
                 "JSON.")
    return "\n".join(lines)


def _parameter_cell(parameters: dict[str, dict], width: int = 72) -> str:
    """The parameters with their defaults, cut to about ``width`` characters with a count of those left out."""
    shown: list[str] = []
    for key, value in parameters.items():
        text = f"{key}={_short(value['default'])}"
        rest = len(parameters) - len(shown) - 1
        if shown and len(", ".join(shown + [text])) + (12 if rest else 0) > width:
            return ", ".join(shown) + f" (+{len(parameters) - len(shown)} more)"
        shown.append(text)
    return ", ".join(shown) or "-"


def _short(value: object) -> str:
    """A default as the table shows it: text defaults that explain a rule are shortened to ``auto``."""
    if isinstance(value, str) and " " in value:
        return "auto"
    return str(value)


def _algorithm_details(name: str, entry: dict) -> str:
    """``crowdspark algorithms NAME``: the algorithm's description, Python classes, presets and parameters."""
    lines = [f"{name}: {entry['title']}", f"  {entry['description']}",
             f"  pandas: {entry['python']['pandas']}; pyspark.ml: {entry['python']['pyspark.ml']}"]
    if entry["presets"]:
        lines.append(f"  presets: {', '.join(entry['presets'])}")
    lines.append("  parameters (--set " + name + ".KEY=VALUE):" if entry["parameters"] else "  no parameters")
    for key, value in entry["parameters"].items():
        lines.append(f"    {key} = {value['default']}")
        if value["doc"]:
            lines.append(f"        {' '.join(value['doc'].split())}")
    return "\n".join(lines)


def _report(summary: dict, output: str) -> str:
    engine = summary["engine"]
    if summary.get("small_input"):
        small = summary["small_input"]
        how = "read with pandas, without Spark" if small.get("reader") == "pandas" else "collected from Spark"
        engine += f" (small input: {small['input_bytes']:,} bytes {how})"
    parts = [
        f"{summary['algorithm']} on {engine}: {summary['counts']['items']} items, "
        f"{summary['counts']['workers']} workers, {summary['counts']['labels']} labels",
        _progress(summary),
    ]
    metrics = summary.get("metrics")
    if metrics and metrics.get("error_rate") is not None:
        fixed = summary.get("gold_split", {}).get("fit_items", 0)
        held = f" held-out gold items ({fixed} more in the fit)" if fixed else " gold items"
        parts.append(f"error rate {metrics['error_rate']:.4f} on {metrics['n_gold']}{held}")
    parts.append(f"results in {output}")
    return "; ".join(parts)


def _progress(summary: dict) -> str:
    """How the fit ended: iterations and convergence, or the sweeps of a sampler (which has no convergence)."""
    if summary["converged"] is None:
        return f"{summary['iterations']} sweeps"
    state = "converged" if summary["converged"] else "not converged"
    return f"{summary['iterations']} iterations ({state})"


def _write_run_report(destination: str, root: str | None = None) -> str | None:
    """Write the report of a committed run (and with ``root``, the run root's history page) and return the
    report's path; when a page fails, say so on stderr (why, and the command that retries) and go on: the run's
    outcome is the run's, whatever its pages do."""
    from crowdspark.report import write_history, write_report

    written = None
    pages = [("report", write_report, destination, "")] + ([("history page", write_history, root, " --history")]
                                                         if root else [])
    for what, write, target, flag in pages:
        try:
            wall, cpu = time.perf_counter(), time.process_time()
            page = write(target)
            log.info("%s written to %s in %.2f s (%.2f CPU s)", what, page, time.perf_counter() - wall,
                     time.process_time() - cpu)
            written = written or page
        except Exception as exc:  # noqa: BLE001 - the results are committed; the pages are extras
            log.debug("the %s of %s failed", what, target, exc_info=True)
            print(f"crowdspark: warning: the run succeeded and its results are in {destination}, but its {what} could "
                  f"not be written ({one_line(exc)}); run crowdspark report {target}{flag} to retry", file=sys.stderr)
    return written


def _items(output: str, out: str | None) -> int:
    """``crowdspark items``: the whole answer of the run at ``output``, to ``out`` (Parquet) or stdout (CSV).

    ``out`` is a folder of its own kind (``items-output``): it replaces only a missing or empty folder or a
    previous ``items --out`` folder, never a result or a run root (:func:`crowdspark.io.sink.check_items_out`);
    one writer at a time (its lock, :class:`crowdspark.io.lock.OutputLock`, as a run's).
    """
    from crowdspark.io.chain import read_items
    from crowdspark.io.files import files_for
    from crowdspark.io.lock import OutputLock
    from crowdspark.io.marker import ITEMS
    from crowdspark.io.sink import StagedOutput, check_items_out
    from crowdspark.io.tables import write_table

    if out is not None:
        check_items_out(out)
    items = read_items(output)
    if out is None:
        try:
            items[["item", "label", "confidence"]].to_csv(sys.stdout, index=False)
            sys.stdout.flush()
        except BrokenPipeError:  # the reader stopped early (| head): not a failure
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    os.makedirs(os.path.dirname(os.path.abspath(out.rstrip("/"))), exist_ok=True)  # the lock is beside --out
    with OutputLock(files_for(out, None), out), StagedOutput(out, kind=ITEMS) as staged:
        check_items_out(out)  # again, under the lock: another writer may have changed it
        write_table(items, staged.path("items"), "parquet")
        staged.commit()
    print(f"{len(items)} items written to {out}/items")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``crowdspark`` console script."""
    from crowdspark.io.runs import run_directory

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _report_parser() if argv[:1] == ["report"] else build_parser()
    args = parser.parse_args(argv)
    debug = getattr(args, "debug", False)
    configure_logging(debug, getattr(args, "quiet", False))
    if args.command == "defaults":
        from crowdspark.defaults import render_defaults

        print(render_defaults(), end="")
        return EXIT_OK
    if args.command == "algorithms":
        from crowdspark.models.registry import algorithm_names, describe

        names = [args.name] if args.name else algorithm_names()
        listing = {name: describe(name) for name in names}
        if args.json:
            print(json.dumps(listing, indent=2, default=str))
        elif args.name:
            print(_algorithm_details(args.name, listing[args.name]))
        else:
            print(_algorithm_table(listing))
        return EXIT_OK
    started = time.time()
    summary = destination = page = status_file = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            # pyspark's notice on every pandas conversion under pandas 3, whose conversions crowdspark uses and
            # tests under pandas 3 (docs/notebook.md, "pandas 2 and pandas 3")
            warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas",
                                    category=FutureWarning)
            if args.command == "report":
                from crowdspark.report import write_history, write_report

                if args.history and args.gold:
                    raise ConfigError("--history draws the nights' own error against gold; drop --gold")
                page = write_history(args.run_dir, args.out) if args.history else write_report(args.run_dir, args.out,
                                                                                                args.gold)
                print(f"{'history page' if args.history else 'report'} written to {page}")
                return EXIT_OK
            if args.command == "items":
                return _items(args.output, args.out)
            if args.status_file:
                _check_status_file(args.status_file, args.output)
                status_file = args.status_file
            summary = run_aggregate(args)
            destination = run_directory(args.output, args.run_id) if args.run_id else args.output
            page = _write_run_report(destination, args.output if args.run_id else None) if args.report else None
    except Exception as exc:  # noqa: BLE001 - the scheduler needs an exit code, the user a message
        failure = classify_failure(exc, getattr(args, "output", None))
        if debug:
            log.exception("run failed")
        print(_failure_line(failure), file=sys.stderr)
        if status_file:
            _write_status(args, started, failure=failure)
        return failure.code
    if status_file:
        _write_status(args, started, summary=summary, result=destination)
    print(_report(summary, destination))
    if page is not None:
        print(f"report written to {page}")
    return EXIT_OK


def _failure_line(failure: Failure) -> str:
    """What the command prints on stderr when it fails: one paragraph, no traceback."""
    if failure.code == EXIT_BAD_INPUT:
        return f"crowdspark: error: {failure.message}"
    retry = f" (exit {failure.code}: the same command can succeed later)" if failure.retryable else ""
    if failure.kind == "output_busy":
        return f"crowdspark: error: {failure.message}{retry}"
    return f"crowdspark: failed: {failure.message}{retry} (rerun with --debug for the traceback)"


def _check_status_file(path: str, output: str) -> None:
    """Refuse a ``--status-file`` that is not a local path, or that lies inside ``--output`` (a result holds only
    what the run writes)."""
    from crowdspark.io.paths import is_local, strip_file_scheme

    if not is_local(path):
        raise ConfigError(f"--status-file must be a local path, but got {path!r}; write it on the machine that runs "
                          "the command (a scheduler reads it there)")
    if is_local(output):
        status = os.path.abspath(strip_file_scheme(path))
        out = os.path.abspath(strip_file_scheme(output))
        if os.path.commonpath([status, out]) == out:
            raise ConfigError(f"--status-file {path!r} is inside --output {output!r}, which holds only what a run "
                              "writes; write it beside the output instead")


def _write_status(args: argparse.Namespace, started: float, failure: Failure | None = None,
                  summary: dict | None = None, result: str | None = None) -> None:
    """Write ``--status-file``; when it cannot be written, say so on stderr and keep the run's exit code."""
    from crowdspark.status import run_status, write_status

    try:
        status = run_status(failure=failure, summary=summary, output=args.output, result=result,
                            run_id=args.run_id, as_of=args.as_of, started=started, finished=time.time())
        write_status(args.status_file, status)
    except Exception as exc:  # noqa: BLE001 - the run's outcome is the run's; the status file is its report
        log.debug("the status file %s could not be written", args.status_file, exc_info=True)
        print(f"crowdspark: warning: the status file {args.status_file!r} could not be written ({one_line(exc)})",
              file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
