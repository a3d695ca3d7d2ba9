"""One type per column across the files of one input, checked from the Parquet footers before any row is read.

Spark reads the files of one input with one schema (taken from one of them), so a column stored as string in
one day's file and as int64 in another's fails Spark's read, or not, depending on which file gave the schema;
the pandas reader reads each file with its own types.  Both readers therefore refuse such files before they
read, with the message of :func:`crowdspark.io.rules.column_types_error`, from the footers of local files.
Remote inputs are left to Spark, whose failure becomes the same kind of message
(:func:`crowdspark.io.spark_reader.input_error_from_spark`).
"""

from __future__ import annotations

from collections.abc import Iterable

from crowdspark.config import GoldConfig, InputConfig
from crowdspark.errors import InputError
from crowdspark.io.paths import infer_format, is_local, resolve_local_paths
from crowdspark.io.rules import column_types_error

__all__ = ["check_column_types", "check_input_types"]


def _logical(kind):
    """An Arrow type as a reader sees its values: a dictionary as its values, large and view strings as
    strings, large binary as binary."""
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_large_string(kind) or getattr(pa.types, "is_string_view", lambda _: False)(kind):
        return pa.string()
    if pa.types.is_large_binary(kind):
        return pa.binary()
    return kind


def check_column_types(path: str | None, fmt: str, columns: Iterable[str], what: str) -> None:
    """Refuse a local Parquet input whose files give one of ``columns`` different types.

    Parameters
    ----------
    path : str or None
        A file, folder or glob (``None``, a remote path or a format other than Parquet: nothing to check).
    fmt : str
        The configured format (``"auto"``: from the files' extensions).
    columns : iterable of str
        The columns the run reads (a column a file lacks, or names twice, is left to the reader's checks).
    what : str
        ``"labels"`` or ``"gold"``.

    Raises
    ------
    InputError
        Naming the column, the first file (in path order) whose type differs from the first file holding the
        column, both files and both types, and the fix.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path or not is_local(path):
        return
    try:
        files = resolve_local_paths(path, what)
        if len(files) < 2 or (infer_format(path, files, what) if fmt == "auto" else fmt) != "parquet":
            return
    except InputError:
        return  # nothing there, or no one format: the reader says so when it reads
    wanted = [c for c in dict.fromkeys(columns) if c]
    seen: dict[str, tuple[str, object]] = {}
    for name in files:
        try:
            schema = pq.read_schema(name)
        except (OSError, ValueError, pa.ArrowException):
            continue  # the reader says what is wrong with this file
        for column in wanted:
            index = schema.get_field_index(column)
            if index < 0:
                continue
            kind = _logical(schema.field(index).type)
            first, first_kind = seen.setdefault(column, (name, kind))
            if kind != first_kind:
                raise column_types_error(what, path, column, name, str(kind), f"file {first!r}", str(first_kind))


def check_input_types(input_cfg: InputConfig, gold_cfg: GoldConfig, labels_path: str | None, gold_path: str | None) -> None:
    """:func:`check_column_types` of the labels (item, worker, label, date columns) and the gold (item, truth)
    of a run.

    Raises
    ------
    InputError
    """
    check_column_types(labels_path, input_cfg.format,
                       (input_cfg.item, input_cfg.worker, input_cfg.label, input_cfg.date_column), "labels")
    check_column_types(gold_path, gold_cfg.format, (gold_cfg.item, gold_cfg.truth), "gold")

