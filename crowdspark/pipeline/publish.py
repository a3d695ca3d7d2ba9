"""Publish a committed run to catalog tables (``output.table``, ``output.history_table``).

After a run root's commit (its run folder renamed into place, ``_LATEST.json`` moved), the run:

* replaces the rows of the **current** table with its whole answer (:func:`crowdspark.io.chain.read_items`:
  one row per item, from the newest run of its chain that fitted it) plus ``run_id`` (text) and ``as_of``
  (date), in one ``INSERT OVERWRITE``; only when ``_LATEST.json`` names the run (a backfill of an older night
  leaves the current answer to the newer night);
* records itself in the **history** table: ``run_id``, ``as_of``, ``algorithm``, ``engine``, the item, worker
  and label counts and the ``counts`` and ``metrics`` of its summary (as JSON text, their keys vary by
  algorithm and gold), ``published_at``; a run published again replaces its row.

Both tables are created by crowdspark, marked with the table property ``crowdspark.kind`` (``current``,
``history``); a table of that name without the mark is never replaced (:func:`crowdspark.io.catalog.check_owned`).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
from typing import Any

from crowdspark.config import RunConfig
from crowdspark.errors import ConfigError
from crowdspark.io.catalog import check_owned, create_owned_table, history_table
from crowdspark.io.chain import read_items
from crowdspark.io.runs import run_directory

__all__ = ["publish_run"]

log = logging.getLogger(__name__)

_HISTORY_SCHEMA = ("run_id string, as_of date, algorithm string, engine string, items long, workers long, "
                   "labels long, counts string, metrics string, published_at timestamp")


def publish_run(spark: Any, config: RunConfig, root: str, run_id: str, as_of: _dt.date, summary: dict[str, Any],
                current: bool) -> None:
    """Publish run ``run_id`` of the run root ``root`` (see the module docstring); nothing without
    ``output.table``.

    Parameters
    ----------
    current : bool
        Whether the run is the root's latest (``_LATEST.json`` names it): only then is the current table
        replaced.

    Raises
    ------
    ConfigError
        When a table of the configured name exists without crowdspark's mark, or the current table's columns
        differ from the answer's.
    """
    if not config.output.table:
        return
    if current:
        _publish_current(spark, config.output.table, run_directory(root, run_id), run_id, as_of)
    else:
        log.info("run %s is not the latest of %s: %s keeps the newer night's answer", run_id, root,
                 config.output.table)
    _publish_history(spark, history_table(config), run_id, as_of, summary)


def _publish_current(spark: Any, name: str, run: str, run_id: str, as_of: _dt.date) -> None:
    from pyspark.sql import functions as F

    answer = (read_items(run, spark).withColumn("run_id", F.lit(run_id).cast("string"))
              .withColumn("as_of", F.lit(as_of.isoformat()).cast("date")))
    if not check_owned(spark, name, "current", "output.table"):
        create_owned_table(spark, name, answer.schema, "current")
    present = spark.table(name).schema.simpleString()
    if present != answer.schema.simpleString():
        raise ConfigError(f"output.table = {name!r} has the columns {present}, and this run's answer "
                          f"{answer.schema.simpleString()} (another algorithm or output?); drop the table "
                          "(crowdspark creates it again), or name another one")
    answer.write.insertInto(name, overwrite=True)
    log.info("published run %s to %s", run_id, name)


def _publish_history(spark: Any, name: str, run_id: str, as_of: _dt.date, summary: dict[str, Any]) -> None:
    from pyspark.sql.types import _parse_datatype_string

    schema = _parse_datatype_string(_HISTORY_SCHEMA)
    counts = summary.get("counts", {})
    row = (run_id, as_of, summary.get("algorithm"), summary.get("engine"), counts.get("items"),
           counts.get("workers"), counts.get("labels"), json.dumps(counts, sort_keys=True, default=str),
           json.dumps(summary.get("metrics", {}), sort_keys=True, default=str),
           _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None))
    if not check_owned(spark, name, "history", "output.history_table"):
        create_owned_table(spark, name, schema, "history")
    # one row per run: collected (a row per night) so the overwrite never reads the files it replaces
    kept = [tuple(r) for r in spark.table(name).collect() if r["run_id"] != run_id]
    rows = sorted([*kept, row], key=lambda r: (r[1], r[0]))
    spark.createDataFrame(rows, schema).coalesce(1).write.insertInto(name, overwrite=True)
    log.info("recorded run %s in %s (%d run(s))", run_id, name, len(rows))
