"""The Spark engine: blocks cached once on the executors, statistics tree-reduced every sweep.

Per sweep (MLlib's optimizer pattern):

1. broadcast the global parameters;
2. run the block function on every cached block (``mapPartitions``), summing its statistics within the
   partition;
3. ``treeAggregate`` the partition sums to the driver (additive statistics, a fresh zero);
4. destroy the broadcast once no cached data can need it again.

Stateless models (Dawid-Skene) read the same cached block RDD every sweep and destroy each broadcast at
once.  Stateful models (samplers, collapsed VI) produce a new cached RDD of ``(block, state)`` per sweep;
its lineage is truncated every ``checkpoint_interval`` sweeps (``localCheckpoint``, or a reliable
``checkpoint`` when the SparkContext has a checkpoint directory), and the broadcasts the older RDDs were
computed from are destroyed only then, so a lost cached partition can always be recomputed.  (The
checkpointed RDD's own broadcast lives until the next truncation: Spark still serializes it with tasks.)  Randomness
comes from (seed, sweep, item key), so a recomputed or retried task gives the same result.

Nothing item-level is collected: the driver sees statistics and parameters sized by workers and classes,
and, from :meth:`SparkEngine.write_items` when asked, a bounded number of rows per partition (the first rows
of the relabel queue).
"""

from __future__ import annotations

import logging
import os
import pickle
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from crowdspark.block import Block
from crowdspark.engine.base import BlockFn, Engine, ItemBatchFn, ItemFn, ItemHeadFn, WrittenItems
from crowdspark.engine.spark.resident import (
    BlockHandle,
    forget,
    make_spill_directory,
    remove_spill_directory,
    remove_stale_spill_directories,
    resolve,
    spill,
)
from crowdspark.engine.spark.session import PROBE_SECONDS, InjectedTaskFailure, SessionError, SweepSession, probe
from crowdspark.errors import ConfigError
from crowdspark.io.datatree import tree_from_bytes, tree_to_bytes
from crowdspark.io.paths import is_local, strip_file_scheme
from crowdspark.io.tables import remove_unfinished_parts, write_parquet_part
from crowdspark.models.base import State
from crowdspark.stats import Stats, add_stats

__all__ = ["SparkEngine", "spill_target", "round_robin_keys"]

log = logging.getLogger(__name__)

_BLOCK = 0
_LOOPBACK = "127.0.0.1"
_STATS = 1
#: a stateful session ends early when the requests it keeps for a replay exceed this (driver memory)
_MAX_REPLAY_BYTES = 256 * 1024 * 1024


def _with_empty_state(block: Block) -> tuple[int, tuple[Block, State]]:
    return (_BLOCK, (block, None))


def _is_block(element: tuple[int, Any]) -> bool:
    return element[0] == _BLOCK


def _is_stats(element: tuple[int, Any]) -> bool:
    return element[0] == _STATS


def _payload(element: tuple[int, Any]) -> Any:
    return element[1]


def _stateless_partition(fn: BlockFn, broadcast, elements: Iterator) -> Iterator[Stats]:
    value = broadcast.value
    total: Stats = {}
    for tag, (block, state) in elements:
        if tag == _BLOCK:
            total = add_stats(total, fn(resolve(block), state, value)[1])
    yield total


def _stateful_partition(fn: BlockFn, broadcast, elements: Iterator) -> Iterator[tuple[int, Any]]:
    value = broadcast.value
    total: Stats = {}
    for tag, (block, state) in elements:
        if tag != _BLOCK:
            continue
        new_state, stats = fn(resolve(block), state, value)
        total = add_stats(total, stats)
        yield (_BLOCK, (block, new_state))  # the handle (or block) as it came: blocks stay where they are
    yield (_STATS, total)


def _keyed_state(element: tuple[int, Any]) -> tuple[str, State]:
    block, state = element[1]
    return (str(resolve(block).item_ids[0]), state)


#: the Spark engine's saved block states
_STATE_SCHEMA = "block string, state binary"


def _state_row(element: tuple[int, Any]) -> tuple[str, bytearray | None]:
    """A block's first item id and its state as ``.npz`` bytes (``None`` for no state)."""
    key, state = _keyed_state(element)
    return (key, None if state is None else bytearray(tree_to_bytes(state)))


def _state_pair(row) -> tuple[str, State]:
    return (row[0], None if row[1] is None else tree_from_bytes(bytes(row[1])))


def _file_uri(path: str) -> str:
    """A path of the driver's filesystem as a ``file:`` URI (a bare path would be on Spark's default
    filesystem, HDFS on a cluster)."""
    return path if path.startswith("file:") else Path(path).absolute().as_uri()


def _keyed_block(element: tuple[int, Any]) -> tuple[str, Block]:
    block = element[1][0]
    return (str(resolve(block).item_ids[0]), block)


def _spilled(directory: str, engine_id: str, block: Block) -> tuple[int, tuple[BlockHandle, State]]:
    return (_BLOCK, (spill(directory, engine_id, block), None))


def _joined(pair: tuple[str, tuple[Block, State]]) -> tuple[int, tuple[Block, State]]:
    return (_BLOCK, pair[1])


def _fail_first_attempt(fn: BlockFn, block: Block, state: State, value: Any) -> tuple[State, Stats]:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is not None and context.attemptNumber() == 0 and context.partitionId() == 0:
        raise InjectedTaskFailure.first_attempt()
    return fn(block, state, value)


def _items_partition(fn: ItemFn, broadcast, elements: Iterator) -> Iterator[tuple[bytes]]:
    value = broadcast.value
    for tag, (block, state) in elements:
        if tag == _BLOCK:
            block = resolve(block)
            yield (pickle.dumps((block, fn(block, state, value)), protocol=5),)


def _item_batches(fn: ItemFn, to_batch: ItemBatchFn, value: Any, elements: Iterator) -> Iterator[Any]:
    """Each block's item batch (``to_batch`` of its results), one block at a time."""
    for tag, (block, state) in elements:
        if tag == _BLOCK:
            block = resolve(block)
            yield to_batch(block, fn(block, state, value))


def _ipc_bytes(data) -> bytes:
    """An Arrow record batch or table as Arrow IPC stream bytes."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write(data)
    return sink.getvalue().to_pybytes()


def _item_batches_partition(fn: ItemFn, to_batch: ItemBatchFn, broadcast, elements: Iterator) -> Iterator[tuple[bytes]]:
    """Each block's item batch, as Arrow IPC stream bytes: the block's label arrays stay where they are."""
    for batch in _item_batches(fn, to_batch, broadcast.value, elements):
        yield (_ipc_bytes(batch),)


class _Fold:
    """``head`` folded over the batches that pass through :meth:`through`; ``kept`` is its last result."""

    def __init__(self, head: ItemHeadFn) -> None:
        self.head = head
        self.kept = None

    def through(self, batches: Iterator) -> Iterator:
        for batch in batches:
            self.kept = self.head(self.kept, batch)
            yield batch


def _write_items_partition(fn: ItemFn, to_batch: ItemBatchFn, directory: str, schema, head: ItemHeadFn | None,
                           broadcast, elements: Iterator) -> Iterator[tuple[int, bytes | None]]:
    """The partition's item batches written as its one Parquet file of ``directory``
    (:func:`~crowdspark.io.tables.write_parquet_part`, numbered by the partition); yields the rows written and
    what ``head`` kept of the batches (Arrow IPC bytes; ``None`` without ``head`` or batches)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    batches = _item_batches(fn, to_batch, broadcast.value, elements)
    fold = _Fold(head) if head is not None else None
    rows = write_parquet_part(batches if fold is None else fold.through(batches), directory, context.partitionId(),
                              schema, str(context.taskAttemptId()), dictionary=("label",))
    yield rows, (None if fold is None or fold.kept is None else _ipc_bytes(fold.kept))


def _kept_table(blobs: list[bytes]):
    """The tables of Arrow IPC stream bytes, concatenated; ``None`` for no bytes."""
    import pyarrow as pa

    tables = [pa.ipc.open_stream(blob).read_all() for blob in blobs]
    return pa.concat_tables(tables) if tables else None


def _decode_items(batches):
    """mapInArrow function: Arrow IPC stream bytes (one value per block) -> the blocks' item batches."""
    import pyarrow as pa

    for batch in batches:
        for blob in batch.column(0).to_pylist():
            yield from pa.ipc.open_stream(blob).read_all().to_batches()


def round_robin_keys(tasks: int, index: int, elements: Iterator) -> Iterator:
    """``(task, element)`` for the elements of partition ``index``: task ``(index + j) % tasks``."""
    for j, element in enumerate(elements):
        yield (index + j) % tasks, element


def _regroup(rdd, tasks: int):
    """``rdd``'s elements dealt over ``tasks`` partitions one by one: element j of partition p goes to
    partition (p + j) % tasks, so every task gets the same number of blocks (within one per partition).

    ``rdd.coalesce(tasks, shuffle=True)`` does not: PySpark shuffles batches of pickled elements, not
    elements, and a batch lands on one partition chosen from a seed per input partition, so regrouping the
    few partitions of a previous session's result can put every block on one core
    (docs/decisions/0110-regrouping.md).
    """
    keyed = rdd.mapPartitionsWithIndex(partial(round_robin_keys, tasks))
    return keyed.partitionBy(tasks, _identity).values()


def _identity(key: int) -> int:
    return key


#: the sweep mode's reason when no fit of the run swept (its models fit in one pass, or nothing was fitted)
_NO_SWEEPS = ("no fit of this run sweeps (a one-pass model such as mv or wawa fits in one Spark job), so "
              "spark.sweep_mode did not apply")


def session_addresses(master: str, conf) -> tuple[str, str]:
    """Where a sweep session's server listens and where its tasks connect: the narrowest address that works.

    On a local master (``local``, ``local[n]``, ``local-cluster[...]``) every executor runs on this machine,
    so both are the loopback address.  Otherwise the server listens on ``spark.driver.bindAddress`` if it is
    set, else on ``spark.driver.host``, and the tasks connect to ``spark.driver.host`` (the address Spark
    tells executors).

    Parameters
    ----------
    master : str
        ``SparkContext.master``.
    conf : pyspark.SparkConf
        The context's configuration.

    Returns
    -------
    (bind, host) : tuple of str

    Raises
    ------
    ConfigError
        A cluster master without ``spark.driver.host``.
    """
    if master.startswith("local"):
        return _LOOPBACK, _LOOPBACK
    host = conf.get("spark.driver.host")
    if not host:
        raise ConfigError(
            f"spark.driver.host is not set on the master {master!r}: sweep sessions need the address executors "
            "reach the driver at; set spark.driver.host, or set spark.sweep_mode=jobs"
        )
    return conf.get("spark.driver.bindAddress") or host, host


#: settings that make Spark encrypt its own traffic; a sweep session's frames are authenticated, not encrypted
ENCRYPTION_SETTINGS = ("spark.network.crypto.enabled", "spark.ssl.rpc.enabled", "spark.ssl.enabled")


def _on(conf, key: str) -> bool:
    return (conf.get(key) or "false").strip().lower() == "true"


def executor_slots(sc) -> int:
    """Tasks the application's executors can run at once (what a barrier stage may use)."""
    jsc = sc._jsc.sc()
    return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))


@dataclass(frozen=True)
class SweepChoice:
    """How a run's sweeps go to Spark, and why.

    Attributes
    ----------
    mode : str
        ``"session"`` (sweep sessions) or ``"jobs"`` (one Spark job per sweep).
    reason : str
        One sentence, for the log and ``summary.json``.
    tasks : int
        Barrier tasks of a session (0 in jobs mode, or when it follows from the partitions).
    """

    mode: str
    reason: str
    tasks: int = 0


def static_choice(requested: str, master: str, conf) -> SweepChoice | None:
    """The sweep mode when the configuration alone decides it; ``None`` when only a probe can.

    Parameters
    ----------
    requested : {"auto", "session", "jobs"}
        ``spark.sweep_mode``.
    master : str
        ``SparkContext.master``.
    conf : pyspark.SparkConf or mapping

    Raises
    ------
    ConfigError
        ``session`` was asked for where a barrier stage cannot run (dynamic allocation on a cluster).
    """
    if requested == "jobs":
        return SweepChoice("jobs", "spark.sweep_mode = jobs")
    local = master.startswith("local")
    if not local and _on(conf, "spark.dynamicAllocation.enabled"):
        reason = "spark.dynamicAllocation.enabled is true, and a barrier stage needs a fixed set of executors"
        if requested == "session":
            raise ConfigError(f"spark.sweep_mode = session cannot run: {reason}; set spark.sweep_mode=auto "
                              "(one Spark job per sweep) or turn dynamic allocation off")
        return SweepChoice("jobs", reason)
    if local:
        if requested == "session":
            return SweepChoice("session", "spark.sweep_mode = session")
        return SweepChoice("session", "local master: the tasks reach the driver on the loopback address")
    encrypted = [key for key in ENCRYPTION_SETTINGS if _on(conf, key)]
    if requested == "auto" and encrypted:
        return SweepChoice("jobs", f"{encrypted[0]} is true: Spark encrypts its traffic, and a sweep session's "
                                   "frames are authenticated but not encrypted; set spark.sweep_mode=session to use "
                                   "sessions anyway (docs/security.md)")
    return None


def _new_engine_id() -> str:
    """A new engine's id (16 hex digits): it names the engine's spill folder and its blocks' handles."""
    return uuid.uuid4().hex[:16]


def _spill_root(sc) -> str:
    """Where resident spill folders go: the first ``spark.local.dir``, else the temporary folder."""
    return sc.getConf().get("spark.local.dir", tempfile.gettempdir()).split(",")[0]


def _new_spill_directory(sc, engine_id: str) -> str:
    """A new spill folder of ``engine_id`` (:func:`~crowdspark.engine.spark.resident.make_spill_directory`), the stale
    ones of this host deleted first."""
    root = _spill_root(sc)
    remove_stale_spill_directories(root)
    return make_spill_directory(root, engine_id)


def spill_target(sc, resident_blocks: str) -> tuple[str, str] | None:
    """A new spill folder and engine id that blocks can be written to before the engine exists (then pass them
    to :class:`SparkEngine` as ``spilled``), on a local master whose engine keeps its blocks resident
    (``spark.resident_blocks`` ``auto`` or ``on``); ``None`` elsewhere (a cluster's tasks do not share the
    driver's disk)."""
    if not sc.master.startswith("local") or resident_blocks == "off":
        return None
    engine_id = _new_engine_id()
    return _new_spill_directory(sc, engine_id), engine_id


class SparkEngine(Engine):
    """Holds the blocks as a cached RDD.

    Parameters
    ----------
    blocks : pyspark.RDD of Block
        Blocks partitioned by item (see :func:`crowdspark.io.spark_reader.block_rdd`).
    checkpoint_interval : int
        With one Spark job per sweep, stateful models truncate the lineage every this many sweeps.
    session_sweeps : int
        A sweep session of a stateful model ends after this many sweeps (its states are then cached with a
        truncated lineage, and a task failure replays at most this many sweeps); each end sends the states
        through Spark's cache and starts a new barrier job (its cost:
        docs/decisions/0085-stateful-sessions.md).
    tree_depth : int
        Depth of ``treeAggregate``.
    inject_task_failure : int
        Test hook: the first attempt of partition 0 fails at this sweep (0 = off).
    resident_blocks : {"auto", "on", "off"}
        Keep blocks in the Python workers between jobs (:mod:`crowdspark.engine.spark.resident`).
    sweep_mode : {"auto", "session", "jobs"}
        ``jobs``: one Spark job per sweep.  ``session``: the sweeps of a fit in barrier jobs that keep the
        blocks and states in the tasks (:mod:`crowdspark.engine.spark.session`).  ``auto``: ``session`` on a
        local master; on a cluster, ``session`` if the first fit's probe (:func:`~crowdspark.engine.spark.session.probe`)
        shows that a barrier stage can run on every executor slot and that its tasks reach the driver within
        a few seconds, and neither dynamic allocation nor Spark's encryption is on; else ``jobs``.  The choice
        and its reason are in :meth:`report`.
    spilled : (str, str), optional
        ``blocks`` holds :class:`~crowdspark.engine.spark.resident.BlockHandle` of blocks already written to this
        spill folder (:func:`spill_target`) with this engine id: the engine is resident, adopts the folder and
        deletes it when it closes.

    Notes
    -----
    Stateful models truncate their lineage with ``checkpoint()`` when the SparkContext has a checkpoint
    directory (``spark.checkpoint.dir``), which survives lost executors, and with ``localCheckpoint()``
    otherwise, which does not: on a cluster, a lost executor then fails a stateful fit once its first
    truncation is behind it (a warning says so).
    """

    name = "spark"

    def __init__(
        self,
        blocks,
        *,
        checkpoint_interval: int = 10,
        session_sweeps: int = 100,
        tree_depth: int = 2,
        inject_task_failure: int = 0,
        resident_blocks: str = "auto",
        sweep_mode: str = "auto",
        spilled: tuple[str, str] | None = None,
    ) -> None:
        from pyspark import StorageLevel

        self._storage = StorageLevel.MEMORY_AND_DISK
        self.sc = blocks.context
        self.checkpoint_interval = checkpoint_interval
        self.session_sweeps = session_sweeps
        self.tree_depth = tree_depth
        self.inject_task_failure = inject_task_failure
        self.engine_id = _new_engine_id() if spilled is None else spilled[1]
        self.local = self.sc.master.startswith("local")
        self.resident = spilled is not None or resident_blocks == "on" or (resident_blocks == "auto" and self.local)
        self.sweep_mode = sweep_mode
        self.choice = static_choice(sweep_mode, self.sc.master, self.sc.getConf())
        self._warned_local_checkpoints = False
        self._session: SweepSession | None = None
        self._in_fit = False
        self._hold = False
        self._sessions_run = 0
        self._session_restarts = 0
        self._spill_dir = None if spilled is None else spilled[0]
        element = _with_empty_state  # blocks given as handles (``spilled``) or kept in Spark's cache
        if spilled is None and self.resident:
            self._spill_dir = _new_spill_directory(self.sc, self.engine_id)
            element = partial(_spilled, self._spill_dir, self.engine_id)
        self._base = blocks.map(element).persist(self._storage)
        self._current = self._base  # elements (tag, payload); blocks with their current state
        self._anchor = self._base  # the newest RDD whose lineage was truncated (or the base)
        self._uncheckpointed: list = []  # the newest cached sweep, if it is not the anchor
        self._pending_broadcasts: list = []  # broadcasts the RDDs since the anchor depend on
        self._sweeps_since_anchor = 0

    def materialize(self) -> int:
        """Build and cache the blocks now (one job); returns the number of blocks."""
        return self._base.count()

    @property
    def n_partitions(self) -> int:
        return self._base.getNumPartitions()

    def _aggregate(self, rdd) -> Stats:
        return rdd.treeAggregate({}, add_stats, add_stats, depth=self.tree_depth)

    @property
    def sessions(self) -> bool:
        """Whether fits run in sweep sessions (``False`` until a cluster's first fit has decided)."""
        return self.choice is not None and self.choice.mode == "session"

    @property
    def reliable_checkpoints(self) -> bool:
        """Whether lineage truncations are written to the SparkContext's checkpoint directory."""
        return bool(self.sc.getCheckpointDir())

    def _truncate(self, rdd) -> None:
        if self.reliable_checkpoints:
            rdd.checkpoint()
        else:
            rdd.localCheckpoint()

    def _decide(self) -> SweepChoice:
        """Probe the cluster (``auto`` or ``session`` on a cluster master) and choose the sweep mode.

        Raises
        ------
        ConfigError
            ``spark.sweep_mode = session`` and sessions cannot run here (the message says why).
        """
        slots = executor_slots(self.sc)
        tasks = min(self.n_partitions, slots)
        try:
            bind, host = session_addresses(self.sc.master, self.sc.getConf())
        except ConfigError as error:
            reason: str | None = str(error)
        else:
            reason = probe(self.sc, tasks, host, bind) if tasks >= 1 else "no executor has registered a slot"
        if reason is None:
            return SweepChoice("session", f"{tasks} barrier tasks (one per slot) reached the driver at {host} within "
                                          f"{PROBE_SECONDS:g} s", tasks)
        if self.sweep_mode == "session":
            raise ConfigError(f"spark.sweep_mode = session cannot run: {reason}; set spark.sweep_mode=auto to fall "
                              "back to one Spark job per sweep")
        log.warning("spark engine: one Spark job per sweep, because %s", reason)
        return SweepChoice("jobs", reason)

    def begin_sweeps(self, stateful: bool) -> None:
        """A fit starts: with sessions on, its sweeps run in sweep sessions (:mod:`crowdspark.engine.spark.session`).

        On a cluster, the run's first fit decides whether they are on (:meth:`_decide`).  Sessions start at the
        fit's first sweep.  A session of a model with per-item state ends every ``session_sweeps`` sweeps (its
        states become the new cached RDD, with a truncated lineage), when its replay log passes 256 MiB, and
        before anything else needs the cluster (checkpoints, item results).
        """
        if self.choice is None:
            self.choice = self._decide()
            log.info("spark engine: sweep mode %s (%s)", self.choice.mode, self.choice.reason)
        if stateful and not self.local and not self.reliable_checkpoints and not self._warned_local_checkpoints:
            self._warned_local_checkpoints = True
            log.warning("spark engine: no checkpoint directory is set, so this fit keeps its per-item states with "
                        "local checkpoints, and a lost executor fails it; set spark.checkpoint.dir to a folder "
                        "on a filesystem every executor can reach (e.g. HDFS) to survive one")
        self._in_fit = self._in_fit or self.sessions

    def end_sweeps(self) -> None:
        """The fit's sweeps are over: its session ends, unless it is stateless and :meth:`sweeps_held` holds it
        for the passes that follow."""
        self._in_fit = False
        session = self._session
        if session is None or session.stateful or not self._hold:
            self._close_session()

    @contextmanager
    def sweeps_held(self) -> Iterator[None]:
        """Within this scope a stateless sweep session outlives the fit's sweeps, and the stateless
        :meth:`map_reduce` calls that follow (the evaluation) run in it: on the tasks whose Python workers
        hold the blocks, with the statistics summed in the tasks (no job, no tree reduction, no block loaded
        again).  Everything else that needs the cluster ends the session first (:meth:`_per_block`,
        :meth:`save_states`, :meth:`load_states`), and the scope's end does.  Code inside the scope must not
        start Spark jobs of its own: the session's tasks occupy every slot until it ends.
        """
        self._hold = True
        try:
            yield
        finally:
            self._hold = False
            self._close_session()

    def _new_session(self, rdd, stateful: bool, inject_task_failure: int = 0) -> SweepSession:
        bind, host = session_addresses(self.sc.master, self.sc.getConf())
        self._sessions_run += 1
        return SweepSession(
            rdd, host, bind=bind, stateful=stateful, storage=self._storage, reliable=self.reliable_checkpoints,
            inject_task_failure=inject_task_failure,
        )

    def _start_session(self, stateful: bool) -> SweepSession:
        tasks = self.choice.tasks or max(1, min(self.n_partitions, self.sc.defaultParallelism))
        # a barrier stage cannot narrow-coalesce its parent (SPARK-24820): more partitions than slots are
        # regrouped by a shuffle of the cached elements (only small handles in resident mode)
        rdd = self._current if self._current.getNumPartitions() == tasks else _regroup(self._current, tasks)
        self._session = self._new_session(rdd, stateful, self.inject_task_failure)
        return self._session

    def _close_session(self) -> None:
        """End the running session; a stateful one's final states become the current cached RDD.

        Raises
        ------
        SessionError
            A stateful session's job failed after its sweeps (its final states were lost, e.g. with an
            executor) and running the session again failed too.
        """
        if self._session is None:
            return
        session, self._session = self._session, None
        session.close()
        self._session_restarts += session.restarts
        if not session.stateful:
            return
        if session.failed:
            session = self._run_again(session)
        self._adopt(session.result)

    def _run_again(self, failed: SweepSession) -> SweepSession:
        """A new session on the failed one's elements, served the failed one's requests, and closed."""
        requests = failed.requests
        log.warning("spark engine: the session's final states were lost after its %d sweeps (%s); running them "
                    "again", len(requests), failed.error)
        session = self._new_session(failed.input, stateful=True)
        try:
            session.replay(requests)
        finally:
            session.close()
            self._session_restarts += session.restarts
        if session.failed:
            raise SessionError(f"the sweep session failed twice after its sweeps; last error: {session.error}")
        return session

    def _adopt(self, rdd) -> None:
        """Make ``rdd`` (states with a truncated lineage, materialized) current; free everything older."""
        for old in self._uncheckpointed:
            old.unpersist(blocking=False)
        self._uncheckpointed = []
        self._release_until(rdd, None)
        self._pending_broadcasts = []
        self._current = rdd

    def session_report(self) -> dict[str, Any]:
        """For run summaries: whether sessions are on, how many ran, how often Spark restarted their tasks."""
        return {"enabled": self.sessions, "sessions": self._sessions_run, "task_restarts": self._session_restarts}

    def map_reduce(self, fn: BlockFn, value: Any, *, stateful: bool, sweep: int = 0) -> Stats:
        if not self._in_fit and self._session is not None:  # a held session (:meth:`sweeps_held`)
            if stateful:
                self._close_session()
            else:
                return self._session.map_reduce(fn, value, sweep)
        if self._in_fit:
            session = self._session
            if session is not None and (
                session.stateful != stateful
                or (stateful and session.served >= self.session_sweeps)
                or session.replay_bytes > _MAX_REPLAY_BYTES
            ):
                self._close_session()
                session = None
            if session is None:
                session = self._start_session(stateful)
            return session.map_reduce(fn, value, sweep)
        if self.inject_task_failure and sweep == self.inject_task_failure:
            fn = partial(_fail_first_attempt, fn)
        broadcast = self.sc.broadcast(value)
        if not stateful:
            try:
                return self._aggregate(self._current.mapPartitions(partial(_stateless_partition, fn, broadcast)))
            finally:
                broadcast.destroy()
        new = self._current.mapPartitions(partial(_stateful_partition, fn, broadcast), preservesPartitioning=True)
        self._sweeps_since_anchor += 1
        truncate = self._sweeps_since_anchor >= self.checkpoint_interval
        new.persist(self._storage)
        if truncate:
            self._truncate(new)
        stats = self._aggregate(new.filter(_is_stats).map(_payload))
        self._pending_broadcasts.append(broadcast)
        self._current = new.filter(_is_block)
        # the previous sweep's RDD is no longer read (``new`` is materialized); a lost partition of ``new``
        # is recomputed from the anchor with the broadcasts kept in ``_pending_broadcasts``
        for rdd in self._uncheckpointed:
            rdd.unpersist(blocking=False)
        self._uncheckpointed = []
        if truncate:
            self._release_until(new, broadcast)
        else:
            self._uncheckpointed.append(new)
        return stats

    def _release_until(self, anchor, anchor_broadcast) -> None:
        """``anchor`` has a truncated lineage: free everything older.

        The anchor's own broadcast stays alive: the (checkpointed) RDD object still references it, and
        Spark serializes that reference with every task that reads the anchor.
        """
        if self._anchor is not self._base:
            self._anchor.unpersist(blocking=False)
        for broadcast in self._pending_broadcasts:
            if broadcast is not anchor_broadcast:
                broadcast.destroy()
        self._pending_broadcasts = [anchor_broadcast]
        self._anchor = anchor
        self._sweeps_since_anchor = 0
        log.debug("lineage truncated; older cached sweeps and broadcasts released")

    def save_states(self, path: str) -> None:
        """Write ``(first item id, state)`` of every block as a Parquet table ``block string, state
        binary`` (each state an ``.npz`` archive of :mod:`crowdspark.io.datatree`; no pickle).

        ``path`` is a path of the driver's filesystem (a shared mount on a cluster), not of Spark's
        default filesystem.
        """
        from pyspark.sql import SparkSession

        self._close_session()
        spark = SparkSession.builder.getOrCreate()
        spark.createDataFrame(self._current.map(_state_row), _STATE_SCHEMA).write.parquet(_file_uri(path))

    def load_states(self, path: str) -> None:
        """Join saved states onto the cached blocks by each block's first item id (one shuffle)."""
        from pyspark.sql import SparkSession

        self._close_session()
        spark = SparkSession.builder.getOrCreate()
        states = spark.read.schema(_STATE_SCHEMA).parquet(_file_uri(path)).rdd.map(_state_pair)
        restored = self._base.map(_keyed_block).join(states).map(_joined).persist(self._storage)
        self._truncate(restored)
        n_restored, n_blocks = restored.count(), self.materialize()
        if n_restored != n_blocks:
            restored.unpersist(blocking=False)
            raise ConfigError(
                f"the checkpoint's block states in {path!r} do not match the blocks ({n_restored} of {n_blocks} "
                "found); delete the checkpoint to start over"
            )
        self._adopt(restored)

    def _per_block(self, partition_fn, value: Any):
        """``partition_fn(broadcast, elements)`` over the current blocks, lazily; the broadcast of ``value`` is
        kept until :meth:`close`."""
        self._close_session()
        broadcast = self.sc.broadcast(value)
        self._pending_broadcasts.append(broadcast)
        return self._current.mapPartitions(partial(partition_fn, broadcast))

    def item_blobs(self, fn: ItemFn, value: Any):
        """RDD of one-element tuples holding a pickled ``(block, ItemResult)`` per block (lazy)."""
        return self._per_block(partial(_items_partition, fn), value)

    def items(self, fn: ItemFn, value: Any, to_batch: ItemBatchFn, schema: str):
        """The item table as a lazy Spark DataFrame of ``schema``: each block's results are turned into an
        Arrow batch by ``to_batch`` where the block is, and travel as Arrow IPC bytes (no Python object per
        item, no block)."""
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
        batches = self._per_block(partial(_item_batches_partition, fn, to_batch), value)
        return spark.createDataFrame(batches, "blob binary").mapInArrow(_decode_items, schema)

    def write_items(self, fn: ItemFn, value: Any, to_batch: ItemBatchFn, schema: str, directory: str,
                    head: ItemHeadFn | None = None) -> WrittenItems | None:
        """Write the item table (``schema``, Spark DDL) as Parquet into ``directory`` from the tasks that hold the
        blocks, where the executors share the driver's filesystem (a local master) and ``directory`` is a local
        path; ``None`` elsewhere (nothing written: the caller writes :meth:`items`).

        One job: each task writes its partition's item batches with pyarrow into one file of ``directory``
        (:func:`~crowdspark.io.tables.write_parquet_part`: a retried attempt replaces the file) and returns its
        row count and what ``head`` kept of its batches (a small Arrow table, as IPC bytes); no row passes
        through the JVM.

        Returns
        -------
        WrittenItems or None
            Rows written, and the partitions' kept tables concatenated.
        """
        if not (self.local and is_local(directory)):
            return None
        from pyspark.sql.pandas.types import to_arrow_schema
        from pyspark.sql.types import DataType

        directory = os.path.abspath(strip_file_scheme(directory))  # the driver's, whatever the tasks' working folder
        arrow = to_arrow_schema(DataType.fromDDL(schema))
        parts = self._per_block(partial(_write_items_partition, fn, to_batch, directory, arrow, head), value).collect()
        removed = remove_unfinished_parts(directory)
        if removed:
            log.info("spark engine: removed %d unfinished item files of failed attempts", len(removed))
        kept = _kept_table([blob for _, blob in parts if blob is not None])
        return WrittenItems(sum(rows for rows, _ in parts), kept)

    def report(self) -> dict[str, Any]:
        """``sweep_mode`` (asked, chosen, why), ``sweep_sessions`` (:meth:`session_report`) and
        ``state_checkpoints`` (``reliable`` or ``local``)."""
        choice = self.choice
        return {
            "sweep_mode": {
                "requested": self.sweep_mode,
                "chosen": choice.mode if choice else None,
                "reason": choice.reason if choice else _NO_SWEEPS,
            },
            "sweep_sessions": self.session_report(),
            "state_checkpoints": "reliable" if self.reliable_checkpoints else "local",
        }

    def close(self) -> None:
        """Unpersist every cached RDD and destroy every broadcast."""
        self.end_sweeps()
        for rdd in self._uncheckpointed:
            rdd.unpersist(blocking=False)
        if self._anchor is not self._base:
            self._anchor.unpersist(blocking=False)
        self._base.unpersist(blocking=False)
        for broadcast in self._pending_broadcasts:
            broadcast.destroy()
        self._uncheckpointed = []
        self._pending_broadcasts = []
        if self._spill_dir is not None:
            forget(self.engine_id)  # the driver's own copies (local engine API use); workers evict lazily
            remove_spill_directory(self._spill_dir)
