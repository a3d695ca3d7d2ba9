"""Catalog tables: labels read with ``spark.table`` (``--labels table:<db>.<name>``), and the tables a run
publishes (``output.table``, ``output.history_table``, :mod:`crowdspark.pipeline.publish`).

A table is read and written by Spark only: a run that names one needs a SparkSession, and the local engine
refuses it (``docs/decisions/0260-catalog-tables-spark.md``).  crowdspark replaces only the tables it
created: each carries the table property :data:`KIND_PROPERTY` (``current`` or ``history``).
"""

from __future__ import annotations

import logging
from typing import Any

from crowdspark.config import TABLE_NAME, RunConfig
from crowdspark.errors import ConfigError, InputError

__all__ = [
    "TABLE_SCHEME",
    "KIND_PROPERTY",
    "table_name",
    "check_table_run",
    "read_table",
    "table_kind",
    "create_owned_table",
    "check_owned",
    "history_table",
]

log = logging.getLogger(__name__)

#: the prefix that makes ``--labels`` / ``--gold`` a catalog table rather than a path
TABLE_SCHEME = "table:"
#: the table property that marks a table crowdspark created, and which of its tables it is
KIND_PROPERTY = "crowdspark.kind"
#: most tables a "no such table" message lists
_LISTED = 30


def table_name(path: str | None) -> str | None:
    """The table ``path`` names (``table:<db>.<name>`` -> ``<db>.<name>``), or ``None`` for a path.

    Raises
    ------
    ConfigError
        When ``path`` starts with ``table:`` but what follows is not ``<db>.<name>``.
    """
    if path is None or not path.startswith(TABLE_SCHEME):
        return None
    name = path[len(TABLE_SCHEME):]
    if not TABLE_NAME.fullmatch(name):
        raise ConfigError(f"a catalog table must be written table:<db>.<name> (letters, digits, underscores), but "
                          f"got {path!r}")
    return name


def check_table_run(config: RunConfig, labels_path: str, gold_path: str | None, run_id: str | None,
                    spark: Any = None) -> None:
    """Refuse, before anything is read, a run that names a catalog table and cannot use it.

    Raises
    ------
    ConfigError
        A table input or ``output.table`` with ``engine.name = "local"`` (tables are read and written by
        Spark); a table input with ``incremental.mode = "on"`` (a night lists day folders); ``output.table``
        without ``--run-id`` (the published answer is a run root's); with ``spark``, an ``output.table`` or
        ``output.history_table`` that exists and is not crowdspark's (:func:`check_owned`).
    """
    tables = [p for p in (labels_path, gold_path) if table_name(p)]
    if config.engine.name == "local" and (tables or config.output.table):
        named = ", ".join([*tables, *([f"output.table = {config.output.table!r}"] if config.output.table else [])])
        raise ConfigError(f"{named}: catalog tables are read and written by Spark, and engine.name is 'local'; run "
                          "with --engine spark (a small table is still fitted on the driver)")
    if tables and config.incremental.mode == "on":
        raise ConfigError(f"{', '.join(tables)}: incremental nights read day partition folders, not catalog tables; "
                          "give the table's location (its folder) as --labels, or set incremental.mode = \"off\"")
    if config.output.table and run_id is None:
        raise ConfigError(f"output.table = {config.output.table!r} publishes a run root's current answer: give "
                          "--run-id (and --output the folder of runs), or unset output.table")
    if config.output.table and spark is not None:
        check_owned(spark, config.output.table, "current", "output.table")
        check_owned(spark, history_table(config), "history", "output.history_table")


def history_table(config: RunConfig) -> str:
    """The history table's name: ``output.history_table``, else ``<output.table>_history``."""
    return config.output.history_table or f"{config.output.table}_history"


def _visible(spark: Any) -> str:
    """The databases and (up to :data:`_LISTED`) tables the session's catalog shows, for a message."""
    databases = sorted(d.name for d in spark.catalog.listDatabases())
    tables = sorted(f"{db}.{t.name}" for db in databases for t in spark.catalog.listTables(db) if not t.isTemporary)
    shown = ", ".join(tables[:_LISTED]) + (f" ... ({len(tables)} in all)" if len(tables) > _LISTED else "")
    return f"databases: {', '.join(databases) or 'none'}; tables: {shown or 'none'}"


def read_table(spark: Any, name: str, what: str) -> Any:
    """The table ``name`` as a Spark DataFrame (lazily: filters on its partition columns prune partitions).

    Raises
    ------
    InputError
        When the catalog has no such table, listing the databases and tables it has.
    """
    if not spark.catalog.tableExists(name):
        raise InputError(f"{what}: no catalog table {name!r} in this Spark session's catalog "
                         f"({spark.conf.get('spark.sql.catalogImplementation', 'in-memory')}); {_visible(spark)}. "
                         "Fix the name, or configure the session's catalog (spark.sql.catalogImplementation=hive "
                         "and its metastore)")
    return spark.table(name)


def table_provider(spark: Any, name: str) -> str:
    """The data source of table ``name`` (``parquet``, ``orc``, ``hive`` ...), lower case; ``"table"`` when the
    catalog does not say."""
    for row in spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect():
        if row["col_name"] == "Provider":
            return str(row["data_type"]).lower()
    return "table"


def table_kind(spark: Any, name: str) -> str | None:
    """The :data:`KIND_PROPERTY` of table ``name``: ``None`` when it has none (a table crowdspark did not
    create)."""
    properties = {row["key"]: row["value"] for row in spark.sql(f"SHOW TBLPROPERTIES {name}").collect()}
    return properties.get(KIND_PROPERTY)


def create_owned_table(spark: Any, name: str, schema: Any, kind: str) -> None:
    """Create the empty Parquet table ``name`` with ``schema`` (a Spark ``StructType``), marked ``kind``; the
    mark is part of its creation, so no table crowdspark created is ever unmarked."""
    columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields)
    spark.sql(f"CREATE TABLE {name} ({columns}) USING parquet TBLPROPERTIES ('{KIND_PROPERTY}' = '{kind}')")
    log.info("created the catalog table %s (%s = %s)", name, KIND_PROPERTY, kind)


def check_owned(spark: Any, name: str, kind: str, setting: str) -> bool:
    """Whether table ``name`` exists (``False``: create it); it must be crowdspark's table of ``kind``.

    Raises
    ------
    ConfigError
        When it exists without the mark, or with another kind.
    """
    if not spark.catalog.tableExists(name):
        return False
    found = table_kind(spark, name)
    if found != kind:
        what = "has no table property" if found is None else f"has {KIND_PROPERTY} = {found!r}, not"
        raise ConfigError(f"{setting} = {name!r}: the table exists and {what} {KIND_PROPERTY} = {kind!r}, so "
                          "crowdspark did not create it for this and will not replace it; name another table, or "
                          "drop this one if it is yours")
    return True
