"""A crowd-kit notebook runs on crowdspark with only its imports changed, and gives crowd-kit's labels.

``tests/notebooks/crowdkit_catalogue.py`` calls every aggregator of crowd-kit's categorical catalogue
(``fit_predict``, ``fit_predict_proba`` where crowd-kit has it, ``fit_predict_score``), their fitted
attributes, ``true_labels`` and ``initial_error``, and the four metric functions, on the 12 bundled crowds.  It
runs three times, in subprocesses: as it is (crowd-kit 1.4.2), with its import lines replaced by ``from
crowdspark.api import ...`` (:func:`crowdspark_text`, nothing else changed), and so again with crowd-kit's tie
rule and estimates (:data:`MATCHED`: the models' ``crowd-kit`` preset, given through the notebook's
``NOTEBOOK_PARAMS``; ``DawidSkene`` takes crowd-kit's stopping rule and M-step by default,
:data:`crowdspark.faces.CROWDKIT_DEFAULTS`).  Agreement is the share of the items untied in both posteriors
on which the labels are equal (docs/catalogue.md, "A crowd-kit notebook").

The default tier runs it on one small crowd, bluebird (binary, so every class of the catalogue runs, KOS
included: about 17 s of crowd-kit); set ``CROWDSPARK_NOTEBOOK_CROWDS=all`` (or a comma-separated list of
crowds) for the 12 bundled crowds, about 20 minutes of crowd-kit on 2 cores (`bash scripts/test.sh --full`).  Print the table of agreement: ``python -m tests.test_notebook_catalogue``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.helpers import DATA

pytest.importorskip("crowdkit.aggregation", reason="crowd-kit is not installed (pip install -e '.[test]')")

NOTEBOOK = Path(__file__).parent / "notebooks" / "crowdkit_catalogue.py"
ROOT = Path(__file__).resolve().parents[1]
#: crowdspark's parameters matched to crowd-kit's tie rule and estimates (crowd-kit takes none of these)
MATCHED = {
    "OneCoinDawidSkene": {"preset": "crowd-kit"},
    "Wawa": {"preset": "crowd-kit"},
    "ZeroBasedSkill": {"preset": "crowd-kit"},
    "GLAD": {"preset": "crowd-kit"},
    "MACE": {"preset": "crowd-kit"},
    "MMSR": {"preset": "crowd-kit"},
    "GoldMajorityVote": {"preset": "crowd-kit"},
}
#: the least agreement on untied items with matched parameters, by class (the others are measured only)
TARGETS = {"DawidSkene": 1.0, "OneCoinDawidSkene": 1.0, "MajorityVote": 1.0, "Wawa": 1.0, "ZeroBasedSkill": 1.0,
           "KOS": 1.0, "GLAD": 0.995}
MODELS = ("MajorityVote", "Wawa", "ZeroBasedSkill", "DawidSkene", "OneCoinDawidSkene", "GLAD", "MACE", "KOS", "MMSR",
          "GoldMajorityVote")
_TIED = 1e-9


def crowds() -> list[str]:
    """The crowds the notebook runs on: ``CROWDSPARK_NOTEBOOK_CROWDS`` (``all``, or names), else bluebird."""
    chosen = os.environ.get("CROWDSPARK_NOTEBOOK_CROWDS", "bluebird")
    if chosen == "all":
        return sorted(p.name for p in DATA.iterdir() if (p / "labels.csv").exists())
    return [name.strip() for name in chosen.split(",") if name.strip()]


def crowdspark_text(text: str) -> str:
    """The notebook with each crowd-kit import line importing the same names from crowdspark.api."""
    return re.sub(r"^from crowdkit\.[\w.]+ import", "from crowdspark.api import", text, flags=re.M)


def start(script: Path, output: Path, params: dict | None = None) -> subprocess.Popen:
    env = {**os.environ, "NOTEBOOK_PARAMS": json.dumps(params or {}),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, str(script), str(DATA), str(output), *crowds()], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_all(directory: Path) -> dict[str, dict]:
    """The notebook's results by run: ``crowd-kit``, ``crowdspark`` (imports changed), ``matched``."""
    ours = directory / "crowdspark_catalogue.py"
    ours.write_text(crowdspark_text(NOTEBOOK.read_text()))
    runs = {"crowd-kit": start(NOTEBOOK, directory / "crowd-kit.pkl"),
            "crowdspark": start(ours, directory / "crowdspark.pkl"),
            "matched": start(ours, directory / "matched.pkl", MATCHED)}
    results = {}
    for name, process in runs.items():
        _, err = process.communicate()
        assert process.returncode == 0, f"the {name} notebook failed:\n{err[-3000:]}"
        results[name] = pd.read_pickle(directory / f"{name}.pkl")
    return results


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_all(tmp_path_factory.mktemp("notebook"))


def posterior(entry: dict) -> pd.DataFrame | None:
    for value in (entry.get("posterior"), entry.get("result"), entry.get("scores_")):
        if isinstance(value, pd.DataFrame):
            return value
    return None


def untied(probas: pd.DataFrame | None, index: pd.Index) -> np.ndarray:
    if probas is None:
        return np.ones(len(index), dtype=bool)
    top = np.sort(probas.rename(columns=str).loc[index].to_numpy(dtype=float), axis=1)
    return top[:, -1] - top[:, -2] > _TIED


def agreement(theirs: dict, ours: dict, given: pd.Index | None = None) -> tuple[float, int]:
    """Share of the items untied in both posteriors on which the labels agree, and their number; without the
    items of ``given`` (true labels, which crowdspark holds fixed and crowd-kit's GoldMajorityVote votes on)."""
    index = theirs["labels_"].index.difference(given if given is not None else [])
    both = untied(posterior(theirs), index) & untied(posterior(ours), index)
    same = theirs["labels_"].loc[index][both].to_numpy() == ours["labels_"].loc[index][both].to_numpy()
    return float(same.mean()), int(both.sum())


def table(theirs: dict, ours: dict) -> pd.DataFrame:
    """Agreement by crowd (rows) and class (columns); NaN where the notebook does not run the class."""
    rows = {}
    for crowd in theirs:
        models = theirs[crowd]["models"]
        given = theirs[crowd]["true_labels"].index
        rows[crowd] = {name: agreement(models[name], ours[crowd]["models"][name],
                                       given if name == "GoldMajorityVote" else None)[0]
                       for name in MODELS if name in models}
    return pd.DataFrame(rows).T.reindex(columns=list(MODELS))


@pytest.mark.slow
def test_the_notebook_runs_with_crowdsparks_imports_and_gives_crowd_kits_results(results):
    theirs, ours = results["crowd-kit"], results["crowdspark"]
    assert sorted(ours) == sorted(theirs) == sorted(crowds())
    for crowd in theirs:
        assert set(ours[crowd]["models"]) == set(theirs[crowd]["models"]), crowd
        for call, entry in theirs[crowd]["models"].items():
            for key, value in entry.items():
                if key != "posterior" or value is not None:
                    assert type(ours[crowd]["models"][call][key]) is type(value), (crowd, call, key)
        for key, value in theirs[crowd]["metrics"].items():
            mine = ours[crowd]["metrics"][key]
            assert isinstance(mine, float) if isinstance(value, float) else type(mine) is type(value), (crowd, key)
        assert ours[crowd]["metrics"]["alpha"] == pytest.approx(theirs[crowd]["metrics"]["alpha"], abs=1e-9)
        assert ours[crowd]["metrics"]["uncertainty"] == pytest.approx(theirs[crowd]["metrics"]["uncertainty"],
                                                                      abs=1e-9)
        assert ours[crowd]["metrics"]["consistency"] == pytest.approx(theirs[crowd]["metrics"]["consistency"],
                                                                      abs=1e-9)
    # every model the notebook ran has a measured agreement: the same tasks, untied items to compare
    ran = sum(name in theirs[crowd]["models"] for crowd in theirs for name in MODELS)
    assert int(table(theirs, ours).notna().sum().sum()) == ran


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_with_crowd_kits_tie_rule_the_labels_are_crowd_kits_on_untied_items(results, name):
    agreements = table(results["crowd-kit"], results["matched"])[name].dropna()
    ran = sum(name in results["crowd-kit"][crowd]["models"] for crowd in results["crowd-kit"])
    assert ran >= 1 and len(agreements) == ran
    assert agreements.min() >= TARGETS[name], agreements.to_dict()


def main() -> None:
    """Run the three notebooks and print the agreement tables (markdown)."""
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        results = run_all(Path(directory))
    for run in ("crowdspark", "matched"):
        print(f"\n{run}: agreement with crowd-kit on untied items\n")
        frame = table(results["crowd-kit"], results[run])
        print("| crowd | " + " | ".join(frame.columns) + " |")
        print("|---" * (len(frame.columns) + 1) + "|")
        for crowd, row in frame.iterrows():
            print(f"| {crowd} | " + " | ".join("" if np.isnan(v) else f"{v:.2%}" for v in row) + " |")


if __name__ == "__main__":
    main()
