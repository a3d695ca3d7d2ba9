"""Fault injection: a run killed with SIGKILL right after each step of writing its result, and the next run.

The steps are the commit's (:data:`crowdspark.io.sink.COMMIT_STEPS`), the run root's
(:data:`crowdspark.io.runs.RUN_ROOT_STEPS`) and the moment a metadata file's temporary copy is written but not
yet renamed over it (``temp-written:<path>``); the hook is ``CROWDSPARK_TEST_KILL_AFTER``
(:mod:`crowdspark.io.killpoint`).  After every one of them, on the local and on the Spark engine, with and
without ``--run-id``, the next run of the same command (on Spark, the command line's ``run_aggregate`` in the
tests' SparkSession) must succeed without manual work, write the same answers as an uninterrupted run, leave
the earlier results byte for byte as they were and leave no staging, moved-aside, temporary or lock file behind
(docs/security.md, "The commit and its recovery"); and nothing the killed command line started (on Spark, its
JVM and the JVM's Python workers) outlives it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from crowdspark.io.files import LocalFiles
from crowdspark.io.killpoint import KILL_AFTER
from crowdspark.io.marker import MARKER, RESULT, STAGING, owned_kind, read_marker
from crowdspark.io.runs import RUN_ROOT_STEPS, read_latest
from crowdspark.io.sink import COMMIT_STEPS, StagedOutput, check_output
from tests.conftest import DATA

LABELS, GOLD = DATA / "rte" / "labels.csv", DATA / "rte" / "truth.csv"
EARLIER, NIGHT = "2026-11-01", "2026-11-02"

#: kill points whose kill leaves the destination as it was (the switch had not begun), by name
BEFORE_SWITCH = {
    "staging-marker-temp": "temp-written:*/_crowdspark-staging-*/_CROWDSPARK.json",
    "summary-temp": "temp-written:*/_crowdspark-staging-*/summary.json",
    "staging-complete-temp": "temp-written:*/_crowdspark-staging-*/_CROWDSPARK.json#2",
    "staged-complete": "staged-complete",
}


def _after_switch(destination_name: str) -> dict[str, str]:
    """Kill points from the switch on: the commit's later steps, and the final marker's temporary copy."""
    steps = {step: step for step in COMMIT_STEPS if step not in BEFORE_SWITCH}
    steps["final-marker-temp"] = f"temp-written:*/{destination_name}/{MARKER}"
    return steps


def _kill_points(run_id: str | None, everything: bool) -> dict[str, str]:
    """The kill points of a run of ``--output out`` (or of ``out/run_id=<run_id>``): the commit's steps, the
    final marker's temporary copy, the run root's steps and ``_LATEST.json``'s temporary copy, and with
    ``everything`` the staged result's files written before the commit too."""
    points = dict(BEFORE_SWITCH) if everything else {"staged-complete": "staged-complete"}
    points.update(_after_switch("out" if run_id is None else f"run_id={run_id}"))
    if run_id is not None:
        points.update({step: step for step in RUN_ROOT_STEPS})
        points["latest-temp"] = "temp-written:*/out/_LATEST.json"
    return points


def _tree(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` (relative path -> bytes)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _leftovers(folder: Path) -> list[str]:
    """crowdspark's staging, moved-aside, temporary and lock entries anywhere below ``folder``."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("_crowdspark-*"))


# -- the commit alone, in-process: a forked writer killed after each step ---------------------------------------


def _write_result(destination: Path, answer: str) -> None:
    """A small result holding ``answer``, written and committed like a run's."""
    with StagedOutput(str(destination)) as out:
        out.write_bytes("items/part-00000.csv", f"item,label\n1,{answer}\n".encode())
        out.write_bytes("workers/part-00000.csv", b"worker\nw\n")
        out.write_json("summary.json", {"answer": answer})
        out.commit()


def _killed_writer(destination: Path, point: str) -> None:
    """Commit ``new`` to ``destination`` in a forked process that ``point`` kills."""
    pid = os.fork()
    if pid == 0:  # the child: killed at the point, never reaches _exit
        os.environ[KILL_AFTER] = point
        try:
            _write_result(destination, "new")
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, f"{point} did not kill the writer"


@pytest.mark.parametrize("name, point", sorted({**BEFORE_SWITCH, **_after_switch("out")}.items()))
def test_a_commit_killed_after_each_step_is_recovered_before_the_output_is_checked(tmp_path, name, point):
    out = tmp_path / "out"
    _write_result(out, "old")
    before = _tree(out)
    _killed_writer(out, point)
    if name in BEFORE_SWITCH:
        assert _tree(out) == before
    # what the next run checks first, on the command line before Spark starts: it recovers, then accepts
    recovered = check_output(str(out), stale_after=3600)
    assert (recovered is None) == (name == COMMIT_STEPS[-1])  # after the last step, nothing is left to do
    assert owned_kind(LocalFiles(), str(out)) == RESULT and read_marker(LocalFiles(), str(out))["kind"] == RESULT
    expected = "old" if name in BEFORE_SWITCH else "new"
    assert json.loads((out / "summary.json").read_text()) == {"answer": expected}
    if name in BEFORE_SWITCH:
        assert _tree(out) == before
    assert _leftovers(tmp_path) == []
    _write_result(out, "next")  # and the next commit goes through
    assert json.loads((out / "summary.json").read_text()) == {"answer": "next"}


def test_a_staging_directory_killed_before_its_marker_is_removed(tmp_path):
    out = tmp_path / "out"
    _write_result(out, "old")
    before = _tree(out)
    _killed_writer(out, BEFORE_SWITCH["staging-marker-temp"])
    staging = [p for p in tmp_path.iterdir() if p.name.startswith("_crowdspark-staging-")]
    assert len(staging) == 1 and not (staging[0] / MARKER).exists()  # unmarked: only a temporary file in it
    assert check_output(str(out), stale_after=3600) is not None
    assert _tree(out) == before and _leftovers(tmp_path) == []


def test_a_destination_left_marked_as_staging_is_no_longer_refused(tmp_path):
    out = tmp_path / "out"
    _write_result(out, "old")
    _killed_writer(out, "staging-renamed")
    assert read_marker(LocalFiles(), str(out))["kind"] == STAGING
    assert "marked the committed result" in check_output(str(out), stale_after=3600)
    assert read_marker(LocalFiles(), str(out))["kind"] == RESULT


def test_a_report_killed_inside_its_commit_is_recovered_as_a_report(tmp_path):
    from crowdspark.io.marker import REPORT

    out = tmp_path / "report"
    pid = os.fork()
    if pid == 0:
        os.environ[KILL_AFTER] = "staging-renamed"
        try:
            with StagedOutput(str(out), kind=REPORT) as staged:
                staged.write_bytes("report.md", b"# report\n")
                staged.write_json("results.json", {})
                staged.commit()
        finally:
            os._exit(0)
    assert os.WTERMSIG(os.waitpid(pid, 0)[1]) == signal.SIGKILL
    check_output(str(out), kind=REPORT, stale_after=3600)
    assert owned_kind(LocalFiles(), str(out)) == REPORT and _leftovers(tmp_path) == []


@pytest.mark.parametrize("run_id", [None, NIGHT], ids=["output", "run-id"])
def test_preflight_recovers_a_commit_cut_short_before_it_checks_the_output(tmp_path, run_id):
    from crowdspark.config import load_config
    from crowdspark.pipeline.run import preflight

    out = tmp_path / "out"
    destination = out / f"run_id={run_id}" if run_id else out
    if run_id:
        from crowdspark.io.sink import make_run_root

        make_run_root(str(out))
    _write_result(destination, "old")
    _killed_writer(destination, "staging-renamed")
    preflight(load_config(), str(LABELS), str(out), None, None, run_id, None)
    assert read_marker(LocalFiles(), str(destination))["kind"] == RESULT
    assert json.loads((destination / "summary.json").read_text()) == {"answer": "new"}
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("files", ["local", pytest.param("hadoop", marks=pytest.mark.spark)])
def test_a_metadata_file_is_written_to_a_temporary_name_then_renamed_over_the_old_one(request, tmp_path, monkeypatch,
                                                                                      files):
    if files == "hadoop":
        from crowdspark.io.files import HadoopFiles

        fs, target = HadoopFiles(request.getfixturevalue("spark")), f"file://{tmp_path}/{MARKER}"
    else:
        fs, target = LocalFiles(), str(tmp_path / MARKER)
    fs.write_bytes(target, b"old")
    seen = []

    def killed_here(step):  # what a kill at this point leaves: the old file whole, the new one beside it
        seen.append((step, (tmp_path / MARKER).read_bytes(),
                     [p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("_crowdspark-tmp-")]))

    monkeypatch.setattr("crowdspark.io.files.kill_point", killed_here)
    fs.write_bytes(target, b"new")
    assert seen == [(f"temp-written:{target}", b"old", [b"new"])]
    assert (tmp_path / MARKER).read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == [MARKER]


# -- the whole command, killed with SIGKILL: local engine and Spark engine -------------------------------------


def _arguments(out: Path, engine: str, run_id: str | None) -> list[str]:
    """The arguments of ``crowdspark aggregate`` writing ``out`` (or its run ``run_id``) on ``engine``."""
    args = ["--labels", str(LABELS), "--gold", str(GOLD), "--output", str(out), "--quiet", "--set",
            "nightly.keep_runs=5"]
    if engine == "spark":  # the distributed engine
        args += ["--engine", "spark", "--master", "local[2]", "--set", "engine.small_input_bytes=0"]
    else:
        args += ["--engine", "local"]
    return args + (["--run-id", run_id] if run_id is not None else [])


#: the environment variable that marks a killed command line and every process it started (they inherit it)
KILLED_MARK = "CROWDSPARK_TEST_KILLED_RUN"


def _cli(out: Path, engine: str, run_id: str | None, kill: str | None = None) -> subprocess.CompletedProcess:
    """The command line in its own process (on Spark, in its own Spark application); with ``kill``, marked with
    :data:`KILLED_MARK` = ``out``."""
    args = [sys.executable, "-m", "crowdspark", "aggregate", *_arguments(out, engine, run_id)]
    env = {k: v for k, v in os.environ.items() if k not in (KILL_AFTER, KILLED_MARK)}
    env.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1",
               **({KILL_AFTER: kill, KILLED_MARK: str(out)} if kill else {}))
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)


def _marked(out: Path, within: float = 60.0) -> list[str]:
    """The processes still running ``within`` seconds after the killed command line of ``out`` ended that carry
    its :data:`KILLED_MARK` (its JVM, the JVM's Python workers), as "pid command"; polls ``/proc``."""
    mark = f"{KILLED_MARK}={out}".encode()
    deadline = time.monotonic() + within
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and mark in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(f"{entry.name} {(entry / 'cmdline').read_bytes()[:200]!r}")
            except OSError:  # gone meanwhile, or not ours
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def _run(out: Path, engine: str, run_id: str | None, spark=None) -> None:
    """An uninterrupted run of the command: on the local engine the command line in its own process; on Spark
    the command line's own ``run_aggregate`` (its checks, recovery, fit and commit) in the tests' SparkSession,
    not a Spark application of its own (30-60 CPU seconds each, docs/testing.md)."""
    if engine != "spark":
        done = _cli(out, engine, run_id)
        assert done.returncode == 0, done.stderr[-3000:]
        return
    from crowdspark.cli import build_parser, run_aggregate

    run_aggregate(build_parser().parse_args(["aggregate", *_arguments(out, engine, run_id)]), spark=spark)


def _answers(result: Path) -> dict[str, object]:
    """What a result says: its tables (sorted) and its saved model's files."""
    tables = {}
    for name in ("items", "workers", "relabel"):
        frame = pd.read_parquet(result / name)
        tables[name] = frame.sort_values(list(frame.columns[:1])).reset_index(drop=True)
    return {**tables, "_model": _tree(result / "_model")}


def _assert_same_answers(got: dict[str, object], expected: dict[str, object]) -> None:
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        if isinstance(value, pd.DataFrame):
            pd.testing.assert_frame_equal(got[name], value, check_exact=True)
        else:
            assert got[name] == value, name


_EARLIER: dict[tuple[str, str | None], tuple[Path, dict[str, object]]] = {}


def _earlier(tmp_path_factory, engine: str, run_id: str | None, spark=None) -> tuple[Path, dict[str, object]]:
    """A folder holding the earlier results (``out``; with a run id, the runs of two nights, the second being
    the night the killed run writes again) and the answers of an uninterrupted run of that night."""
    key = (engine, run_id)
    if key not in _EARLIER:
        folder = tmp_path_factory.mktemp(f"earlier-{engine}-{'runs' if run_id else 'output'}")
        for night in ((EARLIER, run_id) if run_id else (None,)):
            _run(folder / "out", engine, night, spark)
        destination = folder / "out" / (f"run_id={run_id}" if run_id else "")
        _EARLIER[key] = folder, _answers(destination)
    return _EARLIER[key]


def _killed_and_rerun(tmp_path, tmp_path_factory, engine: str, run_id: str | None, name: str, point: str,
                      spark=None) -> None:
    """The command line killed with SIGKILL after ``point`` in its own process, then the next run of the same
    command (:func:`_run`)."""
    template, expected = _earlier(tmp_path_factory, engine, run_id, spark)
    shutil.copytree(template, tmp_path, dirs_exist_ok=True)
    out = tmp_path / "out"
    destination = out / f"run_id={run_id}" if run_id else out
    before = _tree(out)
    others = {path: data for path, data in before.items()  # the other night's run and the root's marker
              if run_id and not path.startswith(f"run_id={run_id}/") and path != "_LATEST.json"}

    killed = _cli(out, engine, run_id, point)
    assert killed.returncode == -signal.SIGKILL, f"{point} did not kill the run: {killed.stderr[-3000:]}"
    assert _marked(out) == []  # nothing the killed command line started outlives it (on Spark: its JVM)
    if name in BEFORE_SWITCH:
        assert _tree(destination) == _tree(template / destination.relative_to(tmp_path))

    _run(out, engine, run_id, spark)
    _assert_same_answers(_answers(destination), expected)
    assert owned_kind(LocalFiles(), str(destination)) == RESULT
    after = _tree(out)
    assert {path: after.get(path) for path in others} == others
    assert _leftovers(tmp_path) == []
    if run_id is not None:
        assert read_latest(str(out))["run_id"] == run_id


def _cases(everything: bool) -> list:
    return [pytest.param(run_id, name, point, id=f"{'run-id' if run_id else 'output'}-{name}")
            for run_id in (None, NIGHT) for name, point in _kill_points(run_id, everything).items()]


@pytest.mark.slow
@pytest.mark.parametrize("run_id, name, point", _cases(everything=True))
def test_a_local_run_killed_after_each_step_is_finished_by_the_next_run(tmp_path, tmp_path_factory, run_id, name,
                                                                        point):
    _killed_and_rerun(tmp_path, tmp_path_factory, "local", run_id, name, point)


#: the Spark kill points of a plain ``--output`` run in every suite: the last step before the switch (the
#: staging that Spark's writer filled is complete) and the last step after it (the old result deleted)
SPARK_EVERY_SUITE = ("staged-complete", "old-deleted")


def _spark_cases() -> list:
    """The Spark engine's kill points.  Every suite kills a plain ``--output`` run at :data:`SPARK_EVERY_SUITE`;
    the commit's other steps and those of a run root are the same code on both engines (the local engine's
    cases kill every one of them in every suite), and each Spark case starts a Spark application (the killed
    command line), so they are in the full tier (``CROWDSPARK_FULL_SUITE=1``, or ``CROWDSPARK_KILL_MATRIX=full``)."""
    every_time = os.environ.get("CROWDSPARK_KILL_MATRIX") == "full"
    return [case if every_time or (case.values[0] is None and case.values[1] in SPARK_EVERY_SUITE)
            else pytest.param(*case.values, id=case.id, marks=pytest.mark.full)
            for case in _cases(everything=False)]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("run_id, name, point", _spark_cases())
def test_a_spark_run_killed_after_each_step_is_finished_by_the_next_run(spark, tmp_path, tmp_path_factory, run_id,
                                                                        name, point):
    _killed_and_rerun(tmp_path, tmp_path_factory, "spark", run_id, name, point, spark)
