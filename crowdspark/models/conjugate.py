"""scipy's conjugate gradients (``minimize(method="CG")``) driven one evaluation at a time, on the driver.

The optimizer minimizes ``f(x)`` over ``x = (x_driver, x_blocks)``: a part the driver holds (a vector) and a
part that stays in the blocks.  It never needs the blocks' part itself, only sums over the blocks at each
point it evaluates: ``f``, and the dot products of the gradient there with the search direction, with
itself, and with the gradient of the current point, and how many of its entries exceed the gradient
tolerance.  So every evaluation is one pass over the data, and the driver decides, from those sums, the
next point, exactly as scipy's ``_minimize_cg`` (Polak-Ribiere+ with its descent condition) and its line
search (``line_search_wolfe1``: MINPACK's ``dcsrch``, scipy's ``DCSRCH`` class, driven by its
reverse-communication ``_iterate``) would.  scipy's fallback line search (``line_search_wolfe2``) is not
followed: where the first one fails, the minimization ends there, as scipy's does when both fail.

A pass evaluates ``x + trial * p`` (``p`` the direction) after applying the pending ``commit``
``(step, coef)``: ``x += step * p``, ``g = gradient at the trial point``, ``p = -g + coef * p``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from crowdspark.errors import ConfigError

__all__ = ["CgSums", "CgState", "cg_start", "cg_after_trial", "state_to_tree", "state_from_tree", "line_search_class"]

#: scipy's constants of ``_minimize_cg`` and its line search
_C1, _C2, _SIGMA_3, _XTOL, _AMIN, _AMAX, _DCSRCH_MAXITER = 1e-4, 0.4, 0.01, 1e-14, 1e-100, 1e100, 100


@dataclass
class CgSums:
    """What a pass reports at the point it evaluated: ``f``; the driver part of the gradient (its own dot
    products are taken on the driver); the blocks' parts of ``g_t . p``, ``g_t . g_t`` and ``g_t . g`` (``g_t``
    the gradient there, ``g`` the current point's); and how many of the blocks' gradient entries exceed the
    gradient tolerance."""

    f: float
    grad_driver: np.ndarray
    dot_p: float
    dot_self: float
    dot_g: float
    n_large: float


@dataclass
class CgState:
    """The driver's side of one minimization.

    Attributes
    ----------
    x, p, g : ndarray of float64, shape (d,)
        The driver's part of the current point, of the search direction and of the gradient at the point.
    gtol, max_steps : float, int
        Stop when no gradient entry exceeds ``gtol`` in absolute value, or after ``max_steps`` steps.
    old_fval, old_old_fval, deltak, steps : float, float, float, int
        scipy's: ``f`` at the point and at the point before, ``g . g`` (whole), the steps taken.
    search, trial, task, evaluations
        The line search in progress: scipy's ``DCSRCH``, the step length to evaluate next, its task, and the
        evaluations it has had.
    done : bool
        The minimization has ended (at ``x``, after ``commit``).
    commit : tuple of float, optional
        ``(step, coef)`` of the step just accepted, which the next pass applies to the blocks' part.
    """

    x: np.ndarray
    p: np.ndarray
    g: np.ndarray
    gtol: float
    max_steps: int
    old_fval: float = 0.0
    old_old_fval: float = 0.0
    deltak: float = 0.0
    steps: int = 0
    search: Any = None
    trial: float = 0.0
    task: bytes = b""
    evaluations: int = 0
    done: bool = False
    commit: tuple[float, float] | None = None


def line_search_class() -> type:
    """scipy's ``DCSRCH`` (``scipy.optimize._dcsrch``, a private module since scipy 1.12).

    Raises
    ------
    ConfigError
        This scipy has no such class, or one without the ``_iterate`` step this module drives.
    """
    try:
        from scipy.optimize._dcsrch import DCSRCH
    except ImportError:
        DCSRCH = None
    if DCSRCH is None or not callable(getattr(DCSRCH, "_iterate", None)):
        import scipy

        raise ConfigError(
            f"glad.m_step = 'cg' (GLAD's crowd-kit preset) follows scipy's line search step by step through "
            f"its private DCSRCH class, which scipy {scipy.__version__} does not have in the form this version "
            "of crowdspark drives (scipy 1.12 and later have it): install one of those, or use glad.m_step = "
            "'newton' (the default)")
    return DCSRCH


def _begin_search(state: CgState, derphi0: float) -> None:
    """scipy's ``scalar_search_wolfe1``: the first trial step, and a new ``DCSRCH``."""
    DCSRCH = line_search_class()

    phi0, old_phi0 = state.old_fval, state.old_old_fval
    alpha1 = 1.0
    if derphi0 != 0:
        alpha1 = min(1.0, 1.01 * 2 * (phi0 - old_phi0) / derphi0)
        if alpha1 < 0:
            alpha1 = 1.0
    state.search = DCSRCH(None, None, _C1, _C2, _XTOL, _AMIN, _AMAX)
    state.evaluations = 0
    stp, _, _, task = state.search._iterate(alpha1, phi0, derphi0, b"START")
    _next_trial(state, stp, task)


def _next_trial(state: CgState, stp: float, task: bytes) -> None:
    state.task = task
    if not np.isfinite(stp) or task[:2] != b"FG":
        state.done = True  # the line search failed: the minimization ends at the current point
        return
    state.trial = float(stp)


def cg_start(x: np.ndarray, f0: float, sums: CgSums, gtol: float, max_steps: int) -> CgState:
    """The minimization from the pass that evaluated the start point (its ``dot_self`` is ``g . g``)."""
    g = sums.grad_driver
    state = CgState(x=x, p=-g, g=g, gtol=gtol, max_steps=max_steps)
    gg = float(g @ g) + sums.dot_self
    state.old_fval = f0
    state.old_old_fval = f0 + np.sqrt(gg) / 2
    large = sums.n_large + int(np.sum(np.abs(g) > gtol))
    if large == 0 or max_steps == 0:
        state.done = True
        return state
    state.deltak = gg
    _begin_search(state, -gg)
    return state


def cg_after_trial(state: CgState, sums: CgSums) -> CgState:
    """The line search's next step after a pass at ``state.trial`` (``sums`` of that pass); on its
    convergence, scipy's step of the point and direction (the commit the next pass applies), and the next
    line search or the end of the minimization."""
    state.commit = None
    gt = sums.grad_driver
    derphi1 = float(gt @ state.p) + sums.dot_p
    state.evaluations += 1
    if state.evaluations >= _DCSRCH_MAXITER:
        state.done = True
        return state
    stp, _, _, task = state.search._iterate(state.trial, sums.f, derphi1, state.task)
    if not np.isfinite(stp) or task[:5] == b"ERROR" or task[:4] == b"WARN":
        state.done = True
        return state
    if task[:2] == b"FG":
        state.trial = float(stp)
        state.task = task
        return state
    # converged: scipy's descent condition on the Polak-Ribiere+ step, with the last gradient evaluated
    step = float(stp)
    gtgt = float(gt @ gt) + sums.dot_self
    coef = max(0.0, (gtgt - (float(gt @ state.g) + sums.dot_g)) / state.deltak)
    new_p = -gt + coef * state.p
    descent = -gtgt + coef * derphi1  # new_p . gt
    large = sums.n_large + int(np.sum(np.abs(gt) > state.gtol))
    if large > 0 and descent > -_SIGMA_3 * gtgt:
        state.done = True  # scipy would try its other line search here
        return state
    state.x = state.x + step * state.p
    state.p, state.g = new_p, gt
    state.old_old_fval, state.old_fval = state.old_fval, sums.f
    state.commit = (step, coef)
    state.steps += 1
    if large == 0 or state.steps >= state.max_steps:
        state.done = True
        return state
    state.deltak = gtgt
    _begin_search(state, descent)
    return state


def state_to_tree(state: CgState) -> dict[str, Any]:
    """``state`` as plain values (numbers, strings, arrays), for checkpoints and broadcasts."""
    tree = {name: getattr(state, name) for name in CgState.__dataclass_fields__}
    tree["task"] = state.task.decode("latin-1")
    if state.search is not None:
        tree["search"] = {key: value for key, value in vars(state.search).items() if key not in ("phi", "derphi")}
    return tree


def state_from_tree(tree: dict[str, Any]) -> CgState:
    """The inverse of :func:`state_to_tree`."""
    DCSRCH = line_search_class()

    values = dict(tree)
    values["task"] = tree["task"].encode("latin-1")
    if tree["search"] is not None:
        search = DCSRCH(None, None, _C1, _C2, _XTOL, _AMIN, _AMAX)
        vars(search).update(tree["search"])
        values["search"] = search
    if values["commit"] is not None:
        values["commit"] = tuple(values["commit"])
    return CgState(**values)
