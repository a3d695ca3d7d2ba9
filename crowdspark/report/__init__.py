"""The run report: ``crowdspark report RUN_DIR`` and ``crowdspark aggregate --report``.

One self-contained HTML page (inline CSS and SVG, no script, no network) that draws what a run directory
holds and says what it lacks (``docs/report.md``).  The page says in its head that crowdspark wrote it
(:func:`generator_meta`); :func:`write_report` replaces only such a page, writes into a result only its
``report.html`` (and adds it to the result's listing, :func:`crowdspark.io.marker.add_written_file`), and
writes through a ``_crowdspark-`` temporary name that a failure removes.
"""

from __future__ import annotations

import os

from crowdspark.version import __version__
from crowdspark.errors import ConfigError
from crowdspark.io.paths import is_local, strip_file_scheme

__all__ = ["REPORT_FILE", "HISTORY_FILE", "generator_meta", "is_report_page", "build_report", "write_report",
           "check_report_target", "check_report_out", "build_history", "write_history"]

#: the page's name in a result directory (part of its layout: :mod:`crowdspark.io.marker`)
REPORT_FILE = "report.html"

#: the history page's name in a run root (``crowdspark report ROOT --history``, and each ``--run-id`` night
#: with ``--report``)
HISTORY_FILE = "history.html"


#: how the head of a page crowdspark wrote starts its generator mark
_GENERATOR = '<meta name="generator" content="crowdspark'


#: how pages written before the generator mark begin
_EARLIER_HEAD = ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
                 'content="width=device-width, initial-scale=1"><title>crowdspark run report: ')


def generator_meta() -> str:
    """The ``<meta name="generator">`` element that marks a report page as crowdspark's (in its head)."""
    return f'{_GENERATOR} {__version__}">'


def is_report_page(path: str) -> bool:
    """Whether the local file ``path`` is a crowdspark report page: its head, before the title, holds the
    generator mark, or it begins as the pages of earlier versions did."""
    with open(path, "rb") as handle:
        start = handle.read(4096).decode("utf-8", errors="replace")
    head = start.split("<title>", 1)[0]
    return start.startswith("<!DOCTYPE html>") and (_GENERATOR in head or start.startswith(_EARLIER_HEAD))


def check_report_target(output: str) -> None:
    """Refuse, before a run, an ``--output`` the report cannot be written beside.

    Raises
    ------
    ConfigError
    """
    if not is_local(output):
        raise ConfigError(f"--report writes the page into --output on the driver's disk, but --output is "
                          f"{output!r}; drop --report and run crowdspark report on a local copy of the result")


def build_report(run_dir: str, gold: str | None = None) -> str:
    """The report page of the run in ``run_dir`` (a result, or a run root: its latest run), as HTML text.

    Parameters
    ----------
    run_dir : str
        Local result directory.
    gold : str, optional
        Gold file to calibrate against instead of the run's own ``--gold``.

    Raises
    ------
    ConfigError
        When ``run_dir`` is not local.
    InputError
        When ``run_dir`` holds no run.
    """
    from crowdspark.report.facts import collect
    from crowdspark.report.page import render
    from crowdspark.report.tables import resolve_run_dir

    return render(collect(resolve_run_dir(run_dir), gold))


def check_report_out(target: str, flag: str) -> None:
    """Refuse, before the page is built, a ``target`` the report must not write: a path inside a crowdspark
    directory other than a result's own ``report.html``, or an existing file that is not a crowdspark report
    page (or not a file).  ``flag`` names where the path came from, for the messages.

    Raises
    ------
    ConfigError
    """
    from crowdspark.io.files import LocalFiles
    from crowdspark.io.marker import describe
    from crowdspark.io.sink import check_outside_owned

    check_outside_owned(target, flag, f"Write the report outside it, or to the result's own {REPORT_FILE} (the "
                                      "default without --out).", own_file=REPORT_FILE)
    if not os.path.lexists(target):
        return
    if os.path.islink(target) or not os.path.isfile(target) or not is_report_page(target):
        what = describe(LocalFiles(), target)
        raise ConfigError(f"{flag} {target!r} is {what} that is not a crowdspark report page (no {_GENERATOR} ...\"> "
                          "in its head): the report replaces only a page it wrote. Choose a new file name, or move "
                          "that one away")


def _replace_file(target: str, text: str) -> None:
    """Write ``text`` to ``target`` through ``_crowdspark-<pid>-<name>`` beside it (a name the deletion rule
    accepts in a result), renamed over ``target``; a failure removes it."""
    folder, name = os.path.split(target)
    temporary = os.path.join(folder, f"_crowdspark-{os.getpid()}-{name}")
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, target)
    except BaseException:
        if os.path.lexists(temporary):
            os.remove(temporary)
        raise


def _summary_stamp(run_dir: str) -> tuple[int, int]:
    """Which ``summary.json`` the run directory holds (inode, modification time): a commit replaces it."""
    stat = os.stat(os.path.join(run_dir, "summary.json"))
    return stat.st_ino, stat.st_mtime_ns


def write_report(run_dir: str, out: str | None = None, gold: str | None = None) -> str:
    """Write the report of ``run_dir`` to ``out`` (default: ``report.html`` in the run directory); returns the
    path written.

    The page is built first; a page that goes into a result is then written under the result's lock
    (:class:`crowdspark.io.lock.OutputLock`, the one a run writing the result holds), which adds it to the
    result's marker, after checking that the result is still the run the page was built from.

    Raises
    ------
    ConfigError
        When ``out`` is refused (:func:`check_report_out`), before the page is built; when a run holds the
        result's lock, or replaced the result while the page was built.
    """
    from crowdspark.io.files import LocalFiles
    from crowdspark.io.lock import OutputLock
    from crowdspark.io.marker import RESULT, add_written_file, enclosing_owned
    from crowdspark.report.tables import resolve_run_dir

    local = resolve_run_dir(run_dir)
    target = os.path.abspath(strip_file_scheme(out)) if out else os.path.join(local, REPORT_FILE)
    check_report_out(target, "--out" if out else "the report page")
    stamp = _summary_stamp(local)
    page = build_report(local, gold)
    owner = enclosing_owned(target)
    if owner is None or owner[1] != RESULT:
        _replace_file(target, page)
        return target
    files = LocalFiles()
    with OutputLock(files, owner[0]):
        if owner[0] == os.path.realpath(local) and (
                not os.path.exists(os.path.join(local, "summary.json")) or _summary_stamp(local) != stamp):
            raise ConfigError(f"the result {local!r} was replaced by another run while its report was built; run "
                              f"crowdspark report {local} again")
        add_written_file(files, owner[0], REPORT_FILE)
        _replace_file(target, page)
    return target


def _run_root(root: str) -> str:
    """The local run root ``root`` names.

    Raises
    ------
    ConfigError
        When it is not local, or not a directory carrying crowdspark's run-root marker.
    """
    from crowdspark.io.files import LocalFiles
    from crowdspark.io.marker import RUN_ROOT, read_marker

    if not is_local(root):
        raise ConfigError(f"the history page reads a local run root, but got {root!r}; copy the runs' summary.json, "
                          "workers/ and relabel/ to local disk and give that folder")
    local = strip_file_scheme(root).rstrip("/") or "/"
    marker = read_marker(LocalFiles(), local) if os.path.isdir(local) else None
    if marker is None or marker.get("kind") != RUN_ROOT:
        raise ConfigError(f"--history reads a folder of --run-id runs carrying crowdspark's run-root marker, but "
                          f"{root!r} is not one (a single result has no history; a folder of runs written by an "
                          "earlier version gets its marker at its next night)")
    return local


def build_history(root: str) -> str:
    """The history page of the run root ``root``, as HTML text (:mod:`crowdspark.report.history`).

    Raises
    ------
    ConfigError
        When ``root`` is not a local run root.
    """
    from crowdspark.report.history import collect_history
    from crowdspark.report.history_page import render_history

    local = _run_root(root)
    return render_history(collect_history(local))


def write_history(root: str, out: str | None = None) -> str:
    """Write the history page of the run root ``root`` to ``out`` (default: ``history.html`` in the root);
    returns the path written.

    Into the root, it is written under the root's lock (:class:`crowdspark.io.lock.OutputLock` of the root),
    replacing only a page crowdspark wrote, through a temporary name renamed over it.

    Raises
    ------
    ConfigError
        When ``root`` is not a local run root, or ``out`` (or the root's ``history.html``) is not a file the
        page may replace.
    """
    from crowdspark.io.files import LocalFiles
    from crowdspark.io.lock import OutputLock

    local = _run_root(root)
    default = os.path.join(local, HISTORY_FILE)
    target = os.path.abspath(strip_file_scheme(out)) if out else default
    inside = os.path.realpath(target) == os.path.realpath(default)
    if not inside:
        check_report_out(target, "--out")
    page = build_history(local)
    if not inside:
        _replace_file(target, page)
        return target
    with OutputLock(LocalFiles(), local):
        if os.path.lexists(target) and (os.path.islink(target) or not os.path.isfile(target)
                                        or not is_report_page(target)):
            raise ConfigError(f"{target!r} is not a page crowdspark wrote (no {_GENERATOR} ...\"> in its head): "
                              "the history page replaces only its own. Move that file away, or give --out FILE")
        _replace_file(target, page)
    return target
