"""Every input case the readers must handle: a clear error (asserted with match=) or a documented, counted
behaviour.

Each case runs on both engines: the pandas reader and the Spark reader must say the same thing.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime

import numpy as np
import pandas as pd
import pytest

from crowdspark.config import load_config
from crowdspark.errors import ConfigError, InputError
from crowdspark.pipeline import aggregate
from tests.helpers import DATA

ENGINES = ["local", pytest.param("spark", marks=pytest.mark.spark)]


@pytest.fixture(params=ENGINES)
def run(request, tmp_path):
    engine = request.param
    session = request.getfixturevalue("spark") if engine == "spark" else None

    def _run(labels, gold=None, overrides=(), algorithm="mv"):
        # the readers are under test, not a model: majority vote fits in one pass (one Spark job, where
        # Dawid-Skene runs a job or a session sweep per iteration).  The Spark readers and validation, not the
        # small-input path (which uses the pandas ones)
        distribute = ["engine.small_input_bytes=0"] if engine == "spark" else []
        config = load_config(overrides=[*distribute, *overrides], algorithm=algorithm, engine_name=engine)
        return aggregate(config, str(labels), None, gold_path=None if gold is None else str(gold), spark=session).summary

    return _run


def write_csv(path, text):
    path.write_text(text.strip() + "\n")
    return path


BASIC = """
item,worker,label
1,a,x
1,b,x
1,c,y
2,a,y
2,b,y
3,c,x
"""


def test_missing_columns_name_missing_and_present(run, tmp_path):
    path = write_csv(tmp_path / "l.csv", "task,worker,label\n1,a,x\n")
    with pytest.raises(InputError, match=r"no column\(s\) \['item'\]; present columns: \['task', 'worker', 'label'\].*input.item=task"):
        run(path)


def test_crowd_kit_columns_by_configuration(run, tmp_path):
    path = write_csv(tmp_path / "l.csv", BASIC.replace("item,", "task,"))
    summary = run(path, overrides=["input.item=task"])
    assert summary["counts"]["items"] == 3 and summary["counts"]["labels"] == 6


@pytest.mark.parametrize("column", ["item", "worker", "label"])
def test_null_values_are_an_error(run, tmp_path, column):
    rows = {"item": "1,,x", "worker": "1,,x", "label": "1,a,"}
    text = BASIC.strip() + "\n" + (",a,x" if column == "item" else rows[column]) + "\n"
    path = write_csv(tmp_path / "l.csv", text)
    with pytest.raises(InputError, match=rf"column '{column}' has 1 null value\(s\)"):
        run(path)


def test_label_outside_configured_classes(run, tmp_path):
    path = write_csv(tmp_path / "l.csv", BASIC + "3,a,maybe\n")
    with pytest.raises(InputError, match=r"value\(s\) \['maybe'\] outside the configured classes \['x', 'y'\]"):
        run(path, overrides=['input.classes=["x", "y"]'])


def test_configured_classes_set_the_posterior_order_and_count_unused(run, tmp_path):
    path = write_csv(tmp_path / "l.csv", BASIC)
    summary = run(path, overrides=['input.classes=["y", "x", "z"]'])
    assert summary["classes"] == ["y", "x", "z"]
    assert summary["counts"]["unused_classes"] == 1


def test_empty_input(run, tmp_path):
    path = write_csv(tmp_path / "l.csv", "item,worker,label")
    with pytest.raises(InputError, match="have no rows; there is nothing to aggregate"):
        run(path)


def test_single_class(run, tmp_path):
    path = write_csv(tmp_path / "l.csv", "item,worker,label\n1,a,x\n2,b,x\n")
    with pytest.raises(InputError, match=r"single class \['x'\]; aggregation needs at least two classes"):
        run(path)


def test_too_many_distinct_labels_suggests_the_wrong_column(run, tmp_path):
    rows = "\n".join(f"{i},w{i % 3},{i}" for i in range(1005))
    path = write_csv(tmp_path / "l.csv", "item,worker,label\n" + rows)
    with pytest.raises(InputError, match=r"more than 1000\); is it the label column"):
        run(path)


def test_duplicate_pairs_are_kept_and_counted(run, tmp_path):
    path = write_csv(tmp_path / "l.csv", BASIC + "1,a,x\n1,a,y\n2,b,y\n")
    summary = run(path)
    assert summary["counts"]["labels"] == 9
    assert summary["counts"]["duplicate_pairs"] == 2


def test_gold_items_without_labels_are_counted_not_scored(run, tmp_path):
    labels = write_csv(tmp_path / "l.csv", BASIC)
    gold = write_csv(tmp_path / "g.csv", "item,truth\n1,x\n2,y\n9,x\n9,x\n")
    summary = run(labels, gold)
    assert summary["counts"]["gold_items_without_labels"] == 1
    assert summary["counts"]["gold_repeated_rows"] == 1
    assert summary["metrics"]["n_gold"] == 2
    assert summary["metrics"]["error_rate"] == 0.0


def test_gold_value_outside_class_set(run, tmp_path):
    labels = write_csv(tmp_path / "l.csv", BASIC)
    gold = write_csv(tmp_path / "g.csv", "item,truth\n1,x\n2,maybe\n")
    with pytest.raises(InputError, match=r"gold at .*column 'truth' has value\(s\) \['maybe'\] outside the class set \['x', 'y'\]"):
        run(labels, gold)


def test_gold_outside_class_set_is_refused_only_for_labelled_items(run, tmp_path):
    labels = write_csv(tmp_path / "l.csv", BASIC)
    gold = write_csv(tmp_path / "g.csv", "item,truth\n1,x\n2,y\n9,maybe\n")  # item 9 has no label: never scored
    summary = run(labels, gold)
    assert summary["counts"]["gold_items_without_labels"] == 1
    assert summary["metrics"]["n_gold"] == 2


def test_gold_with_two_truths_for_an_item(run, tmp_path):
    labels = write_csv(tmp_path / "l.csv", BASIC)
    gold = write_csv(tmp_path / "g.csv", "item,truth\n1,x\n1,y\n")
    with pytest.raises(InputError, match=r"item '1' has 2 different truth values"):
        run(labels, gold)


def test_gold_missing_columns(run, tmp_path):
    labels = write_csv(tmp_path / "l.csv", BASIC)
    gold = write_csv(tmp_path / "g.csv", "item,gold\n1,x\n")
    with pytest.raises(InputError, match=r"gold at .* no column\(s\) \['truth'\]; present columns: \['item', 'gold'\]"):
        run(labels, gold)


def test_unreadable_path(run, tmp_path):
    with pytest.raises(InputError, match=r"cannot read labels: path .*nope.csv' does not exist"):
        run(tmp_path / "nope.csv")


def test_unknown_extension_asks_for_the_format(run, tmp_path):
    path = tmp_path / "labels.txt"
    path.write_text(BASIC)
    with pytest.raises(InputError, match=r"cannot infer the format.*--set input.format=csv\|parquet\|json"):
        run(path)
    assert run(path, overrides=["input.format=csv"])["counts"]["labels"] == 6


def test_parquet_integer_ids_json_folder_and_glob_read_alike(run, tmp_path):
    frame = pd.DataFrame({"item": [1, 1, 1, 2, 2, 3], "worker": [10, 11, 12, 10, 11, 12], "label": [0, 0, 1, 1, 1, 0]})
    folder = tmp_path / "parts"
    folder.mkdir()
    frame.iloc[:3].to_parquet(folder / "a.parquet")
    frame.iloc[3:].to_parquet(folder / "b.parquet")
    (folder / "_SUCCESS").write_text("")
    as_folder = run(folder)
    as_glob = run(str(folder / "*.parquet"))
    json_path = tmp_path / "labels.json"
    frame.to_json(json_path, orient="records", lines=True)
    as_json = run(json_path)
    csv_path = tmp_path / "labels.csv"
    frame.to_csv(csv_path, index=False)
    as_csv = run(csv_path)
    for summary in (as_folder, as_glob, as_json, as_csv):
        assert summary["counts"]["labels"] == 6 and summary["counts"]["items"] == 3
        assert summary["classes"] == ["0", "1"]
    if "input_cached" in as_folder:  # the Spark engine: spark.cache_input = "auto" re-reads Parquet only
        assert [s["input_cached"] for s in (as_folder, as_glob, as_json, as_csv)] == [False, False, True, True]
        on = run(folder, overrides=["spark.cache_input=on"])
        assert on["input_cached"] is True and on["counts"] == as_folder["counts"]
        assert run(csv_path, overrides=["spark.cache_input=off"])["input_cached"] is False


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["ds.max_iter=0"], r"ds.max_iter must be an integer >= 1, but got 0"),
        (["ds.tol=-1"], r"ds.tol must be a number >= 0, but got -1"),
        (["ds.smoothing=0"], r"ds.smoothing must be a number > 0, but got 0"),
        (["ds.maxiter=3"], r"unknown parameter\(s\) ds.maxiter for algorithm 'ds'; known: m_step, max_iter, smoothing, stop, tol"),
        (["spark.partitions=-1"], r"spark.partitions must be an integer >= 0, but got -1"),
        (["output.format=xml"], r"output.format must be one of \['parquet', 'csv'\], but got 'xml'"),
        (["spark.cache_input=yes"], r"spark.cache_input must be one of \['auto', 'on', 'off'\], but got 'yes'"),
    ],
)
def test_invalid_parameters(run, tmp_path, overrides, message):
    path = write_csv(tmp_path / "l.csv", BASIC)
    with pytest.raises(ConfigError, match=message):
        run(path, overrides=overrides, algorithm="ds")


def test_invalid_seed_and_algorithm():
    with pytest.raises(ConfigError, match=r"seed must be an integer >= 0, but got -3"):
        load_config(seed=-3)
    from crowdspark.models.registry import build_model

    with pytest.raises(ConfigError, match=r"algorithm must be one of \['mv', 'ds'.*but got 'em'"):
        build_model("em", {}, 3, 2, 0)


def test_more_partitions_than_items(run, tmp_path):
    path = write_csv(tmp_path / "l.csv", BASIC)
    summary = run(path, overrides=["spark.partitions=8"])
    assert summary["counts"]["items"] == 3


# --------------------------------------------------------------------------- CSV: headers and rows by name


def test_csv_folder_whose_second_file_has_another_header_order_is_refused(run, tmp_path):
    # RTE split in two, the second half written with the header worker,item,label: a reader that goes by
    # position sees 506 items and 510 workers and gives a plausible error rate
    labels = pd.read_csv(DATA / "rte" / "labels.csv", dtype=str)
    folder = tmp_path / "parts"
    folder.mkdir()
    labels.iloc[:5000].to_csv(folder / "a.csv", index=False)
    labels.iloc[5000:][["worker", "item", "label"]].to_csv(folder / "b.csv", index=False)
    with pytest.raises(
        InputError,
        match=r"CSV file '[^']*b\.csv' has the header \['worker', 'item', 'label'\] but .* has \['item', 'worker', 'label'\]",
    ):
        run(folder, DATA / "rte" / "truth.csv")


def test_csv_folder_whose_second_file_has_another_column_is_refused(run, tmp_path):
    folder = tmp_path / "parts"
    folder.mkdir()
    write_csv(folder / "a.csv", BASIC)
    write_csv(folder / "b.csv", "item,worker,answer\n4,a,x\n4,b,y\n")
    with pytest.raises(InputError, match=r"CSV file '[^']*b\.csv' has the header \['item', 'worker', 'answer'\]"):
        run(folder)


@pytest.mark.parametrize(
    "text",
    [
        BASIC + "4,a,x,extra\n",  # one field more than the header
        "item,worker,label,note\n1,a,x,n\n1,b,y,n,extra\n2,a,y,n\n",  # the same beside an unused column
        BASIC + "4,a\n",  # one field fewer
    ],
    ids=["more", "more-beside-unused-column", "fewer"],
)
def test_rows_with_another_number_of_fields_than_the_header_are_refused(run, tmp_path, text):
    path = write_csv(tmp_path / "l.csv", text)
    with pytest.raises(InputError, match=r"CSV file '[^']*l\.csv'.* fields"):
        run(path)


def test_quoted_newlines_are_refused(run, tmp_path):
    path = write_csv(tmp_path / "l.csv", BASIC + '4,a,"two\nlines"\n4,b,y\n')
    with pytest.raises(InputError, match=r"CSV file '[^']*l\.csv'.*a quoted value spans several lines"):
        run(path)


def test_text_after_a_closing_quote_is_refused(run, tmp_path):
    path = write_csv(tmp_path / "l.csv", BASIC + '4,a,"x"y\n')
    with pytest.raises(InputError, match=r"CSV file '[^']*l\.csv'.*closing quote"):
        run(path)


def test_doubled_quotes_and_quoted_commas_read_alike(run, tmp_path):
    path = write_csv(tmp_path / "l.csv", BASIC + '4,a,"x, ""y"""\n4,b,x\n')
    summary = run(path)
    assert summary["classes"] == ["x", 'x, "y"', "y"]


@pytest.mark.parametrize("header", ["item,worker,label,label", "item,worker,label,note,note"])
def test_a_header_naming_a_column_twice_is_refused(run, tmp_path, header):
    fields = header.count(",") + 1
    path = write_csv(tmp_path / "l.csv", header + "\n" + "\n".join(
        ",".join([i, w, lab] + ["n"] * (fields - 3)) for i, w, lab in (("1", "a", "x"), ("1", "b", "y"))))
    with pytest.raises(InputError, match=r"more than once"):
        run(path)


# --------------------------------------------------------------------------- one canonical text per type


def test_parquet_booleans_and_float_ids_have_one_text_on_both_readers(run, tmp_path):
    frame = pd.DataFrame({
        "item": [266.0, 266.0, 266.0, 267.0, 267.0, 268.0],
        "worker": np.array([1, 2, 3, 1, 2, 3], dtype=np.int32),
        "label": [True, True, False, False, False, True],
    })
    path = tmp_path / "labels.parquet"
    frame.to_parquet(path)
    gold = write_csv(tmp_path / "gold.csv", "item,truth\n266,true\n267,false\n")
    summary = run(path, gold)
    assert summary["classes"] == ["false", "true"]
    assert summary["metrics"]["n_gold"] == 2 and summary["counts"]["gold_items_without_labels"] == 0


def test_json_booleans_and_numbers_keep_their_written_text_on_both_readers(run, tmp_path):
    path = tmp_path / "labels.json"
    path.write_text("\n".join([
        '{"item": 266, "worker": "a", "label": true}',
        '{"item": 266, "worker": "b", "label": false}',
        '{"item": 267, "worker": "a", "label": false}',
        '{"item": 267.0, "worker": "b", "label": false}',
    ]) + "\n")
    summary = run(path)
    assert summary["classes"] == ["false", "true"]
    assert summary["counts"]["items"] == 3  # 267 and 267.0 are written differently: two items


def test_a_json_line_that_is_not_an_object_is_refused(run, tmp_path):
    path = tmp_path / "labels.json"
    path.write_text('{"item": 1, "worker": "a", "label": "x"}\n{"item": 2, "worker": "b", label: "y"}\n')
    with pytest.raises(InputError, match=r"JSON file.*every line must hold one JSON object"):
        run(path)


@pytest.mark.parametrize("damage", ["truncated", "not parquet"])
def test_a_damaged_parquet_file_is_refused_with_its_name(run, tmp_path, damage):
    folder = tmp_path / "parts"
    folder.mkdir()
    frame = pd.DataFrame({"item": [1, 1, 2], "worker": ["a", "b", "a"], "label": ["x", "y", "y"]})
    frame.to_parquet(folder / "a.parquet")
    frame.to_parquet(folder / "b.parquet")
    whole = (folder / "b.parquet").read_bytes()
    (folder / "b.parquet").write_bytes(whole[: len(whole) // 2] if damage == "truncated" else b"item,worker\n" * 20)
    with pytest.raises(InputError, match=r"cannot read labels at .*parts.*b\.parquet.* (not readable as Parquet|is not a "
                                         r"Parquet file)"):
        run(folder)


def test_parquet_files_whose_column_types_differ(run, tmp_path):
    # Spark reads every file with one schema (from one of them): both readers refuse, from the footers
    folder = tmp_path / "parts"
    folder.mkdir()
    pd.DataFrame({"item": [1, 1], "worker": ["a", "b"], "label": ["x", "y"]}).to_parquet(folder / "a.parquet")
    pd.DataFrame({"item": ["2", "2"], "worker": ["a", "b"], "label": ["y", "y"]}).to_parquet(folder / "b.parquet")
    with pytest.raises(InputError, match=r"column 'item' is string in file '[^']*b\.parquet' but int64 in file "
                                         r"'[^']*a\.parquet'.*Write every file with the same column types"):
        run(folder)


def test_a_remote_parquet_type_mismatch_spark_reports_names_file_column_and_types():
    from crowdspark.io.spark_reader import input_error_from_spark

    spark_text = ("org.apache.spark.SparkException: Encountered error while reading file s3a://b/l/day=2/p.parquet. "
                  "Details:\nCaused by: ... reading Parquet column [label]. Expected Spark type string, actual "
                  "Parquet type INT64.")
    error = input_error_from_spark(RuntimeError(spark_text), "labels", "s3a://b/l")
    assert re.search(r"labels at 's3a://b/l': column 'label' is INT64 in file 's3a://b/l/day=2/p\.parquet' but "
                     r"string in the input's schema.*same column types", str(error))


@pytest.mark.parametrize(
    "values, message",
    [
        ([1.5, 2.0], r"column 'item' has the value 1.5, which is not a whole number"),
        ([float("nan"), 2.0], r"column 'item' has the value (nan|NaN), which is not a whole number"),
        ([2.0**53, 2.0], r"column 'item' has the value [^,]+, which is not a whole number below 2\*\*53"),
        ([datetime(2026, 11, 1), datetime(2026, 11, 2)], r"column 'item' has type timestamp"),
    ],
    ids=["fraction", "nan", "too-large", "timestamp"],
)
def test_ids_without_a_canonical_text_are_refused(run, tmp_path, values, message):
    import pyarrow as pa
    import pyarrow.parquet as pq

    # written with Arrow, not pandas: pandas would store NaN as null
    path = tmp_path / "labels.parquet"
    pq.write_table(pa.table({"item": pa.array(values), "worker": ["a", "b"], "label": ["x", "y"]}), path)
    with pytest.raises(InputError, match=message):
        run(path)


# --------------------------------------------------------------------------- gold that matches nothing


def test_gold_that_matches_no_labelled_item_warns_with_counts_and_a_hint(run, tmp_path, caplog):
    labels = write_csv(tmp_path / "l.csv", BASIC)
    gold = write_csv(tmp_path / "g.csv", "item,truth\n1.0,x\n2.0,y\n")
    with caplog.at_level(logging.WARNING, logger="crowdspark"):
        summary = run(labels, gold)
    assert summary["metrics"]["n_gold"] == 0 and summary["counts"]["gold_items_without_labels"] == 2
    expected = r"none of the 2 gold items .* has a label .*3 labelled items.* gold item '1\.0'.* labelled item '1'"
    assert any(re.search(expected, w) for w in summary["warnings"]), summary["warnings"]
    assert any(re.search(expected, r.getMessage()) for r in caplog.records)


def test_gold_with_only_a_header_warns_that_no_metrics_are_computed(run, tmp_path, caplog):
    labels = write_csv(tmp_path / "l.csv", BASIC)
    gold = write_csv(tmp_path / "g.csv", "item,truth\n")
    with caplog.at_level(logging.WARNING, logger="crowdspark"):
        summary = run(labels, gold)
    expected = r"gold at '[^']*g\.csv' has a header but no rows, so no metrics are computed"
    assert any(re.search(expected, w) for w in summary["warnings"]), summary["warnings"]
    assert any(re.search(expected, r.getMessage()) for r in caplog.records)


def test_the_null_device_as_labels_is_an_empty_input_not_a_missing_path(run):
    with pytest.raises(InputError, match=r"'/dev/null' is the null device: an empty input, with no rows"):
        run("/dev/null")


def test_an_empty_labels_file_is_said_to_be_empty(run, tmp_path):
    path = tmp_path / "l.csv"
    path.write_text("")
    with pytest.raises(InputError, match=r"labels at '[^']*l\.csv' is empty: no header and no rows"):
        run(path)


# --------------------------------------------------------------------------- the pandas API's own input checks


@pytest.mark.parametrize(
    "data",
    [
        [("1", "a", "x"), ("1", "b", "y")],
        np.array([["1", "a", "x"], ["1", "b", "y"]]),
        {"item": ["1", "1"], "worker": ["a", "b"], "label": ["x", "y"]},
        pd.Series(["x", "y"]),
    ],
    ids=["list", "ndarray", "dict", "series"],
)
def test_api_refuses_what_is_not_a_dataframe(data):
    from crowdspark.api import DawidSkene

    with pytest.raises(InputError, match=r"pass a pandas DataFrame with columns item, worker, label .*got a "):
        DawidSkene().fit(data)
    # the library function under the API says the same in its own terms
    from crowdspark.pipeline import aggregate_frames

    with pytest.raises(InputError, match=r"labels at '<DataFrame>' must be a pandas DataFrame, but got a "):
        aggregate_frames(load_config(engine_name="local"), data)


def test_api_refuses_a_frame_with_a_column_named_twice():
    from crowdspark.api import DawidSkene

    frame = pd.DataFrame([["1", "a", "x", "y"], ["1", "b", "y", "y"]], columns=["item", "worker", "label", "label"])
    with pytest.raises(InputError, match=r"columns named \['label'\] more than once"):
        DawidSkene().fit(frame)
    gold = pd.DataFrame([["1", "x", "x"]], columns=["item", "truth", "truth"])
    with pytest.raises(InputError, match=r"gold: .*columns named \['truth'\] more than once"):
        DawidSkene().fit(frame.iloc[:, :3], gold)


# --------------------------------------------------------------------------- Spark only: folder names and filters


@pytest.mark.spark
@pytest.mark.parametrize("distribute", [False, True], ids=["collected", "distributed"])
def test_partition_folder_values_are_read_as_text(spark, tmp_path, distribute):
    # worker=007 and worker=7 are two workers; Spark's partition type inference makes both the integer 7
    for worker, rows in (("007", [("1", "x"), ("2", "y")]), ("7", [("1", "y"), ("2", "y")]), ("8", [("1", "x")])):
        folder = tmp_path / "lake" / f"worker={worker}"
        folder.mkdir(parents=True)
        pd.DataFrame(rows, columns=["item", "label"]).to_parquet(folder / "part.parquet")
    overrides = ["engine.small_input_bytes=0"] if distribute else []
    config = load_config(overrides=overrides, algorithm="mv", engine_name="spark")
    result = aggregate(config, str(tmp_path / "lake"), str(tmp_path / "out"), spark=spark)
    assert result.summary["counts"]["workers"] == 3
    assert sorted(pd.read_parquet(tmp_path / "out" / "workers")["worker"]) == ["007", "7", "8"]
    assert spark.conf.get("spark.sql.sources.partitionColumnTypeInference.enabled") == "true"


@pytest.mark.spark
def test_a_filter_on_a_date_folder_compares_its_text(spark, tmp_path):
    for day, rows in (("2026-10-31", 3), ("2026-11-01", 4), ("2026-11-02", 5)):
        folder = tmp_path / "lake" / f"date={day}"
        folder.mkdir(parents=True)
        pd.DataFrame({"item": [str(i // 2) for i in range(rows)], "worker": [f"w{i}" for i in range(rows)],
                      "label": ["x", "y"] * (rows // 2) + ["x"] * (rows % 2)}).to_parquet(folder / "part.parquet")
    config = load_config(overrides=["input.filter=date >= '2026-11-01'"], algorithm="mv", engine_name="spark")
    assert aggregate(config, str(tmp_path / "lake"), None, spark=spark).summary["counts"]["labels"] == 9


@pytest.mark.spark
def test_input_filter_is_code_the_job_runs(spark, tmp_path):
    # why the README says never to build input.filter from untrusted values: it can call Java methods
    path = write_csv(tmp_path / "l.csv", BASIC)
    condition = "reflect('java.lang.System', 'getProperty', 'java.version') is not null"
    config = load_config(overrides=[f"input.filter={condition}"], algorithm="mv", engine_name="spark")
    assert aggregate(config, str(path), None, spark=spark).summary["counts"]["labels"] == 6
