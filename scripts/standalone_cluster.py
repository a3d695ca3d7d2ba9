"""A Spark standalone cluster on this machine, started from the installed pyspark (no download).

One master and ``--workers`` workers listen on 127.0.0.1 on ports the system chooses (no collision with other
clusters or tests; the master's REST submission server, which would take the fixed port 6066, is off). Each
daemon runs in its own process group, so stopping it by its process id also stops the executors its worker
launched; a watchdog process stops them too if this process dies without cleaning up. The cluster's files
(daemon logs, the workers' folders with every executor's ``stderr``) are in one new temporary folder.

Run a command against it and stop it afterwards (``{master}`` in the command becomes the master's URL)::

    bash scripts/package.sh && source scripts/env.sh
    .venv/bin/python scripts/standalone_cluster.py --workers 1 --cores 2 -- \\
        .venv/bin/spark-submit --master {master} --py-files dist/crowdspark.zip jobs/aggregate.py \\
        --labels data/rte/labels.csv --gold data/rte/truth.csv --algorithm idbla --output out/rte-idbla \\
        --set engine.small_input_bytes=0

Without a command it prints the URL and keeps the cluster up until Ctrl-C.  From Python (tests, benchmarks):
``with StandaloneCluster(workers=1, cores=2) as cluster: ... cluster.master_url ...``.
"""

from __future__ import annotations

import argparse
import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["StandaloneCluster", "ClusterError", "spark_class", "submit_command", "submit_environment"]

_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_REGISTERED = "Successfully registered with master"
_EXECUTOR_CLASS = "CoarseGrainedExecutorBackend"

#: what a dead parent makes the watchdog do: read process group ids (one per line, "-id" to forget one) until
#: standard input closes, then kill the groups it still holds
_WATCHDOG = """
import os, signal, sys
groups = set()
for line in sys.stdin:
    line = line.strip()
    if line.startswith("-"):
        groups.discard(int(line[1:]))
    elif line:
        groups.add(int(line))
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
"""


class ClusterError(RuntimeError):
    """A daemon of the cluster did not start (the message holds the end of its log)."""


def spark_class() -> Path:
    """The installed pyspark's ``bin/spark-class``."""
    import pyspark

    path = Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not path.exists():
        raise ClusterError(f"{path} not found: the installed pyspark has no launcher scripts")
    return path


def submit_command(master: str, package: str | None, script: str, args: list[str],
                   conf: dict[str, str] | None = None, files: tuple[str, ...] = ()) -> list[str]:
    """The ``spark-submit`` command line of ``script`` with the library ``package`` (``--py-files``; none if
    ``None``), the ``files`` (``--files``) and the Spark settings ``conf`` (the UI off unless ``conf`` says
    otherwise)."""
    command = [str(spark_class().parent / "spark-submit"), "--master", master]
    command += ["--py-files", package] if package is not None else []
    command += ["--files", ",".join(files)] if files else []
    for key, value in {"spark.ui.enabled": "false", **(conf or {})}.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, script, *args]


def submit_environment() -> dict[str, str]:
    """This process's environment, with Spark's Python (driver and workers) this interpreter, on 127.0.0.1."""
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1"}


def _children(pid: int) -> list[int]:
    """Process ids whose parent is ``pid`` (Linux /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # fields after the command name, which is in parentheses and may hold spaces
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


def _command_line(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class StandaloneCluster:
    """A master and workers on 127.0.0.1, from the installed pyspark.

    Parameters
    ----------
    workers : int
        Number of workers (one executor each per application).
    cores : int
        Cores each worker offers.
    memory : str
        Memory each worker offers (e.g. ``"4g"``); an application's executors take
        ``spark.executor.memory`` (1g by default) of it.
    root : str, optional
        Folder for the cluster's files (a new temporary folder by default, deleted by :meth:`stop`).
    start_seconds : float
        How long a daemon may take to start.
    """

    def __init__(self, workers: int = 1, cores: int = 2, memory: str = "4g", root: str | None = None,
                 start_seconds: float = 120.0) -> None:
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.start_seconds = start_seconds
        self._own_root = root is None
        self.root = Path(root or tempfile.mkdtemp(prefix="crowdspark-cluster-"))
        self.master_url: str | None = None
        self._daemons: list[tuple[subprocess.Popen, Path]] = []  # master first
        self._watchdog: subprocess.Popen | None = None
        self._stopped = False

    # starting

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env["SPARK_LOG_DIR"] = str(self.root / "logs")
        env["SPARK_WORKER_DIR"] = str(self.root / "work")
        return env

    def _launch(self, name: str, args: list[str]) -> tuple[subprocess.Popen, Path]:
        log = self.root / f"{name}.log"
        with open(log, "wb") as handle:
            process = subprocess.Popen(
                [str(spark_class()), *args], stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT,
                env=self._environment(), cwd=self.root, start_new_session=True,
            )
        self._daemons.append((process, log))
        self._watch(process.pid)
        return process, log

    def _watch(self, group: int, forget: bool = False) -> None:
        if self._watchdog is None or self._watchdog.stdin is None:
            return
        try:
            self._watchdog.stdin.write(f"{'-' if forget else ''}{group}\n".encode())
            self._watchdog.stdin.flush()
        except OSError:
            pass

    def _wait_for(self, process: subprocess.Popen, log: Path, pattern: re.Pattern | str) -> str:
        deadline = time.monotonic() + self.start_seconds
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            found = pattern.search(text) if isinstance(pattern, re.Pattern) else (pattern in text and pattern)
            if found:
                return found.group(1) if isinstance(found, re.Match) else found
            if process.poll() is not None:
                break
            time.sleep(0.2)
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise ClusterError(f"{log.name[:-4]} did not start within {self.start_seconds:g} s; end of {log}:\n{tail}")

    def start(self) -> str:
        """Start the master and the workers; returns the master's URL once every worker has registered."""
        atexit.register(self.stop)
        self._watchdog = subprocess.Popen([sys.executable, "-c", _WATCHDOG], stdin=subprocess.PIPE,
                                          start_new_session=True)
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        properties = self.root / "master.properties"
        properties.write_text("spark.master.rest.enabled false\n")
        try:
            master, log = self._launch("master", [
                "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
                "--webui-port", "0", "--properties-file", str(properties),
            ])
            self.master_url = self._wait_for(master, log, _MASTER_URL)
            started = []
            for index in range(self.workers):
                work = self.root / f"work-{index}"
                work.mkdir()
                started.append(self._launch(f"worker-{index}", [
                    "org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1",
                    "--port", "0", "--webui-port", "0", "--cores", str(self.cores), "--memory", self.memory,
                    "--work-dir", str(work),
                ]))
            for process, log in started:
                self._wait_for(process, log, _REGISTERED)
        except BaseException:
            self.stop()
            raise
        return self.master_url

    # what tests need

    @property
    def worker_pids(self) -> list[int]:
        return [process.pid for process, _ in self._daemons[1:]]

    def executor_pids(self) -> list[int]:
        """Process ids of the executors the workers run now."""
        return [pid for worker in self.worker_pids for pid in _children(worker)
                if _EXECUTOR_CLASS in _command_line(pid)]

    def kill_executors(self) -> list[int]:
        """Kill every running executor (SIGKILL, as a crashed machine would); returns their process ids."""
        pids = self.executor_pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    def logs(self) -> str:
        """The daemons' logs and every executor's ``stderr``, for a failing test's report."""
        parts = []
        for path in sorted(self.root.glob("*.log")) + sorted(self.root.glob("work-*/*/*/stderr")):
            parts.append(f"==> {path} <==\n" + "\n".join(path.read_text(errors="replace").splitlines()[-40:]))
        return "\n".join(parts)

    # stopping

    def stop(self) -> None:
        """Stop the workers (and their executors), then the master, by their process groups; delete the
        cluster's folder if this object made it.  Safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        for process, _ in reversed(self._daemons):  # workers first: they stop their executors
            _stop_group(process)
            self._watch(process.pid, forget=True)
        if self._watchdog is not None:
            self._watchdog.stdin.close()
            self._watchdog.wait()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)
        atexit.unregister(self.stop)

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


def _stop_group(process: subprocess.Popen, seconds: float = 15.0) -> None:
    """SIGTERM the process group led by ``process``, SIGKILL it if it is still there after ``seconds``."""
    for sig, wait in ((signal.SIGTERM, seconds), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        # the leader is gone; members of its group (executors) may remain
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        break


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--cores", type=int, default=2, help="cores per worker")
    parser.add_argument("--memory", default="4g", help="memory per worker")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="a command to run against the cluster, after --; {master} is the master's URL")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    with StandaloneCluster(args.workers, args.cores, args.memory) as cluster:
        print(f"master {cluster.master_url}; logs in {cluster.root}", file=sys.stderr, flush=True)
        if not command:
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                return 0
        return subprocess.call([part.replace("{master}", cluster.master_url) for part in command])


if __name__ == "__main__":
    sys.exit(main())
