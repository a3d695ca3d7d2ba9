"""The installed package holds the library only: applications (``jobs/``) are not part of it."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from crowdspark.cli import build_parser

PACKAGE = Path(__file__).resolve().parents[1] / "crowdspark"


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return names | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}


def test_no_library_module_imports_the_jobs():
    offenders = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                       if any(m == "jobs" or m.startswith("jobs.") for m in _imported_modules(p)))
    assert offenders == []


def test_the_paper_reproduction_is_not_in_the_library():
    assert importlib.util.find_spec("crowdspark.reproduce") is None


def test_the_command_line_has_no_reproduce_subcommand(capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["reproduce", "--quick"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'reproduce'" in capsys.readouterr().err
