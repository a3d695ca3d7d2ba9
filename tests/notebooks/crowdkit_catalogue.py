"""A crowd-kit notebook: every aggregator of crowd-kit's categorical catalogue, its fitted attributes, true
labels and initial errors, and the four metric functions, on the crowds of a data directory.

Run as ``python crowdkit_catalogue.py <data dir> <output.pkl> [<crowd> ...]``.  Its import lines are
crowd-kit's; ``tests/test_notebook_catalogue.py`` runs it as it is and with them replaced by
``from crowdspark.api import ...`` (nothing else changed), and compares what it saves.  Its one hook: the
environment variable ``NOTEBOOK_PARAMS``, a JSON object of constructor keyword arguments by class name (empty
unless set; crowdspark's ``preset="crowd-kit"`` goes there).
"""

import json
import os
import sys
import time
import warnings
from pathlib import Path

import pandas as pd

from crowdkit.aggregation import DawidSkene, GLAD, GoldMajorityVote, KOS, MACE, MMSR, MajorityVote, OneCoinDawidSkene, Wawa, ZeroBasedSkill
from crowdkit.metrics.data import alpha_krippendorff, consistency, uncertainty
from crowdkit.metrics.workers import accuracy_on_aggregates

warnings.simplefilter("ignore")
PARAMS = json.loads(os.environ.get("NOTEBOOK_PARAMS", "{}"))
#: the fitted attributes crowd-kit 1.4.2 gives each class
ATTRIBUTES = {
    "MajorityVote": ("labels_", "probas_", "skills_"),
    "Wawa": ("labels_", "probas_", "skills_"),
    "ZeroBasedSkill": ("labels_", "probas_", "skills_"),
    "DawidSkene": ("labels_", "probas_", "priors_", "errors_", "loss_history_"),
    "OneCoinDawidSkene": ("labels_", "probas_", "priors_", "errors_", "skills_", "loss_history_"),
    "GLAD": ("labels_", "probas_", "alphas_", "betas_", "loss_history_"),
    "MACE": ("labels_", "probas_", "spamming_", "thetas_"),
    "KOS": ("labels_",),
    "MMSR": ("labels_", "skills_", "scores_", "loss_history_"),
    "GoldMajorityVote": ("labels_", "probas_", "skills_"),
}


def model(cls, *args, **kwargs):
    return cls(*args, **{**kwargs, **PARAMS.get(cls.__name__, {})})


def fitted(estimator):
    """The fitted attributes of ``estimator`` (each must be there)."""
    return {attr: getattr(estimator, attr) for attr in ATTRIBUTES[type(estimator).__name__]}


def notebook(data, gold):
    """Every call of the notebook on one crowd: results by class name, then the metrics."""
    true_labels = gold.iloc[::3]
    out, seconds = {}, {}

    def run(name, make, call):
        start = time.perf_counter()
        estimator = make()
        result = call(estimator)
        out[name] = {"result": result, **fitted(estimator),
                     "posterior": getattr(estimator, "probas_", getattr(estimator, "scores_", None))}
        seconds[name] = time.perf_counter() - start

    for cls in (MajorityVote, Wawa, ZeroBasedSkill, OneCoinDawidSkene, GLAD):
        run(cls.__name__, lambda: model(cls), lambda m: m.fit_predict_proba(data))
        assert (out[cls.__name__]["result"].idxmax(axis=1).index == out[cls.__name__]["labels_"].index).all()
    # MACE sums its counts in the order of the rows: the frame sorted by worker and label (docs/catalogue.md)
    run("MACE", lambda: model(MACE, n_restarts=1), lambda m: m.fit_predict_proba(data.sort_values(["worker", "label"], kind="stable")))
    run("DawidSkene", lambda: model(DawidSkene, 100), lambda m: m.fit_predict_proba(data))
    skills = out["Wawa"]["skills_"]
    out["MajorityVote.skills"] = {"result": model(MajorityVote).fit_predict(data, skills)}
    out["DawidSkene.true_labels"] = {"result": model(DawidSkene).fit_predict(data, true_labels)}
    errors = out["DawidSkene"]["errors_"]
    out["DawidSkene.initial_error"] = {
        "result": model(DawidSkene, initial_error_strategy="assign").fit_predict(data, initial_error=errors)}
    out["DawidSkene.addition"] = {
        "result": model(DawidSkene, initial_error_strategy="addition").fit_predict(data, true_labels, errors * 10)}
    # crowd-kit's GoldMajorityVote needs a skill for every worker: the labels of workers with a true label
    scored = data[data["worker"].isin(data.loc[data["task"].isin(true_labels.index), "worker"])]
    run("GoldMajorityVote", lambda: model(GoldMajorityVote), lambda m: m.fit_predict_proba(scored, true_labels))
    if data["label"].nunique() == 2:
        run("KOS", lambda: model(KOS), lambda m: m.fit_predict(data))
    if data["worker"].nunique() * data["task"].nunique() <= 10**6:  # crowd-kit's MMSR holds K x I floats
        run("MMSR", lambda: model(MMSR), lambda m: m.fit_predict(data))
        out["MMSR.score"] = {"result": model(MMSR).fit_predict_score(data)}
    start = time.perf_counter()
    metrics = {
        "alpha": alpha_krippendorff(data),
        "consistency": consistency(data),
        "consistency_by_task": consistency(data, skills, model(Wawa), by_task=True),
        "uncertainty": uncertainty(data),
        "uncertainty_by_worker": uncertainty(data, skills, compute_by="worker", aggregate=False),
        "uncertainty_wawa": uncertainty(data, aggregator=model(Wawa)),
        "accuracy": accuracy_on_aggregates(data),
        "accuracy_by_worker": accuracy_on_aggregates(data, aggregates=out["DawidSkene"]["labels_"], by="worker"),
    }
    seconds["metrics"] = time.perf_counter() - start
    return {"models": out, "metrics": metrics, "seconds": seconds, "true_labels": true_labels}


def main(argv):
    root, output, crowds = Path(argv[0]), Path(argv[1]), argv[2:]
    results = {}
    for name in crowds or sorted(p.name for p in root.iterdir() if (p / "labels.csv").exists()):
        data = pd.read_csv(root / name / "labels.csv").rename(columns={"item": "task"})
        gold = pd.read_csv(root / name / "truth.csv").set_index("item")["truth"]
        results[name] = notebook(data, gold)
        print(name, {k: round(v, 2) for k, v in results[name]["seconds"].items()}, flush=True)
    pd.to_pickle(results, output)


if __name__ == "__main__":
    main(sys.argv[1:])
