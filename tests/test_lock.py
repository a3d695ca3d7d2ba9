"""One writer per output (:mod:`crowdspark.io.lock`), under races.

Eight processes released by one barrier take the lock of one output, round after round, each writing to a
shared ``O_APPEND`` journal when it holds the lock and when it lets it go: no two may hold it together, from
every state a lock file can be found in.  Both protocols run here on the local filesystem: ``flock`` (what
local outputs use) and exclusive create with a takeover by rename (what Hadoop filesystems use).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from crowdspark.cli import main
from crowdspark.errors import ConfigError
from crowdspark.io.files import HadoopFiles, LocalFiles
from crowdspark.io.lock import OutputLock, lock_path
from tests.helpers import DATA

RACERS = 8
ROUNDS = 40
HOLD = 0.02  # seconds a holder keeps the lock, so that a second holder would overlap it
PROTOCOLS = {"kernel": True, "exclusive create": False}
FORK = multiprocessing.get_context("fork")


def new_lock(destination: str, kernel: bool, **options) -> OutputLock:
    return OutputLock(LocalFiles(), destination, kernel=kernel, **options)


def note(journal: str, round_: int, event: str) -> None:
    """One line appended to the journal in one write (``O_APPEND``: lines of processes never interleave)."""
    descriptor = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, f"{round_} {os.getpid()} {event}\n".encode())
    finally:
        os.close(descriptor)


def racer(destination: str, kernel: bool, barrier, journal: str) -> None:
    """Every round: wait for the start, try the lock, hold it a moment if taken, wait for the round's end."""
    for round_ in range(ROUNDS):
        barrier.wait()
        lock = new_lock(destination, kernel, patience=2 * HOLD)
        try:
            lock.acquire()
        except ConfigError:
            note(journal, round_, "refused")
        except Exception as exc:  # noqa: BLE001 - recorded, so that the test names it
            note(journal, round_, f"error {type(exc).__name__}: {exc}".replace("\n", " "))
        else:
            note(journal, round_, "hold")
            time.sleep(HOLD)
            note(journal, round_, "release")
            lock.release()
        barrier.wait()


def holder_until_killed(destination: str, kernel: bool, holding) -> None:
    """Take the lock, say so, and hold it until killed."""
    new_lock(destination, kernel).acquire()
    holding.set()
    signal.pause()


def dead_pid() -> int:
    """The id of a process of this host that has ended."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def record(pid, started, host=None) -> str:
    return json.dumps({"crowdspark": "lock", "destination": "out", "pid": pid, "host": host or socket.gethostname(),
                       "started": started, "token": "left"})


def prepare(state: str, destination: str, kernel: bool, gone: int) -> None:
    """Leave the lock of ``destination`` in ``state``."""
    path = lock_path(destination)
    if os.path.exists(path):
        os.remove(path)
    if state == "dead-pid lock":
        Path(path).write_text(record(gone, time.time()))
    elif state == "empty lock file":
        Path(path).write_text("")
    elif state == "lock of a killed holder":
        holding = FORK.Event()
        holder = FORK.Process(target=holder_until_killed, args=(destination, kernel, holding))
        holder.start()
        assert holding.wait(30), "the holder did not take the lock"
        os.kill(holder.pid, signal.SIGKILL)
        holder.join()
        assert os.path.exists(path)


def holders_at_once(lines: list[str]) -> tuple[int, int]:
    """The most processes that held the lock together, and how many times it was taken."""
    at_once = most = taken = 0
    for line in lines:
        event = line.split(" ", 2)[2]
        if event == "hold":
            at_once, taken = at_once + 1, taken + 1
            most = max(most, at_once)
        elif event == "release":
            at_once -= 1
    return most, taken


STATES = ["no lock", "dead-pid lock", "empty lock file", "lock of a killed holder"]


@pytest.mark.slow
@pytest.mark.parametrize("protocol", list(PROTOCOLS))
@pytest.mark.parametrize("state", STATES)
def test_eight_processes_at_once_never_hold_the_lock_together(tmp_path, protocol, state):
    kernel = PROTOCOLS[protocol]
    destination, journal = str(tmp_path / "out"), str(tmp_path / "journal")
    gone = dead_pid()
    barrier = FORK.Barrier(RACERS + 1, timeout=120)
    racers = [FORK.Process(target=racer, args=(destination, kernel, barrier, journal)) for _ in range(RACERS)]
    for process in racers:
        process.start()
    try:
        for _ in range(ROUNDS):
            prepare(state, destination, kernel, gone)
            barrier.wait()  # the racers start
            barrier.wait()  # every racer is done
            leftovers = [name for name in os.listdir(tmp_path) if name.startswith("_crowdspark-lock")
                         and name != os.path.basename(lock_path(destination))]
            assert leftovers == []
    except BaseException:
        barrier.abort()
        raise
    finally:
        for process in racers:
            process.join(60)
    assert [process.exitcode for process in racers] == [0] * RACERS
    lines = Path(journal).read_text().splitlines()
    errors = [line for line in lines if " error " in line]
    assert errors == []
    for round_ in range(ROUNDS):
        in_round = [line for line in lines if line.startswith(f"{round_} ")]
        assert len([line for line in in_round if not line.endswith("release")]) == RACERS
        most, taken = holders_at_once(in_round)
        assert most <= 1, f"round {round_}: {most} processes held the lock together:\n" + "\n".join(in_round)
        if not kernel and state == "empty lock file":
            assert taken == 0  # an empty lock may be one being written: never judged stale
        else:
            assert taken >= 1, f"round {round_}: nobody took a lock that is free:\n" + "\n".join(in_round)
    if kernel:
        assert not os.path.exists(lock_path(destination))  # the last holder deleted it


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
@pytest.mark.parametrize("content", ["my notes\n", "{}", '{"crowdspark": "marker"}', "[1, 2]"])
def test_a_file_named_like_the_lock_is_kept(tmp_path, protocol, content):
    destination = str(tmp_path / "out")
    Path(lock_path(destination)).write_text(content)
    lock = new_lock(destination, PROTOCOLS[protocol])
    for attempt in (lock.check_free, lock.acquire):
        with pytest.raises(ConfigError, match=r"_crowdspark-lock-out', the lock of .*out', is a file that is not "
                                              r"crowdspark's lock; .* move it elsewhere"):
            attempt()
    assert Path(lock_path(destination)).read_text() == content
    assert not lock.held


@pytest.mark.parametrize("what", ["directory", "symbolic link"])
def test_a_folder_or_link_named_like_the_lock_is_kept(tmp_path, what):
    destination = str(tmp_path / "out")
    target = tmp_path / "elsewhere"
    target.write_text("mine")
    if what == "directory":
        os.mkdir(lock_path(destination))
    else:
        os.symlink(target, lock_path(destination))
    for kernel in (True, False):
        with pytest.raises(ConfigError, match=rf"the lock of .*out', is a {what}; .* move it"):
            new_lock(destination, kernel).acquire()
    assert os.path.lexists(lock_path(destination)) and target.read_text() == "mine"


@pytest.mark.parametrize("pid, started", [("12", "yesterday"), (None, None), (True, float("inf")),
                                          (-1, "2026-11-25")])
def test_a_lock_with_wrong_types_is_a_clear_error_or_taken(tmp_path, pid, started):
    """Exclusive create cannot judge such a lock (exit 2); with flock nobody holds it, so it is taken, and a held
    lock whose record has wrong types is named without a raw exception."""
    destination = str(tmp_path / "out")
    Path(lock_path(destination)).write_text(record(pid, started, host="elsewhere"))
    with pytest.raises(ConfigError, match=r"the lock .*_crowdspark-lock-out' of .*out' has a record that cannot "
                                          r"be judged \(pid .*, host 'elsewhere', started .*\); if no run is "
                                          r"writing .*out', delete"):
        new_lock(destination, kernel=False).acquire()
    with new_lock(destination, kernel=True) as taken:
        assert json.loads(Path(lock_path(destination)).read_text())["token"] == taken.token
        Path(lock_path(destination)).write_text(record(pid, started))
        with pytest.raises(ConfigError, match=rf"another run is writing .*out' \(process {pid} on .*, since "
                                              rf"an unreadable time {started!r}\)"):
            new_lock(destination, kernel=True, patience=0).acquire()


def test_a_lock_held_with_wrong_types_stops_the_command_with_exit_75(tmp_path, capsys):
    out = tmp_path / "out"
    with new_lock(str(out), kernel=True):
        Path(lock_path(str(out))).write_text(record("12", "yesterday"))
        code = main(["aggregate", "--labels", str(DATA / "rte" / "labels.csv"), "--engine", "local",
                     "--output", str(out), "--quiet"])
    assert code == 75  # held by a live process (the kernel's lock): retryable
    assert "another run is writing" in capsys.readouterr().err
    assert not out.exists()


def test_a_killed_holders_lock_is_free_and_a_live_ones_is_not(tmp_path):
    """flock: the kernel releases the lock of a process killed with SIGKILL; while it lives, it holds."""
    destination = str(tmp_path / "out")
    holding = FORK.Event()
    holder = FORK.Process(target=holder_until_killed, args=(destination, True, holding))
    holder.start()
    assert holding.wait(30)
    try:
        with pytest.raises(ConfigError, match=rf"another run is writing .*out' \(process {holder.pid} on "):
            new_lock(destination, kernel=True, patience=0).check_free()
        with pytest.raises(ConfigError, match=rf"\(process {holder.pid} on .*\); wait for it to finish"):
            new_lock(destination, kernel=True, patience=0).acquire()
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.join()
    new_lock(destination, kernel=True).check_free()
    with new_lock(destination, kernel=True) as taken:
        assert taken.held
    assert not os.path.exists(lock_path(destination))


def test_a_second_holder_in_the_same_process_is_refused(tmp_path):
    destination = str(tmp_path / "out")
    for kernel in (True, False):
        with new_lock(destination, kernel):
            with pytest.raises(ConfigError, match="another run is writing"):
                new_lock(destination, kernel, patience=0).acquire()
        assert not os.path.exists(lock_path(destination))


ALGORITHMS = ["mv", "ds", "glad", "wawa", "zbs", "one-coin", "mace", "ads"]


def read_result(folder: Path) -> dict[str, pd.DataFrame]:
    """The item and worker tables of a result, in the order of their first column."""
    tables = {table: pd.read_parquet(folder / table) for table in ("items", "workers")}
    return {table: frame.sort_values(frame.columns[0]).reset_index(drop=True) for table, frame in tables.items()}


@pytest.mark.slow
def test_eight_commands_on_one_output_leave_one_complete_result(tmp_path):
    """Eight ``aggregate`` commands of different algorithms on one ``--output`` at once: each writes alone or
    stops with exit 75; the output is one run's complete result, equal to that algorithm's result alone."""
    out = tmp_path / "out"
    labels, gold = str(DATA / "rte" / "labels.csv"), str(DATA / "rte" / "truth.csv")

    def command(algorithm: str, output: Path) -> list[str]:
        return [sys.executable, "-m", "crowdspark", "aggregate", "--labels", labels, "--gold", gold, "--engine",
                "local", "--algorithm", algorithm, "--output", str(output), "--quiet"]

    runs = [subprocess.Popen(command(name, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for name in ALGORITHMS]
    finished = [(run.wait(600), run.stderr.read()) for run in runs]
    for name, (code, err) in zip(ALGORITHMS, finished):
        assert code == 0 or (code == 75 and "another run is writing" in err), f"{name}: exit {code}: {err}"
    assert any(code == 0 for code, _ in finished)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["algorithm"] in ALGORITHMS
    alone = tmp_path / "alone"
    subprocess.run(command(summary["algorithm"], alone), check=True)
    written, expected = read_result(out), read_result(alone)
    for table in expected:
        pd.testing.assert_frame_equal(written[table], expected[table])
    assert sorted(os.listdir(tmp_path)) == ["alone", "out"]  # no lock, staging or old result left


@pytest.mark.spark
def test_the_exclusive_create_protocol_through_hadoops_filesystem_api(spark, tmp_path):
    """What HDFS runs, through Hadoop's FileSystem API (on file://): a holder refuses a second run, a dead
    process's lock is taken over without leftovers, an empty lock and a user's file are kept."""
    files = HadoopFiles(spark)
    destination = f"file://{tmp_path}/out"
    path = Path(lock_path(str(tmp_path / "out")))
    with OutputLock(files, destination) as first:
        assert not first.kernel
        with pytest.raises(ConfigError, match=r"another run is writing .*out' \(process \d+ on .*\. If no run is "
                                              r"active .* delete"):
            OutputLock(files, destination).acquire()
    assert not path.exists()
    path.write_text(record(dead_pid(), time.time()))
    with OutputLock(files, destination) as taken:
        assert json.loads(path.read_text())["token"] == taken.token
        assert [name for name in os.listdir(tmp_path) if "lock" in name and not name.endswith(".crc")] == [path.name]
    for content, message in (("", "another run is taking the lock"), ("my notes", "is a file that is not")):
        path.write_text(content)
        with pytest.raises(ConfigError, match=message):
            OutputLock(files, destination).acquire()
        assert path.read_text() == content


@pytest.mark.parametrize("form", ["file:{}", "file://{}", "file://localhost{}"])
def test_a_file_uri_output_locks_the_same_file(tmp_path, form):
    destination = form.format(tmp_path / "out")
    with new_lock(destination, kernel=True) as taken:
        assert json.loads(Path(lock_path(str(tmp_path / "out"))).read_text())["token"] == taken.token
        with pytest.raises(ConfigError, match="another run is writing"):
            new_lock(str(tmp_path / "out"), kernel=True, patience=0).acquire()
    assert not os.path.exists(lock_path(str(tmp_path / "out")))
