"""The Airflow example DAG (``examples/airflow/crowdspark_nightly.py``) parses in Airflow's own ``DagBag``, has the
documented task graph, and turns each exit code of the command into the exception that retries (75) or not.

Airflow is an optional extra (``crowdspark[airflow]``), never a dependency of crowdspark: the test uses the
interpreter named by ``CROWDSPARK_AIRFLOW_PYTHON``, else this one if it has Airflow, else installs Airflow into a
virtual environment of its own (about 7.5 minutes on the 2-core machine: the full tier).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "airflow"

#: run by the Airflow interpreter: parse the folder, then call the ``aggregate`` task's function with commands
#: that exit 0, 1, 2 and 75
PARSE = r'''
import inspect, json, os, sys
try:
    from airflow.dag_processing.dagbag import DagBag
except ImportError:
    from airflow.models.dagbag import DagBag
options = {"include_examples": False} if "include_examples" in inspect.signature(DagBag.__init__).parameters else {}
bag = DagBag(dag_folder=sys.argv[1], **options)
out = {"import_errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": {}, "exits": {}}
for dag_id, dag in bag.dags.items():
    out["dags"][dag_id] = {"max_active_runs": dag.max_active_runs, "tasks": {
        t.task_id: {"upstream": sorted(t.upstream_task_ids), "retries": t.retries} for t in dag.tasks}}
    run = dag.get_task("aggregate").python_callable
    os.environ.update(CROWDSPARK_LABELS="lake/labels", CROWDSPARK_OUTPUT="out", CROWDSPARK_STATUS_DIR=sys.argv[2])
    for code in (0, 1, 2, 75):
        os.environ["CROWDSPARK_COMMAND"] = f"sh -c 'exit {code}'"
        try:
            run(ds="2026-11-25")
            out["exits"][str(code)] = "returned"
        except Exception as exc:
            out["exits"][str(code)] = type(exc).__name__
print("RESULT " + json.dumps(out))
'''


def _airflow_python(tmp_path: Path) -> str:
    if os.environ.get("CROWDSPARK_AIRFLOW_PYTHON"):
        return os.environ["CROWDSPARK_AIRFLOW_PYTHON"]
    if importlib.util.find_spec("airflow") is not None:
        return sys.executable
    venv = tmp_path / "airflow-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", "apache-airflow>=2.9"], check=True, timeout=3000)
    return python


@pytest.mark.full
@pytest.mark.slow
def test_the_example_dag_parses_and_retries_only_what_can_succeed_later(tmp_path):
    python = _airflow_python(tmp_path)
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow-home")}
    done = subprocess.run([python, "-c", PARSE, str(EXAMPLES), str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert result["import_errors"] == {}
    assert result["dags"] == {"crowdspark_nightly": {"max_active_runs": 1, "tasks": {
        "aggregate": {"upstream": [], "retries": 3}, "check_status": {"upstream": ["aggregate"], "retries": 0}}}}
    assert result["exits"] == {"0": "returned", "1": "AirflowFailException", "2": "AirflowFailException",
                               "75": "AirflowException"}
