"""The report's diagnoses (per class against gold, the workers that matter, what each statistic means), the
history page of a run root (night by night, drift flagged, written under the root's lock), and the report's
lock on a result."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crowdspark.cli import main
from crowdspark.errors import ConfigError
from crowdspark.report import HISTORY_FILE, REPORT_FILE, build_report, write_history, write_report
from crowdspark.report.facts import collect, gold_confusion, spotlight_workers
from crowdspark.report.history import DRIFT_FLOORS, collect_history, drift_flags
from crowdspark.report.history_page import HISTORY_SECTIONS, history_figures

LOCAL = ["--engine", "local", "--quiet"]


def _aggregate(*args: str) -> None:
    assert main(["aggregate", *LOCAL, *args]) == 0


def _section(page: str, sid: str) -> str:
    match = re.search(rf'<section id="{sid}">(.*?)</section>', page, flags=re.S)
    assert match, f"section {sid} missing"
    return match.group(1)


#: a tiny crowd: three workers label seven items of classes x and y; the majority of each item, and its gold
TINY = {  # item: (labels of w1, w2, w3), truth
    "i1": ("xxx", "x"), "i2": ("xxy", "x"), "i3": ("yyx", "x"), "i4": ("yyy", "y"), "i5": ("xxy", "y"),
    "i6": ("yyx", "y"), "i7": ("xxx", "x"),
}


def _tiny(folder: Path) -> tuple[Path, Path]:
    rows = [(item, f"w{k + 1}", label) for item, (labels, _) in TINY.items() for k, label in enumerate(labels)]
    labels, truth = folder / "labels.csv", folder / "truth.csv"
    pd.DataFrame(rows, columns=["item", "worker", "label"]).to_csv(labels, index=False)
    pd.DataFrame([(i, t) for i, (_, t) in TINY.items()], columns=["item", "truth"]).to_csv(truth, index=False)
    return labels, truth


def test_the_per_class_confusion_against_gold_is_counted_by_hand(tmp_path):
    labels, truth = _tiny(tmp_path)
    out = tmp_path / "mv"
    _aggregate("--labels", str(labels), "--gold", str(truth), "--algorithm", "mv", "--output", str(out), "--report")
    gold = collect(str(out)).gold
    # majorities: i1 x, i2 x, i3 y, i4 y, i5 x, i6 y, i7 x; true x: i1 i2 i7 right, i3 wrong; true y: i5 wrong
    assert gold.classes == ["x", "y"]
    assert gold.counts.tolist() == [[3, 1], [1, 2]]
    per_class = gold.table().set_index("class")
    assert per_class.loc["x", "accuracy"] == pytest.approx(3 / 4) and per_class.loc["y", "accuracy"] == 2 / 3
    assert per_class.loc["x", "precision"] == pytest.approx(3 / 4) and per_class.loc["y", "precision"] == 2 / 3
    assert per_class.loc["x", "most confused with"] == "y"
    section = _section((out / REPORT_FILE).read_text(encoding="utf-8"), "classes")
    assert "7 held-out gold items" in section and "<svg" in section


def test_gold_confusion_leaves_out_unknown_classes():
    counts = gold_confusion(np.array(["a", "b", "b", "z"]), np.array(["a", "a", "b", "a"]), ["a", "b"])
    assert counts.tolist() == [[1, 0], [1, 1]]


def test_a_run_without_gold_says_why_it_has_no_classes_section(tmp_path):
    labels, _ = _tiny(tmp_path)
    out = tmp_path / "nogold"
    _aggregate("--labels", str(labels), "--algorithm", "mv", "--output", str(out))
    assert "was given no gold" in _section(build_report(str(out)), "classes")


def test_the_workers_that_matter_are_chosen_for_their_reasons():
    workers = pd.DataFrame({"worker": ["a", "b", "c", "d", "e"], "n_labels": [50, 40, 30, 20, 10],
                            "accuracy": [0.9, 0.8, 0.7, 0.6, 0.5],
                            "spammer": [False, False, False, True, True]})
    chosen = spotlight_workers(workers, None, per_reason=2)
    assert chosen["worker"].tolist() == ["a", "b", "d", "e"]
    assert chosen["why"].tolist() == ["most labels", "most labels", "flagged spammer", "flagged spammer"]
    assert chosen["row"].tolist() == [0, 1, 3, 4]


def test_drift_flags_a_jump_and_a_steady_trend_but_not_noise():
    from scipy.stats import theilslopes

    past = np.array([0.50, 0.53, 0.48, 0.52, 0.47, 0.51, 0.49])
    slope, intercept, _, _ = theilslopes(past, np.arange(7))
    noise = 1.4826 * np.median(np.abs(past - intercept - slope * np.arange(7)))  # 0.0297
    threshold = max(5 * noise, 0.03)
    jump, wobble = 0.68, 0.58  # 0.18 and 0.08 from the trailing median 0.50
    assert abs(wobble - 0.50) < threshold < abs(jump - 0.50)
    assert drift_flags(pd.Series([*past, jump]), 0.03).tolist() == [False] * 7 + [True]
    assert not drift_flags(pd.Series([*past, wobble]), 0.03).any()
    ramp = pd.Series(0.9 - 0.05 * np.arange(6))  # a worker who loses 0.05 a night
    # night 4: the 4 nights before it lie on their trend (no noise) with median 0.825; 0.70 is 0.125 away
    assert drift_flags(ramp, DRIFT_FLOORS["worker"]).tolist() == [False] * 4 + [True, True]
    flat = pd.Series([0.6] * 6 + [0.64, np.nan])
    assert not drift_flags(flat, DRIFT_FLOORS["worker"]).any()  # 0.04 is under the floor; NaN is never flagged
    # a proportion on 30 labels: sampling error sqrt(0.4 * 0.6 / 30) = 0.089, so 0.4 is within 5 of them of 0.6
    steady = pd.Series([0.6] * 6 + [0.4])
    assert drift_flags(steady, 0.05).tolist() == [False] * 6 + [True]
    assert not drift_flags(steady, 0.05, pd.Series([30] * 7)).any()


def _nights(root: Path, folder: Path, days: int = 8) -> None:
    """``days`` nights of ds over a lake whose first two workers drift from 0.9 to 0.3 and that has a spammer,
    each night fitting its own day's labels, with gold and the report (which writes the history page)."""
    from crowdspark.lake import LakeSpec, make_lake

    spec = LakeSpec(days=days, items_per_day=200, labels_per_item=4, n_workers=8, drifting_workers=2,
                    drift=(0.9, 0.3), spammers=1, seed=3)
    lake = make_lake(spec)
    lake.truth.to_csv(folder / "truth.csv", index=False)
    for d in range(days):
        day = lake.labels[lake.labels["date"] == spec.date(d)].drop(columns="date")
        day.to_csv(folder / f"labels-{d}.csv", index=False)
        _aggregate("--labels", str(folder / f"labels-{d}.csv"), "--gold", str(folder / "truth.csv"), "--algorithm",
                   "ds", "--output", str(root), "--run-id", spec.date(d), "--report")


@pytest.fixture(scope="module")
def nightly(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("lake")
    root = folder / "runs"
    _nights(root, folder)
    return root


@pytest.mark.slow
def test_each_night_writes_the_history_page_of_its_root(nightly):
    page = (nightly / HISTORY_FILE).read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and '<meta name="generator" content="crowdspark' in page
    for reference in ("http://", "https://", "<script", "<link", " src="):
        assert reference not in page, reference
    positions = [page.index(f'<section id="{sid}">') for sid, _ in HISTORY_SECTIONS]
    assert positions == sorted(positions)
    for sid in ("error", "agreement", "queue", "workers"):
        assert "<svg" in _section(page, sid), sid


@pytest.mark.slow
def test_the_history_holds_each_nights_numbers(nightly):
    import json

    history = collect_history(str(nightly))
    assert len(history.nights) == 8
    for run_id, night in history.nights.iterrows():
        summary = json.loads((nightly / f"run_id={run_id}" / "summary.json").read_text())
        assert night["error_rate"] == summary["metrics"]["error_rate"]
        assert night["krippendorff_alpha"] == summary["quality"]["krippendorff_alpha"]
        assert night["spammers"] == summary["quality"]["workers"]["spammers"]
        assert night["relabel"] == len(pd.read_parquet(nightly / f"run_id={run_id}" / "relabel"))
    latest = pd.read_parquet(nightly / f"run_id={history.nights.index[-1]}" / "workers")
    assert set(history.workers.columns) == set(latest.nlargest(8, "n_labels")["worker"].astype(str))
    for run_id in history.nights.index:
        workers = pd.read_parquet(nightly / f"run_id={run_id}" / "workers").set_index("worker")["accuracy"]
        assert np.allclose(history.workers.loc[run_id], workers.reindex(history.workers.columns), equal_nan=True)


@pytest.mark.slow
def test_a_drifting_worker_is_flagged_and_every_history_figure_is_labelled(nightly):
    from tests.test_report import assert_labelled

    history = collect_history(str(nightly))
    drifting = ["w0000", "w0001"]  # the lake's drifting workers (crowdspark.lake.Lake.drifting)
    assert all(history.drift[w].any() for w in drifting)
    assert not history.drift[[c for c in history.workers.columns if c not in drifting]].any().any()
    drawn = history_figures(history)
    assert set(drawn) == {"error", "agreement", "queue", "workers"}
    for name, fig in drawn.items():
        assert_labelled(name, fig)
        assert all(panel.legend for panel in fig.panels), name
    page = (nightly / HISTORY_FILE).read_text(encoding="utf-8")
    assert "flagged value(s)" in _section(page, "drift")


@pytest.mark.slow
def test_the_history_page_replaces_only_its_own_and_refuses_what_is_not_a_root(nightly, tmp_path):
    assert main(["report", str(nightly), "--history"]) == 0
    foreign = tmp_path / "root"
    foreign.mkdir()
    with pytest.raises(ConfigError, match="run-root marker"):
        write_history(str(foreign))
    with pytest.raises(ConfigError, match="run-root marker"):
        write_history(str(nightly / "run_id=2026-11-01"))
    (nightly / HISTORY_FILE).write_text("my notes")
    try:
        with pytest.raises(ConfigError, match="not a page crowdspark wrote"):
            write_history(str(nightly))
        assert (nightly / HISTORY_FILE).read_text() == "my notes"
    finally:
        (nightly / HISTORY_FILE).unlink()
    with pytest.raises(ConfigError, match="is inside the crowdspark"):
        write_history(str(nightly), str(nightly / "run_id=2026-11-01" / "history.html"))
    out = write_history(str(nightly), str(tmp_path / "h.html"))
    assert Path(out).read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert main(["report", str(nightly), "--history", "--gold", "x.csv"]) == 2


#: holds the lock of the path given in argv[1] until stdin closes, and says "held" once it does
_HOLDER = """
import sys
from crowdspark.io.files import LocalFiles
from crowdspark.io.lock import OutputLock
with OutputLock(LocalFiles(), sys.argv[1]):
    print("held", flush=True)
    sys.stdin.read()
"""


def _holding(path: Path) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_the_report_takes_the_results_lock(tmp_path):
    labels, _ = _tiny(tmp_path)
    out = tmp_path / "run"
    _aggregate("--labels", str(labels), "--algorithm", "mv", "--output", str(out))
    marker = (out / "_CROWDSPARK.json").read_text()
    holder = _holding(out)  # a run writing the result holds its lock
    try:
        done = subprocess.run([sys.executable, "-m", "crowdspark", "report", str(out)], capture_output=True,
                              text=True, timeout=300)
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert done.returncode == 75, done.stderr  # a live writer: the same command succeeds once it ends
    assert "lock" in done.stderr and not (out / REPORT_FILE).exists()
    assert (out / "_CROWDSPARK.json").read_text() == marker  # the marker is left as it was
    assert write_report(str(out)) == str(out / REPORT_FILE)  # once the lock is free


@pytest.mark.slow
def test_the_history_page_takes_the_roots_lock(nightly):
    holder = _holding(nightly)
    try:
        done = subprocess.run([sys.executable, "-m", "crowdspark", "report", str(nightly), "--history"],
                              capture_output=True, text=True, timeout=300)
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert done.returncode == 75 and "lock" in done.stderr, done.stderr


@pytest.mark.slow
def test_each_quality_statistic_says_what_it_means(tmp_path):
    data = Path(__file__).resolve().parents[1] / "data" / "bluebird"
    out = tmp_path / "dds"
    _aggregate("--labels", str(data / "labels.csv"), "--gold", str(data / "truth.csv"), "--algorithm", "dds",
               "--output", str(out), "--report")
    page = (out / REPORT_FILE).read_text(encoding="utf-8")
    quality = _section(page, "quality")
    rows = re.findall(r"<tr><td>([^<]*)</td><td>[^<]*</td><td>([^<]*)</td><td>([^<]*)</td></tr>", quality)
    explained = {name: (what, good) for name, what, good in rows}
    for name in ("krippendorff_alpha", "workers.mean_spammer_score", "workers.spammers", "class_agreement.1"):
        assert explained[name][0] and explained[name][1], name
    assert "items/ column vote_entropy: entropy (nats)" in quality and "ln 2 = 0.69" in quality
    workers = _section(page, "workers")
    listed = re.search(r"spammer: (\d+) of .*?<table>(.*?)</table>", workers, flags=re.S)
    flagged = int(listed.group(1))
    assert flagged > 15 and listed.group(2).count("<tr>") == flagged + 1  # every flagged worker, and a head
    assert "<svg" in workers and "the workers that matter" in workers.lower()


def test_class_bias_is_how_much_a_worker_over_gives_one_label():
    from crowdspark.report.facts import class_bias

    matrices = np.array([[[1.0, 0.0], [1.0, 0.0]], [[0.5, 0.5], [0.5, 0.5]], [[1.0, 0.0], [0.0, 1.0]],
                         [[0.9, 0.1], [np.nan, np.nan]]])
    # column means less 1/2: always "a" 1 - 1/2; even 0; perfect 0; one defined row (0.9, 0.1) 0.9 - 1/2
    assert np.allclose(class_bias(matrices), [0.5, 0.0, 0.0, 0.4])


def test_the_median_of_a_few_nights_is_numpys():
    from crowdspark.report.history import _median

    rng = np.random.default_rng(1)
    for n in range(1, 25):
        values = rng.normal(size=n) * 10.0 ** rng.integers(-5, 5)
        nights = rng.integers(0, 100, n)
        assert _median(values) == float(np.median(values)) and _median(nights) == float(np.median(nights))
    assert np.isnan(_median(np.array([1.0, np.nan, 2.0])))
