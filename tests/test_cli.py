"""The command line end to end: outputs, summary contract, exit codes, atomic results."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from crowdspark.cli import main
from crowdspark.models.registry import algorithm_names
from tests.helpers import DATA

RTE = ["--labels", str(DATA / "rte" / "labels.csv"), "--gold", str(DATA / "rte" / "truth.csv")]
SUMMARY_KEYS = {"algorithm", "engine", "seed", "parameters", "classes", "counts", "iterations", "converged", "history", "timings", "metrics"}


def test_local_run_writes_items_workers_and_summary(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["aggregate", *RTE, "--algorithm", "ds", "--engine", "local", "--seed", "3", "--output", str(out)]) == 0
    assert "error rate 0.07" in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    assert summary["algorithm"] == "ds" and summary["engine"] == "local" and summary["seed"] == 3
    assert set(summary["counts"]) >= {"items", "workers", "labels", "classes", "duplicate_pairs"}
    assert summary["counts"] == {**summary["counts"], "items": 800, "workers": 164, "labels": 8000, "classes": 2}
    assert set(summary["metrics"]) >= {"error_rate", "nll", "n_gold"}
    assert all(set(h) >= {"objective", "change", "seconds"} for h in summary["history"])
    items = pd.read_parquet(out / "items")
    assert list(items.columns[:4]) == ["item", "label", "confidence", "posterior"]
    assert len(items) == 800
    workers = pd.read_parquet(out / "workers")
    assert list(workers.columns) == ["worker", "n_labels", "confusion", "accuracy",
                                     "agreement", "spammer_score", "spammer_probability", "spammer"]
    assert workers["n_labels"].sum() == 8000


def test_csv_output_and_config_file(tmp_path):
    conf = tmp_path / "run.toml"
    conf.write_text('algorithm = "mv"\n[output]\nformat = "csv"\n')
    out = tmp_path / "out"
    assert main(["aggregate", *RTE, "--config", str(conf), "--engine", "local", "--output", str(out)]) == 0
    items = pd.read_csv(out / "items" / "part-00000.csv")
    assert json.loads(items["posterior"].iloc[0])[0] >= 0
    assert json.loads((out / "summary.json").read_text())["algorithm"] == "mv"


def test_bad_input_exits_2_with_a_message_and_no_traceback(tmp_path, capsys):
    code = main(["aggregate", "--labels", str(tmp_path / "missing.csv"), "--engine", "local", "--output", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2
    assert "crowdspark: error: cannot read labels: path" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()
    code = main(["aggregate", *RTE, "--engine", "local", "--set", "ds.max_iter=0", "--output", str(tmp_path / "o")])
    assert code == 2 and "ds.max_iter must be an integer >= 1, but got 0" in capsys.readouterr().err


def test_failed_run_leaves_no_complete_looking_output(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    assert main(["aggregate", *RTE, "--algorithm", "mv", "--engine", "local", "--output", str(out)]) == 0
    before = (out / "summary.json").read_text()

    def broken(frame, directory, fmt):
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "part-00000.parquet"), "w") as handle:
            handle.write("half")
        raise OSError("disk full")

    monkeypatch.setattr("crowdspark.io.tables.write_frame_local", broken)
    assert main(["aggregate", *RTE, "--algorithm", "ds", "--engine", "local", "--output", str(out)]) == 1
    assert "failed: OSError: disk full" in capsys.readouterr().err
    # the previous complete result is untouched, and no staging directory is left behind
    assert (out / "summary.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_rerun_replaces_the_output_atomically(tmp_path):
    out = tmp_path / "out"
    for algorithm in ("mv", "ds"):
        assert main(["aggregate", *RTE, "--algorithm", algorithm, "--engine", "local", "--output", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["algorithm"] == "ds"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_algorithms_prints_a_table_one_line_per_algorithm(capsys):
    assert main(["algorithms"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ALGORITHM", "TITLE", "PARAMETERS", "(default)"]
    rows = lines[1:1 + len(algorithm_names())]
    assert [row.split()[0] for row in rows] == algorithm_names()
    assert all(len(row) <= 130 for row in rows)
    ds = next(row for row in rows if row.startswith("ds "))
    assert "max_iter=100, tol=1e-06, smoothing=0.5" in ds
    assert "--json" in lines[-1]


def test_algorithms_name_describes_one_in_full(capsys):
    assert main(["algorithms", "dds"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("dds: difficulty Dawid-Skene")
    assert "n_levels = chosen among [1, 2] by BIC unless set" in text
    assert "--set dds.KEY=VALUE" in text and "crowdspark.api.DifficultyDawidSkene" in text
    with pytest.raises(SystemExit):
        main(["algorithms", "no-such-model"])


def test_algorithms_lists_parameters(capsys):
    assert main(["algorithms", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    defaults = {key: value["default"] for key, value in listing["ds"]["parameters"].items()}
    assert defaults == {"max_iter": 100, "tol": 1e-6, "smoothing": 0.5, "stop": "change", "m_step": "map"}
    assert listing["dds"]["parameters"]["n_levels"]["default"] == "chosen among [1, 2] by BIC unless set"
    assert listing["ds"]["python"] == {"pandas": "crowdspark.api.DawidSkene",
                                       "pyspark.ml": "crowdspark.ml.DawidSkeneAggregator"}


@pytest.mark.spark
def test_python_m_crowdspark_on_spark_with_crowd_kit_columns(tmp_path):
    labels = pd.read_csv(DATA / "temp" / "labels.csv", dtype=str).rename(columns={"item": "task"})
    labels.to_parquet(tmp_path / "labels.parquet")
    out = tmp_path / "out"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run(
        [sys.executable, "-m", "crowdspark", "aggregate", "--labels", str(tmp_path / "labels.parquet"),
         "--set", "input.item=task", "--algorithm", "ds", "--master", "local[2]", "--quiet", "--output", str(out)],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    # a local file this small takes the small-input path: read with pandas and fitted by the local engine on
    # the driver, without starting Spark
    assert summary["engine"] == "local" and summary["small_input"]["input_bytes"] == os.path.getsize(tmp_path / "labels.parquet")
    assert summary["small_input"]["reader"] == "pandas"
    assert summary["counts"]["items"] == 462 and "read with pandas, without Spark" in proc.stdout + proc.stderr
    assert len(pd.read_parquet(out / "items")) == 462


def _bad_config(tmp_path, kind):
    if kind == "folder":
        return tmp_path, "is a folder"
    path = tmp_path / "c.toml"
    if kind == "binary":
        path.write_bytes(bytes(range(256)) * 4)
        return path, r"is not UTF-8 text \(byte 0x80 at offset 128\)"
    if kind == "latin-1":
        path.write_bytes("[input]\nitem = 'tâche'\n".encode("latin-1"))
        return path, r"is not UTF-8 text \(byte 0xe2 at offset 17\)"
    if kind == "unreadable":
        path.write_text("seed = 1\n")
        path.chmod(0)
        return path, r"cannot be read \(Permission denied\)"
    return "/proc/self/mem", r"cannot be read \("  # exists, but reading it from offset 0 fails


@pytest.mark.parametrize(
    "kind",
    [
        "folder",
        "binary",
        "latin-1",
        pytest.param("unreadable", marks=pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")),
        pytest.param("proc", marks=pytest.mark.skipif(not os.path.exists("/proc/self/mem"), reason="Linux only")),
    ],
)
def test_config_that_is_not_a_readable_toml_file_exits_2(tmp_path, capsys, kind):
    path, what = _bad_config(tmp_path, kind)
    code = main(["aggregate", *RTE, "--engine", "local", "--config", str(path), "--output", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert re.search(rf"crowdspark: error: configuration file '{re.escape(str(path))}' {what}", err), err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("flag", [["--seed", "1000.0"], ["--set", "seed=1000.0"], ["--seed", "1e3"]])
def test_seed_given_as_an_integral_float_gives_the_same_run(tmp_path, flag):
    """bcc draws from streams keyed by the seed: 1000.0 must be the seed 1000, not a different key."""
    sampler = ["--algorithm", "bcc", "--set", "bcc.burn_in=2", "--set", "bcc.n_samples=2", "--engine", "local"]

    def run(name, *seed):
        assert main(["aggregate", *RTE, *sampler, *seed, "--output", str(tmp_path / name)]) == 0
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        return summary, pd.read_parquet(tmp_path / name / "items").sort_values("item").reset_index(drop=True)

    (want, want_items), (got, got_items), (_, other_items) = (
        run("int", "--seed", "1000"), run("float", *flag), run("other", "--seed", "1001")
    )
    assert got["seed"] == 1000 and type(got["seed"]) is int
    assert got["parameters"] == want["parameters"] and got["config"] == want["config"]
    pd.testing.assert_frame_equal(got_items, want_items)
    assert not np.array_equal(np.stack(other_items["posterior"]), np.stack(want_items["posterior"]))


def test_seed_that_is_not_an_integer_exits_2(tmp_path, capsys):
    code = main(["aggregate", *RTE, "--engine", "local", "--seed", "10.5", "--output", str(tmp_path / "o")])
    assert code == 2 and "crowdspark: error: seed must be an integer, but got 10.5" in capsys.readouterr().err
