"""The Spark reader: files and DataFrames to validated string columns, and the RDD of blocks.

The rules and messages are those of :mod:`crowdspark.io.rules`; here they are computed with Spark
aggregations, so that nothing item-level is collected to the driver.  What reaches the driver is sized by
workers and classes: the distinct workers (to number them), the distinct labels (refused beyond
:data:`crowdspark.io.rules.MAX_CLASSES`; no more than that + 1 of them are ever fetched), and counts.  A
Spark job that fails because of the data (a bad header, a malformed record, a value without canonical text)
becomes the same ``InputError`` the pandas reader raises.

Blocks are built on the executors: labels are left-joined with gold, repartitioned by item (so every label
of an item lands in one partition), and each partition is encoded in Arrow (worker and class codes,
items factorized in sorted order) and grouped into blocks by :func:`crowdspark.block.blocks_from_codes`,
the function behind the local engine's :func:`crowdspark.block.build_blocks` (a test checks both give the
same blocks).  The blocks travel from Arrow to Python as one pickled binary value per block.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from urllib.parse import unquote

import numpy as np
import pandas as pd

from crowdspark.block import Block
from crowdspark.config import GoldConfig, InputConfig
from crowdspark.errors import ConfigError, InputError
from crowdspark.io.cells import SPARK_ERROR_END, SPARK_ERROR_START, canonical_spark
from crowdspark.io.paths import is_local, resolve_format, strip_file_scheme
from crowdspark.io.rules import (
    MAX_CLASSES,
    Encoding,
    check_columns,
    column_types_error,
    compressed_file_error,
    csv_header_error,
    csv_quote_error,
    csv_row_error,
    decide_classes,
    duplicate_columns_error,
    empty_labels_error,
    gold_conflict_error,
    gold_empty_warning,
    gold_outside_error,
    gold_unmatched_warning,
    json_line_error,
    missing_columns_error,
    null_error,
    too_many_labels_error,
    sorted_item_codes,
)

__all__ = [
    "COLUMNAR_FORMATS",
    "CSV_OPTIONS",
    "JSON_OPTIONS",
    "read_spark_frame",
    "input_error_from_spark",
    "spark_input_errors",
    "input_bytes",
    "canonical_spark_frame",
    "to_pandas_strings",
    "SparkLabels",
    "prepare_labels_spark",
    "SparkGold",
    "prepare_gold_spark",
    "listed_files",
    "block_rdd",
    "gold_unmatched_spark",
    "filter_error",
]

log = logging.getLogger(__name__)


# formats whose files Spark reads column by column: re-reading the three label columns costs less than
# caching them (see ``spark.cache_input``)
COLUMNAR_FORMATS = ("parquet", "orc")


#: CSV as the pandas reader reads it (:func:`crowdspark.io.pandas_reader.read_csv_file`): every column a string; every
#: file's header checked against the input's by name (``enforceSchema=false``); a record with more or fewer
#: fields than the header, or with text after a closing quote, fails the read (``FAILFAST``, with every
#: field parsed: ``columnPruning=false``, else extra fields beside unused columns go unseen); RFC 4180
#: quoting (``""`` is a quote inside quotes); one record per line (a quoted line break splits the record,
#: which then fails as malformed)
CSV_OPTIONS = {
    "header": "true",
    "inferSchema": "false",
    "enforceSchema": "false",
    "mode": "FAILFAST",
    "columnPruning": "false",
    "escape": '"',
    "unescapedQuoteHandling": "RAISE_ERROR",
    "multiLine": "false",
}


#: JSON lines as text (:func:`crowdspark.io.pandas_reader.read_json_file`): numbers and booleans keep the text written in
#: the file (Spark 4 parses JSON strings exactly), a line that is not JSON fails the read
JSON_OPTIONS = {"primitivesAsString": "true", "mode": "FAILFAST"}


def read_spark_frame(spark, path: str, fmt: str, what: str):
    """Read a file, folder or glob (local or any Hadoop filesystem) as a DataFrame.

    CSV and JSON lines are read as text, with :data:`CSV_OPTIONS` and :data:`JSON_OPTIONS`; their bad rows
    fail the first job that reads them, which :func:`spark_input_errors` turns into an ``InputError``.
    Partition columns (folders named ``column=value``) are text too.
    """
    from pyspark.errors import AnalysisException

    fmt = resolve_format(path, fmt, what)
    if fmt == "json" and spark.conf.get("spark.sql.json.enableExactStringParsing", "true").lower() == "false":
        raise ConfigError(
            "spark.sql.json.enableExactStringParsing is false in this Spark session: Spark would rewrite the JSON "
            f"numbers of {what} at {path!r} (1e5 -> 100000.0) and read them differently from the pandas reader; "
            "remove that setting."
        )
    options = {"csv": CSV_OPTIONS, "json": JSON_OPTIONS}.get(fmt, {})
    reader = spark.read.format(fmt).options(**options)
    try:
        with spark_input_errors(what, path), _partition_values_as_text(spark):
            # the path itself (not the resolved files): Spark then discovers partition columns (date=...)
            return reader.load(path)
    except AnalysisException as exc:
        raise InputError(f"cannot read {what} at {path!r} as {fmt}: {exc}") from exc


_PARTITION_TYPES = "spark.sql.sources.partitionColumnTypeInference.enabled"


@contextmanager
def _partition_values_as_text(spark):
    """Partition columns (``worker=007/``) read as the text of their folder names while a frame is loaded.

    Spark otherwise infers their types, which makes ``worker=007`` and ``worker=7`` the same integer
    worker.  The columns' types are fixed when the frame is loaded; the session's setting is restored.
    """
    previous = spark.conf.get(_PARTITION_TYPES)
    spark.conf.set(_PARTITION_TYPES, "false")
    try:
        yield
    finally:
        spark.conf.set(_PARTITION_TYPES, previous)


def _error_chain(exc: BaseException) -> str:
    """The messages of a Spark failure and of its JVM causes, one per line (no stack frames)."""
    lines = [str(exc).split("\n\tat ", 1)[0]]
    java = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    seen = 0
    while java is not None and seen < 20:
        lines.append(str(java.toString()))
        java, seen = java.getCause(), seen + 1
    return "\n".join(lines)


def _failed_file(text: str) -> str | None:
    """The file a Spark failure names (a local file as its path, as the pandas reader names it)."""
    found = re.search(r"while reading file (\S+?)\.?\s", text)
    return strip_file_scheme(unquote(found.group(1))) if found else None


def input_error_from_spark(exc: BaseException, what: str, source: str) -> InputError | None:
    """The ``InputError`` behind a failed Spark read or job, or ``None`` when the failure is not the data's.

    Recognized: a value the canonical text refuses (:func:`crowdspark.io.cells.canonical_spark`), a CSV header
    other than the input's, a malformed CSV or JSON record, broken CSV quoting, Parquet files whose column
    types differ, a file that is not Parquet.
    """
    text = _error_chain(exc)
    own = re.search(re.escape(SPARK_ERROR_START) + "(.*?)" + re.escape(SPARK_ERROR_END), text, re.S)
    if own:
        return InputError(own.group(1))
    header = re.search(r"CSV header does not conform to the schema\.\s*Header: (.*?)\n\s*Schema: (.*?)\n"
                       r".*?CSV file: (\S+)", text, re.S)
    if header:
        names, expected, name = header.group(1).split(", "), header.group(2).split(", "), unquote(header.group(3))
        repeated = [c for c in dict.fromkeys(names) if [n.lower() for n in names].count(c.lower()) > 1]
        if repeated:
            return duplicate_columns_error(what, source, repeated, f"CSV file {name!r}: its header")
        return csv_header_error(what, source, name, names, "the header Spark read first", expected)
    count = re.search(r"Header length: (\d+), schema size: (\d+)\s*CSV file: (\S+)", text)
    if count:
        return csv_header_error(what, source, unquote(count.group(3)), f"of {count.group(1)} columns",
                                "the header Spark read first", f"{count.group(2)}")
    if "Unescaped quote character" in text:
        return csv_quote_error(what, source, _failed_file(text), "Spark: unescaped quote character")
    record = re.search(r"Malformed CSV record: (.*?)(?: SQLSTATE: \w+)?$", text, re.M)
    if record:
        detail = (f"the record {record.group(1)!r} has more or fewer fields than the header, or a quoted value "
                  "spans several lines")
        return csv_row_error(what, source, _failed_file(text), detail)
    if "INVALID_JSON_RECORD_TYPE" in text:  # a line holding a string, number or array, seen by the schema
        return json_line_error(what, source, _failed_file(text), "a line is not a JSON object")
    if re.search(r"EOFException: Unexpected end of|Not in GZIP format|not a gzip file|ZipException|CompressorException",
                 text):
        return compressed_file_error(what, source, _failed_file(text))
    if "MALFORMED_RECORD_IN_PARSING" in text:  # CSV records are matched above: a JSON line
        reason = re.search(r"JsonParseException: ([^\n]*)", text)
        detail = f" ({reason.group(1)})" if reason else ""
        return json_line_error(what, source, _failed_file(text), f"a line is not a valid JSON object{detail}")
    mismatch = re.search(r"reading Parquet column (\S+)\. Expected Spark type (\S+?),? actual Parquet type "
                         r"(\S+?)\.?(?:\s|$)", text)
    if mismatch:
        column = mismatch.group(1).strip("[]")
        return column_types_error(what, source, column, _failed_file(text), mismatch.group(3),
                                  "the input's schema (Spark's, from one of its files)", mismatch.group(2))
    if "is not a Parquet file" in text:
        return InputError(f"cannot read {what} at {source!r}: {_failed_file(text) or 'a file'!r} is not a Parquet file.")
    return None


#: the largest local input whose refusal by Spark is explained by the pandas reader (:func:`_pandas_error`)
LOCAL_EXPLAIN_BYTES = 64 << 20


def _pandas_error(what: str, source: str) -> InputError | None:
    """The pandas reader's error for a local input of CSV or JSON-lines files that Spark refused (it names the
    file and line where Spark often names neither), or ``None``: a remote or larger input (above
    :data:`LOCAL_EXPLAIN_BYTES`), a format the file names do not say, or files the pandas reader accepts."""
    from crowdspark.io.pandas_reader import read_frame
    from crowdspark.io.paths import infer_format, resolve_local_paths

    if not is_local(source):
        return None
    try:
        files = resolve_local_paths(source, what)
        if infer_format(source, files, what) not in ("csv", "json") or \
                sum(os.path.getsize(name) for name in files) > LOCAL_EXPLAIN_BYTES:
            return None
        read_frame(source, "auto", what)
    except InputError as exc:
        return exc
    except Exception:  # noqa: BLE001 - an explanation only: Spark's own error stands
        return None
    return None


@contextmanager
def spark_input_errors(what: str, source: str):
    """Turn a Spark failure caused by the data (see :func:`input_error_from_spark`) into its ``InputError``:
    for a small local CSV or JSON-lines input, the pandas reader's own (:func:`_pandas_error`), so that both
    readers refuse such files with one message."""
    try:
        yield
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - Py4J and pyspark errors have no common data-error class
        error = input_error_from_spark(exc, what, source)
        if error is None:
            raise
        raise (_pandas_error(what, source) or error) from exc


def listed_files(spark, frame, limit: int = 10000) -> list[tuple[str, int, float]] | None:
    """``(path, bytes, modified seconds)`` of each file behind ``frame``, from the filesystem's listing (no
    Spark job); ``None`` when the frame has no input files, a file cannot be listed, or there are more than
    ``limit`` files (one listing call per file: too slow on an object store beyond that)."""
    try:
        files = frame.inputFiles()
    except Exception:  # noqa: BLE001 - a plan without file sources
        return None
    if not files or len(files) > limit:
        return None
    jvm = spark.sparkContext._jvm
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    out = []
    for name in files:
        try:
            path = jvm.org.apache.hadoop.fs.Path(name)
            status = path.getFileSystem(hadoop).getFileStatus(path)
        except Exception:  # noqa: BLE001 - unreadable listing: do not guess
            return None
        out.append((str(name), int(status.getLen()), int(status.getModificationTime()) / 1000.0))
    return out


def input_bytes(spark, frame, limit: int) -> int | None:
    """Total size of the files behind ``frame``, from the filesystem's listing (no Spark job).

    Stops counting once the total exceeds ``limit`` (or after 1000 files) and returns what it has then.
    ``None`` when the frame has no input files (built in memory) or a file cannot be listed.
    """
    try:
        files = frame.inputFiles()
    except Exception:  # noqa: BLE001 - a plan without file sources
        return None
    if not files:
        return None
    jvm = spark.sparkContext._jvm
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    total = 0
    for count, name in enumerate(files):
        if total > limit or count >= 1000:
            return max(total, limit + 1)
        try:
            path = jvm.org.apache.hadoop.fs.Path(name)
            total += int(path.getFileSystem(hadoop).getFileStatus(path).getLen())
        except Exception:  # noqa: BLE001 - unreadable listing: do not guess
            return None
    return total


def canonical_spark_frame(frame, columns: dict[str, str], what: str, source: str):
    """The canonical text of the configured columns (:func:`crowdspark.io.cells.canonical_spark`), lazily.

    Parameters
    ----------
    frame : pyspark DataFrame
    columns : dict
        Output column -> column of ``frame``.

    Raises
    ------
    InputError
        For missing or repeated columns, or a column type without canonical text (from the schema).
    """
    _check_columns(frame, columns, what, source, "input" if what == "labels" else "gold")
    types = {field.name: field.dataType for field in frame.schema.fields}
    return frame.select(*[
        canonical_spark(column, types[column], what, source, column).alias(out) for out, column in columns.items()
    ])


def to_pandas_strings(frame, columns: list[str], what: str, source: str) -> pd.DataFrame:
    """Collect the canonical text of ``columns`` to the driver (nulls stay missing), as the pandas reader
    of :mod:`crowdspark.io.rules` returns them.

    Raises
    ------
    InputError
        As :func:`canonical_spark_frame`, and for data the read refuses (:func:`spark_input_errors`).
    """
    selected = canonical_spark_frame(frame, {c: c for c in dict.fromkeys(columns)}, what, source)
    with spark_input_errors(what, source):
        return selected.toPandas()


def filter_error(condition: str, columns: list[str], exc: BaseException) -> ConfigError:
    """The error of an ``input.filter`` Spark cannot apply to the labels: the column it names that the labels do
    not have, with the columns they have, or Spark's first line (never its Java stack)."""
    text = str(exc)
    unknown = re.search(r"with name (`[^`]*`|\S+) cannot be resolved", text)
    if unknown:
        return ConfigError(
            f"input.filter {condition!r} is not a valid Spark SQL condition on the labels: it names the column "
            f"{unknown.group(1).strip('`')!r}, which they do not have; their columns are {columns} (a partition "
            "folder such as date=2026-11-01/ is a column). Name one of them in the filter."
        )
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    return ConfigError(f"input.filter {condition!r} is not a valid Spark SQL condition on the labels: {first}; "
                       f"their columns are {columns}.")


@dataclass(frozen=True)
class SparkLabels:
    """Validated labels: a (persisted) DataFrame with string columns ``item``, ``worker``, ``label``."""

    frame: object
    encoding: Encoding
    source: str
    n_rows: int
    observed_classes: tuple[str, ...] = ()


def _check_columns(frame, cols: dict[str, str], what: str, source: str, prefix: str) -> None:
    """:func:`crowdspark.io.rules.check_columns`, with a hint where Spark renamed a repeated CSV header name
    (``label`` twice becomes ``label2`` and ``label3``)."""
    present = list(frame.columns)
    renamed = [c for c in cols.values() if c not in present and any(re.fullmatch(re.escape(c) + r"\d+", p) for p in present)]
    if renamed:
        hint = (f"If a CSV header names {renamed} more than once: Spark renames a repeated header name by "
                "appending its position; give every column its own name. ")
        missing = [c for c in cols.values() if c not in present]
        raise missing_columns_error(what, source, missing, present, [f"{prefix}.{k}" for k in cols], hint)
    check_columns(present, cols, what, source, prefix)


def prepare_labels_spark(frame, cfg: InputConfig, source: str, persist: bool = True) -> SparkLabels:
    """Validate a labels DataFrame and build its encoding (see :func:`crowdspark.io.pandas_reader.prepare_labels`).

    With ``persist`` the selected columns are cached (``MEMORY_AND_DISK``) so that validation and block
    building read the input once; the caller unpersists ``frame`` when the blocks are built.
    """
    from pyspark import StorageLevel

    cols = {"item": cfg.item, "worker": cfg.worker, "label": cfg.label}
    frame = canonical_spark_frame(frame, cols, "labels", source)
    # with ``persist``, read the input once: validation and block building both scan it (the caller
    # unpersists it once the blocks are built)
    if persist:
        frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        with spark_input_errors("labels", source):
            return _validate_labels(frame, cfg, cols, source)
    except BaseException:
        frame.unpersist()
        raise


def _validate_labels(frame, cfg: InputConfig, cols: dict[str, str], source: str) -> SparkLabels:
    from pyspark.sql import functions as F

    # three small jobs: rows and nulls; the distinct labels, at most MAX_CLASSES + 1 of them fetched (a wrong
    # label column is refused before it is collected); the distinct workers.  Cheaper than an
    # approx_count_distinct guard plus one union-distinct job (docs/decisions/0106-input-caching.md)
    aggs = [F.count(F.lit(1)).alias("rows")] + [F.sum(F.col(role).isNull().cast("long")).alias(role) for role in cols]
    row = frame.agg(*aggs).collect()[0]
    if row["rows"] == 0:
        raise empty_labels_error(source)
    for role, column in cols.items():
        if row[role]:
            raise null_error("labels", source, column, int(row[role]))
    labels = [r[0] for r in frame.select("label").distinct().limit(MAX_CLASSES + 1).collect()]
    if len(labels) > MAX_CLASSES:
        raise too_many_labels_error(source, cfg.label)
    classes = decide_classes(sorted(labels), cfg.classes, source, cfg.label)
    workers = tuple(sorted(r[0] for r in frame.select("worker").distinct().collect()))
    return SparkLabels(
        frame=frame,
        encoding=Encoding(workers, tuple(classes)),
        source=source,
        n_rows=int(row["rows"]),
        observed_classes=tuple(labels),
    )


@dataclass(frozen=True)
class SparkGold:
    """Validated gold: DataFrame with string columns ``item``, ``truth``, one row per item."""

    frame: object
    source: str
    repeated_rows: int
    n_items: int = 0


def prepare_gold_spark(frame, cfg: GoldConfig, classes: list[str] | None, source: str, label_items=None) -> SparkGold:
    """Validate a gold DataFrame (see :func:`crowdspark.io.pandas_reader.prepare_gold`; ``label_items`` is a
    DataFrame with the column ``item``, joined only when some gold truth is outside ``classes``).

    ``classes = None``: the caller checks the gold classes of the labelled items itself (the one-pass
    reader, :mod:`crowdspark.engine.spark.blocks`)."""
    from pyspark.sql import functions as F

    cols = {"item": cfg.item, "truth": cfg.truth}
    frame = canonical_spark_frame(frame, cols, "gold", source)
    with spark_input_errors("gold", source):
        row = frame.agg(
            F.count(F.lit(1)).alias("rows"),
            *[F.sum(F.col(role).isNull().cast("long")).alias(role) for role in cols],
        ).collect()[0]
    for role, column in cols.items():
        if row[role]:
            raise InputError(f"gold at {source!r}: column {column!r} has {row[role]} null value(s); remove these rows.")
    outside: list[str] = []
    if classes is not None:
        truths = [r[0] for r in frame.select("truth").distinct().limit(len(classes) + 11).collect()]
        outside = sorted(set(truths) - set(classes))
    if outside and label_items is not None:
        with spark_input_errors("gold", source):
            scored = frame.filter(F.col("truth").isin(outside)).join(label_items, on="item", how="left_semi")
            outside = sorted(r[0] for r in scored.select("truth").distinct().collect())
    if outside:
        raise gold_outside_error(source, cfg.truth, outside, list(classes))
    per_item = frame.groupBy("item").agg(F.countDistinct("truth").alias("n"))
    check = per_item.agg(F.count(F.lit(1)).alias("items"), F.max("n").alias("most")).collect()[0]
    if check["most"] and check["most"] > 1:
        example = per_item.filter(F.col("n") > 1).limit(1).collect()[0]
        raise gold_conflict_error(source, example["item"], int(example["n"]))
    distinct = frame.distinct()
    n_distinct = int(check["items"])
    return SparkGold(frame=distinct, source=source, repeated_rows=int(row["rows"]) - n_distinct, n_items=n_distinct)


def _codes(column, values: tuple[str, ...]) -> np.ndarray:
    """Index of each value of an Arrow string column in ``values`` (``-1`` where absent or null)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    codes = pc.index_in(column, value_set=pa.array(values, type=pa.string()))
    return pc.fill_null(codes, -1).to_numpy(zero_copy_only=False).astype(np.int32)


def _blocks_from_arrow(batches: Iterator, encoding: Encoding, max_labels: int, split=None) -> Iterator:
    """mapInArrow function: one partition's label rows -> pickled blocks (one row each).

    Encoding stays in Arrow (C++) until the per-item ids: no Python object per label is created.
    """
    import pyarrow as pa

    from crowdspark.block import blocks_from_codes

    batches = list(batches)
    if not batches:  # an empty partition (fewer items than partitions)
        return
    table = pa.Table.from_batches(batches)
    if table.num_rows == 0:
        return
    worker = _codes(table["worker"], encoding.workers)
    label = _codes(table["label"], encoding.classes)
    if (worker < 0).any() or (label < 0).any():
        raise InputError("internal encoding error: a worker or label is not in the run's encoding")
    truth = _codes(table["truth"], encoding.classes) if "truth" in table.column_names else None
    codes, uniques = sorted_item_codes(table["item"])
    del table, batches
    for block in blocks_from_codes(codes, uniques, worker, label, truth, max_labels=max_labels, split=split):
        yield pa.RecordBatch.from_pydict({"block": [pickle.dumps(block, protocol=5)]})


def block_rdd(labels: SparkLabels, gold: SparkGold | None, n_partitions: int, max_labels: int, split=None):
    """The RDD of :class:`~crowdspark.block.Block`, partitioned by item, not yet cached.

    Parameters
    ----------
    labels : SparkLabels
    gold : SparkGold or None
        Joined onto the labels so that each block knows its items' gold classes.
    n_partitions : int
    max_labels : int
        Largest number of labels in one block.
    split : crowdspark.block.GoldSplit, optional
        Which gold items the fit holds fixed (the rest are held out for scoring).
    """
    frame = labels.frame
    if gold is not None:
        frame = frame.join(gold.frame, on="item", how="left")
    frame = frame.repartition(n_partitions, "item")
    fn = partial(_blocks_from_arrow, encoding=labels.encoding, max_labels=max_labels, split=split)
    blobs = frame.mapInArrow(fn, "block binary")
    return blobs.rdd.map(_unpickle_block)


def _unpickle_block(row) -> Block:
    return pickle.loads(row[0])


def gold_unmatched_spark(gold: SparkGold, without_labels: int, n_items: int, label_example: str | None) -> str | None:
    """The warning of :func:`crowdspark.io.rules.gold_empty_warning` for gold without rows, of
    :func:`crowdspark.io.rules.gold_unmatched_warning` when no gold item has a label, else ``None`` (one
    one-row job for the gold example, only then).

    Parameters
    ----------
    gold : SparkGold
    without_labels : int
        Gold items without a label.
    n_items : int
        Labelled items.
    label_example : str or None
        The smallest labelled item id.
    """
    if not gold.n_items:
        return gold_empty_warning(gold.source)
    if without_labels < gold.n_items:
        return None
    gold_example = gold.frame.select("item").orderBy("item").limit(1).collect()
    return gold_unmatched_warning(gold.source, gold.n_items, n_items, gold_example[0][0] if gold_example else None,
                                  label_example)
