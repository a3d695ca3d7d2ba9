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


def test_the_block_functions_spark_tasks_unpickle_import_neither_pandas_nor_the_run():
    """The executors' Python workers import :mod:`crowdspark.pipeline.tasks` to unpickle the evaluation and
    item-row functions: it must not pull in pandas, the configuration or every model (0.5-0.8 s per worker)."""
    import subprocess
    import sys

    code = ("import sys, crowdspark.pipeline.tasks; "
            "print(sorted(m for m in ('pandas', 'crowdspark.config', 'crowdspark.models.registry', "
            "'crowdspark.pipeline.fit') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
