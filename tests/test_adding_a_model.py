"""The example of ``docs/adding_a_model.md`` works as the document says: the model in it, registered, is
picked up by the configuration, both Python faces and the command line's listing, and keeps the kernel
contract of the conformance test."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

import crowdspark.api as api
from crowdspark.config import load_config
from crowdspark.engine.local import LocalEngine
from crowdspark.models.registry import ALGORITHMS, describe, register
from crowdspark.pipeline import aggregate_frames
from tests.helpers import DATA, frames_to_blocks
from tests.test_conformance import answers

DOC = DATA.parent / "docs" / "adding_a_model.md"


@pytest.fixture
def model(monkeypatch):
    """The document's model, registered for the test only."""
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), flags=re.S).group(1)
    namespace: dict = {"__name__": "adding_a_model_example"}
    exec(compile(code, str(DOC), "exec", dont_inherit=True), namespace)  # noqa: S102 - our own document
    cls = namespace["AgreementVote"]
    monkeypatch.delitem(ALGORITHMS, cls.name, raising=False)
    register(cls)
    yield cls
    ALGORITHMS.pop(cls.name, None)


def test_the_documented_model_is_picked_up_by_every_face(model):
    labels = pd.read_csv(DATA / "temp" / "labels.csv", dtype=str)
    gold = pd.read_csv(DATA / "temp" / "truth.csv", dtype=str)
    config = load_config(overrides=[f"{model.name}.prior=2"], algorithm=model.name, engine_name="local")
    run = aggregate_frames(config, labels, gold)
    assert run.summary["parameters"]["prior"] == 2.0 and run.summary["metrics"]["error_rate"] < 0.2
    quality = {"agreement", "spammer_score", "spammer_probability", "spammer"}
    assert set(run.workers.columns) == {"worker", "n_labels", "accuracy", *quality}
    fitted = api.Aggregator(model.name, prior=2).fit(labels)
    assert (fitted.labels_.sort_index().to_numpy() == run.items.set_index("item")["label"].sort_index().to_numpy()).all()
    pandas_class = api._face_class(model)
    assert pandas_class.__name__ == "AgreementVote" and pandas_class(prior=3).params == {"prior": 3.0}
    listing = describe(model.name)
    assert listing["parameters"]["prior"] == {"default": 1.0,
                                              "doc": "Pseudo-count of agreement and of labels that every worker starts with."}


def test_the_documented_model_keeps_the_kernel_contract(model):
    labels = pd.read_csv(DATA / "temp" / "labels.csv", dtype=str)
    gold = pd.read_csv(DATA / "temp" / "truth.csv", dtype=str)
    one, enc = frames_to_blocks(labels, gold, max_labels=10**6)
    many, _ = frames_to_blocks(labels, gold, max_labels=60)
    whole, parts = answers(model.name, one, enc), answers(model.name, many, enc)
    np.testing.assert_array_equal(whole[1], parts[1])
    np.testing.assert_allclose(whole[2], parts[2], atol=1e-12)
    np.testing.assert_allclose(whole[2].sum(axis=1), 1.0)
    assert LocalEngine(one).items  # the engines hand it back like any model


def test_the_documented_model_keeps_the_gold_in_the_fit(model):
    from tests.test_conformance import test_clamped_items_keep_their_gold_label

    labels = pd.read_csv(DATA / "temp" / "labels.csv", dtype=str)
    test_clamped_items_keep_their_gold_label((labels, None), model.name)
