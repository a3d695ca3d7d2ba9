"""What a reader does with an incomplete or foreign chain of runs, a damaged ``_LATEST.json`` and a run id that
cannot name a folder: each is refused with exit 2 before anything is read, written or created.

The nights are written once (three local nights of a small lake: a full refit, then two incremental nights) and
copied into each test.  The commands run as a user runs them, ``python -m crowdspark`` in a subprocess, in the
first case of each rule; its other cases call the same ``main`` in this process (a subprocess costs seconds).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys

import pytest

from crowdspark.config import load_config
from crowdspark.cli import main
from crowdspark.io.lock import LOCK_PREFIX
from crowdspark.io.files import OLD_PREFIX, STAGING_PREFIX
from crowdspark.lake import LakeSpec
from crowdspark.pipeline import aggregate
from tests.helpers import DATA, written_lake

SPEC = LakeSpec(days=4, items_per_day=40, labels_per_item=4, n_workers=8, n_classes=3, revisit=0.3, seed=5)
KEYS = ["input.date_column=date", "incremental.mode=on"]
NIGHTS = 3  # nights 0 (a full refit), 1 and 2 (incremental) are written; night 3 is "the next night"
NAME_MAX = 255  # bytes of a file name on Linux filesystems and HDFS (dfs.namenode.fs-limits.max-component-length)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """``(labels folder, run root)`` of the first three nights."""
    base = tmp_path_factory.mktemp("chain")
    labels, _, _ = written_lake(base, SPEC)
    config = load_config(overrides=KEYS, algorithm="ds", engine_name="local")
    for day in range(NIGHTS):
        aggregate(config, labels, str(base / "runs"), run_id=SPEC.date(day))
    return labels, base / "runs"


@pytest.fixture
def root(written, tmp_path):
    """A copy of the three nights: ``(labels folder, run root)``."""
    labels, runs = written
    shutil.copytree(runs, tmp_path / "runs", symlinks=True)
    return labels, tmp_path / "runs"


def cli(*args: str, real: bool = False) -> subprocess.CompletedProcess:
    """``crowdspark ARGS``: in a subprocess (``real``), else ``main(ARGS)`` with its output captured."""
    if real:
        return subprocess.run([sys.executable, "-m", "crowdspark", *args], capture_output=True, text=True,
                              timeout=600)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def next_night(labels, out, *extra: str, real: bool = False) -> subprocess.CompletedProcess:
    sets = [arg for key in KEYS for arg in ("--set", key)]
    return cli("aggregate", "--labels", labels, "--output", str(out), "--run-id", SPEC.date(NIGHTS), "--engine",
               "local", "--algorithm", "ds", *sets, *extra, real=real)


def run(out, day: int = NIGHTS - 1):
    return out / f"run_id={SPEC.date(day)}"


def refused(done: subprocess.CompletedProcess, *words: str, code: int = 2) -> str:
    """The one-paragraph message of a command that exited ``code`` (no traceback), checked to name ``words``."""
    assert done.returncode == code, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr and "Error:" not in done.stderr.replace("error:", "")
    for word in words:
        assert word in done.stderr, (word, done.stderr)
    return done.stderr


def tree(folder) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), folder) for d, dirs, files in os.walk(folder)
                  for f in files + dirs)


# ---- a run that holds only its night's items, without its chain ----------------------------------------------
@pytest.mark.slow
def test_a_night_without_its_chain_is_refused_by_items_and_by_the_next_night(root):
    labels, out = root
    (run(out) / "_incremental" / "chain.json").unlink()
    done = cli("items", str(out), real=True)
    refused(done, f"run_id={SPEC.date(2)}", "chain.json", "is missing", "--full-refit")
    assert done.stdout == ""  # no partial answer
    refused(next_night(labels, out, real=True), "chain.json", "is missing", "--full-refit")  # not an IndexError
    assert not run(out, NIGHTS).exists()
    assert next_night(labels, out, "--full-refit").returncode == 0  # the fix the message names works
    assert cli("items", str(out)).returncode == 0


@pytest.mark.parametrize("document", [
    {"runs": [5]},
    {"runs": "run_id=2026-11-01"},
    {"runs": None},
    ["run_id=2026-11-01"],
    {"runs": ["run_id=2026-11-01", "."]},
], ids=["integer", "string", "null", "list", "dot"])
def test_a_chain_that_is_not_a_list_of_run_names_is_refused(root, document):
    labels, out = root
    (run(out) / "_incremental" / "chain.json").write_text(json.dumps(document))
    refused(cli("items", str(out)), "chain.json", "is not a chain of runs", "--full-refit")
    refused(next_night(labels, out), "is not a chain of runs")
    assert not run(out, NIGHTS).exists()


def test_a_chain_that_does_not_reach_back_to_a_full_refit_is_refused(root):
    labels, out = root
    (run(out) / "_incremental" / "chain.json").write_text(json.dumps({"runs": [f"run_id={SPEC.date(1)}"]}))
    refused(cli("items", str(out)), "does not begin with a full refit", f"run_id={SPEC.date(1)}")
    refused(next_night(labels, out), "does not begin with a full refit")


def test_an_unreadable_summary_is_refused_rather_than_read_as_a_whole_run(root):
    labels, out = root
    (run(out) / "_incremental" / "chain.json").unlink()
    (run(out) / "summary.json").write_text("{")
    refused(cli("items", str(out)), "summary.json", "not a readable run summary")


# ---- foreign chains and pointers ---------------------------------------------------------------------------
@pytest.mark.parametrize("how", [pytest.param("absolute", marks=pytest.mark.slow), "dotdot", "symlink"])
def test_a_chain_naming_a_run_outside_the_root_is_refused(root, tmp_path, how):
    labels, out = root
    foreign = tmp_path / "foreign"
    shutil.copytree(out, foreign)
    first = f"run_id={SPEC.date(0)}"
    names = {"absolute": str(foreign / first), "dotdot": f"../foreign/{first}", "symlink": first}[how]
    if how == "symlink":  # the chain names a sibling, which is a link to another lake's run
        shutil.rmtree(out / first)
        os.symlink(foreign / first, out / first)
    chain = run(out) / "_incremental" / "chain.json"
    chain.write_text(json.dumps({"runs": [names, f"run_id={SPEC.date(1)}"]}))
    message = "resolve out of its folder" if how == "symlink" else "is not a chain of runs"
    real = how == "absolute"
    refused(cli("items", str(out), real=real), message)
    refused(next_night(labels, out, real=real), message)
    assert not run(out, NIGHTS).exists()


def test_a_night_is_refused_when_it_would_write_its_chain_outside_the_previous_runs_folder(root, tmp_path):
    labels, out = root
    other = tmp_path / "other"
    done = next_night(labels, other, "--warm-start", str(out))
    refused(done, "is not in the folder of the run this incremental night continues", "--full-refit")
    assert not other.exists()
    assert next_night(labels, other, "--warm-start", str(out), "--full-refit").returncode == 0
    assert not (run(other, NIGHTS) / "_incremental" / "chain.json").exists()


def elsewhere_run(out, tmp_path):
    """A result outside the run root: a copy of its latest run."""
    shutil.copytree(run(out), tmp_path / "elsewhere")
    return tree(tmp_path / "elsewhere")


@pytest.mark.parametrize("pointer", [
    pytest.param({"path": "../elsewhere"}, marks=pytest.mark.slow),
    {"path": "/tmp/elsewhere"},
    {"path": f"../elsewhere/run_id={SPEC.date(2)}"},
    {"run_id": 5},
    {"run_id": "../elsewhere", "path": "../elsewhere"},
    {"run_id": None},
    {"path": None},
    {"as_of": 20261103},
    "drop path",
], ids=["dotdot", "absolute", "dotdot-run", "integer-run-id", "run-id-path", "null-run-id", "null-path",
        "integer-as-of", "no-path"])
def test_a_latest_pointer_out_of_the_root_or_of_the_wrong_types_is_refused(root, tmp_path, pointer):
    labels, out = root
    before = elsewhere_run(out, tmp_path)
    latest = json.loads((out / "_LATEST.json").read_text())
    if pointer == "drop path":
        del latest["path"]
    else:
        latest.update(pointer)
    (out / "_LATEST.json").write_text(json.dumps(latest))
    real = pointer == {"path": "../elsewhere"}
    refused(cli("items", str(out), real=real), "_LATEST.json", "is not a crowdspark pointer")
    refused(cli("report", str(out), real=real), "_LATEST.json", "is not a crowdspark pointer")
    refused(next_night(labels, out, real=real), "_LATEST.json", "is not a crowdspark pointer")
    assert tree(tmp_path / "elsewhere") == before  # nothing written outside the root
    assert not run(out, NIGHTS).exists()


def test_a_latest_run_that_is_a_link_out_of_the_root_is_refused(root, tmp_path):
    labels, out = root
    before = elsewhere_run(out, tmp_path)
    os.symlink(tmp_path / "elsewhere", out / "run_id=linked")
    latest = json.loads((out / "_LATEST.json").read_text())
    latest.update(run_id="linked", path="run_id=linked")
    (out / "_LATEST.json").write_text(json.dumps(latest))
    for command in ("items", "report"):
        refused(cli(command, str(out)), "outside the folder of runs")
    refused(next_night(labels, out), "outside the folder of runs")
    assert tree(tmp_path / "elsewhere") == before


# ---- run ids -----------------------------------------------------------------------------------------------
LONGEST = NAME_MAX - max(len(STAGING_PREFIX) + 13, len(OLD_PREFIX) + 13, len(LOCK_PREFIX)) - len("run_id=")


@pytest.mark.parametrize("run_id, message", [
    pytest.param("x" * 300, "at most", marks=pytest.mark.slow),
    ("x" * (LONGEST + 1), "at most"),
    ("é" * (LONGEST // 2 + 1), "at most"),  # two bytes each
    (" ", "not blank"),
    ("", "not blank"),
    pytest.param("a\nb", "control characters", marks=pytest.mark.slow),
    ("a\tb", "control characters"),
    (" a", "spaces at either end"),
], ids=["300", "one-too-long", "bytes", "space", "empty", "newline", "tab", "leading-space"])
def test_a_run_id_that_cannot_name_a_folder_is_refused_before_anything_is_created(tmp_path, run_id, message):
    out = tmp_path / "out"
    done = cli("aggregate", "--labels", str(DATA / "bluebird" / "labels.csv"), "--output", str(out),
               "--run-id", run_id, "--engine", "local", "--algorithm", "mv", real=run_id in ("x" * 300, "a\nb"))
    refused(done, "--run-id must be", message)
    assert os.listdir(tmp_path) == []  # no empty folder, no lock


def test_the_longest_run_id_runs(tmp_path):
    run_id = "x" * LONGEST
    done = cli("aggregate", "--labels", str(DATA / "bluebird" / "labels.csv"), "--output", str(tmp_path / "out"),
               "--run-id", run_id, "--engine", "local", "--algorithm", "mv")
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "out" / f"run_id={run_id}" / "items").is_dir()


# ---- the previous run of a run without a run id --------------------------------------------------------------
@pytest.mark.slow
def test_no_new_data_names_a_previous_run_that_has_no_run_id(tmp_path):
    labels = str(DATA / "bluebird" / "labels.csv")
    first = tmp_path / "first"
    assert cli("aggregate", "--labels", labels, "--output", str(first), "--engine", "local",
               "--algorithm", "ds").returncode == 0
    done = cli("aggregate", "--labels", labels, "--output", str(tmp_path / "second"), "--engine", "local",
               "--algorithm", "ds", "--warm-start", str(first), "--set", "nightly.on_no_new_data=fail", real=True)
    message = refused(done, "no new data since the previous run", str(first))
    assert "None" not in message


# ---- retention -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["deleted", "integer"])
def test_retention_deletes_nothing_when_a_kept_runs_chain_cannot_be_read(root, damage):
    from crowdspark.io.chain import prune_runs

    _, out = root
    chain = run(out) / "_incremental" / "chain.json"
    if damage == "deleted":
        chain.unlink()
    else:
        chain.write_text(json.dumps({"runs": [5]}))
    assert prune_runs(str(out), 1) == []
    assert sorted(p.name for p in out.glob("run_id=*")) == [f"run_id={SPEC.date(d)}" for d in range(NIGHTS)]


# ---- a run taken out of the middle of a chain ------------------------------------------------------------------
@pytest.mark.parametrize("edit", [pytest.param("middle", marks=pytest.mark.slow), "last"])
def test_a_chain_with_a_run_taken_out_is_refused_by_items_and_by_the_next_night(root, edit):
    labels, out = root
    extra = 4  # a chain of four runs before the newest: the full refit and three incremental nights
    for day in range(NIGHTS, NIGHTS + extra - 1):
        assert cli("aggregate", "--labels", labels, "--output", str(out), "--run-id", SPEC.date(day), "--engine",
                   "local", "--algorithm", "ds", *[a for k in KEYS for a in ("--set", k)]).returncode == 0
    newest = run(out, NIGHTS + extra - 2)
    chain = newest / "_incremental" / "chain.json"
    names = json.loads(chain.read_text())["runs"]
    gone = names[2] if edit == "middle" else names[-1]
    chain.write_text(json.dumps({"runs": [name for name in names if name != gone]}))
    done = cli("items", str(out), real=edit == "middle")
    refused(done, "a run was taken out of the chain", gone, "--full-refit")
    assert done.stdout == ""
    after = SPEC.date(NIGHTS + extra - 1)
    done = cli("aggregate", "--labels", labels, "--output", str(out), "--run-id", after, "--engine", "local",
               "--algorithm", "ds", *[a for k in KEYS for a in ("--set", k)], real=edit == "middle")
    refused(done, "a run was taken out of the chain", "--full-refit")
    assert not (out / f"run_id={after}").exists()


# ---- items --out -----------------------------------------------------------------------------------------------
def test_items_out_is_refused_while_another_writer_holds_its_lock(root, tmp_path):
    from crowdspark.io.files import files_for
    from crowdspark.io.lock import OutputLock

    _, out = root
    target = tmp_path / "answer"
    with OutputLock(files_for(str(target)), str(target)):
        done = cli("items", str(out), "--out", str(target), real=True)
        refused(done, "another run is writing", code=75)  # a live writer: the same command can succeed later
    assert not target.exists()
    assert cli("items", str(out), "--out", str(target)).returncode == 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(LOCK_PREFIX)]
