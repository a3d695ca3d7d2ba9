"""The chain of runs that makes up an incremental night's answer, and reading that answer.

A full refit writes every item into its ``items/``; an incremental night writes only the items it fitted (new or
revisited), says so in its ``summary.json`` (``items_scope``, :data:`ITEMS_SCOPE`) and names, in
``_incremental/chain.json``, the runs before it back to the last full refit::

    {"runs": ["run_id=2026-11-20", "run_id=2026-11-21"]}

oldest first, each the name of a folder beside the run (``run_id=<id>``; never a path, so the chain does not
depend on the working directory and cannot leave the folder of runs).  The whole answer of a run is, for every
item, its row in the newest run of ``chain + [run]`` that holds it (:func:`read_items`).  The same holds for the
item state (``_incremental/items/``).

A reader refuses (:class:`~crowdspark.errors.InputError`, exit 2) a run that holds only its night's items and
whose chain is missing, unreadable, not a list of names, names a run that is gone or that resolves out of the
folder (a symbolic link), or does not begin with a full refit: it would give part of the answer.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import pandas as pd

from crowdspark.errors import ConfigError, InputError
from crowdspark.io.files import Files, files_for
from crowdspark.io.marker import RESULT, delete_owned
from crowdspark.io.paths import absolute_local, is_local, strip_file_scheme
from crowdspark.io.runs import committed_runs, read_latest, resolves_beside, run_as_of

__all__ = ["CHAIN_FILE", "ITEMS_SCOPE", "chain_runs", "chain_payload", "check_outside_chain", "check_replaceable",
           "resolve_run", "read_items", "newest_rows", "prune_runs"]

log = logging.getLogger(__name__)

CHAIN_FILE = "_incremental/chain.json"

#: the summary's ``items_scope``: whether ``items/`` is the whole answer (a full refit) or a night's delta
ITEMS_SCOPE = {
    True: "all: items/ holds every item of the result",
    False: ("fitted this night: items/ holds only the items this night fitted (new or revisited); the whole answer "
            "is the newest row of each item over the runs of _incremental/chain.json and this one: read it with "
            "crowdspark.read_items(OUTPUT) or `crowdspark items OUTPUT`"),
}

#: how a reader is told to make a run whole again
_REFIT = ("restore what is missing, or run that night again with --full-refit (its items/ then holds every item, "
          "and the next nights continue from it)")


def _parent(run: str) -> str:
    return run.rstrip("/").rpartition("/")[0] or "."


def _absolute(path: str) -> str:
    return absolute_local(path.rstrip("/"))


def _is_name(name: Any) -> bool:
    """Whether ``name`` names a folder beside a run: one path component, not ``.`` or ``..``, no control
    character."""
    return (isinstance(name, str) and name not in ("", ".", "..") and not any(ch in name for ch in "/\\")
            and name.isprintable())


def holds_one_night(files: Files, run: str) -> bool:
    """Whether ``run``'s ``items/`` holds only the items its night fitted (its ``summary.json``'s ``items_scope``).

    Raises
    ------
    InputError
        When its ``summary.json`` exists but cannot be read.
    """
    path = f"{run}/summary.json"
    if not files.exists(path):
        return False
    try:
        summary = json.loads(files.read_bytes(path).decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path!r} is not a readable run summary ({exc}): whether {run!r} holds every item or only "
                         f"its night's is unknown; {_REFIT}") from exc
    scope = summary.get("items_scope") if isinstance(summary, dict) else None
    return isinstance(scope, str) and scope.startswith(ITEMS_SCOPE[False].partition(":")[0])


def _chain_names(files: Files, run: str) -> list[str] | None:
    """The names ``run``'s ``chain.json`` lists, or ``None`` for a run that holds every item."""
    path = f"{run}/{CHAIN_FILE}"
    if not files.exists(path):
        if holds_one_night(files, run):
            raise InputError(f"the run {run!r} holds only the items its night fitted (summary.json's items_scope), "
                             f"and {path!r}, the chain of earlier runs that holds the other items, is missing; "
                             f"{_REFIT}")
        return None
    try:
        document = json.loads(files.read_bytes(path).decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path!r} is not a readable chain of runs ({exc}); {_REFIT}") from exc
    names = document.get("runs") if isinstance(document, dict) else None
    if not isinstance(names, list) or not all(_is_name(name) for name in names):
        shown = repr(names if isinstance(document, dict) else document)
        raise InputError(f"{path!r} is not a chain of runs: its \"runs\" must be a list of the names of runs beside "
                         f"{run!r} (such as \"run_id=2026-11-20\"), but holds {shown[:200]}; {_REFIT}")
    return names


def chain_runs(run: str, spark: Any = None, check: bool = True) -> list[str]:
    """The runs whose rows make up the answer of ``run``, oldest first, ending with ``run`` itself (``check``:
    that each still has its ``items/`` and that the first holds every item).

    Raises
    ------
    InputError
        When ``run`` holds only its night's items and its chain is missing or cannot be read, or the chain names
        a run that is gone, resolves out of ``run``'s folder, or (``check``) does not begin with a full refit.
    """
    run = run.rstrip("/")
    files = files_for(run, spark)
    names = _chain_names(files, run)
    if names is None:
        return [run]
    parent = _parent(run)
    runs = [f"{parent}/{name}" for name in names]
    outside = [r for r in runs if not resolves_beside(parent, r)]
    if outside:
        raise InputError(f"the chain of the run {run!r} names runs that resolve out of its folder {parent!r} "
                         f"({[os.path.realpath(strip_file_scheme(r)) for r in outside[:3]]}, symbolic links): a "
                         f"reader follows no run out of the folder it reads; {_REFIT}")
    missing = [r for r in runs if check and not files.exists(f"{r}/items")]
    if missing:
        raise InputError(f"the run {run!r} holds only the items its night fitted, and earlier runs its answer builds "
                         f"on are gone ({missing[:3]}); {_REFIT}")
    if check and holds_one_night(files, (runs + [run])[0]):
        raise InputError(f"the chain of the run {run!r} ({CHAIN_FILE}) does not begin with "
                         f"a full refit: its first run {(runs + [run])[0]!r} holds only its night's items, so the "
                         f"items of the nights before it are missing; {_REFIT}")
    if check:
        _check_links(files, run, names)
    return runs + [run]


def _previous_name(files: Files, run: str) -> str | None:
    """The folder name of the run ``run`` continued (its summary's ``incremental.previous_run``), or ``None``."""
    try:
        summary = json.loads(files.read_bytes(f"{run}/summary.json").decode("utf-8"))
    except (OSError, ValueError):
        return None
    section = summary.get("incremental") if isinstance(summary, dict) else None
    previous = section.get("previous_run") if isinstance(section, dict) else None
    return previous.rstrip("/").rpartition("/")[2] if isinstance(previous, str) and previous else None


def _check_links(files: Files, run: str, names: list[str]) -> None:
    """Refuse a chain from which a run was taken out: each run of ``names`` after the first continues the runs
    before it, so its own chain must list exactly them (a run of the chain that holds every item has none)."""
    parent = _parent(run)
    previous = _previous_name(files, run)
    if previous is not None and names and previous != names[-1]:
        raise InputError(f"the chain of the run {run!r} ({CHAIN_FILE}) ends with {names[-1]}, but the run continued "
                         f"{previous} (its summary.json): a run was taken out of the chain or the chain was edited, "
                         f"and the rows of the runs left out are missing from the answer; {_REFIT}")
    for k, name in enumerate(names[1:], start=1):
        own = _chain_names(files, f"{parent}/{name}")
        if own is not None and own != names[:k]:
            left_out = [n for n in own if n not in names[:k]]
            problem = (f"leaves out {left_out[:3]}, which {name} builds on" if left_out else
                       f"lists {names[:k][-3:]} before {name}, whose own chain is {own[-3:]}")
            raise InputError(f"the chain of the run {run!r} ({CHAIN_FILE}) {problem}: a run was taken out of the "
                             f"chain or the chain was edited, and the rows of the runs left out are missing from "
                             f"the answer; {_REFIT}")


def _beside(previous: str, destination: str) -> bool:
    return _parent(_absolute(previous)) == _parent(_absolute(destination))


def chain_payload(previous: str, destination: str, spark: Any = None) -> dict[str, list[str]]:
    """``chain.json`` of a night at ``destination`` that continues ``previous``: the names of the previous run's
    chain and of the previous run, all beside ``destination``.

    Raises
    ------
    ConfigError
        When ``previous`` is not beside ``destination`` (:func:`check_outside_chain` refuses such a night first).
    """
    if not _beside(previous, destination):
        raise ConfigError(_not_beside(destination, previous))
    return {"runs": [_absolute(run).rpartition("/")[2] for run in chain_runs(previous, spark)]}


def _not_beside(destination: str, previous: str) -> str:
    return (f"--output {destination!r} is not in the folder of the run this incremental night continues "
            f"({previous!r}): a night's answer is read from the runs beside it, by name; write each night into "
            f"the folder of the runs it continues (--output ROOT --run-id DATE, with --warm-start ROOT or none), "
            "or refit in full (--full-refit)")


def check_outside_chain(destination: str, previous: str, spark: Any = None) -> None:
    """Refuse an incremental night whose ``destination`` is not beside ``previous``, or is ``previous`` or a run
    of its chain: the night writes only the items it fitted and its answer reads the rest from those runs.

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
    if not _beside(previous, destination):
        raise ConfigError(_not_beside(destination, previous))


def check_replaceable(root: str, run_id: str, spark: Any = None) -> None:
    """Refuse a run of ``run_id`` into the folder of runs ``root`` when it would replace a run that the chains of
    other runs include: their answers read its rows, and would change without being run again.

    Raises
    ------
    ConfigError
        Naming the runs that build on it and the fix.
    """
    name = f"run_id={run_id}"
    runs = committed_runs(root, spark)
    if run_id not in runs:
        return
    files = files_for(root, spark)
    later = []
    for other, path in sorted(runs.items()):
        try:
            names = _chain_names(files, path) if other != run_id else None
        except InputError:
            continue  # a chain that cannot be read is refused by its own readers
        if names and name in names:
            later.append(f"run_id={other}")
    if later:
        raise ConfigError(
            f"--run-id {run_id} would replace the run {runs[run_id]!r}, which the answers of {len(later)} later "
            f"night(s) build on ({later[:5]}{' ...' if len(later) > 5 else ''}): they read its items as part of "
            "their answer, so replacing it would change what they mean without running them again. To fit labels "
            "that arrived late, run the newest night again (a night fits the days that arrived after the night "
            "that should have read them) or with --full-refit; to keep another answer as of that day, give this "
            "run another --output"
        )


def resolve_run(output: str, spark: Any = None) -> str:
    """The run at ``output``: itself, or the run ``_LATEST.json`` names when ``output`` is a run root.

    Raises
    ------
    InputError
        When ``output`` is neither a result nor a run root with a latest run.
    """
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


def prune_runs(root: str, keep: int, spark: Any = None) -> list[str]:
    """Delete the oldest committed runs of ``root`` beyond the newest ``keep`` (by as-of date, then run id),
    never the one ``_LATEST.json`` names nor a run the chain of a kept run builds on (an incremental night's
    answer, :mod:`crowdspark.io.chain`); returns the deleted paths."""
    if keep <= 0:
        return []
    files = files_for(root, spark)
    latest = read_latest(root, spark)
    runs = sorted(((run_as_of(files, path), run_id, path) for run_id, path in committed_runs(root, spark).items()),
                  reverse=True)
    kept = [path for _, run_id, path in runs[:keep]] + ([latest["path"]] if latest is not None else [])
    try:
        needed = {run.rstrip("/").rpartition("/")[2] for path in kept for run in chain_runs(path, spark, check=False)}
    except InputError as exc:
        log.warning("retention: no run deleted, the runs a kept night builds on are not known: %s", exc)
        return []
    deleted = []
    for _, run_id, path in runs[keep:]:
        if (latest is not None and run_id == latest["run_id"]) or f"run_id={run_id}" in needed:
            continue
        delete_owned(files, path, (RESULT,), "Delete it by hand.")
        deleted.append(path)
    if deleted:
        log.info("retention: deleted %d run(s) older than the newest %d: %s", len(deleted), keep, deleted)
    return deleted
