"""How each face of crowdspark names a setting: the one place where a face adds the names of its ecosystem.

crowdspark has three faces over one configuration: the command line (``--set ds.max_iter=50``,
``--set input.item=task``), the pandas API (``DawidSkene(max_iter=50, item="task")``) and the pyspark.ml face
(``DawidSkeneAggregator(maxIter=50, itemCol="task")``).  Every setting has one canonical key, the
configuration's (``input.item``, ``<algorithm>.<field>``).  A face may add aliases, and nothing else:

* the pandas API accepts crowd-kit's names (:data:`CROWDKIT_ALIASES`, e.g. ``n_iter`` for ``max_iter``) beside
  the canonical field names;
* the pyspark.ml face has a camelCase ``Param`` per field (:func:`camel`), and also accepts the field name.

Messages name a setting the way the face the user called names it: :func:`using_face` marks the face of a
call, and :func:`display_key` / :func:`setting` render a canonical key for it, so the pandas API says
``item="task"`` where the command line says ``--set input.item=task``.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = [
    "CLI",
    "PANDAS",
    "ML",
    "CROWDKIT_ALIASES",
    "CROWDKIT_POSITIONAL",
    "CROWDKIT_IGNORED",
    "CROWDKIT_DEFAULTS",
    "camel",
    "current_face",
    "using_face",
    "display_key",
    "field_name",
    "setting",
]

CLI = "cli"
PANDAS = "pandas"
ML = "ml"

_FACE: ContextVar[str] = ContextVar("crowdspark_face", default=CLI)

#: crowd-kit's parameter names that the pandas API accepts: alias -> canonical field
CROWDKIT_ALIASES = {"n_iter": "max_iter"}

#: crowd-kit 1.4.2's constructor parameters in its order, for the classes both libraries have: the pandas API
#: takes its positional arguments in this order (``DawidSkene(100)`` is ``DawidSkene(n_iter=100)``)
CROWDKIT_POSITIONAL: dict[str, tuple[str, ...]] = {
    "MajorityVote": ("default_skill", "on_missing_skill"),
    "DawidSkene": ("n_iter", "tol", "initial_error_strategy"),
    "OneCoinDawidSkene": ("n_iter", "tol", "initial_error_strategy"),
    "GLAD": ("n_iter", "tol", "silent", "labels_priors", "alphas_priors_mean", "betas_priors_mean", "m_step_max_iter",
             "m_step_tol"),
    "MACE": ("n_restarts", "n_iter", "method", "smoothing", "default_noise", "alpha", "beta", "random_state",
             "verbose"),
    "ZeroBasedSkill": ("n_iter", "lr_init", "lr_steps_to_reduce", "lr_reduce_factor", "eps"),
    "KOS": ("n_iter", "random_state"),
    "MMSR": ("n_iter", "tol", "random_state", "observation_matrix", "covariation_matrix", "n_common_tasks",
             "n_workers", "n_tasks", "n_labels", "labels_mapping", "workers_mapping", "tasks_mapping"),
}

#: the pandas API's defaults for the crowd-kit classes whose algorithm's own defaults stop (or estimate)
#: otherwise than crowd-kit 1.4: crowd-kit's stopping rule, tolerance and estimates, so that a crowd-kit script
#: gets crowd-kit's answers (the command line and the pyspark.ml face keep the algorithm's defaults; a preset
#: given to the class replaces these; docs/catalogue.md, "A crowd-kit notebook")
CROWDKIT_DEFAULTS: dict[str, dict[str, Any]] = {
    "DawidSkene": {"tol": 1e-5, "stop": "crowd-kit", "m_step": "crowd-kit"},
    "OneCoinDawidSkene": {"tol": 1e-5, "stop": "crowd-kit", "smoothing": 1e-10},
    "GLAD": {"stop": "crowd-kit"},
}

_MMSR_STATE = "crowdspark computes it from the labels of fit()"
#: crowd-kit parameters that have no meaning here, per class: the pandas API accepts them and says once (a
#: UserWarning) what crowdspark does instead, so that a crowd-kit script runs unchanged
CROWDKIT_IGNORED: dict[str, dict[str, str]] = {
    "GLAD": {
        "silent": "crowdspark shows no progress bar (it logs through logging)",
        "labels_priors": "crowdspark's GLAD gives every class the prior 1 / C (crowd-kit's default)",
        "alphas_priors_mean": "crowdspark's GLAD has one prior mean for every worker: alpha_prior_mean",
        "betas_priors_mean": "crowdspark's GLAD has one prior mean for every task: beta_prior_mean",
        "m_step_max_iter": "crowdspark's M-step takes beta_steps and m_step_rounds (preset='crowd-kit' takes "
                           "crowd-kit's M-step)",
        "m_step_tol": "crowdspark's M-step takes beta_steps and m_step_rounds (preset='crowd-kit' takes crowd-kit's "
                      "M-step)",
    },
    "MACE": {
        "n_restarts": "crowdspark's MACE runs one fit, from the same start for every seed",
        "default_noise": "crowdspark's MACE starts every worker at spamming 0.5",
        "verbose": "crowdspark shows no progress bar (it logs through logging)",
    },
    "MMSR": {name: _MMSR_STATE for name in CROWDKIT_POSITIONAL["MMSR"][3:]},
}

#: the non-algorithm keys each Python face exposes: canonical key -> the face's name
_FACE_KEYS = {
    PANDAS: {"input.item": "item", "input.worker": "worker", "input.label": "label", "input.classes": "classes",
             "gold.truth": "truth", "seed": "seed"},
    ML: {"input.item": "itemCol", "input.worker": "workerCol", "input.label": "labelCol", "input.classes": "classes",
         "spark.partitions": "partitions", "engine.max_block_labels": "maxBlockLabels",
         "spark.checkpoint_interval": "checkpointInterval", "engine.small_input_bytes": "smallInputBytes",
         "engine.max_memory": "maxMemory", "seed": "seed"},
}
_SECTIONS = ("input", "gold", "output", "engine")


def camel(name: str) -> str:
    """``max_iter`` -> ``maxIter`` (the pyspark.ml spelling of a field name)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def current_face() -> str:
    """The face of the call in progress (:data:`CLI` unless a Python face said otherwise)."""
    return _FACE.get()


@contextmanager
def using_face(face: str) -> Iterator[None]:
    """Name settings the way ``face`` does in every message raised inside the block."""
    token = _FACE.set(face)
    try:
        yield
    finally:
        _FACE.reset(token)


def display_key(key: str) -> str:
    """A canonical configuration key as the current face names it.

    ``ds.max_iter`` is ``ds.max_iter`` on the command line, ``max_iter`` in the pandas API and ``maxIter`` in the
    pyspark.ml face; ``input.item`` is ``item`` / ``itemCol``.  Keys a face does not expose keep their
    configuration form.
    """
    face = current_face()
    if face == CLI:
        return key
    if key in _FACE_KEYS[face]:
        return _FACE_KEYS[face][key]
    section, _, field = key.partition(".")
    if field and section not in _SECTIONS and "." not in field:
        return camel(field) if face == ML else field
    return key


def field_name(field: str) -> str:
    """An algorithm parameter's name in the current face (``maxIter`` in pyspark.ml, else ``max_iter``)."""
    return camel(field) if current_face() == ML else field


def setting(key: str, value: Any) -> str:
    """How the current face sets ``key`` to ``value`` (a hint in a message): ``--set input.item=task``,
    ``item='task'`` or ``itemCol='task'``.

    ``value`` is a Python value, or a placeholder string such as ``"<column>"``; the command line writes
    non-strings as TOML/JSON and quotes what the shell would split.
    """
    if current_face() == CLI:
        text = value if isinstance(value, str) else json.dumps(value)
        if re.search(r"[\s\"'\[\]{}]", text):
            text = shlex.quote(text)
        return f"--set {key}={text}"
    return f"{display_key(key)}={value!r}"
