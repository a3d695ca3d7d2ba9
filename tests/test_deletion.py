"""What a run deletes, and what it reads back from disk (docs/security.md: "The deletion rule",
"What is deserialized, and from where")."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crowdspark.cli import main
from crowdspark.config import load_config
from crowdspark.errors import ConfigError
from crowdspark.io.marker import MARKER, overlap, path_components
from crowdspark.pipeline import aggregate
from tests.helpers import DATA, frames_to_blocks
from tests.test_nightly import Killed, _kill_at

LABELS = str(DATA / "rte" / "labels.csv")
GOLD = str(DATA / "rte" / "truth.csv")
ROOT = Path(__file__).resolve().parents[1]


def run_cli(output, *extra, labels=LABELS):
    return main(["aggregate", "--labels", str(labels), "--engine", "local", "--algorithm", "mv",
                 "--output", str(output), *extra])


def marker(directory) -> dict:
    return json.loads((Path(directory) / MARKER).read_text())


def listing(directory) -> list[str]:
    return sorted(p.name for p in Path(directory).iterdir())


def tree(directory) -> dict[str, bytes | None]:
    """Everything below ``directory``: relative path -> content (``None`` for a folder)."""
    root = Path(directory)
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


def crowdspark(*args) -> subprocess.CompletedProcess:
    """The real command line, in its own process."""
    return subprocess.run([sys.executable, "-m", "crowdspark", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


RESULT_ENTRIES = [MARKER, "_model", "items", "relabel", "summary.json", "workers"]


def _quick_pages(monkeypatch, page: str | None = None) -> None:
    """Let ``crowdspark report`` write ``page`` (default: the head of a crowdspark page) instead of drawing one:
    these tests are about where pages go, not what they show."""
    from crowdspark import report

    text = page or '<!DOCTYPE html>\n<html><head><meta name="generator" content="crowdspark 0"><title>t</title></head></html>\n'
    monkeypatch.setattr(report, "build_report", lambda run_dir, gold=None: text)


# --------------------------------------------------------------------------- --output


def test_a_folder_of_the_user_at_output_is_refused_and_kept(tmp_path, capsys):
    user = tmp_path / "o" / "userdir"
    user.mkdir(parents=True)
    (user / "notes.txt").write_text("x\n")
    assert run_cli(user) == 2
    err = capsys.readouterr().err
    assert re.search(r"is a directory with 1 entry without crowdspark's marker \(notes.txt\).*nothing there is "
                     r"deleted. Choose a new or empty --output", err), err
    assert (user / "notes.txt").read_text() == "x\n"
    assert listing(user) == ["notes.txt"] and listing(tmp_path / "o") == ["userdir"]


def _lake(tmp_path) -> Path:
    lake = tmp_path / "lake"
    lake.mkdir()
    shutil.copy(LABELS, lake / "labels.csv")
    return lake


@pytest.mark.parametrize(
    "labels, output, message",
    [
        ("lake", "lake", r"is the labels path"),
        ("lake/labels.csv", "lake", r"contains the labels path"),
        ("lake", "lake/results", r"is inside the labels path"),
        ("lake/*.csv", "lake", r"contains the labels path"),
        ("lake/*", "lake/results", r"is inside the labels path"),
        ("lake", "link/results", r"is inside the labels path"),  # link -> lake: real paths are compared
    ],
)
def test_an_output_that_is_inside_or_contains_the_input_is_refused(tmp_path, capsys, labels, output, message):
    lake = _lake(tmp_path)
    (tmp_path / "link").symlink_to(lake)
    assert run_cli(tmp_path / output, labels=tmp_path / labels) == 2
    assert re.search(message + r".*Choose an --output outside", capsys.readouterr().err)
    assert listing(lake) == ["labels.csv"] and listing(tmp_path) == ["lake", "link"]


def test_an_output_containing_the_gold_or_the_checkpoint_dir_is_refused(tmp_path, capsys):
    (tmp_path / "gold").mkdir()
    shutil.copy(GOLD, tmp_path / "gold" / "truth.csv")
    assert run_cli(tmp_path / "gold", "--gold", str(tmp_path / "gold" / "truth.csv")) == 2
    assert "contains the gold path" in capsys.readouterr().err
    over = ["--set", f"engine.checkpoint_dir={tmp_path / 'out' / 'cp'}", "--set", "engine.checkpoint_every=5"]
    assert run_cli(tmp_path / "out", *over) == 2
    assert "contains the engine.checkpoint_dir path" in capsys.readouterr().err
    assert listing(tmp_path) == ["gold"] and listing(tmp_path / "gold") == ["truth.csv"]


def test_an_output_beside_the_input_files_is_fine(tmp_path):
    lake = _lake(tmp_path)
    assert run_cli(lake / "results", labels=lake / "labels.csv") == 0
    assert run_cli(tmp_path / "results", labels=tmp_path / "lake" / "*.csv") == 0


@pytest.mark.parametrize("engine, form", [
    ("local", "file:{}"), ("local", "file://{}"), ("local", "file://localhost{}"),  # Hadoop refuses the last
    pytest.param("spark", "file:{}", marks=pytest.mark.spark),
    pytest.param("spark", "file://{}", marks=pytest.mark.spark),
])
def test_every_local_uri_form_of_the_output_is_the_same_folder(tmp_path, monkeypatch, form, engine, request):
    from crowdspark.io.paths import strip_file_scheme

    out = tmp_path / "out"
    assert strip_file_scheme(form.format(out)) == str(out)
    monkeypatch.chdir(tmp_path)
    if engine == "spark":  # the tests' session (the command line would stop it)
        config = load_config(overrides=["engine.small_input_bytes=0"], engine_name="spark")
        aggregate(config, LABELS, form.format(out), spark=request.getfixturevalue("spark"))
    else:
        assert main(["aggregate", "--labels", LABELS, "--engine", engine, "--output", form.format(out)]) == 0
    assert marker(out)["kind"] == "result" and (out / "summary.json").is_file()
    assert listing(tmp_path) == ["out"]  # nothing written under the working folder ("file:/...")


def test_an_output_that_is_a_file_is_refused(tmp_path, capsys):
    target = tmp_path / "results.csv"
    target.write_text("keep me\n")
    assert run_cli(target) == 2
    assert "is a file, not a directory crowdspark can write" in capsys.readouterr().err
    assert target.read_text() == "keep me\n" and listing(tmp_path) == ["results.csv"]


def test_an_empty_folder_and_a_previous_result_are_replaced(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    assert run_cli(out) == 0
    assert marker(out)["kind"] == "result"
    assert listing(out) == [MARKER, "_model", "items", "relabel", "summary.json", "workers"]
    assert main(["aggregate", "--labels", LABELS, "--engine", "local", "--algorithm", "ds", "--output", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["algorithm"] == "ds"
    assert listing(tmp_path) == ["out"]


def test_results_of_earlier_versions_are_recognised_by_their_layout(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(out) == 0
    (out / MARKER).unlink()  # a result written before markers
    assert run_cli(out) == 0 and marker(out)["kind"] == "result"
    (out / MARKER).unlink()
    (out / "notes.txt").write_text("x")  # no longer exactly a result
    assert run_cli(out) == 2
    assert "without crowdspark's marker) holding 1 entry crowdspark does not write there (notes.txt)" in \
        capsys.readouterr().err and (out / "notes.txt").exists()
    (out / MARKER).write_text(json.dumps({"crowdspark": "marker", "kind": "result"}))
    assert run_cli(out) == 2  # marked, but with a file crowdspark did not write
    assert "a crowdspark result holding 1 entry crowdspark did not write (notes.txt)" in capsys.readouterr().err
    assert (out / "notes.txt").exists()


def _without_listing(result: Path, marked: bool) -> None:
    """Make ``result`` look written by an earlier version: a marker without a listing, or none."""
    document = marker(result)
    document.pop("written", None)
    (result / MARKER).write_text(json.dumps(document))
    if not marked:
        (result / MARKER).unlink()


@pytest.mark.parametrize("marked", [True, False], ids=["marker-without-listing", "unmarked"])
def test_an_earlier_versions_result_is_replaced_only_while_every_file_is_crowdsparks(tmp_path, capsys, monkeypatch,
                                                                                     marked):
    _quick_pages(monkeypatch)
    out = tmp_path / "out"
    assert run_cli(out) == 0
    assert main(["report", str(out)]) == 0
    _without_listing(out, marked)
    assert run_cli(out) == 0 and listing(out) == RESULT_ENTRIES  # part files, model files, report.html: its own
    _without_listing(out, marked)
    (out / "items" / "NOTES.txt").write_text("x\n")  # below a folder, where the layout of its names sees nothing
    (out / "_model" / "mine").mkdir()
    before = tree(out)
    assert run_cli(out) == 2
    assert "holding 2 entries crowdspark d" in capsys.readouterr().err
    assert tree(out) == before
    shutil.rmtree(out / "_model" / "mine")
    (out / "items" / "NOTES.txt").unlink()
    assert run_cli(out) == 0 and marker(out)["written"]


# --------------------------------------------------------------------------- what a run wrote


def test_files_a_user_added_inside_a_result_are_kept_and_the_run_refused(tmp_path):
    out = tmp_path / "r1"
    command = ["aggregate", "--labels", LABELS, "--engine", "local", "--algorithm", "mv", "--output", out]
    assert crowdspark(*command).returncode == 0
    (out / "items" / "NOTES.txt").write_text("x\n")
    (out / "_model" / "mine").mkdir()
    before = tree(out)
    run = crowdspark(*command)
    assert run.returncode == 2, run.stderr
    assert re.search(r"--output '.*r1' is a crowdspark result holding 2 entries crowdspark did not write "
                     r"\(_model/mine/, items/NOTES.txt\): .*nothing there is deleted. Choose a new or empty --output, or "
                     r"move those entries out of it", run.stderr), run.stderr
    assert tree(out) == before and listing(tmp_path) == ["r1"]


def test_the_marker_lists_what_the_run_wrote_and_a_message_counts_the_rest(tmp_path, capsys):
    out = tmp_path / "r1"
    assert run_cli(out) == 0
    written = marker(out)["written"]
    on_disk = sorted(str(p.relative_to(out)) + ("/" if p.is_dir() else "") for p in out.rglob("*") if p.name != MARKER)
    assert written == on_disk and "items/part-00000.parquet" in written and "summary.json" in written
    for n in range(7):
        (out / "workers" / f"mine-{n}.csv").write_text("x")
    assert run_cli(out) == 2
    assert re.search(r"holding 7 entries crowdspark did not write \(workers/mine-0.csv, workers/mine-1.csv, "
                     r"workers/mine-2.csv, workers/mine-3.csv, workers/mine-4.csv and 2 more\)", capsys.readouterr().err)
    assert len(list((out / "workers").glob("mine-*"))) == 7


@pytest.mark.spark
@pytest.mark.slow
def test_a_user_file_inside_a_spark_result_is_kept(spark, tmp_path):
    out = tmp_path / "r1"
    config = load_config(overrides=["engine.small_input_bytes=0"], algorithm="mv", engine_name="spark")
    aggregate(config, LABELS, str(out), spark=spark)
    parts = sorted(f"items/{p.name}" for p in (out / "items").glob("part-*"))
    (out / "items" / "NOTES.txt").write_text("x\n")
    with pytest.raises(ConfigError, match=r"is a crowdspark result holding 1 entry crowdspark did not write "
                                          r"\(items/NOTES.txt\)"):
        aggregate(config, LABELS, str(out), spark=spark)
    assert (out / "items" / "NOTES.txt").read_text() == "x\n"
    assert sorted(f"items/{p.name}" for p in (out / "items").glob("part-*")) == parts
    assert parts and set(parts) <= set(marker(out)["written"])  # Spark's part files, listed after writing
    (out / "items" / "NOTES.txt").unlink()
    aggregate(config, LABELS, str(out), spark=spark)  # what the run wrote is replaced
    assert listing(tmp_path) == ["r1"] and not (out / "items" / "NOTES.txt").exists()


@pytest.mark.parametrize("with_listing", [True, False], ids=["copied-marker", "copied-marker-of-an-earlier-version"])
def test_a_marker_copied_into_a_users_folder_does_not_make_it_replaceable(tmp_path, capsys, with_listing):
    assert run_cli(tmp_path / "r1") == 0
    user = tmp_path / "project"
    (user / "items").mkdir(parents=True)
    shutil.copy(LABELS, user / "items" / "labels.csv")
    (user / "summary.json").write_text('{"mine": true}\n')
    shutil.copy(tmp_path / "r1" / MARKER, user / MARKER)
    if not with_listing:
        _without_listing(user, marked=True)
    before = tree(user)
    assert run_cli(user) == 2
    assert re.search(r"--output '.*project' is a crowdspark result holding 1 entry crowdspark did not write "
                     r"\(items/labels.csv\)", capsys.readouterr().err)
    assert tree(user) == before


def test_crowdsparks_own_names_are_never_listed_and_always_accepted(tmp_path):
    from crowdspark.io.files import LocalFiles
    from crowdspark.io.marker import RESULT, owned_kind, write_marker, written_files

    files = LocalFiles()
    (tmp_path / "d" / "items").mkdir(parents=True)
    for name in ("items/part-0.parquet", "items/_SUCCESS", "items/.part-0.parquet.crc", "summary.json"):
        (tmp_path / "d" / name).write_text("x")
    (tmp_path / "d" / "link").symlink_to(tmp_path / "d" / "items")  # a link is an entry, not a folder to enter
    listed = written_files(files, str(tmp_path / "d"))
    assert listed == {"written": ["items/", "items/part-0.parquet", "link", "summary.json"]}
    write_marker(files, str(tmp_path / "d"), RESULT, **listed)
    for leftover in ("_crowdspark-12-report.html", "_CROWDSPARK.json.tmp-1", "items/_SUCCESS"):
        (tmp_path / "d" / leftover).write_text("")
    assert owned_kind(files, str(tmp_path / "d")) == RESULT
    (tmp_path / "d" / "items" / "part-0.parquet.bak").write_text("")
    assert owned_kind(files, str(tmp_path / "d")) is None


# --------------------------------------------------------------------------- crowdspark report --out


def test_report_out_replaces_only_a_report_page_and_writes_into_a_result_only_its_report(tmp_path, capsys):
    out = tmp_path / "r1"
    assert run_cli(out) == 0
    labels = tmp_path / "labels.csv"
    shutil.copy(LABELS, labels)
    before = tree(out)
    assert main(["report", str(out), "--out", str(labels)]) == 2
    assert re.search(r"--out '.*labels.csv' is a file that is not a crowdspark report page \(no <meta "
                     r"name=\"generator\" content=\"crowdspark ...\"> in its head\)", capsys.readouterr().err)
    assert labels.read_bytes() == Path(LABELS).read_bytes()
    for inside in ("summary.json", "page.html", "items/page.html"):
        assert main(["report", str(out), "--out", str(out / inside)]) == 2
        assert re.search(r"is inside the crowdspark result '.*r1'.*Write the report outside it, or to the result's "
                         r"own report.html", capsys.readouterr().err)
    assert tree(out) == before and listing(tmp_path) == ["labels.csv", "r1"]
    assert run_cli(out) == 0  # the run is intact and still replaceable


def test_a_report_into_the_result_is_listed_and_replaced_with_the_result(tmp_path, capsys, monkeypatch):
    out = tmp_path / "r1"
    assert run_cli(out) == 0
    assert main(["report", str(out)]) == 0  # a real page
    assert "report.html" in marker(out)["written"] and listing(out) == sorted(RESULT_ENTRIES + ["report.html"])
    _quick_pages(monkeypatch, (out / "report.html").read_text())
    assert main(["report", str(out), "--out", str(out / "report.html")]) == 0  # its own page, named
    page = tmp_path / "page.html"
    assert main(["report", str(out), "--out", str(page)]) == 0
    assert main(["report", str(out), "--out", str(page)]) == 0  # a crowdspark page is replaced
    mine = tmp_path / "mine.html"
    mine.write_text("<!DOCTYPE html>\n<html><head><title>crowdspark run report: mine</title></head></html>\n")
    assert main(["report", str(out), "--out", str(mine)]) == 2
    assert "is a file that is not a crowdspark report page" in capsys.readouterr().err
    assert run_cli(out) == 0 and listing(out) == RESULT_ENTRIES
    assert sorted(listing(tmp_path)) == ["mine.html", "page.html", "r1"]


def test_a_failed_report_leaves_nothing_that_stops_the_next_run(tmp_path, monkeypatch):
    _quick_pages(monkeypatch)
    out = tmp_path / "r1"
    assert run_cli(out) == 0

    def full_disk(source, target):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", full_disk)
        # a full disk: the same command can succeed later (docs/operations.md, "Exit codes")
        assert main(["report", str(out)]) == 75
        assert main(["report", str(out), "--out", str(tmp_path / "page.html")]) == 75
    assert listing(out) == RESULT_ENTRIES and listing(tmp_path) == ["r1"]
    (out / f"_crowdspark-{os.getpid()}-report.html").write_text("<!DOCTYPE html>")  # what a killed report leaves
    assert run_cli(out) == 0 and listing(out) == RESULT_ENTRIES


# --------------------------------------------------------------------------- crowdspark items --out


def test_items_out_never_replaces_a_result_a_run_root_or_a_users_folder(tmp_path, capsys):
    run = tmp_path / "r1"
    assert run_cli(run) == 0
    root = tmp_path / "runs"
    assert run_cli(root, "--run-id", "day1") == 0
    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("x")
    before = {folder: tree(folder) for folder in (run, root, user)}
    replaced = crowdspark("items", run, "--out", run)
    assert replaced.returncode == 2
    assert re.search(r"--out '.*r1' is a crowdspark result directory, not a previous crowdspark items-output",
                     replaced.stderr), replaced.stderr
    for target, message in [
        (root, r"is a crowdspark run-root directory, not a previous crowdspark items-output"),
        (user, r"is a directory with 1 entry without crowdspark's marker \(notes.txt\)"),
        (run / "table", r"is inside the crowdspark result '.*r1'.*Choose an --out outside it"),
        (root / "table", r"is inside the crowdspark run-root '.*runs'"),
    ]:
        assert main(["items", str(run), "--out", str(target)]) == 2
        assert re.search(message, capsys.readouterr().err)
    assert {folder: tree(folder) for folder in before} == before

    table = tmp_path / "table"
    for _ in range(2):  # its own folder is replaced
        assert main(["items", str(run), "--out", str(table)]) == 0
    assert marker(table)["kind"] == "items-output" and listing(table) == [MARKER, "items"]
    assert run_cli(table) == 2  # an items folder is not a result
    assert "is a crowdspark items-output directory, not a previous crowdspark result" in capsys.readouterr().err
    _without_listing(table, marked=True)  # written by an earlier version, marked as a result
    (table / MARKER).write_text((table / MARKER).read_text().replace("items-output", "result"))
    assert main(["items", str(run), "--out", str(table)]) == 0 and marker(table)["kind"] == "items-output"
    assert sorted(listing(tmp_path)) == ["r1", "runs", "table", "user"]


def test_run_roots_have_their_own_marker(tmp_path, capsys):
    root = tmp_path / "runs"
    assert run_cli(root, "--run-id", "day1") == 0
    assert marker(root)["kind"] == "run-root" and marker(root / "run_id=day1")["kind"] == "result"
    assert run_cli(root) == 2  # without --run-id the root would be replaced with every run in it
    assert "holds the runs written with --run-id" in capsys.readouterr().err
    assert run_cli(tmp_path / "runs" / "run_id=day1", "--run-id", "x") == 2  # a result is not a run root
    assert "is a crowdspark result written without --run-id" in capsys.readouterr().err
    (root / "run_id=day2").mkdir()
    (root / "run_id=day2" / "mine.txt").write_text("x")
    assert run_cli(root, "--run-id", "day2") == 2
    assert "run_id=day2" in capsys.readouterr().err and (root / "run_id=day2" / "mine.txt").exists()

    user = tmp_path / "project"
    user.mkdir()
    (user / "notes.txt").write_text("x")
    assert run_cli(user, "--run-id", "day1") == 2
    assert "with --run-id it must be a new or empty directory" in capsys.readouterr().err
    assert listing(user) == ["notes.txt"]

    (root / MARKER).unlink()  # a run root written before markers: runs and _LATEST.json only
    shutil.rmtree(root / "run_id=day2")
    assert run_cli(root, "--run-id", "day3") == 0
    assert marker(root)["kind"] == "run-root" and json.loads((root / "_LATEST.json").read_text())["run_id"] == "day3"


def test_staging_carries_the_marker_until_commit(tmp_path):
    from crowdspark.io.sink import StagedOutput

    out = StagedOutput(str(tmp_path / "out"))
    assert marker(out.staging)["kind"] == "staging" and marker(out.staging)["destination"] == str(tmp_path / "out")
    out.write_json("summary.json", {"algorithm": "x"})
    out.abort()
    assert listing(tmp_path) == []
    with StagedOutput(str(tmp_path / "report"), kind="report") as staged:
        staged.write_bytes("report.md", b"# r\n")
        staged.write_json("results.json", {})
        staged.commit()
    assert marker(tmp_path / "report")["kind"] == "report" and listing(tmp_path) == ["report"]


def test_a_report_of_an_earlier_version_is_replaced_a_user_folder_is_not(tmp_path):
    from crowdspark.io.sink import StagedOutput

    old = tmp_path / "report"
    old.mkdir()
    for name in ("report.md", "results.json", "figure1.png"):
        (old / name).write_text("{}")
    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("x")
    def write_report(target):
        with StagedOutput(str(target), kind="report") as staged:
            staged.write_bytes("report.md", b"new\n")
            staged.write_json("results.json", {})
            staged.commit()

    write_report(old)
    with pytest.raises(ConfigError, match=r"crowdspark replaces only an empty directory or a previous crowdspark report"):
        write_report(user)
    assert (old / "report.md").read_text() == "new\n" and listing(old) == [MARKER, "report.md", "results.json"]
    assert listing(tmp_path) == ["report", "user"] and listing(user) == ["notes.txt"]


def test_glob_overlap_compares_component_by_component(tmp_path):
    def relation(output, pattern):
        return overlap(path_components(str(tmp_path / output)), path_components(str(tmp_path / pattern)))

    assert relation("lake/day1", "lake/*/labels.csv") == "contains"
    assert relation("lake/day1/out", "lake/day*/labels.csv") is None
    assert relation("lake/day1/labels.csv", "lake/day*/labels.csv") == "inside"
    assert relation("lake", "lake/*/labels.csv") == "contains"
    assert relation("lake/x.parquet", "lake/*.csv") is None
    assert relation("other", "lake/**/labels.csv") is None
    assert relation("lake/a/b/c", "lake/**/labels.csv") == "inside"
    assert overlap(path_components("s3a://Bucket//lake/./x/"), path_components("S3A://Bucket/lake")) == "inside"
    assert overlap(path_components("hdfs://nn/lake"), path_components(str(tmp_path))) is None


@pytest.mark.spark
def test_output_checks_and_commits_through_hadoop_filesystems(spark, tmp_path, monkeypatch):
    """The Hadoop FileSystem branch (HDFS, S3A ... in production), run on file: URIs."""
    from crowdspark.io import files as files_module
    from crowdspark.io import marker as marker_module
    from crowdspark.io import sink as sink_module
    from crowdspark.io.sink import StagedOutput, check_output

    def remote(path):
        return "://" not in path and not path.startswith("file:")

    monkeypatch.setattr(files_module, "is_local", remote)
    monkeypatch.setattr(marker_module, "is_local", remote)
    monkeypatch.setattr(sink_module, "is_local", remote)
    user = tmp_path / "userdir"
    user.mkdir()
    (user / "notes.txt").write_text("x")
    with pytest.raises(ConfigError, match=r"--output 'file:.*userdir' is a directory with 1 entry without "
                                          r"crowdspark's marker \(notes.txt\)"):
        check_output(user.as_uri(), spark=spark)
    with pytest.raises(ConfigError, match=r"is inside the labels path"):
        check_output(user.as_uri() + "/out", inputs={"labels": user.as_uri()}, spark=spark)
    with pytest.raises(ConfigError, match=r"is not a local path: writing there needs the spark engine"):
        check_output(user.as_uri())
    out = (tmp_path / "out").as_uri()
    for algorithm in ("mv", "ds"):
        check_output(out, spark=spark)
        with StagedOutput(out, spark) as staged:
            staged.write_json("summary.json", {"algorithm": algorithm})
            for table in ("items", "workers"):
                staged.write_bytes(f"{table}/part-00000.parquet", b"")
            staged.commit()
    assert json.loads((tmp_path / "out" / "summary.json").read_text()) == {"algorithm": "ds"}
    assert marker(tmp_path / "out")["kind"] == "result"
    assert marker(tmp_path / "out")["written"] == [
        "items/", "items/part-00000.parquet", "summary.json", "workers/", "workers/part-00000.parquet"]
    (tmp_path / "out" / "workers" / "mine").mkdir()
    with pytest.raises(ConfigError, match=r"holding 1 entry crowdspark did not write \(workers/mine/\)"):
        check_output(out, spark=spark)
    (tmp_path / "out" / "workers" / "mine").rmdir()
    assert [n for n in listing(tmp_path) if not n.startswith(".")] == ["out", "userdir"]
    assert listing(user) == ["notes.txt"]


# --------------------------------------------------------------------------- checkpoints


def _checkpointed(tmp_path, directory, algorithm="ds", **over):
    chain = ["idbla.burn_in=6", "idbla.n_samples=8"] if algorithm == "idbla" else ["ds.tol=0", "ds.max_iter=12"]
    overrides = [*chain, f"engine.checkpoint_dir={directory}", "engine.checkpoint_every=5"]
    return load_config(overrides=overrides, algorithm=algorithm, engine_name="local", seed=1)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_checkpoint_dir_of_the_user_keeps_its_files(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("x")
    (project / "states-5").mkdir()  # a name the old format used
    aggregate(_checkpointed(tmp_path, project, "idbla"), LABELS, None)
    assert listing(project) == ["notes.txt", "states-5"]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_checkpoints_are_data_only_files(tmp_path, monkeypatch):
    from crowdspark.io.datatree import load_tree

    cp = tmp_path / "cp"
    config = _checkpointed(tmp_path, cp, "idbla")
    with monkeypatch.context() as patch:
        _kill_at(patch, 12)
        with pytest.raises(Killed):
            aggregate(config, LABELS, None)
    assert listing(cp) == [MARKER, "crowdspark-checkpoint-10", "crowdspark-checkpoint.json"]
    assert marker(cp)["kind"] == "checkpoint-dir" and marker(cp / "crowdspark-checkpoint-10")["kind"] == "checkpoint"
    pointer = json.loads((cp / "crowdspark-checkpoint.json").read_text())
    assert pointer["sweep"] == 10 and pointer["fingerprint"]["algorithm"] == "idbla"
    for name in ("driver.npz", "states/states.npz"):
        with np.load(cp / "crowdspark-checkpoint-10" / name, allow_pickle=False) as archive:
            assert all(archive[key].dtype != object for key in archive.files)
    driver = load_tree(str(cp / "crowdspark-checkpoint-10" / "driver.npz"))
    assert set(driver) == {"params", "init_stats", "counts", "history"} and len(driver["history"]) == 10
    assert aggregate(config, LABELS, None).summary["resumed_from_iteration"] == 10
    assert not cp.exists()  # created by crowdspark, empty after the fit


class _WritesAFileWhenUnpickled:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def test_an_old_pickle_checkpoint_is_refused_and_never_unpickled(tmp_path, capsys):
    cp = tmp_path / "cp"
    cp.mkdir()
    sentinel = tmp_path / "ran-code"
    (cp / "driver.pkl").write_bytes(pickle.dumps(_WritesAFileWhenUnpickled(sentinel)))
    with pytest.raises(ConfigError, match=r"driver.pkl' is a checkpoint written by an older version of crowdspark, "
                                          r"as a pickle; this version never loads pickles.*Delete it"):
        aggregate(_checkpointed(tmp_path, cp), LABELS, None)
    over = ["--set", f"engine.checkpoint_dir={cp}", "--set", "engine.checkpoint_every=5"]
    assert run_cli(tmp_path / "out", *over) == 2
    assert "older version of crowdspark" in capsys.readouterr().err
    assert not sentinel.exists() and listing(cp) == ["driver.pkl"]


def test_a_damaged_checkpoint_pointer_is_refused(tmp_path):
    cp = tmp_path / "cp"
    cp.mkdir()
    (cp / "crowdspark-checkpoint.json").write_text(json.dumps({"kind": "checkpoint", "format": 2, "sweep": "../x"}))
    with pytest.raises(ConfigError, match=r"is not a readable crowdspark checkpoint \(sweep '../x' is not a sweep"):
        aggregate(_checkpointed(tmp_path, cp), LABELS, None)


def _stateful_states(engine_factory, blocks):
    """An IDBLA model's per-block states after its initialization, on an engine built by ``engine_factory``."""
    from functools import partial

    from crowdspark.engine.loop import _init
    from crowdspark.models.registry import build_model

    model = build_model("idbla", {"burn_in": 2, "n_samples": 2}, 164, 2, 0)
    engine = engine_factory(blocks)
    engine.map_reduce(partial(_init, model), None, stateful=True)
    return engine


def _states_by_key(engine) -> dict:
    if engine.name == "local":
        return {str(b.item_ids[0]): s for b, s in zip(engine.blocks, engine.states)}
    from crowdspark.engine.spark.engine import _keyed_state

    return dict(engine._current.map(_keyed_state).collect())


@pytest.mark.parametrize("engine_name", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_block_states_round_trip_on_both_engines(request, tmp_path, engine_name):
    from crowdspark.engine.local import LocalEngine

    blocks, _ = frames_to_blocks(pd.read_csv(LABELS, dtype=str), max_labels=1500)
    if engine_name == "local":
        factory = LocalEngine
    else:
        from crowdspark.engine.spark.engine import SparkEngine

        spark = request.getfixturevalue("spark")

        def factory(blocks):
            return SparkEngine(spark.sparkContext.parallelize(blocks, 3), resident_blocks="off")

    saved = _stateful_states(factory, blocks)
    fresh = factory(blocks)
    try:
        saved.save_states(str(tmp_path / "states"))
        fresh.load_states(str(tmp_path / "states"))
        before, after = _states_by_key(saved), _states_by_key(fresh)
    finally:
        saved.close()
        fresh.close()
    assert len(before) == len(blocks) > 1 and before.keys() == after.keys()
    for key, state in before.items():
        assert state.keys() == after[key].keys()
        for name, values in state.items():
            assert after[key][name].dtype == values.dtype
            np.testing.assert_array_equal(after[key][name], values)
    files = [p for p in (tmp_path / "states").rglob("*") if p.is_file() and not p.name.startswith((".", "_"))]
    assert files and all(p.suffix in (".npz", ".parquet") for p in files)


# --------------------------------------------------------------------------- spill folders


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _fake_spill(root: Path, name: str, **fields) -> Path:
    folder = root / f"crowdspark-blocks-{name}"
    folder.mkdir()
    (folder / "x.block.npz").write_bytes(b"")
    if fields:
        (folder / MARKER).write_text(json.dumps({"crowdspark": "marker", "kind": "spill", **fields}))
    return folder


@pytest.mark.spark
def test_spill_folders_are_private_marked_removed_and_stale_ones_cleaned(spark, tmp_path, monkeypatch):
    import tempfile

    from crowdspark.engine.spark.resident import read_block
    from crowdspark.engine.spark.engine import SparkEngine

    assert spark.sparkContext.getConf().get("spark.local.dir") is None  # spill folders go to gettempdir()
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    host = socket.gethostname()
    dead = _fake_spill(tmp_path, "dead", pid=_dead_pid(), host=host)
    alive = _fake_spill(tmp_path, "alive", pid=os.getpid(), host=host)
    elsewhere = _fake_spill(tmp_path, "elsewhere", pid=_dead_pid(), host=host + ".other")
    unmarked = _fake_spill(tmp_path, "unmarked")
    blocks, _ = frames_to_blocks(pd.read_csv(LABELS, dtype=str), max_labels=1500)
    engine = SparkEngine(spark.sparkContext.parallelize(blocks, 2), resident_blocks="on")
    try:
        assert engine.materialize() == len(blocks)
        spill_dir = Path(engine._spill_dir)
        assert not dead.exists() and alive.exists() and elsewhere.exists() and unmarked.exists()
        assert spill_dir.parent == tmp_path and stat.S_IMODE(spill_dir.stat().st_mode) == 0o700
        assert marker(spill_dir)["kind"] == "spill" and marker(spill_dir)["pid"] == os.getpid()
        spilled = sorted(spill_dir.glob("*.block.npz"))
        assert len(spilled) == len(blocks)
        by_first = {str(b.item_ids[0]): b for b in blocks}
        for path in spilled:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            with np.load(path, allow_pickle=False) as archive:  # data only
                assert "item_id_bytes" in archive.files
            block = read_block(str(path))
            original = by_first[str(block.item_ids[0])]
            assert block.item_ids.dtype == object and block.item_ids.tolist() == original.item_ids.tolist()
            for name in ("item_keys", "offsets", "item_of_label", "worker", "label", "truth"):
                np.testing.assert_array_equal(getattr(block, name), getattr(original, name))
            assert block.duplicate_pairs == original.duplicate_pairs
    finally:
        engine.close()
    assert not spill_dir.exists()


def test_an_executor_on_another_machine_marks_its_spill_folder_and_cleans_gone_ones(tmp_path):
    from crowdspark.engine.spark.resident import SPILL_PREFIX, spill

    host = socket.gethostname()
    dead = _fake_spill(tmp_path, "dead", pid=_dead_pid(), host=host)
    unmarked = _fake_spill(tmp_path, "unmarked")
    blocks, _ = frames_to_blocks(pd.read_csv(LABELS, dtype=str), max_labels=1500)
    directory = tmp_path / f"{SPILL_PREFIX}engine-driverhost"  # the driver made it on its own machine
    handles = [spill(str(directory), "engine", block) for block in blocks[:2]]
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert marker(directory)["kind"] == "spill"
    assert marker(directory)["pid"] == os.getppid() and marker(directory)["host"] == host
    assert not dead.exists() and unmarked.exists()
    assert sorted(directory.glob("*.block.npz")) == sorted(Path(h.path) for h in handles)


# --------------------------------------------------------------------------- synthetic data sets


@pytest.mark.spark
def test_generated_data_sets_replace_only_their_own_folders(spark, tmp_path):
    from crowdspark.synthetic import write_parquet

    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("x")
    with pytest.raises(ConfigError, match=r"--output '.*user' is a directory with 1 entry without crowdspark's"):
        write_parquet(spark, str(user), "ds", 100, 5, 2, 3, 0)
    with pytest.raises(ConfigError, match=r"--truth-output '.*user' is a directory"):
        write_parquet(spark, str(tmp_path / "gen"), "ds", 100, 5, 2, 3, 0, truth_path=str(user))
    assert listing(user) == ["notes.txt"] and not (tmp_path / "gen").exists()
    for seed in (0, 1):
        write_parquet(spark, str(tmp_path / "gen"), "ds", 100, 5, 2, 3, seed)
    assert marker(tmp_path / "gen")["kind"] == "synthetic-dataset"
    assert len(pd.read_parquet(tmp_path / "gen")) == 300


# --------------------------------------------------------------------------- no pickle from files


def test_nothing_in_crowdspark_unpickles_a_file():
    """``pickle.loads`` of in-memory bytes between Spark processes is fine; reading a pickle from a path is not."""
    pattern = re.compile(r"pickle\.load\(|pickleFile\(|saveAsPickleFile\(|allow_pickle=True")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "crowdspark").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []


@pytest.mark.spark
def test_the_pass_spills_into_the_engines_folder_and_a_refused_input_leaves_none(spark, tmp_path, monkeypatch):
    """On a local master the pass writes the blocks and the driver the remap files into the engine's marked
    folder, which the engine deletes when it closes; a prepare that fails on its input deletes the folder."""
    import tempfile

    from crowdspark.errors import InputError
    from crowdspark.pipeline.prepare import prepare_spark

    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    config = load_config(engine_name="spark", seed=1)
    frame = pd.read_csv(LABELS, dtype=str)
    prepared = prepare_spark(spark, config, spark.createDataFrame(frame))
    engine = prepared.engine
    try:
        spill_dir = Path(engine._spill_dir)
        assert engine.resident and spill_dir.parent == tmp_path and marker(spill_dir)["kind"] == "spill"
        spilled = list(spill_dir.glob("*.block.npz"))
        assert len(spilled) == engine.materialize() >= 1 and len(list(spill_dir.glob("*.remap.npz"))) >= 1
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in spill_dir.glob("*.npz"))
    finally:
        engine.close()
    assert not spill_dir.exists()
    frame.loc[3, "worker"] = None
    with pytest.raises(InputError, match="null"):
        prepare_spark(spark, config, spark.createDataFrame(frame))
    assert not list(tmp_path.glob("crowdspark-blocks-*"))
