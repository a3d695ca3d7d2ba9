"""A successful Spark run prints no traceback: the command line on the Spark engine, in a subprocess, as a user
runs it (``--engine spark --master local[2]``, the small-input path off so that Spark does the work), must
leave no ``Traceback`` on stderr (Spark's Python daemon prints one when it cannot flush a worker's output to a
closed socket)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import DATA


@pytest.mark.spark
@pytest.mark.slow
def test_a_successful_spark_run_prints_no_traceback(tmp_path):
    """glad: a stateful model, whose blocks stay in the Python workers through the sweeps (reused workers, a
    sweep session, the daemon's shutdown at the end); ten sweeps show every stage of a stateful run."""
    out = tmp_path / "out"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run(
        [sys.executable, "-m", "crowdspark", "aggregate", "--labels", str(DATA / "temp" / "labels.csv"),
         "--gold", str(DATA / "temp" / "truth.csv"), "--algorithm", "glad", "--engine", "spark",
         "--master", "local[2]", "--set", "engine.small_input_bytes=0", "--set", "glad.max_iter=10",
         "--output", str(out)],
        capture_output=True, text=True, env=env, timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["engine"] == "spark"
    assert "Traceback" not in proc.stderr, proc.stderr[-5000:]
    assert "BrokenPipeError" not in proc.stderr, proc.stderr[-5000:]
    assert "FutureWarning" not in proc.stderr, proc.stderr[-5000:]  # pyspark's notice under pandas 3
