"""Incremental nights (``incremental.mode = "on"``): a run reads the days after its previous run and the earlier
labels of the items those days touch, and carries every other item's contribution to the model's statistics
from the previous run (incremental EM in the sense of Neal & Hinton 1998; :mod:`crowdspark.engine.carry`).

A night is one of three kinds, decided before any label is read (:func:`plan_night`):

* a **full refit** (the first night, ``--full-refit``, or past ``incremental.full_refit_days``): every day up to
  the as-of date, as a run without incremental mode fits them, plus what the next night continues from;
* an **incremental night**: the new days' labels and the refitted items' earlier labels are fitted with the
  carried statistics added to every sweep, starting from the previous run's parameters;
* a night whose new days hold no label **carries the previous result forward**.

A full refit writes every item into ``items/``; an incremental night (and a night carried forward) writes only
the items it fitted, and the chain of runs back to the last full refit whose rows make up the rest of the answer
(:mod:`crowdspark.io.chain`; ``crowdspark.read_items`` reads the whole answer; the summary's ``items_scope`` says
which).  Each writes its saved model with the carried summary (``_model/carried.npz``), the item state of the items
it fitted (``_incremental/items/``) and the index of where every item's newest state row is
(:mod:`crowdspark.pipeline.item_state`), so a night reads and writes what it touched, not the history.  An incompatible previous run (another algorithm, parameters, class set
or input configuration) is refused with the way to run a full refit, or refitted in full with
``nightly.on_incompatible = "cold"``.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from crowdspark.config import RunConfig
from crowdspark.engine.base import WrittenItems
from crowdspark.engine.carry import Carried, carried_stats, carry_block, responsibilities_fn
from crowdspark.engine.choice import EngineChoice, choose_engine
from crowdspark.errors import ConfigError, IncompatibleModelError, InputError
from crowdspark.io.chain import CHAIN_FILE, ITEMS_SCOPE, chain_payload, chain_runs
from crowdspark.io.paths import is_local
from crowdspark.io.rules import MAX_CLASSES, Encoding
from crowdspark.io.saved_model import SavedModel, load_saved_model, worker_index_map
from crowdspark.io.sink import StagedOutput
from crowdspark.models.base import Model
from crowdspark.models.registry import ALGORITHMS, build_model, model_class, model_parameters
from crowdspark.pipeline.days import DayReader
from crowdspark.pipeline.fit import Fitted, RunOptions
from crowdspark.pipeline.frames import Frames, Table, frames_for
from crowdspark.pipeline.item_state import (
    STATE_FOLDER,
    index_of,
    previous_sums,
    read_index,
    resp_batch,
    revisit_summary,
    state_path,
    state_rows,
    state_table,
    updated_index,
    write_index,
    write_state,
)
from crowdspark.pipeline.manifest import check_new_data, record_inputs, run_manifest
from crowdspark.pipeline.partitions import PARTITIONS_FILE, compare, describe, payload, read_partitions
from crowdspark.pipeline.prepare import Prepared
from crowdspark.pipeline.source import Reading, Source, driver_choice, input_signature, read_spark_input
from crowdspark.pipeline.summary import Timer
from crowdspark.pipeline.window import Window
from crowdspark.stats import Stats

__all__ = ["NightPlan", "Night", "NightSource", "check_incremental_config", "plan_night", "FULL_REFIT"]

log = logging.getLogger(__name__)

#: how a refused night is told to refit everything
FULL_REFIT = ("run a full refit: add --full-refit to this night's command (or set nightly.on_incompatible = "
              "\"cold\" to refit such nights in full automatically)")


def incremental_algorithms() -> list[str]:
    """The registered algorithms that can run incrementally (their models declare ``carried_stats``)."""
    return [name for name, cls in ALGORITHMS.items() if cls.carried_stats]


def check_incremental_config(config: RunConfig) -> None:
    """Refuse, before anything is read, a configuration incremental nights cannot run with.

    Raises
    ------
    ConfigError
    """
    if config.incremental.mode != "on":
        return
    name = config.algorithm
    if not model_class(name).carried_stats:
        raise ConfigError(
            f"{name} cannot run incrementally (incremental.mode = \"on\"): its fit is not a sum of per-item "
            f"statistics that a night can carry (samplers, collapsed VI and one-pass votes keep per-item state or "
            f"have none); use one of {incremental_algorithms()}, or set incremental.mode = \"off\""
        )
    if not config.input.date_column:
        raise ConfigError("incremental.mode = \"on\" needs input.date_column: the column of days (e.g. the lake's "
                          "partition column date) that tells a night's new labels from the earlier ones")
    if config.input.window_days:
        raise ConfigError(
            f"incremental.mode = \"on\" carries every day since the last full refit, but input.window_days = "
            f"{config.input.window_days} would drop the oldest days from a full refit only: set "
            "input.window_days = 0, and use incremental.decay to weigh old days less"
        )
    if config.output.format != "parquet":
        raise ConfigError("incremental.mode = \"on\" carries the previous run's items/ table forward as Parquet: set "
                          "output.format = \"parquet\"")
    section = config.algorithm_params()
    chosen = [key for key in ("select_levels", "level_criterion") if key in section]
    if chosen:
        raise ConfigError(
            f"{', '.join(f'{name}.{key}' for key in chosen)} chooses H from all the labels, which an incremental "
            f"night does not read; set {name}.n_levels, or remove them (a full refit of {name} then chooses H by "
            "default and incremental nights keep it)"
        )


def fingerprint(config: RunConfig) -> dict[str, Any]:
    """The configuration a carried summary depends on: the algorithm, how labels are read, the output format."""
    keys = ("item", "worker", "label", "format", "classes", "filter", "date_column")
    return {"algorithm": config.algorithm, "input": {k: list(v) if isinstance(v, tuple) else v
                                                     for k, v in config.to_dict()["input"].items() if k in keys}}


@dataclass(frozen=True)
class NightPlan:
    """What kind of night a run is, decided before any label is read.

    Attributes
    ----------
    full : bool
        A full refit (else incremental from ``previous``).
    reason : str
        Why (for the log and the summary).
    previous : str, optional
        The run it continues from.
    saved : SavedModel, optional
        That run's saved model.
    carried : Carried, optional
        That run's carried summary.
    """

    full: bool
    reason: str
    previous: str | None = None
    saved: SavedModel | None = None
    carried: Carried | None = None


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=lambda v: v.item() if isinstance(v, np.generic) else list(v)))


def _parameter_changes(saved: SavedModel, config: RunConfig) -> list[str]:
    """The hyperparameters (and seed) of this run that differ from the saved model's."""
    params = config.algorithm_params()
    if "n_levels" in saved.parameters and "n_levels" in {f for f in model_class(config.algorithm).__dataclass_fields__}:
        params.setdefault("n_levels", saved.parameters["n_levels"])
    built = build_model(config.algorithm, params, 1, max(2, len(saved.classes)), config.seed)
    now, before = _plain(model_parameters(built)), _plain(saved.parameters)
    return [f"{config.algorithm}.{key}: {before.get(key)!r} -> {now.get(key)!r}"
            for key in sorted(set(now) | set(before)) if now.get(key) != before.get(key)]


def _incompatibility(saved: SavedModel, carried: Carried, config: RunConfig, as_of: _dt.date) -> str | None:
    """Why a night cannot continue from this previous run, or ``None``."""
    if saved.algorithm != config.algorithm:
        return f"it was fitted with {saved.algorithm!r}, this run uses {config.algorithm!r}"
    if carried.fingerprint != fingerprint(config):
        before, now = carried.fingerprint.get("input", {}), fingerprint(config)["input"]
        changed = [f"input.{k}: {before.get(k)!r} -> {now.get(k)!r}" for k in sorted(now) if before.get(k) != now.get(k)]
        return f"the input configuration changed ({'; '.join(changed) or 'algorithm'})"
    changes = _parameter_changes(saved, config)
    if changes:
        return f"the model's parameters changed ({'; '.join(changes)})"
    if config.input.classes and tuple(config.input.classes) != tuple(saved.classes):
        return f"input.classes changed ({list(saved.classes)} -> {list(config.input.classes)})"
    if carried.as_of >= as_of.isoformat():
        return f"it is as of {carried.as_of}, not older than this run's {as_of}"
    return None


def _load_previous(previous: str, spark: Any) -> tuple[SavedModel, Carried | None]:
    saved = load_saved_model(previous, spark, what="the previous run")
    if saved.carried is None:
        return saved, None
    try:
        return saved, Carried.from_tree(saved.carried)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"the previous run {previous!r} has an unreadable carried summary ({exc}); {FULL_REFIT}") from exc


def plan_night(config: RunConfig, previous: str | None, as_of: _dt.date, full_refit: bool = False,
               spark: Any = None) -> NightPlan | None:
    """The kind of night of a run as of ``as_of`` continuing ``previous`` (``None`` without incremental mode).

    Raises
    ------
    ConfigError
        ``full_refit`` without incremental mode, or a configuration incremental nights cannot run with.
    IncompatibleModelError
        The previous run cannot be continued and ``nightly.on_incompatible = "fail"``.
    """
    if config.incremental.mode != "on":
        if full_refit:
            raise ConfigError("--full-refit applies to incremental nights: set incremental.mode = \"on\" (every run "
                              "is a full fit without it)")
        return None
    check_incremental_config(config)
    if full_refit:
        return NightPlan(True, "--full-refit", previous)
    if previous is None:
        return NightPlan(True, "no previous run to continue: the first night is a full refit")
    saved, carried = _load_previous(previous, spark)
    why = ("it has no carried summary (it ran without incremental.mode = \"on\", or with an older crowdspark)"
           if carried is None else _incompatibility(saved, carried, config, as_of))
    if why is None:
        try:
            chain_runs(previous, spark)
        except InputError as exc:
            why = str(exc)
    if why is not None:
        return _refused(config, f"cannot continue incrementally from the previous run {previous!r}: {why}", previous)
    period = config.incremental.full_refit_days
    since = (as_of - _dt.date.fromisoformat(carried.full_refit_as_of)).days
    if period and since >= period:
        return NightPlan(True, f"the last full refit (as of {carried.full_refit_as_of}) is {since} days old "
                               f"(incremental.full_refit_days = {period})", previous)
    return NightPlan(False, f"continues {previous} (as of {carried.as_of})", previous, saved, carried)


def _refused(config: RunConfig, message: str, previous: str | None) -> NightPlan:
    if config.nightly.on_incompatible == "fail":
        raise IncompatibleModelError(f"{message}; {FULL_REFIT}")
    log.warning("%s; refitting in full (nightly.on_incompatible = \"cold\")", message)
    return NightPlan(True, f"{message}; refitted in full (nightly.on_incompatible = \"cold\")", previous)


#: what the quality signals of an incremental night are computed over (``summary.json``'s ``quality.covers``)
QUALITY_COVERS = ("the items fitted this night: items/ and relabel/ hold them; the summary's quality section and "
                  "workers/'s agreement and spammer columns count their labels only (NaN for a worker without one); "
                  "relabel_gain weighs the workers by their labels over the whole history")


class _Refit(Exception):
    """The new labels show that the night cannot be incremental (a new class)."""


# ---- the night's result ------------------------------------------------------------------------------------
@dataclass
class Night(Fitted):
    """A night of ``incremental.mode = "on"``: a :class:`Fitted` whose tables are what the night writes, with what
    the next night continues from.

    Attributes
    ----------
    item_table : table
        The items fitted this night (a full refit: every item).
    worker_table : DataFrame
        Every worker.
    state : table
        The item state of the items fitted this night (:mod:`crowdspark.pipeline.item_state`).
    index : table
        Where the newest state row of every item of the chain is.
    previous : str, optional
        The run this night continues (``None`` for a full refit, whose result is whole).
    carried : Carried
        The carried summary of this run.
    saved : SavedModel, optional
        The model when no fit ran (the previous run's, carried forward).
    partitions : dict
        The fingerprint of every day the night's chain has read (:mod:`crowdspark.pipeline.partitions`).
    frames : Frames
        The operations of its tables (:mod:`crowdspark.pipeline.frames`).
    """

    item_table: Any = None
    worker_table: pd.DataFrame | None = None
    state: Any = None
    index: Any = None
    previous: str | None = None
    carried: Carried | None = None
    saved: SavedModel | None = None
    partitions: dict[str, Any] = field(default_factory=dict)
    spark: Any = field(default=None, repr=False)
    frames: Frames | None = field(default=None, repr=False)

    @property
    def encoding(self) -> Encoding:
        if self.prepared is None:
            return Encoding(self.saved.workers, self.saved.classes)
        return self.prepared.encoding

    @property
    def params(self) -> Any:
        return self.saved.params if self.result is None else self.result.params

    def items(self):
        """The items fitted this night (:meth:`Fitted.items`, with the quality columns when the run computes
        them); a night carried forward: none."""
        return self.item_table if self.prepared is None else super().items()

    def worker_columns(self) -> dict[str, np.ndarray]:
        """The fit's worker table; on an incremental night, ``n_labels`` counts each worker's labels over the
        whole history (the carried ``worker_labels``), so that every worker weighs as in a full fit wherever the
        table is read (``workers/``, the average confusion of the items' ``relabel_gain``)."""
        table = super().worker_columns()
        if self.previous is None:
            return table
        return {**table, "n_labels": np.rint(self.carried.worker_labels).astype(np.int64)}

    def write_items(self, directory: str, relabel_budget: int = 0) -> WrittenItems | None:
        """A fitted night's item table is its fit's (:meth:`Fitted.write_items`); a night carried forward has
        no blocks (``None``)."""
        return None if self.prepared is None else super().write_items(directory, relabel_budget)

    def workers(self) -> pd.DataFrame:
        return self.worker_table if self.prepared is None else super().workers()

    def saved_model(self, algorithm: str) -> SavedModel:
        saved = self.saved if self.result is None else super().saved_model(algorithm)
        return replace(saved, carried=self.carried.to_tree(), source="")

    def write_extra(self, out: StagedOutput) -> None:
        """Write the item state, its index, the day partitions read and the chain into the staged result."""
        path = out.path(f"{STATE_FOLDER}/items")
        write_state(self.frames, self.state, path)
        index = self.index
        if index is None:  # a full refit: every item of its state
            index = index_of(self.frames, self.frames.written(self.state, path), 0)
        write_index(self.frames, index, out.staging)
        out.write_json(PARTITIONS_FILE, payload(self.partitions))
        if self.previous is not None:
            out.write_json(CHAIN_FILE, chain_payload(self.previous, out.destination, self.spark))

    def close(self) -> None:
        if self.prepared is not None:
            super().close()


# ---- reading ---------------------------------------------------------------------------------------------------
@dataclass
class _Context:
    config: RunConfig
    labels_path: str
    gold_path: str | None
    spark: Any
    run_id: str | None
    as_of: _dt.date
    warm_path: str | None
    previous: str | None
    options: RunOptions
    timer: Timer
    reader: DayReader
    choice: EngineChoice
    small: dict[str, Any] | None = None

    @property
    def frames(self) -> Frames:
        """The operations of the night's tables: Spark's when Spark reads the labels, else the driver's."""
        return frames_for(self.reader.distributed, self.spark)


def _small(ctx: _Context, days: list[str]) -> dict[str, Any] | None:
    """``small_input`` when Spark read the labels but the days' files are small enough to fit on the driver."""
    threshold = ctx.config.engine.small_input_bytes
    if not ctx.reader.distributed or not threshold:
        return None
    size = ctx.reader.bytes_of(days)
    if size is None or size >= threshold:
        return None
    return {"input_bytes": size, "threshold": threshold, "reader": "spark"}


def _reading(ctx: _Context, labels: Any, classes: tuple[str, ...], days: list[str]) -> Reading:
    """What the night read for the one prepare step: its labels (canonical ``item``, ``worker``, ``label``) with
    the configuration that prepares them, the engine that fits them, and the gold."""
    config = replace(ctx.config, input=replace(ctx.config.input, item="item", worker="worker", label="label",
                                                 classes=classes, filter="", date_column="", window_days=0))
    if not ctx.reader.distributed:
        return Reading(Source(engine="local", small_input=ctx.small, choice=ctx.choice.to_dict()), config,
                       labels=labels[["item", "worker", "label"]])
    small = _small(ctx, days)
    choice = ctx.choice if small is None else choose_engine(ctx.config, ctx.choice.master, small=True)
    gold = read_spark_input(ctx.spark, ctx.gold_path, config.gold.format, "gold")[0] if ctx.gold_path else None
    return Reading(Source(engine="spark" if small is None else "local", small_input=small, labels_frame=labels,
                          gold_frame=gold, choice=choice.to_dict()), config)


def _manifest(ctx: _Context, labels_read: int, counts: dict[str, int], window: Window,
              late: dict[str, int] | None = None) -> dict[str, Any]:
    inputs = {"labels": ctx.labels_path, "gold": ctx.gold_path, "label_rows": labels_read, "days": counts}
    if late:
        inputs["late_days"] = late
    manifest = run_manifest(inputs, ctx.options.inputs, ctx.run_id, ctx.as_of, window, ctx.warm_path, ctx.previous,
                            ctx.spark)
    check_new_data(manifest, ctx.config.nightly.on_no_new_data, None)
    return manifest


def _list_files(manifest: dict[str, Any], ctx: _Context, lake: dict[str, dict[str, int]], days: list[str]) -> None:
    """Put into the ``manifest``'s ``files`` what the night read: the ``days`` with their files and bytes summed
    from the ``lake``'s day fingerprints (labels per day for an input not partitioned by day), and the gold's
    files, bytes and time."""
    read: dict[str, Any] = {"days": list(days)}
    for day in days:
        for key, value in lake.get(day, {}).items():
            read[key] = read.get(key, 0) + int(value)
    manifest["files"].pop("incremental", None)  # the kind of night, not a file (the summary's incremental says it)
    manifest["files"]["labels"] = read
    gold = input_signature(None, ctx.gold_path).get("gold")
    if gold is not None:
        manifest["files"]["gold"] = {key: value for key, value in gold.items() if key != "path"}


# ---- the carry pass and the drift report ---------------------------------------------------------------
def _carry_pass(fitted: Fitted) -> Stats:
    """The fitted items' contributions at the final parameters (:data:`SUM_KEYS`)."""
    return fitted.prepared.engine.map_reduce(partial(carry_block, fitted.model), fitted.params, stateful=False)


def _resp_table(fitted: Fitted) -> Any:
    return fitted.prepared.engine.items(partial(responsibilities_fn, fitted.model), fitted.params, resp_batch,
                                        "item string, resp array<double>")


def _carried(sums: Stats, as_of: _dt.date, full_as_of: str, config: RunConfig) -> Carried:
    return Carried(sums["label_sums"], sums["item_sums"], sums["worker_labels"], int(sums["n_items"]),
                   int(sums["n_labels"]), as_of.isoformat(), full_as_of, fingerprint(config))


def _accuracy_moves(ctx: _Context, workers: pd.DataFrame, previous: str | None) -> list[dict[str, Any]]:
    """The workers whose estimated accuracy moved most since the previous run (``incremental.drift_workers``)."""
    top = ctx.config.incremental.drift_workers
    if not top or previous is None:
        return []
    path = f"{previous.rstrip('/')}/workers"
    try:
        before = ctx.frames.to_pandas(ctx.frames.read(path, "the previous run's workers"))
    except InputError as exc:
        log.warning("no accuracy moves: %s", exc)
        return []
    both = workers[["worker", "accuracy"]].merge(before[["worker", "accuracy"]], on="worker", suffixes=("", "_before"))
    both["change"] = both["accuracy"] - both["accuracy_before"]
    order = both["change"].abs().sort_values(ascending=False, kind="stable").index[:top]
    return [{"worker": str(r.worker), "before": float(r.accuracy_before), "now": float(r.accuracy),
             "change": float(r.change)} for r in both.loc[order].itertuples()]


def _report(night: Night, ctx: _Context, kind: str, reason: str, extra: dict[str, Any]) -> None:
    """The summary's ``incremental`` section, and counts of the whole result."""
    carried = night.carried
    counts = night.summary["counts"]
    workers = night.workers()
    counts.update(items=carried.n_items, labels=carried.n_labels, workers=int(workers.shape[0]))
    night.summary["items_scope"] = ITEMS_SCOPE[kind == "full refit"]
    night.summary["incremental"] = {
        "kind": kind, "reason": reason, "previous_run": ctx.previous, "as_of": carried.as_of,
        "full_refit_as_of": carried.full_refit_as_of, "decay": ctx.config.incremental.decay, **extra,
        "accuracy_moves": _accuracy_moves(ctx, workers, ctx.previous),
    }
    if kind == "incremental" and "quality" in night.summary:
        night.summary["quality"]["covers"] = QUALITY_COVERS
    log.info("%s night as of %s: %s", kind, ctx.as_of, reason)


def _base(plan: NightPlan, encoding: Encoding, earlier: Stats, decay: float, days: int) -> Carried:
    """The previous run's carried summary in this run's worker order, decayed by ``days`` days, without the
    previous contributions ``earlier`` of the refitted items."""
    previous = plan.carried.for_workers(worker_index_map(encoding.workers, plan.saved.workers))
    previous = previous.decayed(decay ** days)
    if not earlier:
        return previous
    return replace(previous, label_sums=np.maximum(previous.label_sums - earlier["label_sums"], 0.0),
                   item_sums=np.maximum(previous.item_sums - earlier["item_sums"], 0.0),
                   worker_labels=np.maximum(previous.worker_labels - earlier["worker_labels"], 0.0),
                   n_items=previous.n_items - int(earlier["n_items"]),
                   n_labels=previous.n_labels - int(earlier["n_labels"]))


def _with_previous_workers(prepared: Prepared, saved: SavedModel) -> None:
    """Extend the run's workers with the previous run's workers that have no label tonight (kept in order)."""
    seen = set(prepared.encoding.workers)
    extra = tuple(w for w in saved.workers if w not in seen)
    prepared.encoding = Encoding(prepared.encoding.workers + extra, prepared.encoding.classes)


def _model_like(saved: SavedModel, n_workers: int) -> Model:
    params = {k: v for k, v in saved.parameters.items() if k != "seed"}
    return build_model(saved.algorithm, params, n_workers, len(saved.classes), int(saved.parameters["seed"]))


def _late_days(ctx: _Context, plan: NightPlan) -> tuple[dict[str, Any], list[str]]:
    """The input's days up to the night (their fingerprints), and the days up to the previous run's as-of date
    that its chain has not read (:mod:`crowdspark.pipeline.partitions`).

    Raises
    ------
    _Refit
        When a day the chain read was rewritten or removed.
    """
    lake = ctx.reader.partitions(ctx.as_of)
    before = {day: fp for day, fp in lake.items() if day <= plan.carried.as_of}
    record = read_partitions(plan.previous, ctx.spark if ctx.reader.distributed else None)
    if record is None:
        log.warning("the previous run %r records no day partitions (it was written by an older crowdspark): days "
                    "that arrived after the night that should have read them are not detected tonight; a full "
                    "refit (--full-refit) reads every day", plan.previous)
        return lake, []
    found = compare(record, before)
    if found.rewritten:
        raise _Refit(f"{len(found.rewritten)} day(s) of the input changed or are gone since the nights of its chain "
                     f"read them ({describe(record, before, found.rewritten)}): the labels fitted from them cannot "
                     "be taken out of the carried statistics")
    if found.late:
        log.warning("%d day(s) arrived after the night that should have read them: %s; their labels are fitted "
                    "tonight", len(found.late), found.late[:10])
    return lake, found.late


def _late_labels(ctx: _Context, late: list[str]) -> tuple[Table, dict[str, int]]:
    """The labels of the ``late`` days, and the labels of each."""
    frame = ctx.reader.days(late)
    return frame, {str(day): int(n) for day, n in sorted(ctx.frames.count_by(frame, "day").items())}


def _read_bytes(path: str, spark: Any) -> bytes:
    from crowdspark.io.files import files_for

    return files_for(path, spark).read_bytes(path)


# ---- the night's source: the days it reads, and what it adds to the one path ------------------------------------
class NightSource:
    """The source of an incremental night (:class:`crowdspark.pipeline.source.RunSource`): the days the night
    reads, and the hooks through which the one path of every run (:func:`crowdspark.pipeline.run.fit_source`)
    fits them with the carried statistics and builds the night's state tables.

    A full refit reads every day up to the as-of date; an incremental night the days after the previous run, its
    late days and the earlier days of the items they touch (a night whose labels show it cannot be incremental,
    such as a new class, is refitted in full after ``nightly.on_incompatible``, or refused); a night without new
    labels reads nothing (:meth:`without_fit` carries the previous result forward).

    The reader and engine are chosen as a window run's are (:func:`crowdspark.pipeline.source.driver_choice`, with
    the previous run as the warm start): on a local master, a lake of local files whose whole fits the driver's
    budget is read with pandas and fitted by the local engine, without Spark; ``summary.json`` records the choice
    (``engine_choice``).

    Raises
    ------
    ConfigError
        When the previous run is not on a local path and the local engine runs.
    ValueError
        When the Spark engine is chosen and ``spark`` is ``None``.
    """

    def __init__(self, config: RunConfig, labels_path: str, gold_path: str | None, output_dir: str | None,
                 spark: Any, run_id: str | None, as_of: _dt.date, plan: NightPlan, *, warm_path: str | None,
                 options: RunOptions, timer: Timer) -> None:
        if plan.previous is not None and not is_local(plan.previous) and config.engine.name == "local":
            raise ConfigError(f"the previous run {plan.previous!r} is not on a local path: the local engine reads it "
                              "with pandas; run on the spark engine")
        choice, small = driver_choice(config, labels_path, gold_path, output_dir, plan.previous, spark,
                                      options.master)
        if choice.engine == "spark" and spark is None:
            raise ValueError(f"the spark engine needs a SparkSession ({choice.detail})")
        if choice.engine == "local" and config.engine.name != "local":
            log.info("local engine for the night: %s (set engine.small_input_bytes=0 to always distribute)",
                     choice.detail)
        self.options = replace(options, inputs={**options.inputs, "incremental": {"previous": plan.previous,
                                                                                  "full": plan.full}})
        reader = DayReader(config, labels_path, spark if choice.engine == "spark" else None)
        self.ctx = _Context(config, labels_path, gold_path, spark, run_id, as_of, warm_path, plan.previous,
                            self.options, timer, reader, choice, small)
        self.plan, self.full, self.reason = plan, plan.full, plan.reason
        self._read: dict[str, Any] = {}

    # ---- read ------------------------------------------------------------------------------------------------
    def read(self) -> Reading | None:
        if not self.full:
            try:
                return self._read_incremental()
            except _Refit as refit:
                message = f"cannot continue incrementally from the previous run {self.plan.previous!r}: {refit}"
                if self.ctx.config.nightly.on_incompatible == "fail":
                    raise IncompatibleModelError(f"{message}; {FULL_REFIT}") from None
                log.warning("%s; refitting in full (nightly.on_incompatible = \"cold\")", message)
                self.ctx.reader = DayReader(self.ctx.config, self.ctx.labels_path,
                                            self.ctx.spark if self.ctx.reader.distributed else None)
                self.full, self.reason = True, f"{message}; refitted in full (nightly.on_incompatible = \"cold\")"
        return self._read_full()

    def _read_full(self) -> Reading:
        ctx = self.ctx
        partitions = ctx.reader.partitions(ctx.as_of)  # listed before the read: a day that arrives later is late
        labels, counts = ctx.reader.range(None, ctx.as_of)
        manifest = _manifest(ctx, sum(counts.values()), counts, Window(ctx.config.input.date_column, None, ctx.as_of))
        _list_files(manifest, ctx, partitions, sorted(counts))
        self._read = {"labels": labels, "manifest": manifest, "lake": partitions}
        return _reading(ctx, labels, tuple(ctx.config.input.classes), sorted(counts))

    def _read_incremental(self) -> Reading | None:
        ctx, plan, frames = self.ctx, self.plan, self.ctx.frames
        start = _dt.date.fromisoformat(plan.carried.as_of) + _dt.timedelta(days=1)
        lake, late = _late_days(ctx, plan)
        new, counts = ctx.reader.range(start, ctx.as_of)
        late_counts: dict[str, int] = {}
        if late:
            late_frame, late_counts = _late_labels(ctx, late)
            new, counts = frames.union([new, late_frame]), dict(sorted({**counts, **late_counts}.items()))
        manifest = _manifest(ctx, sum(counts.values()), counts, Window(ctx.config.input.date_column, start, ctx.as_of),
                             late_counts)
        self._read = {"manifest": manifest, "lake": lake, "late_counts": late_counts}
        if not sum(counts.values()):
            _list_files(manifest, ctx, lake, [])
            return None
        outside = sorted(set(frames.distinct_values(new, "label", limit=MAX_CLASSES + 1)) - set(plan.saved.classes))
        if outside:
            raise _Refit(f"the new days bring label(s) {outside[:10]} outside the previous run's classes "
                         f"{list(plan.saved.classes)}")
        touched = frames.distinct(new, "item")
        runs = chain_runs(plan.previous, ctx.spark if ctx.reader.distributed else None)
        index = read_index(frames, plan.previous)
        rows = state_rows(frames, index, touched, runs)
        n_revisited, n_earlier, days = revisit_summary(frames, rows)
        earlier = frames.semi_join(ctx.reader.days(days), touched, ["item"]) if days else None
        labels = new if earlier is None else frames.union([new, earlier])
        _list_files(manifest, ctx, lake, sorted(set(counts) | set(days)))
        self._read.update(labels=labels, touched=touched, runs=runs, index=index, rows=rows, earlier=earlier,
                          revisited=(n_revisited, n_earlier), days=days)
        return _reading(ctx, labels, plan.saved.classes, sorted(set(counts) | set(days)))

    def manifest(self, prepared: Prepared) -> dict[str, Any]:
        return self._read["manifest"]

    # ---- fit -------------------------------------------------------------------------------------------------
    def fit_options(self, prepared: Prepared) -> RunOptions:
        """A full refit's options; an incremental night's add the previous run's parameters as the start and the
        carried statistics of the items it does not refit, in this night's worker order (the previous run's
        workers without a label tonight are kept)."""
        if self.full:
            return self.options
        plan, config, read = self.plan, self.ctx.config, self._read
        _with_previous_workers(prepared, plan.saved)
        enc = prepared.encoding
        model = _model_like(plan.saved, enc.n_workers)
        width = int(plan.carried.item_sums.shape[0])
        days = read["days"]
        removed = previous_sums(self.ctx.frames, read["earlier"], read["rows"], enc, self.ctx.as_of,
                                config.incremental.decay, width) if days else {}
        found = (int(removed.get("n_items", 0)), int(removed.get("n_labels", 0)))
        n_revisited, n_earlier = read["revisited"]
        if found != (n_revisited, n_earlier):
            raise InputError(
                f"the earlier labels of the refitted items are not those the previous run fitted: {found[0]} items "
                f"and {found[1]} labels on the days {days[:10]}, where it recorded {n_revisited} and {n_earlier}; "
                f"labels of a day were added or removed after a run read it; {FULL_REFIT}"
            )
        elapsed = (self.ctx.as_of - _dt.date.fromisoformat(plan.carried.as_of)).days
        base = _base(plan, enc, removed, config.incremental.decay, elapsed)
        read.update(model=model, base=base, elapsed=elapsed)
        return replace(self.options, warm_start=plan.saved,
                       carried=carried_stats(model, base.label_sums, base.item_sums))

    # ---- finish ----------------------------------------------------------------------------------------------
    def finish(self, fitted: Fitted) -> Night:
        """The night from its fit: the carried statistics it passes on, the item state of the items it fitted,
        the index of the chain, and the summary's ``incremental`` section."""
        ctx, read = self.ctx, self._read
        sums = _carry_pass(fitted)
        state = state_table(ctx.frames, _resp_table(fitted), read["labels"], ctx.as_of)
        if self.full:
            night = Night(fitted.model, fitted.result, fitted.prepared, fitted.summary, fitted.quality,
                          fitted.spammer_threshold, state=state, spark=ctx.spark, frames=ctx.frames,
                          partitions=read["lake"], carried=_carried(sums, ctx.as_of, ctx.as_of.isoformat(), ctx.config))
            _report(night, ctx, "full refit", self.reason, {"items_fitted": night.carried.n_items,
                                                            "labels_fitted": night.carried.n_labels})
            return night
        model, base = read["model"], read["base"]
        if model_parameters(fitted.model) != model_parameters(model):
            raise IncompatibleModelError(f"the fitted model differs from the previous run's; {FULL_REFIT}")
        carried = replace(base, label_sums=base.label_sums + sums["label_sums"],
                          item_sums=base.item_sums + sums["item_sums"],
                          worker_labels=base.worker_labels + sums["worker_labels"],
                          n_items=base.n_items + int(sums["n_items"]), n_labels=base.n_labels + int(sums["n_labels"]),
                          as_of=ctx.as_of.isoformat())
        night = Night(fitted.model, fitted.result, fitted.prepared, fitted.summary, fitted.quality,
                      fitted.spammer_threshold, state=state, spark=ctx.spark, frames=ctx.frames,
                      partitions=read["lake"], index=updated_index(ctx.frames, read["index"], read["touched"],
                                                                  len(read["runs"])),
                      previous=self.plan.previous, carried=carried)
        late = read["late_counts"]
        _report(night, ctx, "incremental", self.plan.reason, {
            "items_fitted": int(sums["n_items"]), "labels_fitted": int(sums["n_labels"]),
            "items_revisited": read["revisited"][0], "earlier_days": read["days"],
            "decay_factor": ctx.config.incremental.decay ** read["elapsed"],
            "metrics_cover": "the items fitted this night", "late_days": sorted(late),
            "late_labels": sum(late.values()),
        })
        return night

    def without_fit(self) -> Night:
        """A night without new labels: the previous result, with its carried summary decayed to this night."""
        ctx, plan, frames = self.ctx, self.plan, self.ctx.frames
        previous, spark = plan.previous.rstrip("/"), ctx.spark if ctx.reader.distributed else None
        summary = json.loads(_read_bytes(f"{previous}/summary.json", spark).decode("utf-8"))
        elapsed = (ctx.as_of - _dt.date.fromisoformat(plan.carried.as_of)).days
        carried = replace(plan.carried.decayed(ctx.config.incremental.decay ** elapsed), as_of=ctx.as_of.isoformat())
        workers = frames.to_pandas(frames.read(f"{previous}/workers", "the previous run's workers"))
        summary.update(iterations=0, history=[], converged=True, stop_reason="no new labels: the previous result is "
                       "carried forward", resumed_from_iteration=None, warnings=[], config=ctx.config.to_dict(),
                       timings=ctx.timer.timings)
        # what the previous run computed and this night did not (its engine choice is this night's, recorded below)
        for key in ("metrics", "quality", "small_input", "recovered", "warm_start", "engine_choice"):
            summary.pop(key, None)
        model = _model_like(plan.saved, len(plan.saved.workers))
        night = Night(model, None, None, summary, saved=plan.saved, carried=carried, spark=ctx.spark, frames=frames,
                      worker_table=workers, item_table=frames.no_rows(f"{previous}/items"),
                      state=frames.no_rows(state_path(previous)), index=read_index(frames, previous),
                      previous=plan.previous, partitions=self._read["lake"])
        record_inputs(summary, self._read["manifest"], Source(engine=summary["engine"], choice=ctx.choice.to_dict()))
        _report(night, ctx, "carried forward", "no labels on the days after the previous run",
                {"items_fitted": 0, "labels_fitted": 0, "decay_factor": ctx.config.incremental.decay ** elapsed})
        return night
