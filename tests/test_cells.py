"""One canonical text per cell type, identical on the pandas reader and the Spark reader.

The rules of :mod:`crowdspark.io.cells` are written twice (Arrow and Spark SQL); these tests read the same
files both ways and compare the strings, and check that both refuse the same values.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crowdspark.config import load_config
from crowdspark.errors import InputError
from crowdspark.io.cells import canonical_arrow, canonical_values
from crowdspark.io.pandas_reader import canonical_frame, read_frame
from crowdspark.pipeline import aggregate

# --------------------------------------------------------------------------- the Arrow rules

ACCEPTED = [
    (pa.array(["a", " b ", "", None]), ["a", " b ", "", None]),
    (pa.array(["x", None], pa.large_string()), ["x", None]),
    (pa.array(["x", "y", "x"]).dictionary_encode(), ["x", "y", "x"]),
    (pa.array([-5, 0, 127, None], pa.int8()), ["-5", "0", "127", None]),
    (pa.array([2**63 - 1, None], pa.int64()), [str(2**63 - 1), None]),
    (pa.array([2**64 - 1], pa.uint64()), [str(2**64 - 1)]),
    (pa.array([True, False, None]), ["true", "false", None]),
    (pa.array([266.0, -0.0, -3.0, 2.0**53 - 1, None]), ["266", "0", "-3", str(2**53 - 1), None]),
    (pa.array([266.0, None], pa.float32()), ["266", None]),
    (pa.array([Decimal("266.00"), Decimal("-0.00"), None], pa.decimal128(10, 2)), ["266", "0", None]),
    (pa.array([Decimal("12345678901234567890")], pa.decimal128(38, 0)), ["12345678901234567890"]),
    (pa.nulls(2), [None, None]),
]


@pytest.mark.parametrize("values, text", ACCEPTED, ids=[str(v.type) for v, _ in ACCEPTED])
def test_arrow_rules(values, text):
    out = canonical_arrow(values, "labels", "src", "item")
    assert out.type == pa.string() and out.to_pylist() == text


REFUSED = [
    (pa.array([1.0, 0.5]), r"has the value 0.5, which is not a whole number below 2\*\*53"),
    (pa.array([float("nan")]), r"has the value nan, which is not"),
    (pa.array([float("-inf")]), r"has the value -inf, which is not"),
    (pa.array([2.0**53]), r"has the value 9007199254740992.0, which is not"),
    (pa.array([Decimal("1.50")], pa.decimal128(5, 2)), r"has the value 1.50, which is not"),
    (pa.array([dt.date(2026, 11, 1)]), r"has type date32\[day\]; ids and labels must be strings"),
    (pa.array([dt.datetime(2026, 11, 1)]), r"has type timestamp\[us\]"),
    (pa.array([b"x"]), r"has type binary"),
    (pa.array([[1, 2]]), r"has type list<item: int64>"),
]


@pytest.mark.parametrize("values, message", REFUSED, ids=[str(v.type) + str(i) for i, (v, _) in enumerate(REFUSED)])
def test_arrow_rules_refuse_with_the_column_and_the_fix(values, message):
    with pytest.raises(InputError, match=r"labels at 'src': column 'item' " + message + ".*Write the column as strings"):
        canonical_arrow(values, "labels", "src", "item")


def test_pandas_columns_of_any_dtype_follow_the_arrow_rules():
    mixed = pd.Series(["a", True, 266, np.int64(7), 266.0, None, np.nan, Decimal("3.00"), 2**70], dtype=object)
    assert canonical_values(mixed, "labels", "src", "item").tolist() == [
        "a", "true", "266", "7", "266", None, None, "3", str(2**70)
    ]
    assert canonical_values(pd.Series([1.0, np.nan]), "labels", "src", "c").tolist() == ["1", None]
    assert canonical_values(pd.Series([1, None], dtype="Int64"), "labels", "src", "c").tolist() == ["1", None]
    assert canonical_values(pd.Series(["x", "y"], dtype="category"), "labels", "src", "c").tolist() == ["x", "y"]
    assert canonical_values(pd.Series([True, False]), "labels", "src", "c").tolist() == ["true", "false"]
    with pytest.raises(InputError, match=r"column 'c' has type struct<x: int64>"):
        canonical_values(pd.Series(["a", {"x": 1}], dtype=object), "labels", "src", "c")
    with pytest.raises(InputError, match=r"column 'c' has the value 0.5"):
        canonical_values(pd.Series(["a", 0.5], dtype=object), "labels", "src", "c")


# --------------------------------------------------------------------------- the same files, both readers


def _both_readers(spark, path: str, columns: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    from crowdspark.io.spark_reader import canonical_spark_frame, read_spark_frame

    mapping = {c: c for c in columns}
    by_pandas = canonical_frame(read_frame(path, "auto", "labels"), mapping, "labels", path)
    by_spark = canonical_spark_frame(read_spark_frame(spark, path, "auto", "labels"), mapping, "labels", path)
    by_spark = by_spark.toPandas().astype(object).where(lambda f: f.notna(), None)
    key = columns[0]
    return (by_pandas.sort_values(key, na_position="first").reset_index(drop=True),
            by_spark.sort_values(key, na_position="first").reset_index(drop=True))


TYPED = pa.table({
    "key": pa.array([str(i) for i in range(5)]),
    "string": pa.array(["a", " b ", "", None, "ü"]),
    "int8": pa.array([-5, 0, 127, None, 1], pa.int8()),
    "int64": pa.array([2**62, -1, 0, None, 266], pa.int64()),
    "uint64": pa.array([2**64 - 1, 0, 1, None, 2], pa.uint64()),
    "bool": pa.array([True, False, None, True, False]),
    "float64": pa.array([266.0, -0.0, None, 2.0**53 - 1, -7.0]),
    "float32": pa.array([266.0, 1.0, None, -2.0, 0.0], pa.float32()),
    "decimal": pa.array([Decimal("266.00"), Decimal("-0.00"), None, Decimal("1.00"), Decimal("-12.00")],
                        pa.decimal128(10, 2)),
    "dictionary": pa.array(["x", "y", None, "x", "z"]).dictionary_encode(),
})


@pytest.mark.spark
def test_parquet_of_every_accepted_type_reads_alike(spark, tmp_path):
    path = str(tmp_path / "typed.parquet")
    pq.write_table(TYPED, path)
    by_pandas, by_spark = _both_readers(spark, path, TYPED.column_names)
    pd.testing.assert_frame_equal(by_pandas, by_spark)
    assert by_pandas["bool"].tolist() == ["true", "false", None, "true", "false"]
    assert by_pandas["float64"].tolist() == ["266", "0", None, str(2**53 - 1), "-7"]


@pytest.mark.spark
@pytest.mark.parametrize("values, message", REFUSED[:7], ids=[str(v.type) + str(i) for i, (v, _) in enumerate(REFUSED[:7])])
def test_parquet_values_without_canonical_text_are_refused_by_both_readers(spark, tmp_path, values, message):
    from crowdspark.io.spark_reader import canonical_spark_frame, read_spark_frame, spark_input_errors

    path = str(tmp_path / "refused.parquet")
    pq.write_table(pa.table({"item": values}), path)
    # the same message; a value or a type may be named as each engine prints it
    pattern = r"column 'item' " + message.replace("nan", "(nan|NaN)").replace("-inf", "(-inf|-Infinity)").replace(
        "9007199254740992.0", "(9007199254740992.0|9.007199254740992E15)")
    pattern = re.sub(r"has type .*?(;|$)", r"has type \\S+\1", pattern)
    with pytest.raises(InputError, match=pattern):
        canonical_frame(read_frame(path, "auto", "labels"), {"item": "item"}, "labels", path)
    with pytest.raises(InputError, match=pattern):
        with spark_input_errors("labels", path):
            frame = canonical_spark_frame(read_spark_frame(spark, path, "auto", "labels"), {"item": "item"}, "labels", path)
            frame.collect()


JSON_LINES = "\n".join([
    '{"key": "0", "item": 266, "label": true, "note": "a"}',
    '{"key": "1", "item": 266.0, "label": false, "note": 1}',
    '{"key": "2", "item": 1e5, "label": "true", "note": null}',
    '{"key": "3", "item": -0, "label": null}',
    '{"key": "4", "item": 12345678901234567890123, "label": "caf\\u00e9", "note": 1.50}',
    '',
    '{"key": "5", "item": "266", "label": "x\\ny", "note": false}',
    '{"label": "no key", "key": "6", "item": 2.5E-3}',
]) + "\n"


@pytest.mark.spark
def test_json_lines_read_alike_with_numbers_as_written(spark, tmp_path):
    path = str(tmp_path / "labels.json")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(JSON_LINES)
    by_pandas, by_spark = _both_readers(spark, path, ["key", "item", "label", "note"])
    pd.testing.assert_frame_equal(by_pandas, by_spark)
    assert by_pandas["item"].tolist() == ["266", "266.0", "1e5", "-0", "12345678901234567890123", "266", "2.5E-3"]
    assert by_pandas["label"].tolist() == ["true", "false", "true", None, "café", "x\ny", "no key"]
    assert by_pandas["note"].tolist() == ["a", "1", None, None, "1.50", "false", None]


@pytest.mark.spark
def test_json_is_refused_where_spark_would_rewrite_its_numbers(spark, tmp_path):
    from crowdspark.errors import ConfigError
    from crowdspark.io.spark_reader import read_spark_frame

    path = tmp_path / "labels.json"
    path.write_text(JSON_LINES)
    spark.conf.set("spark.sql.json.enableExactStringParsing", "false")
    try:
        with pytest.raises(ConfigError, match=r"enableExactStringParsing is false .*remove that setting"):
            read_spark_frame(spark, str(path), "auto", "labels")
    finally:
        spark.conf.unset("spark.sql.json.enableExactStringParsing")
    assert read_spark_frame(spark, str(path), "auto", "labels").count() == 7


@pytest.mark.spark
def test_csv_reads_alike(spark, tmp_path):
    path = str(tmp_path / "labels.csv")
    text = "\ufeffkey,item,label\r\n0,1,x\r\n1,\"a, b\",\"say \"\"hi\"\"\"\r\n\r\n2,,\"\"\r\n3, 1 ,x \r\n4,001,ü\r\n"
    with open(path, "w", encoding="utf-8", newline="") as handle:
        handle.write(text)
    by_pandas, by_spark = _both_readers(spark, path, ["key", "item", "label"])
    pd.testing.assert_frame_equal(by_pandas, by_spark)
    assert by_pandas["item"].tolist() == ["1", "a, b", None, " 1 ", "001"]
    assert by_pandas["label"].tolist() == ["x", 'say "hi"', None, "x ", "ü"]


# --------------------------------------------------------------------------- end to end


@pytest.mark.spark
def test_small_and_distributed_runs_give_the_same_classes_and_labels(spark, tmp_path):
    rng = np.random.default_rng(3)
    n_items, per_item = 60, 5
    truth = rng.random(n_items) < 0.5
    rows = []
    for i in range(n_items):
        for k in rng.choice(12, per_item, replace=False):
            rows.append((float(1000 + i), int(k), bool(truth[i] if rng.random() < 0.8 else not truth[i])))
    frame = pd.DataFrame(rows, columns=["item", "worker", "label"]).astype({"worker": "int32"})
    flat = tmp_path / "labels.parquet"
    frame.to_parquet(flat)
    hive = tmp_path / "hive" / "day=1"
    hive.mkdir(parents=True)
    frame.to_parquet(hive / "part.parquet")
    gold = tmp_path / "gold.csv"
    pd.DataFrame({"item": [str(1000 + i) for i in range(n_items)],
                  "truth": np.where(truth, "true", "false")}).to_csv(gold, index=False)

    def run(path, name, overrides=()):
        config = load_config(overrides=list(overrides), algorithm="ds", engine_name="spark")
        summary = aggregate(config, str(path), str(tmp_path / name), gold_path=str(gold), spark=spark).summary
        items = pd.read_parquet(tmp_path / name / "items").sort_values("item").reset_index(drop=True)
        return summary, items

    by_pandas, items = run(flat, "pandas")
    runs = [run(tmp_path / "hive", "collected"), run(flat, "distributed", ["engine.small_input_bytes=0"])]
    assert by_pandas["small_input"]["reader"] == "pandas" and runs[0][0]["small_input"]["reader"] == "spark"
    assert "small_input" not in runs[1][0]
    assert by_pandas["classes"] == ["false", "true"] and by_pandas["metrics"]["n_gold"] == n_items
    assert items["item"].tolist() == [str(1000 + i) for i in range(n_items)]
    for summary, other in runs:
        assert summary["classes"] == by_pandas["classes"] and summary["counts"] == by_pandas["counts"]
        assert summary["metrics"] == pytest.approx(by_pandas["metrics"])
        assert other["item"].tolist() == items["item"].tolist() and other["label"].tolist() == items["label"].tolist()
