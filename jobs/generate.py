"""Write a synthetic crowd-label dataset as Parquet (spark-submit entry point).

Example::

    spark-submit jobs/generate.py --kind ds --labels 10000000 --items 1000000 --workers 10000 \\
        --classes 5 --seed 0 --output /data/ds_10m

writes the labels (``item``, ``worker``, ``label``) to ``--output`` and the truth to ``--truth-output``
(default ``<output>_truth``). ``--kind paper`` writes the paper's Synthetic set (sizes fixed).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

from crowdspark.errors import ConfigError
from crowdspark.synthetic import GENERATORS, write_parquet

logger = logging.getLogger("crowdspark.jobs.generate")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=GENERATORS, default="ds", help="generator (default ds)")
    parser.add_argument("--output", required=True, help="output directory of the labels")
    parser.add_argument("--truth-output", default=None, help="truth output directory (default <output>_truth)")
    parser.add_argument("--items", type=int, default=None, help="number of items")
    parser.add_argument("--workers", type=int, default=None, help="number of workers")
    parser.add_argument("--classes", type=int, default=None, help="number of classes")
    parser.add_argument("--levels", type=int, default=None, help="difficulty levels (idbla, default 2)")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--labels-per-item", type=int, default=None, help="distinct workers per item")
    size.add_argument("--labels", type=int, default=None, help="total labels (must be a multiple of --items)")
    parser.add_argument("--accuracy", type=float, nargs=2, default=None, metavar=("LOW", "HIGH"),
                        help="range of the workers' diagonal accuracies")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--partitions", type=int, default=None, help="Spark partitions / output files")
    parser.add_argument("--master", default=None, help="Spark master (default: as set by spark-submit)")
    return parser.parse_args(argv)


def labels_per_item(args: argparse.Namespace) -> int | None:
    """``--labels-per-item``, or ``--labels / --items`` when that divides exactly."""
    if args.labels is None:
        return args.labels_per_item
    if not args.items or args.labels % args.items:
        raise ConfigError(f"--labels must be a multiple of --items, but got {args.labels} and {args.items}")
    return args.labels // args.items


def run(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Write the dataset described by ``args`` with ``spark``; returns :func:`write_parquet`'s summary."""
    options = {} if args.accuracy is None else {"accuracy": tuple(args.accuracy)}
    summary = write_parquet(
        spark, args.output, args.kind, args.items, args.workers, args.classes, labels_per_item(args), args.seed,
        args.partitions, n_levels=args.levels, truth_path=args.truth_output, **options,
    )  # fmt: skip
    logger.info("wrote %s (truth %s)", summary["path"], summary["truth_path"])
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    try:
        labels_per_item(args)  # fail before starting Spark
    except ConfigError as err:
        logger.error("%s", err)
        return 2
    from crowdspark.spark_session import build_session

    spark = build_session("crowdspark-generate", master=args.master)
    try:
        run(spark, args)
    except ConfigError as err:
        logger.error("%s", err)
        return 2
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
