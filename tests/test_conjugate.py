"""scipy's conjugate gradients driven one evaluation at a time (crowdspark.models.conjugate) take scipy's path."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from crowdspark.models.conjugate import CgSums, cg_after_trial, cg_start


def problem(seed: int = 0):
    """A smooth, non-quadratic objective of 30 variables: a logistic loss with a ridge."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(200, 30))
    y = rng.random(200) < 0.5

    def f(x):
        z = a @ x
        return float(np.sum(np.logaddexp(0.0, z) - y * z) + 0.05 * x @ x)

    def grad(x):
        z = a @ x
        return a.T @ (1.0 / (1.0 + np.exp(-z)) - y) + 0.1 * x

    return f, grad


def run(f, grad, x0, split: int, gtol: float = 1e-2, steps: int = 25):
    """The minimization with the first ``split`` variables on the driver and the rest summed as if in blocks."""
    def sums(x, p, g):
        gt = grad(x)
        rest = slice(split, None)
        return CgSums(f(x), gt[:split], float(gt[rest] @ p[rest]), float(gt[rest] @ gt[rest]),
                      float(gt[rest] @ g[rest]), float(np.sum(np.abs(gt[rest]) > gtol)))

    g0 = grad(x0)
    state = cg_start(x0[:split], f(x0), sums(x0, -g0, g0), gtol, steps)
    x, p, g, evaluations = x0.copy(), -g0, g0, 1
    while not state.done:
        point = x + state.trial * p
        gt = grad(point)
        state = cg_after_trial(state, sums(point, p, g))
        evaluations += 1
        if state.commit is not None:
            step, coef = state.commit
            x, g, p = x + step * p, gt, -gt + coef * p
    return x, state, evaluations


def test_the_driven_minimization_is_scipys_whatever_part_the_driver_holds():
    f, grad = problem()
    x0 = np.ones(30)
    theirs = minimize(f, x0, method="CG", jac=grad, tol=1e-2, options={"maxiter": 25})
    for split in (0, 7, 30):
        x, state, evaluations = run(f, grad, x0, split)
        np.testing.assert_allclose(x, theirs.x, rtol=0, atol=1e-9)
        np.testing.assert_allclose(state.x, theirs.x[:split], rtol=0, atol=1e-9)
        assert state.steps == theirs.nit and evaluations == theirs.nfev
        assert state.old_fval == pytest.approx(theirs.fun, rel=1e-12)


def test_a_start_within_the_tolerance_takes_no_step():
    f, grad = problem()
    best = minimize(f, np.zeros(30), method="CG", jac=grad, tol=1e-10, options={"maxiter": 1000}).x
    x, state, evaluations = run(f, grad, best, 10)
    assert state.done and state.steps == 0 and evaluations == 1
    np.testing.assert_array_equal(x, best)


@pytest.mark.parametrize("module", [None, "without _iterate"])
def test_a_scipy_without_the_line_search_this_module_drives_is_a_config_error_naming_the_fix(monkeypatch, module):
    import sys
    import types

    from crowdspark.errors import ConfigError
    from crowdspark.models.glad import Glad

    fake = None if module is None else types.SimpleNamespace(DCSRCH=type("DCSRCH", (), {}))
    monkeypatch.setitem(sys.modules, "scipy.optimize._dcsrch", fake)
    with pytest.raises(ConfigError, match="private DCSRCH class.*glad.m_step = 'newton'"):
        Glad(3, 2, m_step="cg", stop="crowd-kit")
    Glad(3, 2)  # the default M-step does not need it
