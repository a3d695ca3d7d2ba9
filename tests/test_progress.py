"""Long phases say where they are: a line when each starts, then one every interval while it runs."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from crowdspark.config import load_config
from crowdspark.pipeline import progress as progress_module
from crowdspark.pipeline import aggregate
from crowdspark.pipeline.progress import progress
from tests.helpers import DATA

LOGGER = "crowdspark.pipeline.progress"


def _still(caplog, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"{name}: still running after")]


def _wait_for(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def _reporters() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("crowdspark-progress-")]


def test_a_phase_says_it_starts_then_that_it_is_still_running_until_it_ends(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    with progress("blocks", "grouping the labels into blocks", interval=0.02):
        assert _wait_for(lambda: len(_still(caplog, "blocks")) >= 2)
    assert caplog.records[0].getMessage() == "grouping the labels into blocks"
    assert not _reporters()


def test_only_the_innermost_phase_reports(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    with progress("night", "a night", interval=0.02):
        with progress("fit", "its fit", interval=0.02):
            assert _wait_for(lambda: len(_still(caplog, "fit")) >= 3)
            before = len(_still(caplog, "night"))
            assert _wait_for(lambda: len(_still(caplog, "fit")) >= 6)
            assert len(_still(caplog, "night")) == before
        assert _wait_for(lambda: len(_still(caplog, "night")) >= before + 2)
    assert not _reporters()


def test_a_phase_that_fails_stops_reporting_and_the_error_goes_on(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    with pytest.raises(RuntimeError, match="broken"):
        with progress("read", "reading", interval=0.02):
            raise RuntimeError("broken")
    assert not _reporters()


def test_a_run_announces_each_phase(caplog, tmp_path, monkeypatch):
    monkeypatch.setattr(progress_module, "INTERVAL", 0.01)
    caplog.set_level(logging.INFO, logger=LOGGER)
    config = load_config(algorithm="ds", engine_name="local")
    aggregate(config, str(DATA / "rte" / "labels.csv"), str(tmp_path / "out"), str(DATA / "rte" / "truth.csv"))
    started = [r.getMessage() for r in caplog.records if "still running" not in r.getMessage()]
    assert started[0].startswith(f"reading the labels at {DATA / 'rte' / 'labels.csv'}")
    assert any(line.startswith("ds: fitting on the local engine") for line in started)
    assert "evaluating: quality signals and gold metrics" in started
    assert f"writing the results to {tmp_path / 'out'}" in started
    assert not _reporters()
