"""The local engine computes several blocks at once on threads, and its answers do not depend on how many."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pandas as pd
import pytest

from crowdspark.engine.local import LocalEngine, usable_cores
from crowdspark.engine.loop import fit
from crowdspark.models.registry import algorithm_names, build_model, model_class
from tests.helpers import DATA, fitted_answers, frames_to_blocks


@pytest.fixture(scope="module")
def frames():
    labels = pd.read_csv(DATA / "temp" / "labels.csv", dtype=str)
    gold = pd.read_csv(DATA / "temp" / "truth.csv", dtype=str)
    return labels, gold


def _assert_identical(a, b, where: str) -> None:
    """``a`` and ``b`` (nested dicts, lists and arrays) are equal bit for bit."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _assert_identical(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for j, (x, y) in enumerate(zip(a, b)):
            _assert_identical(x, y, f"{where}[{j}]")
    elif isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=where, strict=True)
    elif isinstance(a, float) and np.isnan(a):
        assert isinstance(b, float) and np.isnan(b), where
    else:
        assert a == b, where


#: the algorithms of the default tier: a vote, an EM and a stateful sampler; the others run with ``--full``
QUICK = ("mv", "ds", "bcc")


@pytest.mark.parametrize("name", [n if n in QUICK else pytest.param(n, marks=pytest.mark.full)
                                  for n in algorithm_names()])
def test_answers_do_not_depend_on_the_number_of_threads(frames, name):
    blocks, enc = frames_to_blocks(*frames, max_labels=500)
    assert len(blocks) > 5
    runs = []
    for threads in (1, 3):
        model = build_model(name, model_class(name).quick_settings(), enc.n_workers, enc.n_classes, 3)
        runs.append(fitted_answers(model, blocks, LocalEngine(blocks, threads=threads)))
    (one, *answers_one), (three, *answers_three) = runs
    _assert_identical(one.params, three.params, "params")
    _assert_identical(one.init_stats, three.init_stats, "init_stats")
    _assert_identical([{k: v for k, v in h.items() if k != "seconds"} for h in one.history],
                      [{k: v for k, v in h.items() if k != "seconds"} for h in three.history], "history")
    for x, y in zip(answers_one, answers_three):
        np.testing.assert_array_equal(x, y, strict=True)


def test_blocks_run_at_once_and_their_statistics_add_in_block_order(frames):
    """Two blocks wait for each other (they can only both pass on two threads), and the later block
    finishes first; the sum is still taken in block order, as one thread takes it (float addition is not
    associative: 1e16 + 1 - 1e16 is 0 in this order, 1 in another)."""
    blocks, _ = frames_to_blocks(*frames, max_labels=60)
    blocks = blocks[:3]
    values = [1e16, 1.0, -1e16]
    both_started = threading.Barrier(2, timeout=30)
    second_done = threading.Event()

    def fn(block, state, value):
        j = next(i for i, b in enumerate(blocks) if b is block)
        if j < 2:
            both_started.wait()
        if j == 1:
            second_done.set()
        if j == 0:
            assert second_done.wait(timeout=30)
        return state, {"x": np.array(values[j])}

    total = LocalEngine(blocks, threads=2).map_reduce(fn, None, stateful=False)
    assert total["x"] == (values[0] + values[1]) + values[2] == 0.0


def test_a_block_error_reaches_the_caller(frames):
    blocks, _ = frames_to_blocks(*frames, max_labels=60)

    def fn(block, state, value):
        if block is blocks[4]:
            raise ValueError("block 4 fails")
        return state, {"x": np.ones(1)}

    with pytest.raises(ValueError, match="block 4 fails"):
        LocalEngine(blocks, threads=2).map_reduce(fn, None, stateful=False)


def test_the_engine_uses_every_usable_core_by_default(frames):
    blocks, _ = frames_to_blocks(*frames, max_labels=60)
    assert LocalEngine(blocks).threads == usable_cores() >= 1
    with pytest.raises(ValueError, match="threads must be at least 1, but got 0"):
        LocalEngine(blocks, threads=0)


def test_a_stateful_fit_keeps_each_blocks_state_on_threads(frames):
    blocks, enc = frames_to_blocks(*frames, max_labels=500)
    states = []
    for threads in (1, 2):
        model = build_model("bcc", model_class("bcc").quick_settings(), enc.n_workers, enc.n_classes, 5)
        assert model.stateful
        engine = LocalEngine(blocks, threads=threads)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit(model, engine)
        states.append(engine.states)
    _assert_identical(states[0], states[1], "states")
