"""The paper-reproduction runner and report (quick settings, local engine, small datasets)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from crowdspark.errors import ConfigError  # noqa: E402
from jobs.reproduce.aggregates import aggregate_records  # noqa: E402
from jobs.reproduce.cli import build_parser, config_from_args  # noqa: E402
from jobs.reproduce.datasets import Dataset, load_folder  # noqa: E402
from jobs.reproduce.methods import Method, default_methods, parse_methods  # noqa: E402
from jobs.reproduce.paper import PAPER_TABLE2  # noqa: E402
from jobs.reproduce.report import BEGIN_MARK, END_MARK  # noqa: E402
from jobs.reproduce.runs import ReproduceConfig, RunRecord, fit_local, load_results, paper_loglik, run_one  # noqa: E402
from jobs.reproduce.tables import markdown_table, table_paper_reference  # noqa: E402
from tests.helpers import DATA  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
METHODS = ("mv", "ds", "idbla", "idbla:random-init")


_LOGGERS = ("", "crowdspark", "jobs.reproduce", "crowdspark.io.sink", "py4j", "matplotlib", "PIL")


def call_main(argv: list[str]) -> int:
    """The job's ``main`` with the logging configuration it sets restored afterwards."""
    import logging

    from jobs.reproduce_paper import main

    saved = {name: logging.getLogger(name).level for name in _LOGGERS}
    handlers = list(logging.getLogger().handlers)
    try:
        return main(argv)
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)
        logging.getLogger().handlers[:] = handlers
        logging.captureWarnings(False)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """One quick reproduction on two small datasets (bluebird, temp), written by the job's ``main``."""
    out = tmp_path_factory.mktemp("repro") / "report"
    code = call_main(["--quick", "--runs", "2", "--datasets", "bluebird,temp", "--methods", ",".join(METHODS),
                      "--data-root", str(DATA), "--output", str(out), "--quiet"])
    assert code == 0
    return out


def test_report_directory_has_report_results_and_pngs(report):
    assert (report / "report.md").is_file()
    assert (report / "results.json").is_file()
    pngs = sorted(report.glob("*.png"))
    assert {p.name for p in pngs} >= {"table2_error_rates.png", "figure3_nll.png"}
    for png in pngs:
        data = png.read_bytes()
        assert data[:8] == PNG_SIGNATURE and len(data) > 5_000, png.name
    assert not list(report.parent.glob("*staging*")), "staging directory left behind"


def test_results_json_has_every_run_and_the_aggregates(report):
    data = json.loads((report / "results.json").read_text())
    assert len(data["records"]) == 2 * len(METHODS) * 2  # datasets x methods x runs
    assert {r["seed"] for r in data["records"]} == {0, 1}
    for rec in data["records"]:
        assert rec["error"] is None
        assert 0.0 <= rec["error_rate"] <= 1.0
        assert rec["seconds"] >= 0.0
    agg = data["aggregates"]
    assert set(agg) == {"bluebird", "temp"}
    assert set(agg["temp"]) == set(METHODS)
    row = agg["temp"]["idbla"]
    assert row["runs"] == 2 and row["error_std"] >= 0.0
    assert row["error_mean"] == pytest.approx(
        100 * sum(r["error_rate"] for r in data["records"] if r["dataset"] == "temp" and r["method"] == "idbla") / 2)
    assert row["levels"]["runs"] == 2
    assert data["paper"]["table2"]["idbla"]["RTE"] == 7.13
    assert data["datasets"]["temp"]["labels"] == 4620
    assert {c["verdict"].split(" ")[0] for c in data["claims"]} <= {"holds", "partly", "does", "not"}


def test_report_tables_name_the_methods_and_the_papers_numbers(report):
    text = (report / "report.md").read_text()
    for heading in ("Error rates, % (Table 2)", "Initialization ablation (Table 3)", "difficulty level",
                    "Negative log-likelihood", "Run time", "The paper's claims"):
        assert heading in text
    table2 = text.split("## Error rates, % (Table 2)")[1].split("###")[0]
    for method in METHODS:
        assert f"| {method} |" in table2
    assert table_paper_reference() in text
    assert "| Heartdisease (paper) | idbla | 16.0 | 40.9 |" in text
    for name in ("table2_error_rates.png", "figure3_nll.png"):
        assert f"]({name})" in text


def test_render_only_reproduces_the_report(report, tmp_path):
    results = load_results(report / "results.json")
    assert call_main(["--render-only", str(report / "results.json"), "--output", str(tmp_path / "again"),
                      "--quiet"]) == 0
    assert (tmp_path / "again" / "report.md").read_text() == (report / "report.md").read_text()
    assert len(results.records) == 16


def test_markdown_table_format():
    text = markdown_table(["method", "rte"], [["ds", "7.12 ± 0.00"], ["a|b", None]])
    assert text.splitlines() == [
        "| method | rte |",
        "|---|---|",
        "| ds | 7.12 ± 0.00 |",
        "| a\\|b | - |",
    ]


def test_paper_reference_table_is_the_papers_table2():
    text = table_paper_reference()
    assert "| IDBLA | 16.03 | 16.66 | 7.13 | 9.50 |" in text
    assert "| Majority vote | 24.89 | 24.76 | 9.88 | 19.80 |" in text
    assert set(PAPER_TABLE2) == {"mv", "ds", "bcc", "idbla", "fixed-idbla"}


def test_methods_come_from_the_registry_and_bad_names_are_refused():
    keys = [m.key for m in default_methods()]
    assert keys[:2] == ["mv", "ds"] and "idbla:paper" in keys and "idbla:random-init" in keys
    assert [m.params for m in parse_methods(["idbla:paper", "fixed-idbla:random-init"])] == [
        {"preset": "paper"}, {"init": "random"}]
    with pytest.raises(ConfigError, match="method algorithm must be one of"):
        parse_methods(["no-such-model"])
    with pytest.raises(ConfigError, match="variant of 'idbla' must be one of"):
        parse_methods(["idbla:fast"])
    with pytest.raises(ConfigError, match="has no 'init' parameter"):
        parse_methods(["ds:random-init"])
    with pytest.raises(ConfigError, match="runs must be an integer >= 1"):
        ReproduceConfig(runs=0)


def _tiny() -> Dataset:
    import pandas as pd

    labels = pd.DataFrame({"item": ["a", "a", "a", "b", "b", "b"], "worker": ["w1", "w2", "w3"] * 2,
                           "label": ["x", "x", "y", "y", "y", "y"]})
    return Dataset("tiny", labels, pd.DataFrame({"item": ["a", "b"], "truth": ["x", "y"]}))


def test_paper_loglik_of_dawid_skene_is_the_sum_over_labels():
    data = _tiny()
    fitted = fit_local(data, "ds", 0, {})
    pi = {w: row for w, row in fitted.workers["confusion"].items()}
    classes = fitted.summary["classes"]
    expected = 0.0
    for item, worker, label in data.labels.itertuples(index=False):
        t = classes.index(fitted.items.loc[item, "label"])
        expected += math.log(pi[worker][t][classes.index(label)])
    assert paper_loglik(data.labels, fitted) == pytest.approx(expected)


def test_a_failing_run_is_recorded_not_raised():
    rec = run_one(_tiny(), Method("ds", "ds", {"max_iter": -1}), seed=0, quick=False)
    assert rec.error is not None and "max_iter" in rec.error and rec.error_rate is None
    agg = aggregate_records([rec, RunRecord("tiny", "ds", "ds", 1, 0.1, error_rate=0.5)])
    assert agg["tiny"]["ds"]["failed"] == 1 and agg["tiny"]["ds"]["error_mean"] == 50.0


def test_a_missing_dataset_folder_exits_2_with_a_message(tmp_path, caplog):
    code = call_main(["--datasets", "nope", "--data-root", str(tmp_path), "--output", str(tmp_path / "out")])
    assert code == 2
    assert "must contain labels.csv and truth.csv" in caplog.text
    assert not (tmp_path / "out").exists()


@pytest.mark.spark
def test_spark_engine_gives_the_local_numbers(spark):
    data = load_folder(DATA / "bluebird")
    for key in ("idbla",):  # the level_confusion path (nested arrays from Spark)
        method = parse_methods([key])[0]
        local = run_one(data, method, seed=1, quick=True)
        remote = run_one(data, method, seed=1, quick=True, spark=spark)
        assert remote.error is None, remote.error
        assert remote.error_rate == local.error_rate
        assert remote.paper_nll == pytest.approx(local.paper_nll)
        assert remote.gold_nll == pytest.approx(local.gold_nll)


@pytest.mark.parametrize("content", [None, "not json", '{"config": {}}', '{"config": {}, "datasets": {}, '
                                     '"methods": [], "worker_accuracy": {}, "records": [{"nope": 1}]}'])
def test_render_only_of_a_bad_results_file_exits_2_with_a_message(tmp_path, caplog, content):
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    assert call_main(["--render-only", str(path), "--output", str(tmp_path / "out")]) == 2
    assert f"--render-only: results file must be the results.json an earlier run wrote, but {path}" in caplog.text
    assert not (tmp_path / "out").exists()


def test_the_entry_point_runs_as_a_script_from_another_directory(tmp_path):
    """As under ``spark-submit``: only ``jobs/`` is on ``sys.path``, and the working directory is elsewhere."""
    job = Path(__file__).resolve().parents[1] / "jobs" / "reproduce_paper.py"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, str(job), "--quick", "--runs", "1", "--datasets", "temp", "--methods", "mv",
         "--data-root", str(DATA), "--output", "out", "--quiet"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    report = (tmp_path / "out" / "report.md").read_text()
    assert "Produced by `python jobs/reproduce_paper.py --quick --runs 1 --datasets temp" in report
    assert "| mv | 5.84 ± 0.00 |" in report


def test_update_doc_splices_the_generated_block(report, tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(f"# title\n\nprose\n{BEGIN_MARK}\nold table\n{END_MARK}\nafter\n")
    assert call_main(["--render-only", str(report / "results.json"), "--output", str(tmp_path / "r"),
                      "--update-doc", str(doc), "--quiet"]) == 0
    text = doc.read_text()
    assert "old table" not in text and text.startswith("# title\n\nprose\n") and text.endswith(f"{END_MARK}\nafter\n")
    assert "| idbla:random-init |" in text and "The paper's claims" in text
    (tmp_path / "plain.md").write_text("no markers\n")
    assert call_main(["--render-only", str(report / "results.json"), "--output", str(tmp_path / "r2"),
                      "--update-doc", str(tmp_path / "plain.md"), "--quiet"]) == 2
    assert (tmp_path / "plain.md").read_text() == "no markers\n"


def test_arguments_become_a_validated_config():
    args = build_parser().parse_args(["--runs", "3", "--datasets", "rte, synthetic", "--methods", "mv,idbla:paper"])
    config = config_from_args(args)
    assert (config.runs, config.datasets, config.methods) == (3, ("rte", "synthetic"), ("mv", "idbla:paper"))
    assert config.engine == "local" and config.ablation and args.output == "reports/paper"
