"""The run report: a self-contained page with every section, numbers that agree with the run, figures with
labelled axes and legends, and a real browser that opens it without console errors."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crowdspark.cli import main
from crowdspark.errors import ConfigError, InputError
from crowdspark.report import REPORT_FILE, build_report, write_report
from crowdspark.report.facts import collect
from crowdspark.report.page import SECTIONS, build_figures
from crowdspark.report.tables import resolve_run_dir

DATA = Path(__file__).resolve().parents[1] / "data"
BLUEBIRD = ["--labels", str(DATA / "bluebird" / "labels.csv")]
GOLD = ["--gold", str(DATA / "bluebird" / "truth.csv")]
LOCAL = ["--engine", "local", "--quiet"]


def _aggregate(*args: str) -> None:
    assert main(["aggregate", *LOCAL, *args]) == 0


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A dds run with gold (levels, calibration, quality statistics), an mv run without gold or quality
    statistics, and two nights of ds, the second warm-started from the first on more labels."""
    root = tmp_path_factory.mktemp("runs")
    _aggregate(*BLUEBIRD, *GOLD, "--algorithm", "dds", "--output", str(root / "gold"), "--report")
    _aggregate(*BLUEBIRD, "--algorithm", "mv", "--output", str(root / "nogold"), "--report",
               "--set", "quality.enabled=false")
    labels = pd.read_csv(DATA / "bluebird" / "labels.csv", dtype=str)
    first = root / "first.csv"
    labels.iloc[: len(labels) * 2 // 3].to_csv(first, index=False)
    nightly = root / "nightly"
    for run_id, path in (("2026-11-01", first), ("2026-11-02", DATA / "bluebird" / "labels.csv")):
        _aggregate("--labels", str(path), *GOLD, "--algorithm", "ds", "--output", str(nightly), "--run-id", run_id,
                   "--warm-start", str(nightly), "--report")
    return {"gold": root / "gold", "nogold": root / "nogold", "nightly": nightly,
            "night1": nightly / "run_id=2026-11-01", "night2": nightly / "run_id=2026-11-02"}


def _page(run: Path) -> str:
    return (run / REPORT_FILE).read_text(encoding="utf-8")


def _section(page: str, sid: str) -> str:
    match = re.search(rf'<section id="{sid}">(.*?)</section>', page, flags=re.S)
    assert match, f"section {sid} missing"
    return match.group(1)


@pytest.mark.parametrize("name", ["gold", "nogold", "night2"])
def test_the_page_is_self_contained(runs, name):
    page = _page(runs[name])
    assert page.startswith("<!DOCTYPE html>")
    for reference in ("http://", "https://", "<script", "<link", " src="):
        assert reference not in page, reference
    # references only within the page; no image, embedded or not
    assert not re.search(r"url\(|href=\"(?!#)|<image|data:", page)
    assert page.count("<svg") >= 4


@pytest.mark.parametrize("name", ["gold", "nogold"])
def test_every_section_is_there_in_order(runs, name):
    page = _page(runs[name])
    positions = [page.index(f'<section id="{sid}">') for sid, _ in SECTIONS]
    assert positions == sorted(positions)
    for sid in ("convergence", "confidence", "workers", "confusion"):
        assert "<svg" in _section(page, sid) or sid == "convergence" and name == "nogold"


def test_a_run_with_gold_draws_its_calibration_and_levels(runs):
    page = _page(runs["gold"])
    calibration = _section(page, "calibration")
    assert "<svg" in calibration and "expected calibration error" in calibration
    assert "<svg" in _section(page, "levels")
    assert "Number of levels chosen by bic" in _section(page, "convergence")


def test_a_run_without_gold_says_what_it_lacks(runs):
    page = _page(runs["nogold"])
    assert "was given no gold" in _section(page, "calibration")
    assert "mv has no difficulty levels" in _section(page, "levels")
    assert "records no iterations" in _section(page, "convergence")
    assert "has no previous run" in _section(page, "changes")
    assert "no &quot;quality&quot; section" in _section(page, "quality")


def test_the_calibration_agrees_with_the_runs_error_rate(runs):
    facts = collect(str(runs["gold"]))
    table = facts.calibration.table
    assert facts.calibration.n == facts.summary["metrics"]["n_gold"] == int(table["items"].sum())
    right = float((table["items"] * table["accuracy"]).sum())
    assert right / facts.calibration.n == pytest.approx(1 - facts.summary["metrics"]["error_rate"], abs=1e-12)
    gap = np.abs(table["accuracy"] - table["mean_confidence"]) * table["items"] / facts.calibration.n
    assert facts.calibration.ece == pytest.approx(float(gap.sum()))


def test_histograms_count_every_item_and_worker(runs):
    facts = collect(str(runs["gold"]))
    items = pd.read_parquet(runs["gold"] / "items")
    assert facts.items.histograms["confidence"].total == len(items) == facts.summary["counts"]["items"]
    level_counts = facts.items.histograms["level"].counts
    assert list(level_counts) == list(np.bincount(items["level"], minlength=len(level_counts)))
    assert facts.items.label_counts.to_dict() == items["label"].value_counts().to_dict()


def test_a_warm_started_run_shows_what_changed(runs):
    facts = collect(str(runs["night2"]))
    changes = facts.changes
    assert changes is not None and changes.previous == str(runs["night1"])
    now = pd.read_parquet(runs["night2"] / "items")
    then = pd.read_parquet(runs["night1"] / "items")
    both = now.merge(then, on="item", suffixes=("", "_before"))
    assert changes.n_flipped == int((both["label"] != both["label_before"]).sum())
    assert changes.items_new == len(now) - len(both)
    w_now = pd.read_parquet(runs["night2"] / "workers").set_index("worker")["accuracy"]
    w_then = pd.read_parquet(runs["night1"] / "workers").set_index("worker")["accuracy"]
    moves = (w_now - w_then).dropna()
    assert changes.workers["change"].abs().iloc[0] == pytest.approx(moves.abs().max())
    section = _section(_page(runs["night2"]), "changes")
    assert "items whose label flipped" in section and "<svg" in section


def test_a_run_root_reports_its_latest_run(runs, tmp_path):
    assert resolve_run_dir(str(runs["nightly"])) == str(runs["night2"])
    out = write_report(str(runs["nightly"]), str(tmp_path / "latest.html"))
    assert "run_id=2026-11-02" in Path(out).read_text(encoding="utf-8")


def assert_labelled(name: str, figure) -> None:
    """Every panel of ``figure`` has both axis labels and a legend, or the figure has a labelled colour bar."""
    assert figure.panels, name
    for panel in figure.panels:
        assert panel.xlabel and panel.ylabel, f"{name}: unlabelled axis"
        assert panel.legend or figure.bar is not None, f"{name}: no legend"
    assert figure.bar is None or figure.bar.label, f"{name}: colour bar without a label"


@pytest.mark.parametrize("name", ["gold", "nogold", "night2"])
def test_every_figure_has_labelled_axes_and_a_legend(runs, name):
    drawn = build_figures(collect(str(runs[name])))
    assert drawn
    for fig_name, fig in drawn.items():
        assert_labelled(fig_name, fig)


@pytest.mark.parametrize("name", ["gold", "night2"])
def test_log_axes_label_their_ticks_as_numbers(runs, name):
    texts = _svg_texts(_page(runs[name]))  # the convergence figure's change is on a log scale
    assert [t for t in texts if re.fullmatch("1e[-\u2212]0[1-6]", t)], texts  # a decade, minus sign and all
    assert not [t for t in texts if "mathdefault" in t], texts


def test_a_csv_result_is_reported(tmp_path):
    out = tmp_path / "csv"
    _aggregate(*BLUEBIRD, *GOLD, "--algorithm", "dds", "--output", str(out), "--set", "output.format=csv")
    assert main(["report", str(out)]) == 0
    page = _page(out)
    assert "<svg" in _section(page, "calibration") and "<svg" in _section(page, "levels")
    assert sorted(p.suffix for p in (out / "gold_workers").iterdir()) == [".csv"]
    before = _written_before(out, tmp_path / "before")
    assert page == build_report(str(before)).replace(str(before), str(out))


def test_the_gold_can_be_given_to_the_report(runs, tmp_path):
    page = build_report(str(runs["nogold"]), gold=str(DATA / "bluebird" / "truth.csv"))
    assert "expected calibration error" in _section(page, "calibration")


def test_a_run_given_relative_paths_finds_its_gold_from_another_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(DATA / "bluebird")
    out = tmp_path / "relative"
    _aggregate("--labels", "labels.csv", "--gold", "truth.csv", "--algorithm", "ds", "--output", str(out),
               "--set", "quality.enabled=false")
    monkeypatch.chdir(tmp_path)
    facts = collect(str(out))
    assert facts.summary["inputs"]["gold"] == str(DATA / "bluebird" / "truth.csv")
    assert facts.calibration is not None and facts.calibration.n == facts.summary["metrics"]["n_gold"]


def test_an_incremental_nights_report_says_its_items_are_the_nights(tmp_path):
    from crowdspark.lake import LakeSpec, make_lake, write_lake

    spec = LakeSpec(days=2, items_per_day=40, labels_per_item=4, n_workers=8, seed=2)
    labels = str(tmp_path / "labels")
    write_lake(make_lake(spec), labels)
    out = tmp_path / "nights"
    for d in range(spec.days):
        _aggregate("--labels", labels, "--algorithm", "ds", "--output", str(out), "--run-id", spec.date(d),
                   "--set", "input.date_column=date", "--set", "incremental.mode=on", "--report")
    first, second = (_section(_page(out / f"run_id={spec.date(d)}"), "run") for d in range(spec.days))
    assert "item figures of this page show those items only" not in first  # the first night fits every item
    assert "items: fitted this night" in second and "crowdspark items" in second


def test_a_rerun_replaces_a_result_holding_its_report(runs, tmp_path, caplog):
    out = tmp_path / "again"
    _aggregate(*BLUEBIRD, "--algorithm", "mv", "--output", str(out), "--report")
    with caplog.at_level("INFO", logger="crowdspark.cli"):
        _aggregate(*BLUEBIRD, "--algorithm", "mv", "--output", str(out), "--report")
    assert (out / REPORT_FILE).exists()
    # the run says what its page cost (benchmarks/report_cost.py reads it)
    said = [r.getMessage() for r in caplog.records if r.name == "crowdspark.cli" and "CPU s)" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"report written to {out / REPORT_FILE} in ")


def test_bad_run_directories_are_refused(tmp_path, capsys):
    with pytest.raises(InputError, match="holds no summary.json"):
        build_report(str(tmp_path))
    with pytest.raises(ConfigError, match="reads a local run directory"):
        build_report("hdfs://namenode/results/ds")
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "holds no summary.json" in capsys.readouterr().err
    code = main(["aggregate", *BLUEBIRD, "--output", "s3a://bucket/out", "--report"])
    assert code == 2 and "--report writes the page" in capsys.readouterr().err


def test_the_report_needs_no_matplotlib(runs, monkeypatch):
    for module in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # any import of it fails
    page = build_report(str(runs["gold"]))
    assert page.count("<svg") >= 8 and "matplotlib" not in page


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _open_in_chromium(page: Path, screenshot: Path) -> str:
    """Open ``page`` in headless Chromium, take a screenshot, and return the console messages it logged."""
    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--enable-logging=stderr", "--v=0", "--log-level=0", "--window-size=1100,1400",
               f"--screenshot={screenshot}", page.resolve().as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return "\n".join(line for line in done.stderr.splitlines() if ":CONSOLE" in line)


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (Debian: apt-get install -y "
                                                 "chromium); the report's browser test needs it")
@pytest.mark.parametrize("name", ["gold", "night2"])
def test_chromium_opens_the_report_without_console_errors(runs, name, tmp_path):
    broken = tmp_path / "broken.html"
    broken.write_text('<!DOCTYPE html><html><body><script>console.error("planted"); missing();</script></body></html>')
    planted = _open_in_chromium(broken, tmp_path / "broken.png")
    assert "planted" in planted and "ReferenceError" in planted  # the check sees console errors
    screenshot = tmp_path / "report.png"
    assert _open_in_chromium(runs[name] / REPORT_FILE, screenshot) == ""
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 20_000


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (Debian: apt-get install -y "
                                                 "chromium); the report's browser test needs it")
def test_chromium_opens_the_history_page_without_console_errors(runs, tmp_path):
    from crowdspark.report import HISTORY_FILE
    from crowdspark.report.history_page import HISTORY_SECTIONS

    page = runs["nightly"] / HISTORY_FILE  # written by each --run-id night with --report
    text = page.read_text(encoding="utf-8")
    for sid in ("error", "agreement", "queue", "workers"):
        assert "<svg" in _section(text, sid), sid
    assert [sid for sid, _ in HISTORY_SECTIONS] == re.findall(r'<section id="(\w+)">', text)
    screenshot = tmp_path / "history.png"
    assert _open_in_chromium(page, screenshot) == ""
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 20_000


#: worker ids a browser must show as text: markup, mathtext, a right-to-left override, a long name
ODD_WORKERS = ("<b>bold</b>", "$w_^$", "\u202egpj.exe", "L" * 300)


def _dom(page: Path) -> str:
    """The document Chromium builds from ``page`` (``--dump-dom``)."""
    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.resolve().as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (Debian: apt-get install -y "
                                                 "chromium); the report's browser test needs it")
def test_chromium_shows_odd_names_literally(tmp_path):
    import html

    labels = pd.read_csv(DATA / "bluebird" / "labels.csv", dtype=str)
    truth = pd.read_csv(DATA / "bluebird" / "truth.csv", dtype=str)
    codes = {w: f"{ODD_WORKERS[k % len(ODD_WORKERS)]}{k}" for k, w in enumerate(sorted(labels["worker"].unique()))}
    labels["worker"] = labels["worker"].map(codes)
    labels["label"] = labels["label"].map(ODD_CLASSES)
    truth["truth"] = truth["truth"].map(ODD_CLASSES)
    labels.to_csv(tmp_path / "labels.csv", index=False)
    truth.to_csv(tmp_path / "truth.csv", index=False)
    out = tmp_path / "run"
    _aggregate("--labels", str(tmp_path / "labels.csv"), "--gold", str(tmp_path / "truth.csv"), "--algorithm", "ds",
               "--output", str(out), "--report")
    assert _open_in_chromium(out / REPORT_FILE, tmp_path / "odd.png") == ""
    dom = _dom(out / REPORT_FILE)
    assert "<b>" not in dom  # the markup of a name is text, never an element
    cells = [html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", dom, flags=re.S)]
    assert any(c.startswith("<b>bold</b>") for c in cells)
    assert any(c.startswith("$w_^$") for c in cells)
    assert any(c.startswith("<U+202E>gpj.exe") for c in cells)  # the override is shown, not obeyed
    assert any(c.startswith("L" * 300) for c in cells)  # the long name whole
    for name in ODD_CLASSES.values():
        assert name in cells  # the per-class table against gold


def test_the_quality_statistics_are_drawn_when_the_run_has_them(runs):
    quality_run = runs["gold"]
    facts = collect(str(quality_run))
    assert facts.calibration.source.startswith("computed by the run")
    assert list(facts.relabel["rank"]) == list(range(1, 16))
    page = build_report(str(quality_run))
    quality = _section(page, "quality")
    for text in ("krippendorff_alpha", "class_agreement.1", "workers.spammers", "items/ column vote_entropy",
                 "workers/ column spammer_score", "relabel queue"):
        assert text in quality, text
    assert "bins" not in quality  # the calibration is drawn in its own section
    assert "spammer: " in _section(page, "workers")


@pytest.mark.spark
def test_a_result_written_by_spark_is_reported(spark, tmp_path):
    from crowdspark.cli import build_parser, run_aggregate

    out = tmp_path / "spark"
    args = build_parser().parse_args(["aggregate", *BLUEBIRD, *GOLD, "--algorithm", "dds", "--output", str(out),
                                      "--set", "engine.small_input_bytes=0", "--set", "spark.partitions=2"])
    summary = run_aggregate(args, spark=spark)
    assert summary["engine"] == "spark"
    facts = collect(write_report(str(out)).rsplit("/", 1)[0])
    assert facts.items.histograms["confidence"].total == summary["counts"]["items"]
    assert facts.calibration.n == summary["metrics"]["n_gold"]
    page = _page(out)
    assert "<svg" in _section(page, "levels") and "<svg" in _section(page, "calibration")
    before = _written_before(out, tmp_path / "before")
    assert page == build_report(str(before)).replace(str(before), str(out))


def test_the_crowd_matrix_weighs_workers_by_labels_and_skips_undefined_rows():
    from crowdspark.report.page import crowd_matrix

    workers = pd.DataFrame({"n_labels": [3, 1],
                            "confusion": [[[1.0, 0.0], [0.5, 0.5]], [[0.0, 1.0], [np.nan, np.nan]]]})
    expected = np.array([[0.75, 0.25], [0.5, 0.5]])
    assert np.allclose(crowd_matrix(workers, 2), expected)
    one_coin = pd.DataFrame({"n_labels": [1, 1], "accuracy": [0.9, 0.5]})
    assert np.allclose(crowd_matrix(one_coin, 3), [[0.7, 0.15, 0.15], [0.15, 0.7, 0.15], [0.15, 0.15, 0.7]])


def test_a_one_coin_model_gets_the_crowd_matrix_of_its_accuracies(tmp_path):
    out = tmp_path / "wawa"
    _aggregate(*BLUEBIRD, "--algorithm", "wawa", "--output", str(out), "--report")
    confusion = _section(_page(out), "confusion")
    assert "<svg" in confusion and "one-coin matrices" in confusion


def test_a_report_that_fails_after_the_run_leaves_the_runs_outcome(tmp_path, monkeypatch, capsys):
    import crowdspark.report as report

    def broken(run_dir, out=None, gold=None):
        raise ValueError("planted")

    monkeypatch.setattr(report, "write_report", broken)
    out = tmp_path / "run"
    assert main(["aggregate", *LOCAL, *BLUEBIRD, "--algorithm", "mv", "--output", str(out), "--report"]) == 0
    captured = capsys.readouterr()
    assert f"results in {out}" in captured.out and "report written" not in captured.out
    assert f"warning: the run succeeded and its results are in {out}" in captured.err and "planted" in captured.err
    assert f"run crowdspark report {out} to retry" in captured.err
    assert (out / "summary.json").exists()


#: names mathtext would read: dollar signs, a superscript, a subscript, a backslash
ODD_CLASSES = {"1": "$5 to $10", "2": "$x^$ a_b\\c"}


def _svg_texts(page: str) -> list[str]:
    import html

    return [html.unescape(t) for svg in re.findall(r"<svg.*?</svg>", page, flags=re.S)
            for t in re.findall(r"<text[^>]*>(.*?)</text>", svg, flags=re.S)]


def test_names_with_dollars_are_drawn_literally(tmp_path):
    labels = pd.read_csv(DATA / "bluebird" / "labels.csv", dtype=str)
    truth = pd.read_csv(DATA / "bluebird" / "truth.csv", dtype=str)
    labels["label"] = labels["label"].map(ODD_CLASSES)
    labels["worker"] = "$w_" + labels["worker"] + "^$"
    truth["truth"] = truth["truth"].map(ODD_CLASSES)
    labels.to_csv(tmp_path / "labels.csv", index=False)
    truth.to_csv(tmp_path / "truth.csv", index=False)
    out = tmp_path / "run"
    _aggregate("--labels", str(tmp_path / "labels.csv"), "--gold", str(tmp_path / "truth.csv"), "--algorithm", "ds",
               "--output", str(out), "--report")
    texts = _svg_texts(_section(_page(out), "confusion"))
    for name in ODD_CLASSES.values():
        assert texts.count(name) == 2, (name, texts)  # a tick label on each axis
def test_a_model_that_fitted_one_level_says_so(tmp_path):
    out = tmp_path / "dds1"
    _aggregate(*BLUEBIRD, "--algorithm", "dds", "--set", "dds.n_levels=1", "--output", str(out), "--report")
    levels = _section(_page(out), "levels")
    assert "dds fitted one difficulty level" in levels and "<svg" not in levels


def _written_before(run: Path, copy: Path) -> Path:
    """A copy of the result ``run`` as a version that did not write its gold figures would have written it:
    without ``gold_workers/`` and ``summary.json``'s ``quality.calibration.confusion``."""
    import json

    shutil.copytree(run, copy)
    shutil.rmtree(copy / "gold_workers")
    summary = json.loads((copy / "summary.json").read_text(encoding="utf-8"))
    del summary["quality"]["calibration"]["confusion"]
    (copy / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return copy


def _held_out(truth: pd.DataFrame, fit_fraction: float) -> pd.DataFrame:
    """The rows of ``truth`` the run's gold split holds out of the fit."""
    from crowdspark.config import GoldConfig
    from crowdspark.rng import item_keys

    return truth[~GoldConfig(fit_fraction=fit_fraction).split().in_fit(item_keys(truth["item"].to_numpy()))]


@pytest.fixture(scope="module")
def few(tmp_path_factory) -> Path:
    """A ds run on bluebird with half its gold in the fit and a worker ``few`` who gave 3 labels on held-out gold
    items, 2 of them right."""
    folder = tmp_path_factory.mktemp("few")
    labels = pd.read_csv(DATA / "bluebird" / "labels.csv", dtype=str)
    truth = pd.read_csv(DATA / "bluebird" / "truth.csv", dtype=str)
    held = _held_out(truth, 0.5).head(3)
    wrong = next(c for c in sorted(truth["truth"].unique()) if c != held["truth"].iloc[2])
    extra = held.assign(worker="few", label=[held["truth"].iloc[0], held["truth"].iloc[1], wrong])
    pd.concat([labels, extra[["item", "worker", "label"]]]).to_csv(folder / "labels.csv", index=False)
    _aggregate("--labels", str(folder / "labels.csv"), *GOLD, "--algorithm", "ds", "--set", "gold.fit_fraction=0.5",
               "--output", str(folder / "run"), "--report")
    return folder


def test_each_workers_accuracy_on_gold_is_counted_from_the_labels(few):
    from crowdspark.report.facts import MIN_GOLD_LABELS

    labels = pd.read_csv(few / "labels.csv", dtype=str)
    truth = pd.read_csv(DATA / "bluebird" / "truth.csv", dtype=str)
    held = _held_out(truth, 0.5)
    assert 0 < len(held) < len(truth)
    scored = labels.merge(held, on="item")
    expected = scored.assign(right=scored["label"] == scored["truth"]).groupby("worker")["right"].agg(["size", "mean"])
    facts = collect(str(few / "run"))
    found = facts.worker_gold.table.set_index("worker").sort_index()
    assert found.index.tolist() == sorted(expected.index)
    assert found["gold_labels"].tolist() == expected.loc[found.index, "size"].tolist()
    assert np.allclose(found["gold_accuracy"], expected.loc[found.index, "mean"])
    small = expected[expected["size"] < MIN_GOLD_LABELS]
    assert expected.loc["few", "size"] == 3 and expected.loc["few", "mean"] == pytest.approx(2 / 3)
    assert facts.worker_gold.left_out == len(small) >= 1 and "few" not in facts.worker_gold.drawn["worker"].tolist()
    workers = _section(_page(few / "run"), "workers")
    assert (f"{len(expected) - len(small)} workers with at least {MIN_GOLD_LABELS} labels on held-out gold items "
            f"drawn; {len(small)} with 1 to {MIN_GOLD_LABELS - 1} left out") in workers
    assert "estimated accuracy" in workers and "accuracy on held-out gold items" in workers


def _labels_gone(run: Path, labels: Path, tmp_path: Path) -> None:
    summary = (run / "summary.json").read_text(encoding="utf-8")
    (run / "summary.json").write_text(summary.replace(str(labels), str(tmp_path / "gone.csv")), encoding="utf-8")


def test_a_report_whose_labels_are_gone_says_why_it_has_no_accuracy_on_gold(few, tmp_path):
    run = _written_before(few / "run", tmp_path / "run")
    _labels_gone(run, few / "labels.csv", tmp_path)
    facts = collect(str(run))
    assert facts.worker_gold is None and "could not be read here" in facts.worker_gold_note
    assert "could not be read here" in _section(build_report(str(run)), "workers")


def test_the_report_reads_neither_labels_nor_gold_when_the_run_counted_its_gold(few, tmp_path, monkeypatch):
    import crowdspark.report.facts as facts_module

    run = tmp_path / "run"
    shutil.copytree(few / "run", run)
    _labels_gone(run, few / "labels.csv", tmp_path)

    def refused(*args, **kwargs):
        raise AssertionError("the report read the labels or the gold again")

    monkeypatch.setattr(facts_module, "read_label_columns", refused)
    monkeypatch.setattr(facts_module, "_gold_truth", refused)
    facts = collect(str(run))
    assert facts.worker_gold_note == "" and facts.worker_gold.table.equals(collect(str(few / "run")).worker_gold.table)
    assert facts.gold is not None and facts.gold.n == facts.calibration.n


def test_the_page_is_the_same_from_the_runs_gold_counts_as_from_the_labels(runs, few, tmp_path):
    """The page a result gets from the gold figures its run wrote (``gold_workers/`` and the gold confusion in
    ``summary.json``) is the page a result written before them gets from the labels and the gold files."""
    for name, run in (("few", few / "run"), ("gold", runs["gold"]), ("night2", runs["night2"])):
        assert (run / "gold_workers").is_dir(), name
        before = _written_before(run, tmp_path / name)
        fast, slow = collect(str(run)), collect(str(before))
        assert fast.worker_gold.table.equals(slow.worker_gold.table), name
        assert fast.worker_gold.table["gold_labels"].sum() > 0, name
        assert np.array_equal(fast.gold.counts, slow.gold.counts) and fast.gold.classes == slow.gold.classes, name
        assert build_report(str(run)) == build_report(str(before)).replace(str(before), str(run)), name


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (Debian: apt-get install -y "
                                                 "chromium); the report's browser test needs it")
def test_chromium_draws_the_scatter_against_gold_accuracy(few, tmp_path):
    page = few / "run" / REPORT_FILE
    assert _open_in_chromium(page, tmp_path / "few.png") == ""
    dom = _dom(page)
    workers = _section(dom, "workers")
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", workers, flags=re.S)
    assert any("against the share of its labels on held-out gold items" in c for c in captions)
    assert "labels on gold items" in _svg_texts(workers)  # the colour bar of the gold labels per worker


def test_the_runs_gold_counts_add_up_over_any_blocks_and_match_the_labels():
    """crowdspark.quality.gold_worker_stats summed over blocks of any size (some without a held-out gold item)
    counts what a direct count of the labels on the held-out gold gives."""
    from crowdspark.block import GoldSplit, build_blocks
    from crowdspark.quality import gold_worker_stats
    from crowdspark.stats import sum_stats

    rng = np.random.default_rng(3)
    K, C, m = 7, 3, 400
    items = np.array([f"i{n:03d}" for n in rng.integers(0, 90, m)], dtype=object)
    worker, label = rng.integers(0, K, m), rng.integers(0, C, m)
    gold = {f"i{n:03d}": int(rng.integers(0, C)) for n in range(0, 90, 2) if n < 40 or n > 70}
    truth = np.array([gold.get(i, -1) for i in items])
    split = GoldSplit(fit_fraction=0.3, seed=1)
    for max_labels in (5, 40, m):
        blocks = build_blocks(items, worker, label, truth, max_labels=max_labels, split=split)
        inferred = [rng.integers(0, C, b.n_items) for b in blocks]
        found = sum_stats([gold_worker_stats(b, lab, K, C) for b, lab in zip(blocks, inferred)])
        assert any(not (b.truth >= 0).any() for b in blocks) or max_labels > 5
        held = np.concatenate([b.truth for b in blocks])
        item_truth = dict(zip(np.concatenate([b.item_ids for b in blocks]), held))
        row_truth = np.array([item_truth[i] for i in items])
        on = row_truth >= 0
        assert 0 < on.sum() < m and 0 < (truth >= 0).sum() - on.sum()  # gold held out, and gold in the fit
        assert np.array_equal(found["gold_worker_labels"], np.bincount(worker[on], minlength=K))
        assert np.array_equal(found["gold_worker_right"], np.bincount(worker[on & (label == row_truth)], minlength=K))
        expected = np.zeros((C, C), dtype=np.int64)
        np.add.at(expected, (held[held >= 0], np.concatenate(inferred)[held >= 0]), 1)
        assert np.array_equal(found["gold_confusion"], expected)


def test_the_items_that_flipped_are_pandas_merges_rows():
    """The comparison with the previous run (Arrow's hash lookup) gives the rows, order and index of a pandas inner
    merge of the two runs' items, and so the same flip table and most confident flips."""
    import pyarrow as pa

    from crowdspark.report.facts import _flipped_items

    rng = np.random.default_rng(3)
    n = 2000
    items = np.array([f"item {k}" for k in range(n)], dtype=object)
    now = pd.DataFrame({"item": items[rng.permutation(n)[:1500]], "label": rng.choice(list("abc"), 1500),
                        "confidence": np.round(rng.random(1500), 1)})  # many ties
    then = pd.DataFrame({"item": items[rng.permutation(n)[:1600]], "label": rng.choice(list("abc"), 1600),
                         "confidence": np.round(rng.random(1600), 1)})
    both = now.merge(then, on="item", suffixes=("", "_before"))
    expected = both[both["label"] != both["label_before"]]
    shared, flipped = _flipped_items(*(pa.Table.from_pandas(f, preserve_index=False) for f in (now, then)))
    assert shared == len(both) and 0 < len(flipped) < shared
    pd.testing.assert_frame_equal(flipped[expected.columns], expected, check_index_type=False)
    top = [f.sort_values("confidence", ascending=False).head(20) for f in (flipped, expected)]
    pd.testing.assert_frame_equal(top[0][top[1].columns], top[1], check_index_type=False)
