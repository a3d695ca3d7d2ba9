"""A run's memory is predicted before the model allocates, and a prediction above the budget stops the run with
exit 2, the figures and the fixes; settings that would make a run last for days are refused at config load; the
warnings of dropped session connections are rate-limited."""

from __future__ import annotations

import json
import logging
import os
import resource
import socket
import subprocess
import sys
import time
import tracemalloc

import numpy as np
import pandas as pd
import pytest

from crowdspark.config import load_config
from crowdspark.engine import memory
from crowdspark.engine.spark import session_net
from crowdspark.engine.memory import (
    ACCURACY, Budget, FitShape, check_configured, format_bytes, host_memory, memory_budget,
    predict_configured,
)
from crowdspark.engine.spark.session_net import DropLog, SessionServer, new_key
from crowdspark.errors import ConfigError
from crowdspark.validation import parse_bytes
from crowdspark.models.base import RUN_BOUNDS
from crowdspark.pipeline.fit import fit_prepared
from crowdspark.pipeline.prepare import prepare_frames
from tests.helpers import DATA

GIB = 1 << 30
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def many_classes_csv(path, n_labels: int = 2000, n_workers: int = 1000, n_classes: int = 999) -> str:
    """The issue's input: 2,000 labels (two per item) by 1,000 workers in 999 classes."""
    j = np.arange(n_labels)
    frame = pd.DataFrame({"item": [f"i{x}" for x in j // 2], "worker": [f"w{x}" for x in j % n_workers],
                          "label": [f"c{x}" for x in j % n_classes]})
    frame.to_csv(path, index=False)
    return str(path)


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 * GIB, 4 * GIB))


def run_limited(args: list[str], cwd) -> tuple[subprocess.CompletedProcess, float]:
    """The CLI under a 4 GiB address-space limit, and how long it took."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "crowdspark", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600, preexec_fn=_limit_address_space)
    return done, time.monotonic() - start


# ------------------------------------------------------------------------------------------- the refusal


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["ds", None])
def test_a_tiny_input_with_999_classes_stops_with_exit_2_and_the_figure(tmp_path, algorithm):
    labels = many_classes_csv(tmp_path / "labels.csv")
    chosen = ["--algorithm", algorithm] if algorithm else []
    done, seconds = run_limited(["aggregate", "--labels", labels, "--output", str(tmp_path / "out"),
                                 "--engine", "local", *chosen], tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "MemoryError" not in done.stderr and "Traceback" not in done.stderr
    name = algorithm or load_config().algorithm
    error = done.stderr[done.stderr.index("crowdspark: error:"):]
    assert f"{name} would need about" in error and "GiB" in error
    assert "1,000 workers x" in error and "999 x 999 classes" in error  # what drives it
    assert "ulimit -v" in error  # the budget's source
    assert "engine.max_memory" in error and "quality.enabled=false" in error  # the fixes
    assert not (tmp_path / "out").exists()
    assert seconds < 120


def test_the_refusal_comes_before_the_model_allocates(tmp_path, monkeypatch):
    """In process: the check raises before the fit's first allocation (the fit is never called)."""
    from crowdspark.pipeline import fit as fit_module

    frame = pd.read_csv(many_classes_csv(tmp_path / "labels.csv"))
    config = load_config(overrides=["engine.max_memory=1g"], algorithm="ds", engine_name="local")
    monkeypatch.setattr(fit_module, "fit_configured", lambda *a, **k: pytest.fail("the fit started"))
    with pytest.raises(ConfigError, match=r"ds would need about [\d.]+ GiB .* more than the budget of 1 GiB "
                                          r"\(engine.max_memory = 1 GiB\)"):
        fit_prepared(config, prepare_frames(config, frame))


def test_a_fit_within_the_budget_records_prediction_and_budget(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "crowdspark", "aggregate", "--labels",
                           str(DATA / "rte" / "labels.csv"), "--output", str(out), "--engine", "local",
                           "--algorithm", "ds", "--set", "engine.max_memory=512m"],
                          env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    recorded = json.loads((out / "summary.json").read_text())["memory"]
    assert recorded["budget_bytes"] == 512 << 20 and recorded["budget_source"] == "engine.max_memory = 512 MiB"
    assert 0 < recorded["predicted_peak_bytes"] < recorded["budget_bytes"]
    assert recorded["engine"] == "local" and recorded["accuracy_factor"] == ACCURACY
    assert recorded["driver_python_peak_mib"] > 0  # the measured peak stays beside them


# ------------------------------------------------------------------------------------ prediction vs measure


def synthetic(n_items: int, n_workers: int, n_classes: int, per_item: int, seed: int = 0) -> pd.DataFrame:
    """Labels of a crowd that is right 70% of the time, every worker and class present."""
    rng = np.random.default_rng(seed)
    n_labels = n_items * per_item
    items = np.repeat(np.arange(n_items), per_item)
    workers = rng.integers(0, n_workers, n_labels)
    workers[:n_workers] = np.arange(n_workers)
    truth = rng.integers(0, n_classes, n_items)
    labels = np.where(rng.random(n_labels) < 0.7, truth[items], rng.integers(0, n_classes, n_labels))
    labels[:n_classes] = np.arange(n_classes)
    return pd.DataFrame({"item": [f"i{x}" for x in items], "worker": [f"w{x}" for x in workers],
                         "label": labels.astype(str)})


def measured_peak(config, frame: pd.DataFrame) -> int:
    """tracemalloc's peak (every numpy array counts) over preparing and fitting ``frame``."""
    tracemalloc.start()
    try:
        fitted = fit_prepared(config, prepare_frames(config, frame))
        fitted.close()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


SHAPES = {"many workers": (2000, 1000, 20, 5), "many labels": (20000, 100, 4, 8), "many classes": (600, 300, 40, 5)}
CASES = [  # algorithm, shape, quality signals, settings that keep the fit short (the peak is one sweep's)
    ("ds", "many workers", False, ["ds.max_iter=3"]),
    ("ds", "many classes", True, ["ds.max_iter=3"]),
    ("ads", "many workers", True, ["ads.max_iter=3"]),
    ("mv", "many classes", False, []),
    ("idbla", "many workers", False, ["idbla.burn_in=2", "idbla.n_samples=2"]),
    ("dds", "many classes", False, ["dds.max_iter=3"]),
    ("wawa", "many labels", True, []),
    ("glad", "many labels", False, ["glad.max_iter=2"]),
    ("ebcc", "many labels", False, ["ebcc.max_iter=2"]),
    ("bwa", "many labels", False, ["bwa.max_iter=2"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm, shape, quality, settings", CASES,
                         ids=[f"{c[0]}-{c[1]}-{'quality' if c[2] else 'plain'}" for c in CASES])
def test_the_prediction_is_within_its_stated_factor_of_the_measured_peak(algorithm, shape, quality, settings):
    n_items, n_workers, n_classes, per_item = SHAPES[shape]
    frame = synthetic(n_items, n_workers, n_classes, per_item)
    config = load_config(overrides=[f"quality.enabled={str(quality).lower()}", *settings], algorithm=algorithm,
                         engine_name="local")
    predicted = predict_configured(config, FitShape(n_items, n_workers, n_classes, len(frame)), "local")
    peak = measured_peak(config, frame)
    assert peak / ACCURACY <= predicted.peak_bytes <= peak * ACCURACY, (
        f"{algorithm} predicted {format_bytes(predicted.peak_bytes)}, measured {format_bytes(peak)}")


def test_the_spark_driver_holds_the_parameters_and_an_executor_one_block():
    config = load_config(algorithm="ds", overrides=["quality.enabled=false", "engine.max_block_labels=1000"])
    shape = FitShape(n_items=10**6, n_workers=100, n_classes=10, n_labels=10**7)
    local = predict_configured(config, shape, "local")
    spark = predict_configured(config, shape, "spark")
    assert spark.peak_bytes == local.parts["params"]  # nothing per item or per label on the driver
    assert 0 < spark.executor_bytes < local.peak_bytes / 100  # one block of 1,000 labels


def test_a_choice_of_levels_is_predicted_with_every_candidate():
    config = load_config(algorithm="dds", overrides=["dds.select_levels=[1, 2, 5]"])
    shape = FitShape(1000, 100, 10, 5000)
    chosen = predict_configured(config, shape, "local")
    largest = predict_configured(load_config(algorithm="dds", overrides=["dds.n_levels=5"]), shape, "local")
    assert chosen.peak_bytes > largest.peak_bytes and chosen.parts["other_levels"] > 0


# -------------------------------------------------------------------------------------------------- budget


@pytest.mark.parametrize("text, expected", [("4g", 4 * GIB), ("512m", 512 << 20), ("1.5GiB", 3 * GIB // 2),
                                            ("2048", 2048), (4_000_000_000, 4_000_000_000), ("8 kb", 8192)])
def test_sizes_are_read_in_binary_units(text, expected):
    assert parse_bytes("engine.max_memory", text) == expected


@pytest.mark.parametrize("text", ["lots", "4x", "-1g", True])
def test_a_malformed_size_is_refused_at_config_load(text):
    with pytest.raises(ConfigError, match="engine.max_memory must be a size such as"):
        load_config(overrides=[f"engine.max_memory={json.dumps(text)}"])


def test_the_budget_is_the_setting_or_a_share_of_the_host():
    assert memory_budget(3 * GIB, 0.5) == Budget(3 * GIB, "engine.max_memory = 3 GiB")
    budget = memory_budget(0, 0.5, host=lambda: (10 * GIB, "cgroup memory limit"))
    assert budget.bytes == 5 * GIB and "0.5 of the cgroup memory limit (10 GiB)" in budget.source
    with pytest.raises(ConfigError, match="engine.memory_share must be a number <= 1"):
        load_config(overrides=["engine.memory_share=1.5"])


def test_the_host_memory_is_the_smallest_limit(tmp_path, monkeypatch):
    # a cgroup v1 hierarchy whose own path is not mounted: the namespaced root's limit counts
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text(f"{3 * GIB}\n")
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/some/where\n0::/\n")
    assert memory._cgroup_limit(str(tmp_path), str(proc)) == 3 * GIB
    (tmp_path / "memory.max").write_text("max\n")  # v2 without a limit
    assert memory._cgroup_limit(str(tmp_path), str(proc)) == 3 * GIB
    monkeypatch.setattr(memory, "_cgroup_limit", lambda: 1 * GIB)
    assert host_memory() == (1 * GIB, "cgroup memory limit")


def test_an_address_space_limit_is_the_budget_of_a_process_under_ulimit(tmp_path):
    code = "from crowdspark.engine.memory import host_memory; print(host_memory()[1])"
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True,
                          text=True, timeout=120, preexec_fn=_limit_address_space)
    assert done.stdout.strip() == "address space left under ulimit -v 4 GiB", done.stderr


def test_the_check_names_the_algorithms_that_would_fit():
    config = load_config(algorithm="ds", overrides=["engine.max_memory=64m", "quality.enabled=false"])
    with pytest.raises(ConfigError) as caught:
        check_configured(config, FitShape(2000, 1000, 60, 4000), "local")
    message = str(caught.value)
    assert "choose an algorithm with fewer parameters that fits: " in message
    fitting = message.split("that fits: ")[1].split(";")[0].split(", ")
    assert "wawa" in fitting and "ds" not in fitting and "ads" not in fitting


# -------------------------------------------------------------------------------------------------- bounds


@pytest.mark.parametrize("setting, message", [
    ("idbla.n_levels=1e6", "idbla.n_levels must be at most 100, but got 1000000: each level adds a (K, C, C)"),
    ("bcc.n_samples=1e12", "bcc.n_samples must be at most 100,000, but got 1000000000000: every kept sample is a "
                           "pass over every label"),
    ("ds.max_iter=1e9", "ds.max_iter must be at most 100,000, but got 1000000000: every iteration is a pass"),
    ("dds.select_levels=[2, 1000]", "dds.select_levels must be at most 100, but got 1000"),
    ("idbla-cvb.histogram_bins=1e9", "idbla-cvb.histogram_bins must be at most 16,777,216"),
])
def test_settings_that_would_run_for_days_are_refused_at_config_load(setting, message):
    with pytest.raises(ConfigError) as caught:
        load_config(overrides=[setting])
    assert message in str(caught.value)


def test_a_sampler_whose_sweeps_add_up_to_days_is_refused():
    with pytest.raises(ConfigError, match=r"idbla.burn_in \+ idbla.thin \* idbla.n_samples must be at most "
                                          r"1,000,000, but got 50000100"):
        load_config(overrides=["idbla.thin=500", "idbla.n_samples=100000"])


def test_every_bound_admits_its_default():
    from crowdspark.models.registry import ALGORITHMS, hyperparameters

    for name in ALGORITHMS:
        for key, value in hyperparameters(name).items():
            if key in RUN_BOUNDS and isinstance(value, int):
                assert value <= RUN_BOUNDS[key][0], f"{name}.{key}"


# ------------------------------------------------------------------------------- dropped session connections


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_dropped_connections_are_logged_one_by_one_then_counted(caplog):
    clock = Clock()
    drops = DropLog(first=3, seconds=60.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger=session_net.__name__):
        for j in range(1000):
            clock.now = j * 0.01  # 1,000 drops in 10 s
            drops.dropped("sweep session: dropped a connection from %s", f"peer{j}")
        lines = [r.getMessage() for r in caplog.records]
        assert lines[:3] == ["sweep session: dropped a connection from peer0",
                             "sweep session: dropped a connection from peer1",
                             "sweep session: dropped a connection from peer2; further drops are counted and "
                             "logged once per 60 s"]
        assert len(lines) == 3
        clock.now = 70.0
        drops.dropped("sweep session: dropped a connection from %s", "late")
        assert caplog.records[-1].getMessage().startswith("sweep session: dropped 998 more connection(s) in the "
                                                          "last 70 s (1001 in all")
        drops.flush()  # nothing counted since
        assert len(caplog.records) == 4
    assert drops.total == 1001


def test_a_flood_of_intruders_logs_a_few_lines(caplog):
    server = SessionServer("127.0.0.1", new_key(), 2, handshake_seconds=2.0)
    n = session_net.DROP_WARNINGS + 15
    try:
        with caplog.at_level(logging.WARNING, logger=session_net.__name__):
            for _ in range(n):
                with socket.create_connection(("127.0.0.1", server.port)) as sock:
                    sock.sendall(b"\0" * 64)
                    sock.settimeout(10)
                    while sock.recv(4096):
                        pass
            deadline = time.monotonic() + 10
            while server.drops.total < n and time.monotonic() < deadline:
                time.sleep(0.05)
            server.close()
    finally:
        server.close()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("did not complete the handshake" in m for m in messages) == session_net.DROP_WARNINGS
    assert messages[-1].startswith("sweep session: dropped 15 more connection(s)")
    assert len(messages) == session_net.DROP_WARNINGS + 1
