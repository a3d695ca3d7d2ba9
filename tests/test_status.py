"""``aggregate --status-file``: one JSON document per run, success or failure, each field checked against what
the run itself wrote or said (:mod:`crowdspark.status`)."""

from __future__ import annotations

import datetime as _dt
import errno
import json
import os

import pandas as pd
import pytest

from crowdspark.cli import main
from crowdspark.lake import LakeSpec, make_lake, write_lake
from crowdspark.report.history import History
from crowdspark.status import SCHEMA, VERSION, drift_of, read_status, write_status
from crowdspark.version import __version__
from tests.helpers import DATA

RTE = ["--labels", str(DATA / "rte" / "labels.csv"), "--gold", str(DATA / "rte" / "truth.csv")]


def _run(tmp_path, *args: str) -> tuple[int, dict]:
    path = tmp_path / "status.json"
    code = main(["aggregate", *args, "--status-file", str(path), "--quiet"])
    return code, read_status(str(path))


def test_a_succeeded_night_reports_what_its_summary_says(tmp_path, capsys):
    out = tmp_path / "out"
    code, status = _run(tmp_path, *RTE, "--engine", "local", "--algorithm", "mv", "--output", str(out),
                        "--run-id", "2026-11-25")
    assert code == 0
    summary = json.loads((out / "run_id=2026-11-25" / "summary.json").read_text())
    assert (status["schema"], status["version"]) == (SCHEMA, VERSION)
    assert (status["status"], status["exit_code"], status["retryable"], status["error"]) == ("succeeded", 0, False,
                                                                                             None)
    assert (status["run_id"], status["as_of"]) == ("2026-11-25", summary["inputs"]["as_of"])
    assert (status["output"], status["result"]) == (str(out), f"{out}/run_id=2026-11-25")
    started, finished = (_dt.datetime.fromisoformat(status[key]) for key in ("started", "finished"))
    assert started <= finished and status["seconds"] >= 0
    assert status["crowdspark_version"] == __version__
    assert (status["algorithm"], status["engine"]) == (summary["algorithm"], summary["engine"])
    assert status["counts"] == {key: summary["counts"][key] for key in ("labels", "items", "workers")}
    assert status["gold"] == {"error_rate": summary["metrics"]["error_rate"], "n_gold": summary["metrics"]["n_gold"]}
    assert status["missing_days"] is None  # no window
    assert status["drift"] == {"checked": True, "nights": 1, "series": [], "workers": [], "reason": None}
    assert status["warnings"] == summary["warnings"]
    assert not [name for name in os.listdir(tmp_path) if ".tmp-" in name]


def test_a_failed_run_reports_its_exit_code_and_error(tmp_path, capsys):
    code, status = _run(tmp_path, "--labels", str(tmp_path / "nowhere.csv"), "--engine", "local",
                        "--output", str(tmp_path / "out"))
    err = capsys.readouterr().err
    assert code == 2 and status["exit_code"] == 2
    assert (status["status"], status["retryable"]) == ("failed", False)
    assert status["error"]["kind"] == "bad_input" and status["error"]["class"] == "InputError"
    assert err == f"crowdspark: error: {status['error']['message']}\n"
    assert status["counts"] is None and status["gold"] is None and status["missing_days"] is None
    assert status["drift"]["checked"] is False and status["drift"]["reason"] == "the run failed"


def test_a_full_disk_is_retryable_in_the_status(tmp_path, monkeypatch, capsys):
    def full(frame, directory, fmt):
        raise OSError(errno.ENOSPC, "Error writing bytes to file")

    monkeypatch.setattr("crowdspark.io.tables.write_frame_local", full)
    code, status = _run(tmp_path, *RTE, "--engine", "local", "--algorithm", "mv", "--output", str(tmp_path / "out"))
    assert code == 75
    assert (status["status"], status["exit_code"], status["retryable"]) == ("failed", 75, True)
    assert status["error"]["kind"] == "disk_full" and f"writing '{tmp_path}/" in status["error"]["message"]


def test_missing_days_of_the_window_come_from_the_summary(tmp_path, capsys):
    spec = LakeSpec(days=6, items_per_day=20, labels_per_item=3, n_workers=6, missing_days=(2,))
    write_lake(make_lake(spec), str(tmp_path / "lake"))
    code, status = _run(tmp_path, "--labels", str(tmp_path / "lake"), "--engine", "local", "--algorithm", "mv", "--set",
                        "input.date_column=date", "--set", "input.window_days=6", "--as-of", spec.date(5),
                        "--output", str(tmp_path / "out"))
    assert code == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert status["missing_days"] == summary["inputs"]["missing_days"] == [spec.date(2)]


def test_drift_names_the_series_and_workers_the_history_flags_for_the_night(tmp_path, monkeypatch):
    nights = pd.DataFrame({"as_of": ["2026-11-24", "2026-11-25"]}, index=pd.Index(["a", "b"], name="run_id"))
    drift = pd.DataFrame({"error_rate": [False, True], "krippendorff_alpha": [False, False], "w7": [False, True],
                          "w9": [True, False]}, index=nights.index)
    history = History(root=str(tmp_path), nights=nights, workers=pd.DataFrame(), worker_labels=pd.DataFrame(),
                      drift=drift, skipped=[])
    monkeypatch.setattr("crowdspark.report.history.collect_history", lambda root: history)
    assert drift_of(str(tmp_path), "b") == {"checked": True, "nights": 2, "series": ["error_rate"],
                                            "workers": ["w7"], "reason": None}
    assert drift_of(str(tmp_path), "a")["workers"] == ["w9"]
    assert drift_of(str(tmp_path), "c")["checked"] is False
    assert drift_of(str(tmp_path), None)["reason"].startswith("not a --run-id night")
    assert drift_of("s3a://lake/out", "b")["reason"].startswith("the run root 's3a://lake/out' is not local")


def test_the_status_file_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "status.json"
    write_status(str(path), {"schema": SCHEMA, "version": VERSION, "status": "succeeded"})
    before = path.read_text()

    def full(descriptor):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError):
        write_status(str(path), {"schema": SCHEMA, "version": VERSION, "status": "failed"})
    assert path.read_text() == before
    assert os.listdir(tmp_path) == ["status.json"]


def test_a_status_file_that_cannot_be_written_keeps_the_runs_exit_code(tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    code = main(["aggregate", *RTE, "--engine", "local", "--algorithm", "mv", "--output", str(tmp_path / "out"),
                 "--status-file", str(tmp_path / "a-file" / "status.json"), "--quiet"])
    assert code == 0
    assert "crowdspark: warning: the status file" in capsys.readouterr().err


def test_a_status_file_inside_the_output_or_remote_is_refused(tmp_path, capsys):
    for where, message in ((str(tmp_path / "out" / "status.json"), "is inside --output"),
                           ("s3a://bucket/status.json", "must be a local path")):
        code = main(["aggregate", *RTE, "--engine", "local", "--output", str(tmp_path / "out"),
                     "--status-file", where, "--quiet"])
        assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_document_of_another_version_is_not_read_as_a_status(tmp_path):
    path = tmp_path / "status.json"
    path.write_text(json.dumps({"schema": SCHEMA, "version": VERSION + 1}))
    with pytest.raises(ValueError, match="not a crowdspark status file of version 1"):
        read_status(str(path))
