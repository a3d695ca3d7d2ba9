"""Every input case of issue 2: a clear error (asserted with match=) or a documented, counted behaviour.

Each case runs on both engines: the pandas reader and the Spark reader must say the same thing.
"""

from __future__ import annotations


import pandas as pd
import pytest

from crowdspark.config import load_config
from crowdspark.errors import ConfigError, InputError
from crowdspark.runner import aggregate

ENGINES = ["local", pytest.param("spark", marks=pytest.mark.spark)]


@pytest.fixture(params=ENGINES)
def run(request, tmp_path):
    engine = request.param
    session = request.getfixturevalue("spark") if engine == "spark" else None

    def _run(labels, gold=None, overrides=(), algorithm="ds"):
        # the Spark readers and validation, not the small-input path (which uses the pandas ones)
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
    if "input_cached" in as_folder:  # the Spark engine: engine.cache_input = "auto" re-reads Parquet only
        assert [s["input_cached"] for s in (as_folder, as_glob, as_json, as_csv)] == [False, False, True, True]
        on = run(folder, overrides=["engine.cache_input=on"])
        assert on["input_cached"] is True and on["counts"] == as_folder["counts"]
        assert run(csv_path, overrides=["engine.cache_input=off"])["input_cached"] is False


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["ds.max_iter=0"], r"ds.max_iter must be an integer >= 1, but got 0"),
        (["ds.tol=-1"], r"ds.tol must be a number >= 0, but got -1"),
        (["ds.smoothing=0"], r"ds.smoothing must be a number > 0, but got 0"),
        (["ds.maxiter=3"], r"unknown parameter\(s\) ds.maxiter for algorithm 'ds'; known: max_iter, smoothing, tol"),
        (["engine.partitions=-1"], r"engine.partitions must be an integer >= 0, but got -1"),
        (["output.format=xml"], r"output.format must be one of \['parquet', 'csv'\], but got 'xml'"),
        (["engine.cache_input=yes"], r"engine.cache_input must be one of \['auto', 'on', 'off'\], but got 'yes'"),
    ],
)
def test_invalid_parameters(run, tmp_path, overrides, message):
    path = write_csv(tmp_path / "l.csv", BASIC)
    with pytest.raises(ConfigError, match=message):
        run(path, overrides=overrides)


def test_invalid_seed_and_algorithm():
    with pytest.raises(ConfigError, match=r"seed must be an integer >= 0, but got -3"):
        load_config(seed=-3)
    from crowdspark.algorithms import build_model

    with pytest.raises(ConfigError, match=r"algorithm must be one of \['mv', 'ds'.*but got 'em'"):
        build_model("em", {}, 3, 2, 0)


def test_more_partitions_than_items(run, tmp_path):
    path = write_csv(tmp_path / "l.csv", BASIC)
    summary = run(path, overrides=["engine.partitions=8"])
    assert summary["counts"]["items"] == 3
