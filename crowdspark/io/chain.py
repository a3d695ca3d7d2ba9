"""The chain of runs that makes up an incremental night's answer, and reading that answer.

A full refit writes every item into its ``items/``; an incremental night writes only the items it fitted (new or
revisited) and names, in ``_incremental/chain.json``, the runs before it back to the last full refit::

    {"runs": ["run_id=2026-11-20", "run_id=2026-11-21"]}

oldest first, each relative to the run's parent folder when it is a sibling (``run_id=<id>``, so the chain does
not depend on the working directory), else its full path.  The whole answer of a run is, for every item, its row
in the newest run of ``chain + [run]`` that holds it (:func:`read_items`).  The same holds for the item state
(``_incremental/items/``).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pandas as pd

from crowdspark.errors import ConfigError, InputError
from crowdspark.io.files import files_for
from crowdspark.io.paths import absolute_local, is_local, strip_file_scheme

__all__ = ["CHAIN_FILE", "chain_runs", "chain_payload", "check_outside_chain", "resolve_run", "read_items", "newest_rows"]

CHAIN_FILE = "_incremental/chain.json"


def _parent(run: str) -> str:
    return run.rstrip("/").rpartition("/")[0] or "."


def _absolute(path: str) -> str:
    return absolute_local(path.rstrip("/"))


def chain_runs(run: str, spark: Any = None, check: bool = True) -> list[str]:
    """The runs whose rows make up the answer of ``run``, oldest first, ending with ``run`` itself (``check``:
    that each still has its ``items/``).

    Raises
    ------
    InputError
        When ``chain.json`` cannot be read, or names a run that is gone.
    """
    run = run.rstrip("/")
    files = files_for(run, spark)
    path = f"{run}/{CHAIN_FILE}"
    if not files.exists(path):
        return [run]
    try:
        names = json.loads(files.read_bytes(path).decode("utf-8"))["runs"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path!r} is not a readable chain of runs ({exc}); run a full refit (--full-refit)") from exc
    runs = [name if "/" in name else f"{_parent(run)}/{name}" for name in names]
    missing = [r for r in runs if check and not files.exists(f"{r}/items")]
    if missing:
        raise InputError(f"the run {run!r} holds only the items its night fitted, and earlier runs its answer builds "
                         f"on are gone ({missing[:3]}): restore them, or refit that night in full")
    return runs + [run]


def chain_payload(previous: str, destination: str, spark: Any = None) -> dict[str, list[str]]:
    """``chain.json`` of a night at ``destination`` that continues ``previous``: the previous run's chain and
    the previous run, siblings of ``destination`` by name."""
    parent = _absolute(_parent(destination))
    names = []
    for run in chain_runs(previous, spark):
        full = _absolute(run)
        names.append(full.rpartition("/")[2] if _parent(full) == parent else full)
    return {"runs": names}


def check_outside_chain(destination: str, previous: str, spark: Any = None) -> None:
    """Refuse an incremental night whose ``destination`` is ``previous`` or a run of its chain: the night writes
    only the items it fitted and its answer reads the rest from those runs.

    Raises
    ------
    ConfigError
    """
    target = _absolute(destination)
    if any(_absolute(run) == target for run in chain_runs(previous, spark, check=False)):
        raise ConfigError(f"--output {destination!r} is a run that this incremental night builds on (it continues "
                          f"{previous!r}): a night writes only the items it fitted and reads the rest of its answer "
                          "from those runs, so it cannot replace one; write each night to its own folder "
                          "(--output ROOT --run-id DATE), or refit in full (--full-refit)")


def resolve_run(output: str, spark: Any = None) -> str:
    """The run at ``output``: itself, or the run ``_LATEST.json`` names when ``output`` is a run root.

    Raises
    ------
    InputError
        When ``output`` is neither a result nor a run root with a latest run.
    """
    from crowdspark.io.runs import read_latest

    files = files_for(output, spark, "the output")
    output = output.rstrip("/")
    if files.exists(f"{output}/items"):
        return output
    latest = read_latest(output, spark)
    if latest is None or not files.exists(f"{latest['path']}/items"):
        raise InputError(f"{output!r} is neither a crowdspark result (no items/) nor a folder of runs with a "
                         "_LATEST.json; give the --output of a run, or the folder of its runs")
    return latest["path"]


def newest_rows(tables: list[Any], spark: Any = None) -> Any:
    """One row per ``item``: its row in the last table of ``tables`` (oldest first) that holds it.

    Local tables (pyarrow or pandas) give a pandas frame in the tables' order; Spark DataFrames a Spark DataFrame.
    """
    if spark is not None:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        tagged = [table.withColumn("__crowdspark_run", F.lit(i)) for i, table in enumerate(tables)]
        union = tagged[0]
        for table in tagged[1:]:
            union = union.unionByName(table, allowMissingColumns=True)
        newest = Window.partitionBy("item").orderBy(F.col("__crowdspark_run").desc())
        return (union.withColumn("__crowdspark_rank", F.row_number().over(newest))
                .filter("__crowdspark_rank = 1").drop("__crowdspark_run", "__crowdspark_rank"))
    frames = [t if isinstance(t, pd.DataFrame) else t.to_pandas() for t in tables]
    whole = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    return whole.loc[~whole["item"].duplicated(keep="last").to_numpy()].reset_index(drop=True)


def read_items(output: str, spark: Any = None, folder: str = "items") -> Any:
    """The whole answer of a run: one row per item, from the newest run of its chain that fitted the item.

    Parameters
    ----------
    output : str
        A run's ``--output`` (``<root>/run_id=<id>``), or a folder of runs (its ``_LATEST.json`` run).
    spark : SparkSession, optional
        Read with Spark (a Spark DataFrame); else with pyarrow (a pandas DataFrame, local paths only).
    folder : str
        The table: ``items`` (default) or ``_incremental/items`` (the item state).

    Returns
    -------
    DataFrame
        The item table's columns (``item``, ``label``, ``confidence``, ``posterior`` ...), one row per item.

    Raises
    ------
    InputError
        When ``output`` is not a result or its chain is incomplete.
    """
    run = resolve_run(output, spark)
    runs = chain_runs(run, spark)
    if spark is not None:
        return newest_rows([spark.read.parquet(f"{r}/{folder}") for r in runs], spark)
    if not is_local(run):
        raise InputError(f"{run!r} is not on a local path: read it with a SparkSession (read_items(output, spark))")
    import pyarrow.dataset as ds

    return newest_rows([ds.dataset(strip_file_scheme(f"{r}/{folder}"), format=_format(r, folder)).to_table()
                        for r in runs])


def _format(run: str, folder: str) -> str:
    names = os.listdir(strip_file_scheme(f"{run}/{folder}"))
    return "csv" if any(name.endswith(".csv") for name in names) else "parquet"
