"""What pandas 2 and pandas 3 could make differ, under whichever pandas is installed (docs/notebook.md,
"pandas versions"): ids keep their text and the caller's dtype on every attribute of the pandas API (pandas 3
infers ``str`` where pandas 2 kept ``object``), ids that look like numbers stay the text of the CSV file, and a
missing label (``None``, NaN or NA, whatever the string dtype turns it into) is the input error that names it.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from crowdspark.api import CLASSES, DawidSkene, MajorityVote
from crowdspark.config import InputConfig
from crowdspark.errors import InputError
from crowdspark.io.pandas_reader import prepare_labels, read_frame
from crowdspark.models.registry import model_class
from tests.helpers import DATA

ROOT = DATA.parent

#: item ids a numeric parser would change (leading zeros, a decimal point, an exponent, a space)
NUMBER_LIKE = ["007", "7", "1.0", "1e3", " 12"]


def _number_like(frame: pd.DataFrame) -> pd.DataFrame:
    """RTE's item ids and labels written as text that a numeric parser would change."""
    return frame.assign(item=frame["item"].str.zfill(5), **{c: frame[c].map({"0": "0.0", "1": "01"})
                                                             for c in ("label", "truth") if c in frame.columns})


def _labels(dtype) -> tuple[pd.DataFrame, pd.Series]:
    """RTE's first 600 labels with string ids that look like numbers, each column in ``dtype`` (``None``:
    the dtype pandas infers for strings: ``object`` on pandas 2, ``str`` on pandas 3), and the true labels of a
    third of their tasks (a Series indexed by task)."""
    data = _number_like(pd.read_csv(DATA / "rte" / "labels.csv", dtype=str, nrows=600))
    gold = _number_like(pd.read_csv(DATA / "rte" / "truth.csv", dtype=str))
    gold = gold[gold["item"].isin(data["item"])].iloc[::3]
    frame = pd.DataFrame({"task": data["item"].tolist(), "worker": data["worker"].tolist(),
                          "label": data["label"].tolist()}, dtype=dtype)
    true = pd.Series(gold["truth"].tolist(), index=pd.Index(gold["item"].tolist(), dtype=frame["task"].dtype),
                     dtype=frame["label"].dtype)
    return frame, true


def _check_ids(model, data: pd.DataFrame) -> None:
    """Every attribute that holds tasks, workers or classes holds them as given, in the frame's dtype."""
    task, worker, label = (data[c].dtype for c in ("task", "worker", "label"))
    by_task = {"labels_": model.labels_, "probas_": model.probas_, "items_": model.items_}
    by_worker = {"skills_": model.skills_, "workers_": model.workers_}
    for attr, (table, columns) in model_class(model.algorithm).api_attributes.items():
        if isinstance(columns, str):
            (by_task if table == "items" else by_worker)[attr] = getattr(model, attr)
    for attr, frame in by_task.items():
        assert frame.index.dtype == task and set(frame.index) == set(data["task"]), attr
    for attr, frame in by_worker.items():
        assert frame.index.dtype == worker and set(frame.index) <= set(data["worker"]), attr
    assert model.labels_.dtype == model.items_["label"].dtype == label
    assert set(model.labels_) <= set(data["label"]) and set(model.classes_) == set(data["label"])
    if hasattr(model, "errors_"):
        assert model.errors_.index.get_level_values("worker").dtype == worker
        assert model.errors_.index.get_level_values("label").dtype == label
    assert model.relabel_["task"].dtype == task and model.relabel_["label"].dtype == label
    if label == object:
        assert model.probas_.columns.dtype == object
        if hasattr(model, "priors_"):
            assert model.priors_.index.dtype == object
        if hasattr(model, "errors_"):
            assert model.errors_.columns.dtype == object


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_object_ids_stay_object_on_every_attribute_of_every_class(name):
    data, true = _labels(object)
    _check_ids(CLASSES[name]().fit(data, true_labels=true), data)


@pytest.mark.parametrize("dtype", [None, object, "string", "category"], ids=["inferred", "object", "string", "category"])
def test_string_ids_round_trip_with_their_dtype(dtype):
    data, _ = _labels(dtype)
    model = DawidSkene(n_iter=20).fit(data)
    _check_ids(model, data)
    assert set(model.labels_.index) == set(data["task"])
    weighted = MajorityVote().fit(data, pd.Series(0.5, index=data["worker"].unique()))
    assert weighted.labels_.dtype == data["label"].dtype
    assert weighted.labels_.index.dtype == data["task"].dtype and weighted.skills_.index.dtype == data["worker"].dtype


def test_a_vote_with_skills_weighs_a_worker_without_one_by_the_default():
    """The weights of a skill-weighted vote are written in place (a read-only array under pandas 3's
    Copy-on-Write if taken from a Series without a copy)."""
    data = pd.DataFrame({"task": ["a", "a", "a", "b"], "worker": ["w1", "w2", "w3", "w1"], "label": ["x", "y", "y", "x"]})
    skills = pd.Series({"w1": 0.9})
    model = MajorityVote(on_missing_skill="value", default_skill=0.5).fit(data, skills)
    assert model.labels_.to_dict() == {"a": "y", "b": "x"}  # a: y weighs 0.5 + 0.5 > 0.9
    assert MajorityVote(on_missing_skill="value", default_skill=0.4).fit(data, skills).labels_["a"] == "x"


@pytest.mark.parametrize("quoted", [False, True], ids=["unquoted", "quoted"])
def test_csv_ids_that_look_like_numbers_stay_the_files_text(tmp_path, quoted):
    """Both CSV readers (pyarrow's for a file without quotes, Python's otherwise) and the command line keep
    ``007`` and ``1.0`` as written."""
    rows = [(item, f"w{w}", label) for item in NUMBER_LIKE for w, label in enumerate(["01", "2", "01"])]
    cell = (lambda v: f'"{v}"') if quoted else str
    path = tmp_path / "labels.csv"
    path.write_text("item,worker,label\n" + "".join(f"{cell(i)},{w},{cell(x)}\n" for i, w, x in rows))
    labels = prepare_labels(read_frame(str(path), "csv", "labels"), InputConfig(), str(path))
    assert list(labels.items) == sorted(NUMBER_LIKE) and labels.encoding.classes == ("01", "2")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "crowdspark", "aggregate", "--labels", str(path), "--algorithm", "mv",
                           "--engine", "local", "--output", str(out), "--quiet"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    items = pd.read_parquet(out / "items")
    assert sorted(items["item"]) == sorted(NUMBER_LIKE) and set(items["label"]) == {"01"}


@pytest.mark.parametrize("missing", [None, np.nan, pd.NA], ids=["None", "NaN", "NA"])
@pytest.mark.parametrize("dtype", [None, object, "string"], ids=["inferred", "object", "string"])
def test_a_missing_label_is_the_error_that_names_it(missing, dtype):
    data = pd.DataFrame({"task": ["a", "a", "b"], "worker": ["w1", "w2", "w1"], "label": ["x", missing, "y"]},
                        dtype=dtype)
    with pytest.raises(InputError, match=r"column 'label' has 1 null value\(s\); every row needs an item"):
        MajorityVote().fit(data)


def test_an_empty_csv_label_cell_is_the_error_that_names_it(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text("item,worker,label\n007,w1,x\n007,w2,\n1.0,w1,y\n")
    done = subprocess.run([sys.executable, "-m", "crowdspark", "aggregate", "--labels", str(path), "--algorithm", "mv",
                           "--engine", "local", "--output", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and "column 'label' has 1 null value(s)" in done.stderr, done.stderr
