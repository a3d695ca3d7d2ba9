"""Run configuration: frozen dataclasses, loaded from TOML files and ``--set KEY=VALUE`` overrides.

Precedence (lowest first): the defaults below, ``conf/default.toml``-style files given with ``--config``,
then ``--set`` overrides, then explicit command-line flags (``--seed``, ``--engine`` ...).  Keys are
``section.name``.  The only tables are ``input``, ``gold``, ``output``, ``engine`` and the registered
algorithm names (exact, case-sensitive); anything else is an error that lists them.  Algorithm sections
(``[ds]``, ``[idbla]`` ...) are kept as plain dicts, every one of them (not only the chosen algorithm's)
checked by :func:`crowdspark.models.registry.check_params`, so that a typo in any section is an error that
lists the known keys.  Every value is brought to the type its dataclass field declares
(:func:`crowdspark.validation.coerce_fields`): ``max_iter = 1e9`` is the integer ``1000000000``.  See
``conf/default.toml`` for every key with its default and meaning.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import tomllib

from crowdspark.block import DEFAULT_MAX_BLOCK_LABELS, GoldSplit
from crowdspark.errors import ConfigError
from crowdspark.models.registry import (
    ALGORITHMS,
    algorithm_names,
    check_params,
    hyperparameters,
    model_class,
)
from crowdspark.validation import (
    check_choice,
    check_float,
    check_int,
    coerce_fields,
    did_you_mean,
    parse_bytes,
)

__all__ = [
    "DEFAULT_ALGORITHM",
    "InputConfig",
    "GoldConfig",
    "OutputConfig",
    "EngineConfig",
    "SparkConfig",
    "NightlyConfig",
    "IncrementalConfig",
    "QualityConfig",
    "RelabelConfig",
    "RunConfig",
    "load_config",
    "parse_override",
    "parse_value",
]

INPUT_FORMATS = ("auto", "csv", "parquet", "json")
OUTPUT_FORMATS = ("parquet", "csv")
#: a catalog table: <db>.<name>
TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*")
ENGINES = ("spark", "local")
#: the algorithm every face runs when none is named (the command line, the pyspark.ml face)
DEFAULT_ALGORITHM = "ads"


@dataclass(frozen=True)
class InputConfig:
    """Where the labels' columns are and how to read them.

    Attributes
    ----------
    item, worker, label : str
        Column names of the labels (crowd-kit data: ``item = "task"``).
    format : str
        ``auto`` (from the file extension), ``csv``, ``parquet`` or ``json`` (JSON lines).
    classes : tuple of str
        The class set, in the order used for posteriors, e.g. ``["0", "1"]``; empty: inferred from the labels
        (numeric order when every label is a number, else string order).  With a class set, a label outside it
        is an error.
    filter : str
        A Spark SQL condition on the labels as read, e.g. ``"worker NOT LIKE 'test-%'"``; Spark engine only;
        empty: every row.  It is code the job runs: never build it from untrusted values
        (``docs/security.md``).  For a window of days use ``date_column`` and ``window_days``, which follow
        the run's as-of date (a condition on ``current_date()`` makes a backfill read the future).
    date_column : str
        A column of ISO dates (``YYYY-MM-DD``, e.g. the lake's partition column ``date``) that the window of
        ``window_days`` and the run summary's per-day counts use; empty: none.
    window_days : int
        With ``date_column``: read the labels of the ``window_days`` days that end at the run's as-of date
        (``--as-of``, default the run id when it is a date, else today), both ends included; 0: every day up to
        the as-of date.  Spark prunes the partitions outside it.
    """

    item: str = "item"
    worker: str = "worker"
    label: str = "label"
    format: str = "auto"
    classes: tuple[str, ...] = ()
    filter: str = ""
    date_column: str = ""
    window_days: int = 0

    def __post_init__(self) -> None:
        coerce_fields(self, "input")
        check_choice("input.format", self.format, INPUT_FORMATS)
        if not isinstance(self.filter, str):
            raise ConfigError(f"input.filter must be a Spark SQL condition string, but got {self.filter!r}")
        for name in ("item", "worker", "label"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ConfigError(f"input.{name} must be a non-empty column name, but got {value!r}")
        if len({self.item, self.worker, self.label}) < 3:
            raise ConfigError(
                "input.item, input.worker and input.label must be three different columns, but got "
                f"{self.item!r}, {self.worker!r}, {self.label!r}"
            )
        if len(set(self.classes)) != len(self.classes):
            raise ConfigError(f"input.classes must not repeat a class, but got {list(self.classes)!r}")
        if not isinstance(self.date_column, str):
            raise ConfigError(f"input.date_column must be a column name, but got {self.date_column!r}")
        check_int("input.window_days", self.window_days, minimum=0)
        if self.window_days and not self.date_column:
            raise ConfigError("input.window_days needs input.date_column (the column of dates the window is on)")


@dataclass(frozen=True)
class GoldConfig:
    """The optional gold file (one row per item).

    Attributes
    ----------
    item, truth : str
        Column names of the gold file.
    format : str
        ``auto``, ``csv``, ``parquet`` or ``json``, as ``input.format``.
    fit_fraction : float
        Share of the gold items, in [0, 1], whose true class the fit holds fixed (every model learns its worker
        parameters from them); the items are chosen by a hash of the item id seeded by ``split_seed``, and every
        gold-based figure (error rate, NLL, per-level error, reports) uses only the others.  0: the gold only
        scores.
    split_seed : int
        Seed of that choice; it does not follow the run's ``seed``, so runs with other seeds hold out the same
        gold items.
    """

    item: str = "item"
    truth: str = "truth"
    format: str = "auto"
    fit_fraction: float = 0.0
    split_seed: int = 0

    def __post_init__(self) -> None:
        coerce_fields(self, "gold")
        check_choice("gold.format", self.format, INPUT_FORMATS)
        check_float("gold.fit_fraction", self.fit_fraction, minimum=0.0, maximum=1.0)
        check_int("gold.split_seed", self.split_seed, minimum=0, maximum=2**63 - 1)

    def split(self) -> GoldSplit:
        """Which gold items the fit holds fixed (:class:`crowdspark.block.GoldSplit`)."""
        return GoldSplit(fit_fraction=self.fit_fraction, seed=self.split_seed)


@dataclass(frozen=True)
class OutputConfig:
    """How the result tables are written.

    Attributes
    ----------
    format : str
        ``parquet``, or ``csv`` (array columns written as JSON strings).
    table : str
        A catalog table ``<db>.<name>`` that a run with ``--run-id`` publishes its whole current answer to
        after its commit (one row per item, as ``read_items`` gives it, with ``run_id`` and ``as_of``),
        replaced at once for readers; empty: no table.  crowdspark creates it and replaces only a table it
        created (table property ``crowdspark.kind``).
    history_table : str
        A catalog table ``<db>.<name>`` that gets one row per published run (``run_id``, ``as_of``, counts,
        metrics, algorithm from ``summary.json``); a run published again replaces its row.  Empty: with
        ``table``, ``<table>_history``.
    """

    format: str = "parquet"
    table: str = ""
    history_table: str = ""

    def __post_init__(self) -> None:
        coerce_fields(self, "output")
        check_choice("output.format", self.format, OUTPUT_FORMATS)
        for key in ("table", "history_table"):
            name = getattr(self, key)
            if name and not TABLE_NAME.fullmatch(name):
                raise ConfigError(f"output.{key} must be a catalog table written <db>.<name> (letters, digits, "
                                  f"underscores), but got {name!r}")
        if self.table and self.format != "parquet":
            raise ConfigError(f"output.table = {self.table!r} publishes the Parquet item tables, but output.format "
                              f"is {self.format!r}; set output.format = \"parquet\", or unset output.table")
        if self.history_table and not self.table:
            raise ConfigError(f"output.history_table = {self.history_table!r} needs output.table (the history "
                              "lists the runs published to it); set output.table too")


@dataclass(frozen=True)
class EngineConfig:
    """Which engine runs, and what applies to every engine.

    Attributes
    ----------
    name : str
        ``spark``, or ``local`` (numpy in one process, no Spark).
    max_block_labels : int
        Largest number of labels in one block (an item is never split).
    small_input_bytes : int
        A Spark run whose label files total fewer bytes (and that has no ``input.filter``) fits them with the
        local engine on the driver, which gives the same answers in seconds instead of several Spark jobs;
        ``0`` always distributes.  The run summary says which path ran (``small_input``).
    checkpoint_dir : str
        Where long fits save their state (a path the driver can write: local disk or a shared mount); the
        same command started again resumes from the last checkpoint.
    checkpoint_every : int
        Save the fit's state every this many sweeps (0 = off; needs ``checkpoint_dir``).
    max_memory : str
        The memory a fit may use on the driver's host, e.g. ``"4g"`` or ``"512m"`` (k, m, g, t: powers of 1024);
        empty: ``memory_share`` of what the host has (the smallest of its physical memory, its cgroup's limit and
        the address space ``ulimit -v`` leaves).  A fit whose predicted peak is above it stops before it
        allocates, with exit 2, the figures and the fixes (``summary.json``'s ``memory`` records both).
    memory_share : float
        In (0, 1]: the share of the host's memory a fit may use when ``max_memory`` is empty.
    """

    name: str = "spark"
    max_block_labels: int = DEFAULT_MAX_BLOCK_LABELS
    small_input_bytes: int = 8 * 1024 * 1024
    checkpoint_dir: str = ""
    checkpoint_every: int = 0
    max_memory: str = ""
    memory_share: float = 0.8

    def __post_init__(self) -> None:
        coerce_fields(self, "engine")
        check_choice("engine.name", self.name, ENGINES)
        check_int("engine.max_block_labels", self.max_block_labels, minimum=1)
        check_int("engine.small_input_bytes", self.small_input_bytes, minimum=0)
        check_int("engine.checkpoint_every", self.checkpoint_every, minimum=0)
        if not isinstance(self.checkpoint_dir, str):
            raise ConfigError(f"engine.checkpoint_dir must be a path, but got {self.checkpoint_dir!r}")
        if self.checkpoint_every and not self.checkpoint_dir:
            raise ConfigError("engine.checkpoint_every needs engine.checkpoint_dir (where to save the checkpoints)")
        if self.max_memory != "":
            parse_bytes("engine.max_memory", self.max_memory)
            object.__setattr__(self, "max_memory", str(self.max_memory))
        check_float("engine.memory_share", self.memory_share, minimum=0.0, maximum=1.0, strict_min=True)

    @property
    def max_memory_bytes(self) -> int:
        """``max_memory`` in bytes, 0 when it is empty."""
        return parse_bytes("engine.max_memory", self.max_memory) if self.max_memory != "" else 0


@dataclass(frozen=True)
class SparkConfig:
    """How the Spark engine runs (tuning; the defaults suit a local master and most clusters).

    Attributes
    ----------
    partitions : int
        Spark partitions of the item blocks; 0 = the cluster's default parallelism (number of cores), or one
        partition per 4M labels when that is more (block building holds a partition in pandas), rounded up to
        a multiple of the cores so that every core gets the same share of the sweeps.
    sweep_mode : str
        ``session`` runs a fit's sweeps in barrier jobs whose tasks keep their blocks (and per-item states)
        and exchange statistics with the driver over an authenticated TCP connection (tasks must reach the
        driver's host, ``docs/security.md``); ``jobs`` runs one Spark job per sweep; ``auto`` = ``session`` on
        a local master, and on a cluster when a probe at the first fit shows that every executor slot can run
        a barrier task that reaches the driver within 5 s, without dynamic allocation or Spark's encryption
        (``summary.json``'s ``sweep_mode`` says what was chosen and why).
    session_sweeps : int
        In sweep sessions, a stateful model's session ends after this many sweeps: its states are cached with
        a truncated lineage and a new session starts; a task failure replays at most this many sweeps.
    checkpoint_interval : int
        Stateful models (samplers, collapsed VI) truncate the Spark lineage every this many sweeps when each
        sweep is one Spark job (``sweep_mode = "jobs"``).
    tree_depth : int
        Depth of the ``treeAggregate`` that sums the statistics of the blocks.
    resident_blocks : str
        Keep the blocks in the Python workers between sweeps instead of streaming them from Spark's cache
        every sweep: ``auto`` (on with a local master, where every task can read the spill files), ``on`` or
        ``off``.
    cache_input : str
        Cache the label columns while they are validated and grouped into blocks (several scans): ``auto``
        caches CSV and JSON files and DataFrames passed in, and re-reads Parquet and ORC, whose three columns
        Spark reads faster than it caches them; ``on`` can pay where reads are slow (an object store);
        ``off`` never caches.
    """

    partitions: int = 0
    sweep_mode: str = "auto"
    session_sweeps: int = 100
    checkpoint_interval: int = 10
    tree_depth: int = 2
    resident_blocks: str = "auto"
    cache_input: str = "auto"

    def __post_init__(self) -> None:
        coerce_fields(self, "spark")
        check_int("spark.partitions", self.partitions, minimum=0)
        check_choice("spark.sweep_mode", self.sweep_mode, ("auto", "session", "jobs"))
        check_int("spark.session_sweeps", self.session_sweeps, minimum=1)
        check_int("spark.checkpoint_interval", self.checkpoint_interval, minimum=1)
        check_int("spark.tree_depth", self.tree_depth, minimum=1)
        check_choice("spark.resident_blocks", self.resident_blocks, ("auto", "on", "off"))
        check_choice("spark.cache_input", self.cache_input, ("auto", "on", "off"))


@dataclass(frozen=True)
class NightlyConfig:
    """How a run behaves in a schedule of runs (``--run-id``, ``--warm-start``).

    Attributes
    ----------
    on_incompatible : str
        When the warm-start model cannot start this run (another algorithm, a changed class set or number of
        levels): ``fail`` (exit 2 before the fit, saying why) or ``cold`` (run without it, with a warning in the
        log and the summary).
    on_no_new_data : str
        When the run reads no labels newer than the run it warm starts from (the same newest day with
        ``input.date_column``, else the same files): ``warn`` (a warning in the log and the summary) or ``fail``
        (exit 2 before the fit).
    keep_runs : int
        After a run, keep only the newest this many runs of the output root (by as-of date; never the one
        ``_LATEST.json`` names); 0 keeps all.
    lock_stale_hours : float
        On Hadoop filesystems, the lock of a run on another host counts as left by a killed run after this many
        hours (a run on this host is checked by its process id); local locks are released by the kernel.
    """

    on_incompatible: str = "fail"
    on_no_new_data: str = "warn"
    keep_runs: int = 0
    lock_stale_hours: float = 12.0

    def __post_init__(self) -> None:
        coerce_fields(self, "nightly")
        check_choice("nightly.on_incompatible", self.on_incompatible, ("fail", "cold"))
        check_choice("nightly.on_no_new_data", self.on_no_new_data, ("warn", "fail"))
        check_int("nightly.keep_runs", self.keep_runs, minimum=0)
        check_float("nightly.lock_stale_hours", self.lock_stale_hours, minimum=0.0, strict_min=True)


@dataclass(frozen=True)
class IncrementalConfig:
    """Incremental nights: a run that reads only the days after the previous run (and the earlier labels of the
    items those days touch) and carries the statistics of every other item forward (docs/incremental.md).

    Attributes
    ----------
    mode : str
        ``off``: every run fits all the labels it reads; ``on``: a run continues from the previous run of the
        output root (or its ``--warm-start`` run), and writes what the next night continues from.  Needs
        ``input.date_column`` and ``input.window_days = 0``; a night without a previous run, with
        ``--full-refit`` or past ``full_refit_days`` fits every day up to its as-of date (a full refit).
    decay : float
        In (0, 1]: every day, the carried statistics of items not labelled since are multiplied by this (1: no
        decay), so that the estimates follow workers whose reliability changes; 0.95 weighs a day 20 days old
        at about a third.
    full_refit_days : int
        A night whose previous full refit is this many days or more before its as-of date is a full refit; 0:
        only the first night and ``--full-refit``.
    drift_workers : int
        The run summary lists this many workers whose estimated accuracy moved most since the previous run.
    """

    mode: str = "off"
    decay: float = 1.0
    full_refit_days: int = 0
    drift_workers: int = 10

    def __post_init__(self) -> None:
        coerce_fields(self, "incremental")
        check_choice("incremental.mode", self.mode, ("off", "on"))
        check_float("incremental.decay", self.decay, minimum=0.0, maximum=1.0, strict_min=True)
        check_int("incremental.full_refit_days", self.full_refit_days, minimum=0)
        check_int("incremental.drift_workers", self.drift_workers, minimum=0)


@dataclass(frozen=True)
class QualityConfig:
    """The quality signals of a run (docs/quality.md): agreement and uncertainty per item and for the run,
    worker quality, calibration against the held-out gold.

    Attributes
    ----------
    enabled : bool
        Compute them (the ``items/`` and ``workers/`` quality columns, ``summary.json``'s ``quality`` and
        ``relabel/``); ``false`` leaves the outputs as they were without them.
    spammer_threshold : float
        A worker whose spammer probability (the posterior probability that its labels agree with the inferred
        classes only at chance rate, docs/quality.md) is above this is flagged ``spammer`` in ``workers/``.
    calibration_bins : int
        Equal-width confidence bins of the reliability table.
    """

    enabled: bool = True
    spammer_threshold: float = 0.5
    calibration_bins: int = 10

    def __post_init__(self) -> None:
        coerce_fields(self, "quality")
        check_float("quality.spammer_threshold", self.spammer_threshold, minimum=0.0, maximum=1.0)
        check_int("quality.calibration_bins", self.calibration_bins, minimum=1)


@dataclass(frozen=True)
class RelabelConfig:
    """The relabel queue (``relabel/``): the items one more label would help most.

    Attributes
    ----------
    budget : int
        How many items the queue lists (the first ones by expected error reduction, then lowest confidence);
        0: every item (a sort of the whole item table).
    """

    budget: int = 1000

    def __post_init__(self) -> None:
        coerce_fields(self, "relabel")
        check_int("relabel.budget", self.budget, minimum=0)


#: keys that moved from [engine] to [spark]: what an older configuration is told
MOVED_TO_SPARK = tuple(f.name for f in fields(SparkConfig))


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs besides paths."""

    algorithm: str = DEFAULT_ALGORITHM
    seed: int = 0
    input: InputConfig = field(default_factory=InputConfig)
    gold: GoldConfig = field(default_factory=GoldConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    nightly: NightlyConfig = field(default_factory=NightlyConfig)
    incremental: IncrementalConfig = field(default_factory=IncrementalConfig)
    quality: QualityConfig = field(default_factory=QualityConfig)
    relabel: RelabelConfig = field(default_factory=RelabelConfig)
    algorithms: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        coerce_fields(self)
        check_int("seed", self.seed, minimum=0, maximum=2**63 - 1)
        if not isinstance(self.algorithm, str):
            raise ConfigError(f"algorithm must be a name such as 'ds', but got {self.algorithm!r}")
        model_class(self.algorithm)
        if not isinstance(self.algorithms, Mapping):
            raise ConfigError(f"algorithms must map algorithm names to their parameters, but got {self.algorithms!r}")
        for name in self.algorithms:
            if name not in ALGORITHMS:
                raise _unknown_table(name)
        object.__setattr__(self, "algorithms", {k: check_params(k, v) for k, v in self.algorithms.items()})

    def algorithm_params(self, name: str | None = None) -> dict[str, Any]:
        """The ``[name]`` section (default: the chosen algorithm), possibly empty."""
        return dict(self.algorithms.get(name or self.algorithm, {}))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly view (for ``summary.json``)."""
        out: dict[str, Any] = {"algorithm": self.algorithm, "seed": self.seed}
        for section in _SECTIONS:
            obj = getattr(self, section)
            out[section] = {f.name: _jsonable(getattr(obj, f.name)) for f in fields(obj)}
        out["algorithms"] = {k: dict(v) for k, v in self.algorithms.items()}
        out["unused_sections"] = sorted(k for k in self.algorithms if k != self.algorithm)
        return out


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


_SECTIONS = {"input": InputConfig, "gold": GoldConfig, "output": OutputConfig, "engine": EngineConfig,
             "spark": SparkConfig, "nightly": NightlyConfig, "incremental": IncrementalConfig,
             "quality": QualityConfig, "relabel": RelabelConfig}
_TOP_KEYS = ("algorithm", "seed")


def _unknown_table(name: str) -> ConfigError:
    known = [*_SECTIONS, *algorithm_names()]
    return ConfigError(
        f"unknown configuration section [{name}]{did_you_mean(str(name), known)}; the sections are "
        f"{', '.join(_SECTIONS)} and the algorithm names {', '.join(algorithm_names())} (exact, case-sensitive)"
    )


def parse_value(raw: str) -> Any:
    """``raw`` read as a TOML value (``10``, ``1e-6``, ``true``, ``["a", "b"]``) or, if it is none, the
    string itself."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def parse_override(text: str) -> tuple[list[str], Any]:
    """Parse ``section.key=value``; the value is read by :func:`parse_value`."""
    if "=" not in text:
        raise ConfigError(f"--set must be KEY=VALUE (e.g. ds.max_iter=50), but got {text!r}")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"--set must be KEY=VALUE (e.g. ds.max_iter=50), but got {text!r}")
    return key.split("."), parse_value(raw)


def _merge(tree: dict[str, Any], path: list[str], value: Any) -> None:
    node = tree
    for part in path[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"configuration key {'.'.join(path)!r} goes below a value that is not a table")
    node[path[-1]] = value


def _read_toml(path: str | Path) -> dict[str, Any]:
    """The TOML file at ``path``; a missing, unreadable, non-UTF-8 or invalid file is a ConfigError."""
    where = f"configuration file {str(path)!r}"
    if os.path.isdir(path):
        raise ConfigError(f"{where} is a folder; --config takes a TOML file (e.g. conf/default.toml)")
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError as exc:
        raise ConfigError(f"{where} does not exist") from exc
    except OSError as exc:
        raise ConfigError(f"{where} cannot be read ({exc.strerror or exc}); check the path and its permissions") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{where} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); TOML files are "
            "UTF-8: is it a binary file, or saved in another encoding?"
        ) from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where} is not valid TOML: {exc}") from exc


def _deep_update(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep_update(base[key], value)
        else:
            base[key] = value


def _build_section(name: str, values: Any) -> Any:
    cls = _SECTIONS[name]
    if not isinstance(values, dict):
        raise ConfigError(f"[{name}] must be a table of keys, but got {values!r}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    moved = [k for k in unknown if name == "engine" and k in MOVED_TO_SPARK]
    if moved:
        raise ConfigError(
            f"{', '.join(f'engine.{k}' for k in moved)} moved to the [spark] section (Spark tuning): write "
            f"{', '.join(f'spark.{k}' for k in moved)} instead"
        )
    if unknown:
        raise ConfigError(
            f"unknown configuration key(s) {', '.join(f'{name}.{k}' for k in unknown)}; "
            f"known keys in [{name}]: {', '.join(sorted(known))}"
        )
    values = dict(values)
    if "classes" in values:
        classes = values["classes"]
        if not isinstance(classes, list):
            raise ConfigError(f"input.classes must be a list such as [\"0\", \"1\"], but got {classes!r}")
        values["classes"] = tuple(str(c) for c in classes)
    try:
        return cls(**values)
    except TypeError as exc:  # pragma: no cover - dataclass signature mismatch
        raise ConfigError(str(exc)) from exc


def load_config(
    files: list[str | Path] | None = None,
    overrides: list[str] | None = None,
    **explicit: Any,
) -> RunConfig:
    """Build a :class:`RunConfig` from TOML files, ``--set`` overrides and explicit values.

    Parameters
    ----------
    files : list of path, optional
        TOML files, later ones override earlier ones.
    overrides : list of str, optional
        ``section.key=value`` strings.
    **explicit
        Top-level values (``algorithm``, ``seed``) or ``engine_name``-style values set by dedicated
        command-line flags; ``None`` values are ignored.

    Raises
    ------
    ConfigError
        For unknown keys, bad values or unreadable files.
    """
    tree: dict[str, Any] = {}
    for path in files or []:
        _deep_update(tree, _read_toml(path))
    algorithm_overrides: list[tuple[list[str], Any]] = []
    for text in overrides or []:
        path, value = parse_override(text)
        _merge(tree, path, value)
        if path[0] in ALGORITHMS and len(path) > 1:
            algorithm_overrides.append((path, value))
    for key, value in explicit.items():
        if value is None:
            continue
        if "_" in key and key.split("_", 1)[0] in _SECTIONS:
            section, name = key.split("_", 1)
            _merge(tree, [section, name], value)
        else:
            tree[key] = value
    kwargs: dict[str, Any] = {}
    algorithms: dict[str, dict[str, Any]] = {}
    for key, value in tree.items():
        if key in _SECTIONS:
            kwargs[key] = _build_section(key, value)
        elif key in _TOP_KEYS:
            kwargs[key] = value
        elif key in ALGORITHMS:
            algorithms[key] = value
        elif isinstance(value, dict):
            raise _unknown_table(key)
        else:
            raise ConfigError(
                f"unknown configuration key {key!r}{did_you_mean(key, _TOP_KEYS)}; top-level keys are "
                f"{', '.join(_TOP_KEYS)} and the tables {', '.join(_SECTIONS)} and {', '.join(algorithm_names())}"
            )
    config = RunConfig(algorithms=algorithms, **kwargs)
    _check_overrides_apply(algorithm_overrides, config.algorithm)
    return config


def _check_overrides_apply(overrides: list[tuple[list[str], Any]], algorithm: str) -> None:
    """ConfigError for a ``--set`` of a parameter of an algorithm the run does not use.

    A run reads only its own algorithm's section (``[ads]`` for ``ads``, never ``[ds]``), so such an override
    would change nothing.  Sections in configuration files are allowed for every algorithm (the bundled
    ``conf/default.toml`` has one each); ``summary.json`` lists them as ``config.unused_sections``.
    """
    for path, value in overrides:
        section, key = path[0], ".".join(path[1:])
        if section == algorithm:
            continue
        own = f"{algorithm}.{key}"
        fix = (f"--set {own}={_text(value)} sets it for {algorithm}" if key in hyperparameters(algorithm)
               else f"the [{algorithm}] keys are {', '.join(hyperparameters(algorithm)) or '(none)'}")
        raise ConfigError(
            f"--set {section}.{key}={_text(value)} sets a parameter of {section}, but this run's algorithm is "
            f"{algorithm}, which reads only the [{algorithm}] section, so it would change nothing: {fix}; "
            f"or run {section} with --algorithm {section}"
        )


def _text(value: Any) -> str:
    """A ``--set`` value as the user would write it again."""
    if isinstance(value, bool):
        return str(value).lower()
    return value if isinstance(value, str) else repr(value)


def with_engine(config: RunConfig, **changes: Any) -> RunConfig:
    """A copy of ``config`` with engine settings changed."""
    return replace(config, engine=replace(config.engine, **changes))
