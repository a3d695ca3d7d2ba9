"""A nightly crowdspark run as an Airflow DAG (Airflow 2.9+ or 3; ``pip install 'crowdspark[airflow]'``).

One night per logical date: ``aggregate`` runs the command line with the night's date as ``--run-id`` and a
``--status-file``, and acts on its exit code (``docs/operations.md``, "Exit codes"):

* 0: the night is committed; the status document goes to XCom for ``check_status``;
* 75 (a full disk, lost executors, another live run on the output): the task fails *for a retry* (Airflow's
  ``retries``, ``retry_delay``); the same command can succeed later, and a rerun of a night is idempotent;
* 2 (bad input or configuration, incompatible history, executors without crowdspark) and 1 (anything else): the
  task fails without retrying (``AirflowFailException``): a person must look, the status file and the log say
  what.

``check_status`` then fails the run, without retrying, when the committed night says something a person should
see: days of its window without labels, or a series (the error against gold, the agreement) that drifts.

Settings come from the environment of the Airflow workers, so that the file is used as it is:
``CROWDSPARK_COMMAND`` (default ``crowdspark aggregate``; e.g. ``spark-submit --master yarn --py-files
crowdspark.zip jobs/aggregate.py``), ``CROWDSPARK_LABELS``, ``CROWDSPARK_GOLD`` (optional), ``CROWDSPARK_OUTPUT``,
``CROWDSPARK_CONFIG`` (default ``conf/nightly.toml``) and ``CROWDSPARK_STATUS_DIR`` (default: the system's
temporary folder).  ``max_active_runs=1``: one scheduler run writes an output at a time (the output lock
refuses a second one with exit 75 anyway).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import subprocess
import tempfile

try:  # Airflow 3
    from airflow.sdk import dag, task
    from airflow.sdk.exceptions import AirflowException, AirflowFailException
except ImportError:  # Airflow 2
    from airflow.decorators import dag, task
    from airflow.exceptions import AirflowException, AirflowFailException

#: the exit codes of ``crowdspark aggregate`` (crowdspark.errors)
EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_RETRYABLE = 0, 1, 2, 75


def command(run_id: str, status_file: str) -> list[str]:
    """The night's command line: the settings of the environment, the night's run id and status file."""
    env = os.environ
    args = shlex.split(env.get("CROWDSPARK_COMMAND", "crowdspark aggregate"))
    args += ["--config", env.get("CROWDSPARK_CONFIG", "conf/nightly.toml"), "--labels", env["CROWDSPARK_LABELS"],
             "--output", env["CROWDSPARK_OUTPUT"], "--warm-start", env["CROWDSPARK_OUTPUT"], "--run-id", run_id,
             "--status-file", status_file]
    if env.get("CROWDSPARK_GOLD"):
        args += ["--gold", env["CROWDSPARK_GOLD"]]
    return args


def outcome(code: int, status_file: str) -> dict:
    """The status document of a finished command, or the exception that tells Airflow whether to retry."""
    status = {}
    if os.path.exists(status_file):
        with open(status_file, encoding="utf-8") as handle:
            status = json.load(handle)
    error = (status.get("error") or {}).get("message", "see the task's log")
    if code == EXIT_OK:
        return status
    if code == EXIT_RETRYABLE:
        raise AirflowException(f"crowdspark exited {code} (retryable): {error}")
    raise AirflowFailException(f"crowdspark exited {code} (not retried: a person must fix it): {error}")


@dag(
    dag_id="crowdspark_nightly",
    schedule="@daily",
    start_date=dt.datetime(2026, 11, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 3, "retry_delay": dt.timedelta(minutes=15)},
    tags=["crowdspark"],
)
def crowdspark_nightly():
    @task
    def aggregate(ds=None) -> dict:
        """Run the night ``ds`` and return its status document."""
        folder = os.environ.get("CROWDSPARK_STATUS_DIR", tempfile.gettempdir())
        status_file = os.path.join(folder, f"crowdspark-status-{ds}.json")
        done = subprocess.run(command(ds, status_file), check=False)
        return outcome(done.returncode, status_file)

    @task(retries=0)
    def check_status(status: dict) -> None:
        """Fail, without retrying, on what a committed night says a person should see."""
        problems = []
        if status.get("missing_days"):
            problems.append(f"no labels for the days {status['missing_days']}")
        drift = status.get("drift") or {}
        if drift.get("series"):
            problems.append(f"drift in {', '.join(drift['series'])}")
        if problems:
            raise AirflowFailException(f"night {status.get('run_id')} is committed, but: {'; '.join(problems)}")

    check_status(aggregate())


crowdspark_nightly()
