"""Catalog tables: labels read from a table (``--labels table:<db>.<name>``) with the window pruning its
partitions, and the current-answer and history tables a run root publishes (``output.table``)."""

from __future__ import annotations

import datetime as _dt
import subprocess
import sys

import pandas as pd
import pytest

from crowdspark.config import load_config
from crowdspark.errors import ConfigError, InputError
from crowdspark.io.catalog import KIND_PROPERTY, check_table_run, table_kind, table_name
from crowdspark.io.chain import read_items
from crowdspark.pipeline.run import aggregate
from crowdspark.pipeline.source import choose_source
from crowdspark.pipeline.window import Window

DAYS = ["2026-11-20", "2026-11-21", "2026-11-22", "2026-11-23"]
WINDOW = ["input.date_column=date", "input.window_days=2"]


def dated_labels(data_dir) -> pd.DataFrame:
    """The bundled RTE crowd with a date per item (items spread over :data:`DAYS`)."""
    labels = pd.read_csv(data_dir / "rte" / "labels.csv", dtype=str)
    codes = pd.factorize(labels["item"])[0] % len(DAYS)
    return labels.assign(date=[DAYS[c] for c in codes])


@pytest.fixture(scope="module")
def lake(spark, data_dir, tmp_path_factory):
    """A database ``lake`` under a temporary folder with ``lake.labels`` partitioned by ``date``, and the same
    labels as a CSV file: ``(csv path, labels frame)``."""
    root = tmp_path_factory.mktemp("catalog")
    labels = dated_labels(data_dir)
    spark.sql(f"CREATE DATABASE IF NOT EXISTS lake LOCATION '{root / 'lake.db'}'")
    spark.createDataFrame(labels).write.partitionBy("date").format("parquet").saveAsTable("lake.labels")
    csv = root / "labels.csv"
    labels.to_csv(csv, index=False)
    yield str(csv), labels
    spark.sql("DROP DATABASE lake CASCADE")


def _config(*extra: str, engine: str = "spark"):
    return load_config(overrides=[*WINDOW, *extra], algorithm="ds", engine_name=engine)


def test_table_names_are_db_dot_name():
    assert table_name("table:lake.labels") == "lake.labels"
    assert table_name("data/labels.csv") is None
    with pytest.raises(ConfigError, match=r"table:<db>\.<name>.*'table:labels'"):
        table_name("table:labels")


def test_output_table_settings_are_checked():
    with pytest.raises(ConfigError, match=r"output.table must be a catalog table .*'answers'"):
        load_config(overrides=["output.table=answers"])
    with pytest.raises(ConfigError, match="output.format is 'csv'"):
        load_config(overrides=["output.table=lake.answers", "output.format=csv"])
    with pytest.raises(ConfigError, match="needs output.table"):
        load_config(overrides=["output.history_table=lake.history"])
    with pytest.raises(ConfigError, match="give --run-id"):
        check_table_run(load_config(overrides=["output.table=lake.answers"]), "labels.csv", None, None)


def test_a_table_with_the_local_engine_exits_2_with_the_fix(tmp_path):
    done = subprocess.run([sys.executable, "-m", "crowdspark", "aggregate", "--labels", "table:lake.labels",
                           "--output", str(tmp_path / "out"), "--engine", "local"], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert "table:lake.labels" in done.stderr and "--engine spark" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.spark
@pytest.mark.slow
def test_the_window_prunes_the_table_partitions_before_it_is_read(spark, lake):
    config = _config()
    window = Window.of(config, _dt.date(2026, 11, 22))
    source = choose_source(config, "table:lake.labels", None, None, None, spark, window)
    plan = source.labels_frame._jdf.queryExecution().executedPlan().toString()
    assert "PartitionFilters: [" in plan and "PartitionFilters: []" not in plan
    days = {f.split("date=")[1].split("/")[0] for f in source.labels_frame.inputFiles()}
    assert days == {"2026-11-21", "2026-11-22"}


@pytest.mark.spark
@pytest.mark.slow
def test_labels_from_a_table_give_the_answer_of_the_same_labels_from_files(spark, lake, tmp_path):
    csv, _ = lake
    as_of = _dt.date(2026, 11, 22)
    from_table = aggregate(_config(), "table:lake.labels", str(tmp_path / "t"), spark=spark, as_of=as_of)
    from_files = aggregate(_config(engine="local"), csv, str(tmp_path / "f"), as_of=as_of)
    assert from_table.summary["inputs"]["labels"] == "table:lake.labels"
    assert from_table.summary["inputs"]["days"] == from_files.summary["inputs"]["days"]
    pd.testing.assert_frame_equal(from_table.items, from_files.items)


@pytest.mark.spark
@pytest.mark.slow
def test_a_missing_table_names_it_and_lists_what_the_catalog_has(spark, lake, tmp_path):
    with pytest.raises(InputError, match=r"no catalog table 'lake\.lables'.*databases: .*lake.*tables: .*lake\.labels"):
        aggregate(_config(), "table:lake.lables", str(tmp_path / "t"), spark=spark, as_of=_dt.date(2026, 11, 22))


@pytest.mark.spark
@pytest.mark.slow
def test_a_run_root_publishes_its_current_answer_and_history(spark, lake, tmp_path):
    out = str(tmp_path / "runs")
    config = _config("output.table=lake.answers")

    def night(day: str):
        return aggregate(config, "table:lake.labels", out, spark=spark, run_id=day, warm_start=out)

    night("2026-11-22")
    second = night("2026-11-23")
    current = spark.table("lake.answers")
    assert dict(current.dtypes)["run_id"] == "string" and dict(current.dtypes)["as_of"] == "date"
    expected = read_items(out).assign(run_id="2026-11-23", as_of=_dt.date(2026, 11, 23))
    got = current.toPandas().sort_values("item").reset_index(drop=True)
    pd.testing.assert_frame_equal(got[["item", "label", "run_id", "as_of"]],
                                  expected.sort_values("item").reset_index(drop=True)[["item", "label", "run_id",
                                                                                        "as_of"]])
    night("2026-11-23")  # the same night again: its history row is replaced, not added
    history = spark.table("lake.answers_history").toPandas()
    assert list(history["run_id"]) == ["2026-11-22", "2026-11-23"]
    assert history["labels"].iloc[1] == second.summary["counts"]["labels"]
    night("2026-11-21")  # a backfill: recorded, and the current answer stays the newer night's
    assert {r["run_id"] for r in spark.table("lake.answers").select("run_id").distinct().collect()} == {"2026-11-23"}
    history = spark.table("lake.answers_history").toPandas()
    assert list(history["run_id"]) == ["2026-11-21", "2026-11-22", "2026-11-23"]
    assert table_kind(spark, "lake.answers") == "current"
    assert table_kind(spark, "lake.answers_history") == "history"


@pytest.mark.spark
@pytest.mark.slow
def test_a_table_crowdspark_did_not_create_is_not_replaced(spark, lake, tmp_path):
    spark.sql("CREATE TABLE lake.theirs (item string) USING parquet")
    spark.sql("INSERT INTO lake.theirs VALUES ('kept')")
    config = _config("output.table=lake.theirs")
    with pytest.raises(ConfigError, match=rf"output.table = 'lake.theirs'.*no table property {KIND_PROPERTY}"):
        aggregate(config, "table:lake.labels", str(tmp_path / "runs"), spark=spark, run_id="2026-11-22")
    assert [r["item"] for r in spark.table("lake.theirs").collect()] == ["kept"]
    assert not (tmp_path / "runs" / "run_id=2026-11-22").exists()  # refused before anything was read


def _two_runs(data_dir, root) -> None:
    config = load_config(algorithm="ds", engine_name="local")
    for day in ("2026-11-20", "2026-11-21"):
        aggregate(config, str(data_dir / "rte" / "labels.csv"), str(root), run_id=day)


def test_read_runs_gives_every_run_with_its_id_as_text(data_dir, tmp_path):
    import crowdspark

    _two_runs(data_dir, tmp_path / "ds")
    runs = crowdspark.read_runs(str(tmp_path / "ds"))
    assert runs.groupby("run_id").size().to_dict() == {"2026-11-20": 800, "2026-11-21": 800}
    with pytest.raises(InputError, match="holds no committed run"):
        crowdspark.read_runs(str(tmp_path))


#: the documented read of every run's items with Spark (docs/incremental.md, "Catalog tables")
SNIPPET = '''
import crowdspark
items = crowdspark.read_runs("results/ds", spark)   # every run's items, run_id as text
'''


@pytest.mark.spark
@pytest.mark.slow
def test_the_documented_spark_read_of_every_run_is_quiet_and_types_run_id_as_text(data_dir, tmp_path):
    from pathlib import Path

    assert SNIPPET.strip() in (Path(__file__).parents[1] / "docs" / "incremental.md").read_text()
    _two_runs(data_dir, tmp_path / "results" / "ds")
    script = ("from crowdspark.spark_session import build_session\n"
              "spark = build_session('snippet', master='local[1]')\n" + SNIPPET +
              "print(dict(items.dtypes)['run_id'], items.count())\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["string", "1600"]
    assert "\tat " not in done.stderr and "Exception" not in done.stderr, done.stderr
