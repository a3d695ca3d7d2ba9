"""The fit of a run, the same on every engine: build the configured model (choosing H when asked), warm start
it, fit it with checkpoints, evaluate it against the gold carried in the blocks, and describe it."""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from crowdspark.version import __version__
from crowdspark.config import RunConfig
from crowdspark.engine.base import Engine, ItemBatchFn, ItemFn, WrittenItems
from crowdspark.engine.checkpoint import Checkpointer
from crowdspark.engine.local import LocalEngine
from crowdspark.engine.loop import FitResult, WarmStart, finish_fn, fit
from crowdspark.engine.memory import FitShape, check_configured
from crowdspark.engine.select import LevelChoice, choose_levels, level_plan
from crowdspark.errors import RUN_COLD, ConfigError, IncompatibleModelError
from crowdspark.faces import setting
from crowdspark.io.rules import Encoding
from crowdspark.io.saved_model import SavedModel, worker_index_map
from crowdspark.io.sink import StagedOutput
from crowdspark.io.tables import item_schema, worker_frame
from crowdspark.io.worker_table import WorkerTable
from crowdspark.metrics import metrics_from_stats
from crowdspark.models.base import Model, checked_worker_table, no_worker_start
from crowdspark.models.registry import build_model, model_class, model_parameters
from crowdspark.pipeline.prepare import Prepared
from crowdspark.pipeline.progress import progress
from crowdspark.pipeline.quality import quality_on, quality_summary, relabel_fold, worker_quality
from crowdspark.pipeline.summary import gold_split_report, run_summary
from crowdspark.pipeline.tasks import block_item_batch, evaluate_block, finish_with_quality
from crowdspark.quality import ITEM_COLUMNS, average_confusion
from crowdspark.stats import Stats

__all__ = ["RunOptions", "Fitted", "evaluate", "fit_configured", "fit_prepared"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunOptions:
    """Operational options of a run: a warm start, what identifies the run's inputs for its checkpoints, and
    the tests' fault injection (not a user setting).

    Attributes
    ----------
    warm_start : SavedModel, optional
        A previous run's model (``--warm-start``).
    initial_workers : WorkerTable, optional
        Starting matrices of the workers it lists (``--initial-workers``); not with ``warm_start``.
    inputs : dict
        Description of the inputs (paths, sizes) that goes into the checkpoint fingerprint.
    inject_task_failure : int
        Test hook: on the Spark engine, the first attempt of partition 0 fails at this sweep (0 = off), to
        show that a retried task does not change the result.
    carried : dict, optional
        Statistics of items the blocks do not hold, added to every sweep's (an incremental run,
        :mod:`crowdspark.engine.carry`).
    master : str, optional
        The Spark master the command line starts when it needs a session (``--master``): the engine choice's
        master when the run has no session (:func:`crowdspark.engine.choice.driver_master`).
    """

    warm_start: SavedModel | None = None
    inputs: dict[str, Any] = field(default_factory=dict)
    inject_task_failure: int = 0
    initial_workers: WorkerTable | None = None
    carried: Stats | None = None
    master: str | None = None


def evaluate_stats(model: Model, engine: Engine, params: Any, quality_bins: int = 0) -> Stats:
    """The summed gold statistics and, with ``quality_bins`` (the reliability table's bins), the quality
    statistics (:func:`crowdspark.quality.quality_block_stats`) of every block, in one pass."""
    return engine.map_reduce(partial(evaluate_block, model, quality_bins), params, stateful=False)


def evaluate(model: Model, engine: Engine, params: Any) -> dict[str, Any]:
    """Metrics against the gold labels carried in the blocks (any engine)."""
    return metrics_from_stats(evaluate_stats(model, engine, params))


def check_fit_gold(config: RunConfig, has_gold: bool) -> None:
    """Refuse a model that learns from gold in the fit (``Model.needs_fit_gold``) when the run has none.

    Raises
    ------
    ConfigError
    """
    if model_class(config.algorithm).needs_fit_gold and (not has_gold or config.gold.fit_fraction <= 0):
        raise ConfigError(
            f"{config.algorithm} weighs each worker by its accuracy on gold in the fit, but the run has "
            f"{'no gold' if not has_gold else 'gold.fit_fraction = 0'}: give the gold (--gold on the command line, "
            f"true_labels= in the pandas API) and the share of it the fit uses ({setting('gold.fit_fraction', 0.3)}; "
            "the rest scores the run)"
        )


def check_algorithm(saved: SavedModel, config: RunConfig) -> None:
    """Refuse a warm start from a model of another algorithm (before anything is read).

    Raises
    ------
    IncompatibleModelError
    """
    if saved.algorithm != config.algorithm:
        raise IncompatibleModelError(
            f"the warm-start model at {saved.source!r} was fitted with {saved.algorithm!r}, this run uses "
            f"{config.algorithm!r}; warm start from a run of the same algorithm, or {RUN_COLD}"
        )


def warm_start_for(saved: SavedModel | None, config: RunConfig, encoding: Encoding) -> WarmStart | None:
    """The warm start a saved model gives this run, after checking the algorithm and the class set."""
    if saved is None:
        return None
    check_algorithm(saved, config)
    if tuple(saved.classes) != tuple(encoding.classes):
        raise IncompatibleModelError(
            f"the class set changed since the warm-start run ({list(saved.classes)} -> {list(encoding.classes)}); "
            f"a warm start needs the same classes: {RUN_COLD}"
        )
    old_index = worker_index_map(encoding.workers, saved.workers)
    return WarmStart(saved.params, old_index, saved.source, saved.parameters)


def check_table_start(config: RunConfig, warm_start: str | None, initial_workers: str | None) -> None:
    """Refuse a worker table with a warm start, or for a model that has no worker parameters a table sets.

    Raises
    ------
    ConfigError
    """
    if initial_workers is None:
        return
    if warm_start is not None:
        raise ConfigError("--warm-start and --initial-workers both start the workers; give one (a run's output "
                          "given to --warm-start also carries its class proportions)")
    if model_class(config.algorithm).worker_start is Model.worker_start:
        raise no_worker_start(config.algorithm)


def table_start(table: WorkerTable, encoding: Encoding) -> WarmStart:
    """The warm start a worker table gives this run: listed workers start from its matrices.

    Raises
    ------
    IncompatibleModelError
        When the table's classes are not the run's.
    """
    confusion, accuracy = table.matrices(encoding.classes)
    old_index = worker_index_map(encoding.workers, table.workers)
    return WarmStart({"confusion": confusion, "accuracy": accuracy}, old_index, table.source, workers_only=True)


def _warm_start(options: RunOptions, config: RunConfig,
                encoding: Encoding) -> tuple[WarmStart | None, dict[str, Any] | None]:
    """The warm start of the run (a saved model or a worker table) and what the summary says about it, after
    ``nightly.on_incompatible``."""
    saved, table = options.warm_start, options.initial_workers
    if saved is None and table is None:
        return None, None
    report: dict[str, Any] = {"source": (saved or table).source, "used": True}
    try:
        if table is not None:
            start = table_start(table, encoding)
            report.update(worker_table=True, workers_listed=len(table.workers),
                          workers_known=int((start.old_index >= 0).sum()))
            return start, report
        return warm_start_for(saved, config, encoding), report
    except IncompatibleModelError as exc:
        if config.nightly.on_incompatible == "fail":
            raise
        return None, _cold(report, exc)


def _cold(report: dict[str, Any] | None, exc: Exception) -> dict[str, Any]:
    reason = f"ran cold (nightly.on_incompatible = \"cold\"): {exc}"
    log.warning("%s", reason)
    return {**(report or {}), "used": False, "reason": reason}


def checkpointer_for(config: RunConfig, options: RunOptions, layout: dict[str, Any]) -> Checkpointer | None:
    """The run's checkpointer (``engine.checkpoint_every``), fingerprinted by everything that makes the run."""
    if not config.engine.checkpoint_every:
        return None
    fingerprint = {
        "algorithm": config.algorithm,
        "parameters": config.algorithm_params(),
        "seed": config.seed,
        "input": config.to_dict()["input"],
        "gold_split": {"fit_fraction": config.gold.fit_fraction, "seed": config.gold.split_seed},
        "inputs": options.inputs,
        "layout": layout,
        "warm_start": None if options.warm_start is None else options.warm_start.source,
        "initial_workers": None if options.initial_workers is None else options.initial_workers.source,
        "version": __version__,
    }
    return Checkpointer(config.engine.checkpoint_dir, config.engine.checkpoint_every, fingerprint)


def reusable_fit(choice: LevelChoice, candidates: tuple[int, ...], stateful: bool, cold: bool) -> FitResult | None:
    """The chosen candidate's fit from the selection, when fitting the chosen H again would repeat it.

    A refit repeats it when it starts cold (no warm start, no carried statistics, no checkpoint to resume
    from) and the engine's block states are the chosen fit's: a stateless model keeps none, a stateful one
    those of the last candidate fitted.  Otherwise None (the caller refits).
    """
    if not cold or (stateful and choice.chosen != candidates[-1]):
        return None
    return choice.fits.get(choice.chosen)


def fit_configured(
    config: RunConfig,
    n_workers: int,
    n_classes: int,
    engine: Engine,
    warm_start: WarmStart | None = None,
    checkpoint: Checkpointer | None = None,
    carried: Stats | None = None,
) -> tuple[Model, FitResult, dict | None]:
    """Build the configured model and fit it, first choosing H when the configuration asks for it.

    Whether and among which H the run chooses is :func:`crowdspark.engine.select.level_plan`'s decision;
    the choice is :func:`crowdspark.engine.select.choose_levels`'s.

    Returns
    -------
    model, result, selection
        ``selection`` is ``{"criterion", "chosen", "table"}`` or ``None``.
    """
    name = config.algorithm
    plan = level_plan(model_class(name), config.algorithm_params(),
                      warm_start.parameters if warm_start is not None else None)
    params = plan.params
    selection = None
    if plan.candidates is not None:

        def make(h: int) -> Model:
            return build_model(name, {**params, "n_levels": h}, n_workers, n_classes, config.seed)

        choice = choose_levels(make, engine, plan.candidates, plan.criterion)
        params["n_levels"] = choice.chosen
        selection = {"criterion": choice.criterion, "chosen": choice.chosen, "table": choice.table}
        log.info("%s: chose H = %d by %s", name, choice.chosen, choice.criterion)
    model = build_model(name, params, n_workers, n_classes, config.seed)
    if selection is not None:
        chosen_fit = reusable_fit(choice, plan.candidates, model.stateful,
                                  warm_start is None and checkpoint is None and carried is None)
        if chosen_fit is not None:
            log.info("%s: keeps the fit of H = %d from the selection", name, choice.chosen)
            return model, chosen_fit, selection
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fit(model, engine, warm_start=warm_start, checkpoint=checkpoint, carried=carried)
    result.warnings = [str(w.message) for w in caught]
    for w in caught:  # hand them on to the caller's filters (the CLI shows them)
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if checkpoint is not None:
        checkpoint.clear()
    return model, result, selection


@dataclass
class Fitted:
    """A fitted run whose blocks are still held by their engine (call :meth:`close` when done).

    Attributes
    ----------
    model : Model
    result : FitResult
    prepared : Prepared
        The engine holding the blocks, and what was read.
    summary : dict
        ``summary.json``, without the write phase.
    quality : Stats, optional
        The summed quality statistics (:func:`crowdspark.quality.quality_block_stats`); ``None`` when
        the run computes no quality signals.
    spammer_threshold : float
        ``quality.spammer_threshold``.
    """

    model: Model
    result: FitResult
    prepared: Prepared
    summary: dict[str, Any]
    quality: Stats | None = None
    spammer_threshold: float = 0.0

    @property
    def encoding(self) -> Encoding:
        return self.prepared.encoding

    @property
    def params(self) -> Any:
        return self.result.params

    @property
    def item_extras(self) -> dict[str, str]:
        """The item table's columns beyond ``item``, ``label``, ``confidence`` and ``posterior``, with their
        Spark SQL types: the model's extras, then the quality columns when the run computes them."""
        return {**self.model.item_extras, **(ITEM_COLUMNS if self.quality is not None else {})}

    def _item_fns(self) -> tuple[ItemFn, ItemBatchFn]:
        """The block functions of the item table: a block's final results, and their Arrow batch."""
        to_batch = partial(block_item_batch, classes=self.encoding.classes, extras=self.item_extras)
        fn = partial(finish_fn, self.model)
        if self.quality is not None:
            table = self.worker_columns()
            confusion = self.model.worker_confusion(table)
            fn = partial(finish_with_quality, self.model, average_confusion(confusion, table["n_labels"]))
        return fn, to_batch

    def items(self):
        """The item table: a pyarrow Table from the local engine, a lazy Spark DataFrame from the Spark engine
        (valid until :meth:`close`)."""
        fn, to_batch = self._item_fns()
        if isinstance(self.prepared.engine, LocalEngine):
            return self.prepared.engine.item_table(fn, self.params, to_batch)
        return self.prepared.engine.items(fn, self.params, to_batch, item_schema(self.item_extras))

    def write_items(self, directory: str, relabel_budget: int = 0) -> WrittenItems | None:
        """Write :meth:`items` as Parquet into ``directory`` from where the blocks are, when the engine can
        (:meth:`crowdspark.engine.base.Engine.write_items`), or return ``None`` (nothing written).  With the
        quality columns and ``relabel_budget > 0``, each partition also keeps its first ``relabel_budget`` rows
        of the relabel queue (:func:`crowdspark.pipeline.quality.relabel_fold`)."""
        fn, to_batch = self._item_fns()
        head = partial(relabel_fold, relabel_budget) if self.quality is not None and relabel_budget > 0 else None
        return self.prepared.engine.write_items(fn, self.params, to_batch, item_schema(self.item_extras), directory,
                                                head)

    def worker_columns(self) -> dict[str, np.ndarray]:
        """The model's worker table (:func:`crowdspark.models.base.checked_worker_table`), each column with K
        rows."""
        return checked_worker_table(self.model, self.params, self.result.init_stats)

    def workers(self) -> pd.DataFrame:
        """The worker table (size K: it lives on the driver)."""
        table = self.worker_columns()
        if self.quality is not None:
            table = {**table, **worker_quality(self.quality, self.spammer_threshold)}
        return worker_frame(self.encoding.workers, table)

    def saved_model(self, algorithm: str) -> SavedModel:
        """The fitted model in the one saved-model format."""
        return SavedModel(algorithm, model_parameters(self.model), self.encoding.classes, self.encoding.workers,
                          self.model.export_params(self.params), init_stats=self.result.init_stats)

    def write_extra(self, out: StagedOutput) -> None:
        """Write what this kind of run adds to its result into the staged ``out`` (before ``summary.json``):
        nothing for a window run; an incremental night's item state (:class:`crowdspark.pipeline.incremental.Night`)."""

    def close(self) -> None:
        self.prepared.engine.close()


def fit_shape(prepared: Prepared) -> FitShape:
    """The items, workers, classes and labels the fit of ``prepared`` works on: counted in the local engine's
    blocks; on Spark, the label rows read (an upper bound of the items too)."""
    enc = prepared.encoding
    if isinstance(prepared.engine, LocalEngine):
        blocks = prepared.engine.blocks
        n_items, n_labels = sum(b.n_items for b in blocks), sum(b.n_labels for b in blocks)
    else:
        n_labels = n_items = int(prepared.inputs.get("label_rows", 0))
    return FitShape(n_items, enc.n_workers, enc.n_classes, n_labels)


def fit_prepared(config: RunConfig, prepared: Prepared, options: RunOptions | None = None) -> Fitted:
    """Fit, evaluate and describe the blocks ``prepared`` holds (any engine); the engine stays open.

    The phases ``fit`` and ``evaluate`` go to ``prepared.timer``.
    """
    options = options or RunOptions()
    enc = prepared.encoding
    try:
        check_fit_gold(config, prepared.has_gold)
        memory = check_configured(config, fit_shape(prepared), prepared.engine.name)
    except ConfigError:
        prepared.engine.close()
        raise
    checkpoint = checkpointer_for(config, options, prepared.layout)
    try:
        warm, warm_report = _warm_start(options, config, enc)
        # the evaluation runs in the fit's sweep session when it has one, where the blocks are
        with prepared.engine.sweeps_held():
            with progress("fit", f"{config.algorithm}: fitting on the {prepared.engine.name} engine"):
                try:
                    model, result, selection = fit_configured(config, enc.n_workers, enc.n_classes,
                                                              prepared.engine, warm, checkpoint, options.carried)
                except IncompatibleModelError as exc:
                    if config.nightly.on_incompatible == "fail" or options.carried is not None:
                        raise  # an incremental fit without its warm start would lose the carried items
                    warm_report = _cold(warm_report, exc)
                    model, result, selection = fit_configured(config, enc.n_workers, enc.n_classes,
                                                              prepared.engine, None, checkpoint)
            prepared.timer.lap("fit")
            bins = config.quality.calibration_bins if quality_on(config) else 0
            needed = prepared.has_gold or bins
            stats = None
            if needed:
                with progress("evaluate", "evaluating: quality signals and gold metrics"):
                    stats = evaluate_stats(model, prepared.engine, result.params, bins)
        metrics = metrics_from_stats(stats) if prepared.has_gold else None
        prepared.timer.lap("evaluate")
    except BaseException:
        prepared.engine.close()
        raise
    summary = run_summary(config, model, prepared.engine.name, enc, result, prepared.counts, prepared.inputs,
                          prepared.warnings)
    summary.update(prepared.report)
    summary.update(prepared.engine.report())
    split, split_warnings = gold_split_report(config, result.counts, prepared.has_gold, model.needs_fit_gold)
    if split is not None:
        summary["gold_split"] = split
    for message in split_warnings:
        log.warning("%s", message)
        summary["warnings"].append(message)
    if warm_report is not None:
        summary["warm_start"] = warm_report
        if not warm_report["used"]:
            summary["warnings"].append(warm_report["reason"])
    if selection is not None:
        summary["level_selection"] = selection
    if metrics is not None:
        summary["metrics"] = metrics
    quality = stats if bins else None
    if quality is not None:
        workers = worker_quality(quality, config.quality.spammer_threshold)
        summary["quality"] = quality_summary(quality, workers, enc.classes, config, prepared.has_gold)
    summary["memory"].update(memory)  # beside the measured peak: the prediction and the budget
    summary["timings"] = prepared.timer.timings
    return Fitted(model=model, result=result, prepared=prepared, summary=summary, quality=quality,
                  spammer_threshold=config.quality.spammer_threshold)
