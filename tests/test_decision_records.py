"""The decision records in docs/decisions/: their form, their index, and every reference to them.

Each record is ``NNNN-slug.md`` with ``# NNNN Title``, a ``- Status:`` line (``in force``, ``superseded by
NNNN`` or ``withdrawn``), an optional ``- Date: YYYY-MM-DD`` and the sections Context, Decision and
Consequences; ``docs/decisions/README.md`` lists every record once, in force or not; a path
``docs/decisions/NNNN-*.md`` cited anywhere in the repository, or a record named by its file name, exists.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RECORD_NAME = re.compile(r"^(\d{4})-[a-z0-9]+(?:-[a-z0-9]+)*\.md$")
STATUS = re.compile(r"^- Status: (in force|superseded by (\d{4})|withdrawn)$")
DATE = re.compile(r"^- Date: \d{4}-\d{2}-\d{2}$")
SECTIONS = ("## Context", "## Decision", "## Consequences")
IN_FORCE_TABLE = "## Records in force"
OTHER_TABLE = "## Superseded and withdrawn records"
INDEX_ROW = re.compile(r"^\| \[(\d{4})\]\(([^)]+)\) \|(.*)\|$")
#: a record named by its file name, with or without the folder (a date such as 2026-11-27 does not match)
CITED = re.compile(r"(?<![\w/.-])(?:docs/decisions/)?(\d{4}-[a-z][a-z0-9]*(?:-[a-z0-9]+)*\.md)")
SCANNED_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".ini", ".yml", ".yaml", ".sh", ".ipynb"}
SKIPPED_DIRS = {".git", ".venv", "data", "__pycache__", ".pytest_cache", "build", "dist", "node_modules"}


def record_problems(folder: Path) -> list[str]:
    """What is wrong with the record files of ``folder``: names, title, status, date and sections."""
    problems = []
    records = {}
    for path in sorted(folder.glob("[0-9]*.md")):
        match = RECORD_NAME.match(path.name)
        if not match:
            problems.append(f"{path.name}: a record is named NNNN-short-slug.md")
            continue
        number = match.group(1)
        if number in records:
            problems.append(f"{path.name}: number {number} is also {records[number].name}")
        records[number] = path
        lines = path.read_text(encoding="utf-8").split("\n")
        if not lines[0].startswith(f"# {number} ") or len(lines[0]) <= len(f"# {number} "):
            problems.append(f"{path.name}: the first line must be '# {number} Title', not {lines[0]!r}")
        header = lines[1 : lines.index(SECTIONS[0])] if SECTIONS[0] in lines else lines[1:]
        header_fields = [line for line in header if line.strip()]
        if not header_fields or not STATUS.match(header_fields[0]):
            problems.append(f"{path.name}: the line after the title must be '- Status: in force | superseded by "
                            f"NNNN | withdrawn', not {header_fields[:1]}")
        elif header_fields[0].endswith(f"superseded by {number}"):
            problems.append(f"{path.name}: a record cannot supersede itself")
        for extra in header_fields[1:]:
            if not DATE.match(extra):
                problems.append(f"{path.name}: between the status and '## Context' only '- Date: YYYY-MM-DD' may "
                                f"stand, not {extra!r}")
        positions = [lines.index(section) if section in lines else -1 for section in SECTIONS]
        if -1 in positions or positions != sorted(positions):
            problems.append(f"{path.name}: needs the sections {', '.join(SECTIONS)} in that order")
            continue
        bounds = positions + [len(lines)]
        for section, start, end in zip(SECTIONS, bounds, bounds[1:]):
            if not any(line.strip() for line in lines[start + 1 : end]):
                problems.append(f"{path.name}: '{section}' is empty")
    for number, path in records.items():
        status = status_of(path)
        if status.startswith("superseded by "):
            target = status.rsplit(" ", 1)[1]
            if target not in records:
                problems.append(f"{path.name}: superseded by {target}, which is no record")
    return problems


def status_of(path: Path) -> str:
    """The status of the record at ``path`` ('' when it has no status line)."""
    for line in path.read_text(encoding="utf-8").split("\n"):
        match = STATUS.match(line)
        if match:
            return match.group(1)
    return ""


def index_problems(folder: Path) -> list[str]:
    """What is wrong with the index of ``folder``/README.md: each record once, in the table of its status."""
    readme = folder / "README.md"
    if not readme.is_file():
        return [f"{readme} is missing"]
    problems = []
    table = None
    listed: dict[str, list[str]] = {}
    for line in readme.read_text(encoding="utf-8").split("\n"):
        if line.startswith("## "):
            table = line if line in (IN_FORCE_TABLE, OTHER_TABLE) else None
            continue
        match = INDEX_ROW.match(line)
        if not match or table is None:
            continue
        number, target, rest = match.groups()
        listed.setdefault(number, []).append(table)
        path = folder / target
        if not RECORD_NAME.match(target) or not target.startswith(number) or not path.is_file():
            problems.append(f"index row {number}: links {target}, which is not record {number}'s file")
            continue
        status = status_of(path)
        if table == IN_FORCE_TABLE and status != "in force":
            problems.append(f"index: {target} is '{status}' but listed under '{IN_FORCE_TABLE}'")
        if table == OTHER_TABLE:
            if status == "in force":
                problems.append(f"index: {target} is in force but listed under '{OTHER_TABLE}'")
            elif status.split(" ")[0] not in rest or (status.startswith("superseded") and status[-4:] not in rest):
                problems.append(f"index: the row of {target} does not give its status '{status}'")
    numbers = {RECORD_NAME.match(path.name).group(1) for path in folder.glob("[0-9]*.md")
               if RECORD_NAME.match(path.name)}
    for number in sorted(numbers - set(listed)):
        problems.append(f"index: record {number} is not listed")
    for number, tables in sorted(listed.items()):
        if len(tables) > 1:
            problems.append(f"index: record {number} is listed {len(tables)} times")
    return problems


def scanned_files(root: Path):
    """The repository's text files that may cite a record."""
    for path in root.rglob("*"):
        skipped = SKIPPED_DIRS & set(path.relative_to(root).parts[:-1]) or path == Path(__file__).resolve()
        if path.suffix in SCANNED_SUFFIXES and path.is_file() and not skipped:
            yield path


def citation_problems(root: Path, folder: Path) -> list[str]:
    """Every record named by its file name under ``root`` that does not exist in ``folder``."""
    existing = {path.name for path in folder.glob("[0-9]*.md")}
    problems = []
    for path in scanned_files(root):
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").split("\n"), 1):
            for name in CITED.findall(line):
                if name not in existing:
                    problems.append(f"{path.relative_to(root)}:{number}: cites {name}, which is no record")
    return problems


def test_every_record_has_its_headings_and_a_valid_status():
    folder = ROOT / "docs" / "decisions"
    assert list(folder.glob("[0-9]*.md")), "docs/decisions/ holds no record"
    assert record_problems(folder) == []


def test_the_index_lists_every_record_once_in_the_table_of_its_status():
    assert index_problems(ROOT / "docs" / "decisions") == []


def test_every_cited_record_exists():
    assert citation_problems(ROOT, ROOT / "docs" / "decisions") == []


def _record(folder: Path, name: str, status: str, sections=SECTIONS) -> None:
    number = name[:4]
    body = [f"# {number} A decision", "", f"- Status: {status}", "- Date: 2026-11-28", ""]
    for section in sections:
        body += [section, "", "Text.", ""]
    (folder / name).write_text("\n".join(body), encoding="utf-8")


def test_the_checks_find_what_is_wrong(tmp_path):
    """The three checks report a bad status, a missing section, a dangling supersession, an index row in the
    wrong table, an unlisted record and a citation of a missing record."""
    folder = tmp_path / "docs" / "decisions"
    folder.mkdir(parents=True)
    _record(folder, "0001-first.md", "superseded by 0002")
    _record(folder, "0002-second.md", "in force")
    _record(folder, "0003-third.md", "superseded by 0009")
    _record(folder, "0004-fourth.md", "in force", sections=SECTIONS[:2])
    _record(folder, "0005-fifth.md", "retired")
    (folder / "README.md").write_text(
        "\n".join([IN_FORCE_TABLE, "", "| [0001](0001-first.md) | First | engine |",
                   "| [0002](0002-second.md) | Second | engine |", "", OTHER_TABLE, "",
                   "| [0002](0002-second.md) | Second | engine | in force |", ""]),
        encoding="utf-8",
    )
    (tmp_path / "notes.md").write_text("See docs/decisions/0002-second.md and 0007-gone.md, 2026-11-28.md.\n")

    records = "\n".join(record_problems(folder))
    assert "0003-third.md: superseded by 0009, which is no record" in records
    assert "0004-fourth.md: needs the sections" in records
    assert "0005-fifth.md: the line after the title" in records
    assert "0001" not in records and "0002" not in records

    index = "\n".join(index_problems(folder))
    assert "0001-first.md is 'superseded by 0002' but listed under" in index
    assert "0002-second.md is in force but listed under" in index
    assert "record 0002 is listed 2 times" in index
    assert "record 0003 is not listed" in index

    citations = citation_problems(tmp_path, folder)
    assert citations == ["notes.md:1: cites 0007-gone.md, which is no record"]
