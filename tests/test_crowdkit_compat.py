"""Switching from crowd-kit is a changed import: one script, run with crowd-kit's import and with crowdspark's.

The script (:data:`SCRIPT`) is the same text for both libraries except its first line, the import. It reads
the bundled Bluebird set as a crowd-kit user would (``task``, ``worker``, ``label``, integer labels), gives the
methods that take them the true labels of a third of the gold, and returns every fitted attribute. For every
method both libraries have, the attributes crowd-kit has must exist in crowdspark's result with the same
shapes, names, index and column values and types. The labels are compared twice: with each library's defaults
(the script alone) they agree on at least 99% of the items untied in both posteriors; with crowdspark's
parameters matched to crowd-kit's (:data:`MATCHED`: crowd-kit's tie rule, one-coin without smoothing,
given to crowdspark's constructor only) they are equal on every such item.  Dawid-Skene takes crowd-kit's
stopping rule and M-step by default (:data:`crowdspark.faces.CROWDKIT_DEFAULTS`): its fitted values are
crowd-kit's.

crowd-kit 1.4.2's ``predict`` (Wawa, ZeroBasedSkill, MMSR, GoldMajorityVote) needs scikit-learn < 1.6, which
the ``test`` extra pins; without crowd-kit the test is skipped.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pandas as pd
import pytest

from crowdspark.errors import ConfigError, InputError
from tests.helpers import DATA

crowdkit = pytest.importorskip("crowdkit.aggregation", reason="crowd-kit is not installed (pip install -e '.[test]')")

#: the user's script; ``{module}`` is the only thing that changes
SCRIPT = """
from {module} import {name} as Method
import pandas as pd

data = pd.read_csv(DATA / "bluebird" / "labels.csv").rename(columns={{"item": "task"}})
if "{name}" in ROW_ORDER:
    data = data.sort_values(["worker", "label"], kind="stable")
gold = pd.read_csv(DATA / "bluebird" / "truth.csv").set_index("item")["truth"]
true_labels = gold.iloc[::3]
model = Method(**PARAMS)
if "{name}" in ("DawidSkene", "GoldMajorityVote"):
    labels = model.fit_predict(data, true_labels)
else:
    labels = model.fit_predict(data)
RESULT = {{attr: getattr(model, attr) for attr in ATTRIBUTES if getattr(model, attr, None) is not None}}
RESULT["true_labels"] = true_labels
"""

ATTRIBUTES = ("labels_", "probas_", "errors_", "skills_", "priors_", "alphas_", "betas_", "spamming_", "thetas_",
              "scores_")
#: crowd-kit 1.4.2's MACE sums its strategy counts by worker and label in sorted order and stores them by
#: order of first appearance, so its answer depends on the order of the rows; the script gives it the frame
#: sorted by worker and label, where the two orders agree (docs/catalogue.md, "mace")
ROW_ORDER = ("MACE",)
#: where crowd-kit names things otherwise than for its other methods (crowdspark names them alike for every
#: method): the name of the classes of ``probas_`` (GLAD keeps its melted frame's column name, MACE none) and
#: of GLAD's ``priors_`` (none, for the Series and its index)
CROWDKIT_NAMES = {"GLAD.probas_": "variable", "MACE.probas_": None, "GLAD.priors_": None}
#: crowdspark's parameters matched to crowd-kit's rules (crowd-kit takes none of these)
MATCHED = {
    "OneCoinDawidSkene": {"smoothing": 1e-10},
    "Wawa": {"preset": "crowd-kit"},
    "ZeroBasedSkill": {"preset": "crowd-kit"},
    "MMSR": {"preset": "crowd-kit"},
    "GoldMajorityVote": {"preset": "crowd-kit"},
    "GLAD": {"preset": "crowd-kit"},
    "MACE": {"preset": "crowd-kit"},
}


def both_have() -> list[str]:
    from crowdspark.api import CLASSES

    return sorted(name for name in CLASSES if name in crowdkit.__all__)


def run(module: str, name: str, params: dict) -> dict:
    namespace = {"DATA": DATA, "PARAMS": params, "ATTRIBUTES": ATTRIBUTES, "ROW_ORDER": ROW_ORDER}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(SCRIPT.format(module=module, name=name), namespace)  # noqa: S102 - the test's own script
    return namespace["RESULT"]


def untied(probas: pd.DataFrame | None, index: pd.Index) -> np.ndarray:
    if probas is None:
        return np.ones(len(index), dtype=bool)
    top = np.sort(probas.loc[index].to_numpy(), axis=1)
    return top[:, -1] - top[:, -2] > 1e-9


def agreement(theirs: dict, ours: dict) -> float:
    """Share of the items (not given as true labels) untied in both posteriors on which the labels agree."""
    index = theirs["labels_"].index.difference(theirs["true_labels"].index)
    both = untied(theirs.get("probas_"), index) & untied(ours.get("probas_"), index)
    assert both.mean() > 0.9
    return float((theirs["labels_"].loc[index][both] == ours["labels_"].loc[index][both]).mean())


def assert_same_layout(theirs, ours, what: str) -> None:
    assert type(ours) is type(theirs), what
    assert ours.shape == theirs.shape, what
    if isinstance(theirs, np.ndarray):  # MACE's spamming_ and thetas_: a row per worker
        return
    series = isinstance(theirs, pd.Series)
    if series and what in CROWDKIT_NAMES:
        assert theirs.name is theirs.index.name is CROWDKIT_NAMES[what], what
    else:
        assert list(ours.index.names) == list(theirs.index.names), what
        assert not series or ours.name == theirs.name, what
    assert sorted(ours.index.tolist()) == sorted(theirs.index.tolist()), what
    assert ours.index.dtype == theirs.index.dtype, what
    if series:
        assert ours.dtype == theirs.dtype, what
    else:
        # the class values and their name (crowd-kit's errors_ holds them in an object Index); crowd-kit orders
        # them as pandas' groupby happens to (on pandas 3, MajorityVote's probas_ on RTE: [2, 1])
        assert sorted(ours.columns) == sorted(theirs.columns), what
        assert theirs.columns.name == CROWDKIT_NAMES.get(what, ours.columns.name), what


def test_every_method_crowd_kit_has_is_here_under_its_name():
    assert {"DawidSkene", "GLAD", "GoldMajorityVote", "KOS", "MACE", "MMSR", "MajorityVote", "OneCoinDawidSkene",
            "Wawa", "ZeroBasedSkill"} <= set(both_have())


@pytest.mark.parametrize("name", both_have())
def test_one_script_gives_crowd_kits_shapes_names_and_labels(name):
    theirs = run("crowdkit.aggregation", name, {})
    ours = run("crowdspark.api", name, {})
    for attr in ATTRIBUTES:
        if attr in theirs:
            assert attr in ours, f"{name}.{attr} is missing"
            assert_same_layout(theirs[attr], ours[attr], f"{name}.{attr}")
    fixed = theirs["true_labels"].index.intersection(ours["labels_"].index)
    if name in ("DawidSkene", "GoldMajorityVote"):
        assert (ours["labels_"].loc[fixed] == theirs["true_labels"].loc[fixed]).all()
    assert agreement(theirs, ours) >= 0.99
    matched = run("crowdspark.api", name, MATCHED.get(name, {}))
    assert agreement(theirs, matched) == 1.0


def fitted_values(model) -> dict:
    """``probas_``, ``errors_`` and ``priors_`` of a Dawid-Skene fit with text ids, rows and columns sorted."""
    def text(frame):
        if isinstance(frame, pd.Series):
            return frame.rename(index=str).sort_index()
        index = frame.index.map(lambda key: tuple(map(str, key)) if isinstance(key, tuple) else str(key))
        return frame.set_axis(index).rename(columns=str).sort_index().sort_index(axis=1)

    return {"probas_": text(model.probas_), "errors_": text(model.errors_), "priors_": text(model.priors_)}


def dawid_skene_gap(crowd: str, n_iter: int = 100) -> dict:
    """crowd-kit's ``DawidSkene(n_iter)`` and the pandas API's on one bundled crowd: their iterations, the items
    untied in crowd-kit's posterior and the share of them with the same label, and the largest differences of
    ``probas_``, ``errors_``, ``priors_`` and ``loss_history_``."""
    from crowdspark.api import DawidSkene

    data = pd.read_csv(DATA / crowd / "labels.csv").rename(columns={"item": "task"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = crowdkit.DawidSkene(n_iter).fit(data)
        ours = DawidSkene(n_iter).fit(data)
    expected, got = fitted_values(theirs), fitted_values(ours)
    untied = np.diff(np.sort(expected["probas_"].to_numpy(), axis=1)[:, -2:], axis=1)[:, 0] > 1e-9
    same = (ours.labels_.rename(index=str).sort_index().astype(str).to_numpy()
            == theirs.labels_.rename(index=str).sort_index().astype(str).to_numpy())
    loss = (np.max(np.abs(np.subtract(ours.loss_history_, theirs.loss_history_)))
            if len(ours.loss_history_) == len(theirs.loss_history_) else np.inf)
    return {"crowd-kit iterations": len(theirs.loss_history_), "crowdspark iterations": ours.n_iter_,
            "untied items": int(untied.sum()), "agreement": float(same[untied].mean()),
            "probas_": float(np.max(np.abs(got["probas_"].to_numpy() - expected["probas_"].to_numpy()))),
            "errors_": float(np.max(np.abs(got["errors_"].loc[expected["errors_"].index].to_numpy()
                                           - expected["errors_"].to_numpy()))),
            "priors_": float(np.max(np.abs(got["priors_"].to_numpy() - expected["priors_"].to_numpy()))),
            "loss_history_": float(loss)}


#: (crowd, n_iter) of the Dawid-Skene comparison: the suite's four, and every crowd of
#: ``CROWDSPARK_NOTEBOOK_CROWDS`` when it is set (``all``: the 12 bundled crowds)
DS_CASES = [("cf", 100), ("bluebird", 100), ("web_search", 100), ("music_genre", 3)]
if os.environ.get("CROWDSPARK_NOTEBOOK_CROWDS"):
    from tests.test_notebook_catalogue import crowds

    DS_CASES += [(crowd, 100) for crowd in crowds() if (crowd, 100) not in DS_CASES]


@pytest.mark.parametrize("crowd, n_iter", DS_CASES)
def test_dawid_skene_gives_crowd_kits_fit_by_default(crowd, n_iter):
    """crowd-kit's stopping rule, its M-step and its tol are the defaults of the pandas API's DawidSkene: the
    posteriors, error matrices, priors and loss history are crowd-kit's, where its loop stops (cf: after 5
    iterations, at a fall of its objective) and when it runs out of iterations (music_genre, n_iter=3: the
    answers are the last E-step's, the matrices the last M-step's)."""
    gap = dawid_skene_gap(crowd, n_iter)
    assert gap["crowdspark iterations"] == gap["crowd-kit iterations"], gap
    assert gap["agreement"] == 1.0, gap
    assert gap["probas_"] <= 1e-9, gap  # crowd-kit floors its posteriors at 1e-10
    assert max(gap["errors_"], gap["priors_"], gap["loss_history_"]) <= 1e-8, gap


def test_crowd_kits_dawid_skene_defaults_belong_to_the_crowd_kit_class_only():
    """``Aggregator("ds")``, the command line's and the pyspark.ml face's ds keep ds's own rule; a preset or a
    given value replaces the class's crowd-kit defaults; models built on ds refuse what they do not have."""
    from crowdspark.api import Aggregator, DawidSkene, OneCoinDawidSkene
    from crowdspark.models.registry import build_model

    assert DawidSkene()._algorithm_params() == {"tol": 1e-5, "stop": "crowd-kit", "m_step": "crowd-kit"}
    assert DawidSkene(tol=1e-3, stop="change")._algorithm_params() == {"tol": 1e-3, "stop": "change",
                                                                        "m_step": "crowd-kit"}
    assert Aggregator("ds")._algorithm_params() == {}
    assert OneCoinDawidSkene(preset="crowd-kit")._algorithm_params() == {"preset": "crowd-kit"}
    ds = build_model("ds", {}, n_workers=2, n_classes=2, seed=0)
    assert (ds.stop, ds.m_step, ds.tol) == ("change", "map", 1e-6)
    with pytest.raises(ConfigError, match=r"ads.stop must be one of \['change'\], but got 'crowd-kit'"):
        build_model("ads", {"stop": "crowd-kit"}, n_workers=2, n_classes=2, seed=0)
    with pytest.raises(ConfigError, match=r"one-coin.m_step must be one of \['map'\], but got 'crowd-kit'"):
        build_model("one-coin", {"m_step": "crowd-kit"}, n_workers=2, n_classes=2, seed=0)


def test_one_coins_crowd_kit_preset_stops_where_crowd_kit_stops_with_its_answers():
    """web_search: crowd-kit's objective falls at its second iteration and its loop stops there; the preset's
    objectives are crowd-kit's ``loss_history_`` and its labels crowd-kit's on every item."""
    from crowdspark.api import Aggregator

    labels = pd.read_csv(DATA / "web_search" / "labels.csv", dtype=str)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = crowdkit.OneCoinDawidSkene().fit(labels.rename(columns={"item": "task"}))
        ours = Aggregator("one-coin", preset="crowd-kit").fit(labels)
    np.testing.assert_allclose(ours.loss_history_, theirs.loss_history_, rtol=1e-6)
    assert len(theirs.loss_history_) == 2
    assert (ours.labels_.loc[theirs.labels_.index].astype(str) == theirs.labels_.astype(str)).all()


def test_glads_crowd_kit_objective_is_crowd_kits():
    """crowd-kit's GLAD objective of its first iteration, recomputed by glad's block terms and driver step
    (``stop="crowd-kit"``) from crowd-kit's own posteriors and parameters, is its ``loss_history_[0]``."""
    from crowdspark.models.registry import build_model
    from tests.helpers import load_dataset

    labels = pd.read_csv(DATA / "bluebird" / "labels.csv", dtype=str)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = crowdkit.GLAD(n_iter=1).fit(labels.rename(columns={"item": "task"}))
    blocks, enc = load_dataset("bluebird", max_labels=500)
    assert len(blocks) > 1
    model = build_model("glad", {"stop": "crowd-kit"}, enc.n_workers, enc.n_classes, 0)
    alpha = theirs.alphas_.loc[list(enc.workers)].to_numpy()
    probas = theirs.probas_[list(enc.classes)]
    terms = 0.0
    for block in blocks:
        beta = theirs.betas_.loc[block.item_ids].to_numpy()
        posterior = probas.loc[block.item_ids].to_numpy()
        terms += model._crowdkit_terms(block, posterior, beta, *model._label_logs(block, alpha, beta))
    zeros = np.zeros(enc.n_workers)
    stats = {"grad": zeros, "info": zeros, "right": zeros, "log_evidence": np.array(0.0), "crowdkit": np.array(terms)}
    counts = np.bincount(np.concatenate([b.worker for b in blocks]), minlength=enc.n_workers).astype(float)
    update = model.global_step(stats, {"alpha": alpha, "labels": counts}, sweep=2)
    assert update.extra["crowdkit_objective"] == pytest.approx(theirs.loss_history_[0], rel=1e-9)


def test_glads_crowd_kit_preset_takes_crowd_kits_m_step():
    """One EM iteration: crowd-kit's abilities and difficulties after its conjugate-gradient M-step are the
    preset's (its M-step followed one evaluation per pass, on blocks of 500 labels), and so are the answers."""
    from crowdspark.api import GLAD

    labels = pd.read_csv(DATA / "bluebird" / "labels.csv", dtype=str)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = crowdkit.GLAD(n_iter=1).fit(labels.rename(columns={"item": "task"}))
        ours = GLAD(preset="crowd-kit", n_iter=1).fit(labels)
    np.testing.assert_allclose(ours.alphas_.loc[theirs.alphas_.index], theirs.alphas_, rtol=0, atol=1e-6)
    np.testing.assert_allclose(ours.betas_.loc[theirs.betas_.index], theirs.betas_, rtol=0, atol=1e-6)
    assert (ours.labels_.loc[theirs.labels_.index] == theirs.labels_).all()


def test_glads_crowd_kit_preset_stops_where_crowd_kit_stops_with_its_answers():
    """music_genre: crowd-kit's objective falls at its second iteration and its loop stops there; the preset
    stops after the same two EM iterations, and its labels are crowd-kit's on every untied item."""
    from crowdspark.api import GLAD

    labels = pd.read_csv(DATA / "music_genre" / "labels.csv", dtype=str)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = crowdkit.GLAD().fit(labels.rename(columns={"item": "task"}))
        ours = GLAD(preset="crowd-kit").fit(labels)
    assert len(theirs.loss_history_) == 2
    assert ours.converged_ and ours.history_["em_iteration"].max() == 2
    np.testing.assert_allclose(ours.history_["crowdkit_objective"].dropna(), theirs.loss_history_, rtol=1e-6)
    index = theirs.labels_.index
    both = untied(theirs.probas_, index) & untied(ours.probas_.rename(columns=str), index)
    assert both.mean() > 0.9
    assert (ours.labels_.loc[index][both] == theirs.labels_.loc[index][both]).all()


def test_majority_votes_skills_weigh_the_vote_as_crowd_kits_weighted_vote():
    from crowdspark.api import MajorityVote

    data = pd.read_csv(DATA / "bluebird" / "labels.csv").rename(columns={"item": "task"})
    rng = np.random.default_rng(0)
    workers = np.sort(data["worker"].unique())
    skills = pd.Series(rng.uniform(0.0, 1.0, len(workers)), index=pd.Index(workers, name="worker"))
    theirs = crowdkit.MajorityVote().fit(data, skills)
    ours = MajorityVote().fit(data, skills)
    index = theirs.labels_.index
    assert sorted(ours.labels_.index) == sorted(index)
    both = untied(theirs.probas_, index) & untied(ours.probas_, index)
    assert both.mean() > 0.9
    pd.testing.assert_series_equal(ours.labels_.loc[index], theirs.labels_, check_names=False)
    np.testing.assert_allclose(ours.probas_.loc[index, theirs.probas_.columns].to_numpy(),
                               theirs.probas_.to_numpy())
    pd.testing.assert_series_equal(ours.skills_.sort_index(), theirs.skills_.sort_index())
    unweighted = MajorityVote().fit(data)
    assert (unweighted.labels_.loc[index][both] != ours.labels_.loc[index][both]).any()
    # the second positional argument is skills, never gold: skills of 1.0 are the plain vote
    ones = MajorityVote().fit_predict(data, pd.Series(1.0, index=workers))
    plain = crowdkit.MajorityVote().fit_predict(data)
    tied = ~untied(unweighted.probas_, index)
    assert (ones.loc[index][~tied] == plain[~tied]).all()


def crowd_kit_parameters(name: str) -> dict:
    """crowd-kit's constructor parameters of ``name`` with its defaults, in its order (attrs' ``NOTHING``, a
    value crowd-kit computes, as None)."""
    import inspect

    return {key: None if type(p.default).__name__ == "_Nothing" else p.default
            for key, p in inspect.signature(getattr(crowdkit, name)).parameters.items()}


@pytest.mark.parametrize("name", both_have())
def test_crowd_kits_constructor_arguments_are_taken_in_its_order_with_one_warning_at_most(name):
    from crowdspark.api import CLASSES
    from crowdspark.faces import CROWDKIT_POSITIONAL

    theirs = crowd_kit_parameters(name)
    assert CROWDKIT_POSITIONAL.get(name, ()) == tuple(theirs)
    for args, kwargs in ((tuple(theirs.values()), {}), ((), theirs)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = CLASSES[name](*args, **kwargs)
        assert len(caught) <= 1, [str(w.message) for w in caught]
        if caught:
            assert "does not use" in str(caught[0].message) and caught[0].filename == __file__
        if "n_iter" in theirs:
            assert model.params["max_iter"] == theirs["n_iter"]
    with pytest.raises(TypeError, match=rf"{name}\(\) takes"):
        CLASSES[name](*range(len(theirs) + 1))


def test_positional_arguments_mean_what_they_mean_in_crowd_kit():
    from crowdspark.api import DawidSkene, MajorityVote

    data = pd.read_csv(DATA / "bluebird" / "labels.csv").rename(columns={"item": "task"})
    assert DawidSkene(7).params == DawidSkene(n_iter=7).params == {"max_iter": 7}
    assert DawidSkene(7, 1e-3).params == {"max_iter": 7, "tol": 1e-3}
    with pytest.raises(TypeError, match="multiple values for argument 'n_iter'"):
        DawidSkene(7, n_iter=8)
    vote = MajorityVote(0.5, "value")
    assert (vote.default_skill, vote.on_missing_skill) == (0.5, "value")
    some = pd.Series(1.0, index=data["worker"].unique()[:5])
    with pytest.raises(InputError, match="labels are by workers without a skill"):
        MajorityVote().fit(data, some)
    ignored = MajorityVote(on_missing_skill="ignore").fit(data[data["worker"].isin(some.index)], some)
    theirs = crowdkit.MajorityVote(on_missing_skill="ignore").fit(data[data["worker"].isin(some.index)], some)
    pd.testing.assert_series_equal(ignored.labels_.loc[theirs.labels_.index], theirs.labels_, check_names=False)
    filled = MajorityVote(default_skill=0.5, on_missing_skill="value").fit(data, some)
    theirs = crowdkit.MajorityVote(default_skill=0.5, on_missing_skill="value").fit(data, some)
    pd.testing.assert_series_equal(filled.labels_.loc[theirs.labels_.index], theirs.labels_, check_names=False)
    with pytest.raises(ConfigError, match="default_skill is the skill of the workers skills does not list"):
        MajorityVote(default_skill=0.5)


def test_mmsrs_scores_are_the_vote_weighted_by_its_skills_as_in_crowd_kit():
    from crowdspark.api import MMSR

    data = pd.read_csv(DATA / "bluebird" / "labels.csv").rename(columns={"item": "task"})
    model = MMSR(preset="crowd-kit")
    scores = model.fit_predict_score(data)
    assert scores is model.scores_
    weighted = crowdkit.MajorityVote().fit(data, model.skills_).probas_
    np.testing.assert_allclose(scores.loc[weighted.index, weighted.columns].to_numpy(), weighted.to_numpy())
    assert (scores.idxmax(axis=1) == model.labels_).all()


def test_initial_error_addition_starts_from_crowd_kits_first_m_step():
    from crowdspark.api import DawidSkene

    data = pd.read_csv(DATA / "bluebird" / "labels.csv").rename(columns={"item": "task"})
    first = crowdkit.DawidSkene(10).fit(data)
    counts = (first.errors_ * 20).iloc[:40]  # some workers' counts
    start = DawidSkene(initial_error_strategy="addition")._added_errors(data, "task", None, counts)
    shares = crowdkit.MajorityVote().fit_predict_proba(data)
    theirs = crowdkit.DawidSkene._m_step(data[["task", "worker", "label"]], shares, counts, "addition")
    ours = start / start.groupby(level="worker").sum()
    ours = ours.loc[theirs.index, theirs.columns]
    np.testing.assert_allclose(ours.to_numpy(), theirs.to_numpy(), atol=1e-9)
    # counts that outweigh the data's start as the matrices they hold would ('assign')
    added = DawidSkene(initial_error_strategy="addition").fit(data, initial_error=first.errors_ * 1e9)
    assigned = DawidSkene(initial_error_strategy="assign").fit(data, initial_error=first.errors_)
    assert added.summary_["warm_start"]["workers_known"] == data["worker"].nunique()
    pd.testing.assert_series_equal(added.labels_, assigned.labels_)


def main() -> None:
    """Print the Dawid-Skene comparison (:func:`dawid_skene_gap`) on every crowd of ``DS_CASES`` (markdown)."""
    rows = {crowd: dawid_skene_gap(crowd, n_iter) for crowd, n_iter in DS_CASES if n_iter == 100}
    columns = list(next(iter(rows.values())))
    print("| crowd | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for crowd, row in sorted(rows.items()):
        cells = [f"{100 * v:.2f}" if k == "agreement" else f"{v:.1e}" if isinstance(v, float) else str(v)
                 for k, v in row.items()]
        print(f"| {crowd} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
