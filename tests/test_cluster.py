"""The cluster path, as a user takes it: a Spark standalone cluster on 127.0.0.1 (one master, one worker with
two cores, from the installed pyspark), the library shipped either as the PEX of ``scripts/pack.sh`` to
executors whose Python has no package at all (docs/cluster.md's recipe) or with ``spark-submit --py-files``
to executors that have the dependencies, the job ``jobs/aggregate.py``.

One cluster serves the whole module (its daemons are stopped by process id when the module ends, also when
a test fails, and at exit).  Each test is one Spark application (four in all), so the module pays for one
cluster start and four application starts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crowdspark.cli import main as crowdspark_main
from scripts.standalone_cluster import StandaloneCluster, submit_command, submit_environment
from tests.cluster_job import MODULES

pytestmark = [pytest.mark.cluster, pytest.mark.full, pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
RTE = ROOT / "data" / "rte"

#: executors' sitecustomize for the unreachable-driver test: a firewall that drops the tasks' connections
FIREWALL = '''
import socket
import time


def _dropped(address, timeout=None, *args, **kwargs):
    time.sleep(min(timeout or 5.0, 5.0))
    raise TimeoutError(f"timed out (a firewall drops connections to {address[0]}:{address[1]})")


socket.create_connection = _dropped
'''


@dataclass
class Packed:
    """What ``scripts/pack.sh`` built, the executors' bare Python and the folder their PEX installs into."""

    wheel: Path
    pex: Path
    bare: Path
    pex_root: Path

    def conf(self) -> dict[str, str]:
        """The executors' settings: ``python3.X`` on their ``PATH`` is the bare Python, as on a node that
        has nothing but the interpreter; the PEX installs its wheels under :attr:`pex_root`."""
        path = f"{self.bare / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
        return {"spark.executorEnv.PATH": path, "spark.executorEnv.PEX_ROOT": str(self.pex_root)}


@dataclass
class Cluster:
    daemons: StandaloneCluster
    package: Path

    def submit(self, script: Path, args: list[str], cwd: Path, conf: dict[str, str] | None = None,
               stream: bool = False, packed: Packed | None = None):
        """``spark-submit`` of ``script`` to the cluster with the package (``--py-files``), or with the PEX
        alone (``--files``, ``PYSPARK_PYTHON=./crowdspark.pex``) if ``packed``; a finished process, or a
        running one with ``stream``."""
        conf = {"spark.sql.shuffle.partitions": "4", **(packed.conf() if packed else {}), **(conf or {})}
        env = submit_environment()
        if packed is None:
            command = submit_command(self.daemons.master_url, str(self.package), str(script), args, conf)
        else:
            command = submit_command(self.daemons.master_url, None, str(script), args, conf,
                                     files=(str(packed.pex),))
            env["PYSPARK_PYTHON"] = f"./{packed.pex.name}"
        if stream:
            return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True)
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)

    def explain(self, output: str) -> str:
        """What a failing test prints: the end of the application's output and the cluster's logs."""
        return "\n".join(output.splitlines()[-60:]) + "\n" + self.daemons.logs()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster")
    package = root / "crowdspark.zip"
    subprocess.run(["bash", str(ROOT / "scripts" / "package.sh"), str(package)], check=True, capture_output=True)
    daemons = StandaloneCluster(workers=1, cores=2, memory="2g", root=str(root / "daemons"))
    daemons.start()
    try:
        yield Cluster(daemons, package)
    finally:
        daemons.stop()
    assert not daemons.executor_pids()


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """``scripts/pack.sh`` run by this interpreter, and a virtual environment without any package (not even
    pip) for the executors' Python."""
    root = tmp_path_factory.mktemp("packed")
    built = subprocess.run(["bash", str(ROOT / "scripts" / "pack.sh"), str(root / "dist")], capture_output=True,
                           text=True, env={**os.environ, "PYTHON": sys.executable})
    assert built.returncode == 0, built.stdout + built.stderr
    bare = root / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    for name in MODULES:
        probe = subprocess.run([str(bare / "bin" / "python"), "-c", f"import {name}"], capture_output=True,
                               cwd=root)
        assert probe.returncode != 0, f"the bare Python imports {name}"
    (wheel,) = (root / "dist").glob("crowdspark-*-py3-none-any.whl")
    return Packed(wheel, root / "dist" / "crowdspark.pex", bare, root / "pex-root")


def rte_args(algorithm: str, output: str, *settings: str) -> list[str]:
    args = ["--labels", str(RTE / "labels.csv"), "--gold", str(RTE / "truth.csv"), "--algorithm", algorithm,
            "--output", output, "--set", "engine.small_input_bytes=0"]
    for setting in settings:
        args += ["--set", setting]
    return args


def local_answer(tmp_path: Path, algorithm: str, *settings: str) -> Path:
    """The local engine's result for the same arguments (in this process)."""
    out = tmp_path / f"local-{algorithm}"
    assert crowdspark_main(["aggregate", "--engine", "local", *rte_args(algorithm, str(out), *settings)]) == 0
    return out


def assert_same_answer(result: Path, reference: Path) -> None:
    items = pd.read_parquet(result / "items").sort_values("item").reset_index(drop=True)
    expected = pd.read_parquet(reference / "items").sort_values("item").reset_index(drop=True)
    assert items["item"].tolist() == expected["item"].tolist()
    assert items["label"].tolist() == expected["label"].tolist()
    np.testing.assert_allclose(np.stack(items["posterior"]), np.stack(expected["posterior"]), rtol=0, atol=1e-9)
    workers = pd.read_parquet(result / "workers").sort_values("worker").reset_index(drop=True)
    expected_workers = pd.read_parquet(reference / "workers").sort_values("worker").reset_index(drop=True)
    np.testing.assert_allclose(np.stack([np.stack(c) for c in workers["confusion"]]),
                               np.stack([np.stack(c) for c in expected_workers["confusion"]]), atol=1e-9)
    summary, local = (json.loads((path / "summary.json").read_text()) for path in (result, reference))
    assert summary["engine"] == "spark" and local["engine"] == "local"
    assert summary["iterations"] == local["iterations"]
    assert summary["metrics"]["error_rate"] == local["metrics"]["error_rate"]


def test_cluster_answers_equal_the_local_engine_and_are_committed_atomically(cluster, packed, tmp_path):
    """ds, dds, idbla and idbla-cvb0 on RTE, default settings, executors whose Python has no package and that
    receive only the PEX of ``scripts/pack.sh``: sweep sessions on the cluster, the local engine's answers,
    outputs (relative paths, resolved on the driver) committed as on a local master, and every library the
    executors used came from the PEX (pyspark from the cluster's own ``pyspark.zip``)."""
    algorithms = ["ds", "dds", "idbla", "idbla-cvb0"]
    references = {algorithm: local_answer(tmp_path, algorithm) for algorithm in algorithms}
    work = tmp_path / "work"
    (work / "results").mkdir(parents=True)
    previous = work / "results" / "ds"
    shutil.copytree(references["ds"], previous)  # a previous result (of the local engine): replaced
    runs = [rte_args(algorithm, f"results/{algorithm}") for algorithm in algorithms]
    (work / "runs.json").write_text(json.dumps(runs))
    done = cluster.submit(ROOT / "tests" / "cluster_job.py", ["runs.json", "origins.json"], cwd=work,
                          packed=packed)
    assert done.returncode == 0, cluster.explain(done.stdout + done.stderr)
    origins = json.loads((work / "origins.json").read_text())
    assert len(origins) == 2
    for origin in origins:
        assert Path(origin["executable"]).parent == packed.bare / "bin", origin
        assert Path(origin["pex"]) == Path(origin["cwd"]) / packed.pex.name, origin
        assert Path(origin["cwd"]).is_relative_to(cluster.daemons.root), origin  # the executor's folder
        for name in MODULES[:-1]:
            assert Path(origin["modules"][name]).is_relative_to(packed.pex_root), origin
        assert f"/{packed.wheel.name}/crowdspark/" in origin["modules"]["crowdspark"], origin  # the wheel's
        assert "/python/lib/pyspark.zip/" in origin["modules"]["pyspark"], origin
    for algorithm in algorithms:
        result = work / "results" / algorithm
        assert_same_answer(result, references[algorithm])
        summary = json.loads((result / "summary.json").read_text())
        assert summary["sweep_mode"]["requested"] == "auto"
        assert summary["sweep_mode"]["chosen"] == "session", summary["sweep_mode"]
        assert summary["sweep_sessions"]["sessions"] >= 1
        marker = json.loads((result / "_CROWDSPARK.json").read_text())
        assert marker["kind"] == "result"
    assert json.loads((previous / "summary.json").read_text())["engine"] == "spark"
    assert sorted(p.name for p in (work / "results").iterdir()) == sorted(algorithms)  # no staging left over


class Watched:
    """A running application whose output is read line by line, waiting for a line to appear."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, pattern: str, seconds: float) -> bool:
        regex = re.compile(pattern)
        deadline = time.monotonic() + seconds
        with self._changed:
            while not any(regex.search(line) for line in self.lines):
                if not self._reader.is_alive() or time.monotonic() > deadline:
                    return False
                self._changed.wait(0.5)
            return True

    def finish(self, seconds: float) -> str:
        try:
            self.process.wait(seconds)
        finally:
            if self.process.poll() is None:
                self.process.kill()
        self._reader.join(10)
        return "".join(self.lines)


#: per mode: settings, the sweep after which the executor is killed, and the sweeps of the fit.  A session's
#: sweeps take milliseconds on RTE, so the killed session must have many left for the kill to land inside
#: it rather than between two sessions (where no session task restarts): 950 of its 1000.
KILLED = {
    "session": (["spark.session_sweeps=1000", "idbla.burn_in=1000", "idbla.n_samples=1000"], 1050, 2000),
    "jobs": (["idbla.burn_in=10", "idbla.n_samples=15"], 12, 25),
}


@pytest.mark.parametrize("mode", ["session", "jobs"])
def test_a_killed_executor_is_survived_with_the_same_answer(cluster, tmp_path, mode):
    """IDBLA (per-item state), executor killed after its lineage was truncated (every 10 sweeps in jobs
    mode; at each session's end, every 1000 sweeps, in session mode): the states come back from the reliable
    checkpoints (and, in session mode, the driver replays the session's sweeps to the restarted tasks)."""
    settings, kill_at, sweeps = KILLED[mode]
    reference = local_answer(tmp_path, "idbla", *settings)
    out = tmp_path / "cluster"
    checkpoints = tmp_path / "spark-checkpoints"
    app = Watched(cluster.submit(
        ROOT / "jobs" / "aggregate.py", rte_args("idbla", str(out), f"spark.sweep_mode={mode}", *settings),
        cwd=tmp_path, stream=True, conf={
            "spark.checkpoint.dir": checkpoints.as_uri(),
            # a barrier stage resubmitted before the new executor registers waits this long per check (15 s)
            "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "2s",
        },
    ))
    try:
        assert app.wait_for(rf"idbla: iteration {kill_at}/{sweeps} ", 600), cluster.explain("".join(app.lines))
        assert cluster.daemons.kill_executors()
    finally:
        output = app.finish(900)
    assert app.process.returncode == 0, cluster.explain(output)
    assert "Lost executor" in output
    assert_same_answer(out, reference)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["sweep_mode"]["chosen"] == mode
    assert summary["state_checkpoints"] == "reliable"
    last = next(i for i, line in enumerate(app.lines) if f"iteration {sweeps}/{sweeps} " in line)
    assert any("Lost executor" in line for line in app.lines[:last])  # the kill came mid-fit
    if mode == "session":
        assert summary["sweep_sessions"]["task_restarts"] >= 1


def test_a_driver_the_executors_cannot_reach_falls_back_to_jobs_and_says_why(cluster, tmp_path):
    """The executors' Python sees every TCP connection it opens time out (a firewall between them and the
    driver's session port); the run completes in jobs mode with the local engine's answer."""
    firewall = tmp_path / "firewall"
    firewall.mkdir()
    (firewall / "sitecustomize.py").write_text(FIREWALL)
    reference = local_answer(tmp_path, "ds")
    out = tmp_path / "cluster"
    start = time.perf_counter()
    done = cluster.submit(ROOT / "jobs" / "aggregate.py", rte_args("ds", str(out)), cwd=tmp_path,
                          conf={"spark.executorEnv.PYTHONPATH": str(firewall)})
    assert done.returncode == 0, cluster.explain(done.stdout + done.stderr)
    assert time.perf_counter() - start < 600
    assert_same_answer(out, reference)
    choice = json.loads((out / "summary.json").read_text())["sweep_mode"]
    assert choice["requested"] == "auto" and choice["chosen"] == "jobs"
    assert re.search(r"2 of 2 probe tasks could not connect to the driver's sweep session at \S+ within 5 s .*"
                     r"a firewall drops connections", choice["reason"]), choice["reason"]
    assert "one Spark job per sweep, because 2 of 2 probe tasks could not connect" in done.stdout + done.stderr
