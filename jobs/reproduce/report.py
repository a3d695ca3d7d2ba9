"""Writing a reproduction: the report directory and the generated block of a markdown document.

The report directory holds ``report.md``, ``results.json`` and the PNG figures and is replaced atomically;
the generated block (in README.md, docs/reproduce.md) lies between :data:`BEGIN_MARK` and :data:`END_MARK`.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from crowdspark.errors import ConfigError
from crowdspark.io.marker import REPORT
from crowdspark.io.sink import StagedOutput
from jobs.reproduce.aggregates import aggregate_records
from jobs.reproduce.claims import check_claims
from jobs.reproduce.figures import write_figures
from jobs.reproduce.paper import (
    PAPER_DATASET_OF,
    PAPER_DATASETS,
    PAPER_LEVEL_ERROR,
    PAPER_TABLE2,
    PAPER_TABLE3,
)
from jobs.reproduce.runs import Results
from jobs.reproduce.tables import render_report, summary_markdown

__all__ = ["BEGIN_MARK", "END_MARK", "results_document", "write_report", "splice_generated", "update_doc"]

BEGIN_MARK = "<!-- BEGIN reproduce_paper generated: do not edit by hand -->"
END_MARK = "<!-- END reproduce_paper generated -->"

#: the keys of ``results.json``, in order
RESULTS_KEYS = ("config", "started", "seconds", "meta", "datasets", "methods", "aggregates", "claims", "paper",
                "worker_accuracy", "records")


def results_document(results: Results) -> dict[str, Any]:
    """The content of ``results.json``: what was measured, its aggregates, the claims and the paper's numbers."""
    derived = {
        "aggregates": aggregate_records(results.records),
        "claims": [asdict(c) for c in check_claims(results)],
        "paper": {
            "table1": PAPER_DATASETS, "table2": PAPER_TABLE2, "table3": PAPER_TABLE3,
            "level_error": PAPER_LEVEL_ERROR, "dataset_names": PAPER_DATASET_OF,
        },
    }
    document = {**results.to_dict(), **derived}
    return {key: document[key] for key in RESULTS_KEYS}


def write_report(results: Results, output_dir: str | Path, command: str = "") -> Path:
    """Write ``report.md``, ``results.json`` and the PNG figures to ``output_dir`` (replaced atomically).

    Returns
    -------
    Path
        The report directory.
    """
    with StagedOutput(str(output_dir), kind=REPORT) as staged:
        out = Path(staged.staging)
        figures = write_figures(results, out)
        (out / "report.md").write_text(render_report(results, figures, command), encoding="utf-8")
        staged.write_json("results.json", results_document(results))
        staged.commit()
    return Path(output_dir)


def splice_generated(document: str, generated: str) -> str:
    """Replace the text between :data:`BEGIN_MARK` and :data:`END_MARK` of ``document`` with ``generated``.

    Raises
    ------
    ConfigError
        The document lacks one of the markers.
    """
    start, end = document.find(BEGIN_MARK), document.find(END_MARK)
    if start < 0 or end < start:
        raise ConfigError(f"document must contain the lines {BEGIN_MARK!r} and {END_MARK!r}, in that order")
    return document[: start + len(BEGIN_MARK)] + "\n" + generated.strip() + "\n" + document[end:]


def update_doc(path: str | Path, results: Results) -> None:
    """Replace the generated block of the markdown file ``path`` with the run's summary.

    Raises
    ------
    ConfigError
        The file lacks the markers (it is left unchanged).
    OSError
        The file cannot be read or written.
    """
    doc = Path(path)
    doc.write_text(splice_generated(doc.read_text(encoding="utf-8"), summary_markdown(results)), encoding="utf-8")
