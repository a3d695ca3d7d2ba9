"""Sweep sessions: every sweep of a fit in one long-running Spark job (the Spark engine's session mode).

A Spark job costs tens of milliseconds before any work is done (scheduling, task serialization, the Python
worker round trip, a broadcast and a tree reduction), about as much as the numpy work of one Dawid-Skene
iteration on 10M labels per core, so one job per sweep cannot use two cores well
(docs/decisions/0080-sweep-sessions.md).  In session mode the engine runs
**one barrier job** (Spark's barrier execution mode: all tasks start together) whose tasks hold their
blocks in memory and serve the driver's sweeps:

1. each task connects to a small TCP server on the driver (:mod:`crowdspark.engine.spark.session_net`); driver
   and task prove to each other that they know the session's random key, which travels with the task
   closure, before either deserializes anything; then the task says which partition it holds;
2. per sweep the driver sends every task the block function and the global parameters (pickled once),
   each task runs the function on its blocks and sends back its summed statistics;
3. the driver adds the statistics in partition order (so the result does not depend on which task answers
   first), runs the model's global step as usual, and sends the next sweep;
4. at the end the driver sends ``stop`` (with the number of sweeps served) and the job finishes.

This is the pattern of XGBoost's and Horovod's Spark integrations (barrier stage + a tracker on the
driver).  Models with per-item state (samplers, collapsed VI) keep their states in the tasks during a
session; when it ends, the tasks return the blocks with their final states, which the session's own job
caches and locally checkpoints, so the engine's RDD of states moves on without lineage back through the
session.  Spark's own ``BarrierTaskContext.allGather`` is not used: its JVM side polls once a second, so a
call takes about as long (docs/decisions/0081-allgather-rejected.md).

**Failures.**  If a task fails, Spark kills its siblings and resubmits the whole barrier stage; the new
tasks connect again (their task attempt ids are higher than any seen before the failure) and the driver
sends the interrupted sweep again.  Sweeps are pure functions of the blocks, the states and the parameters
(randomness comes from (seed, sweep, item key)), so the retried sweep gives the same statistics.  Restarted
tasks of a stateful session hold the states the session began with: the driver keeps the session's
requests and replays them first (which is why stateful sessions end every ``spark.session_sweeps``
sweeps, or earlier when the kept requests pass 256 MiB).  If the job fails for good, the driver raises its error.

**Where it runs.**  Tasks must reach the driver's Python process on a TCP port.  On a local master the
server listens on the loopback address only; on a cluster it listens on ``spark.driver.bindAddress`` (or
``spark.driver.host``) and the tasks connect to ``spark.driver.host``, so executors must be able to
connect there (``docs/security.md`` says who else can).  Barrier mode also needs a slot for every task at
once and no dynamic allocation.  On a cluster, :func:`probe` (one barrier job of one task per slot that
connects and authenticates within :data:`PROBE_SECONDS`) tells the engine whether sessions can run, and a
session has one task per slot.  With more partitions than tasks, the cached elements are dealt one by one
over the tasks by a shuffle first (``spark._regroup``; a barrier stage cannot narrow-coalesce its parent,
SPARK-24820): cheap in resident mode, where the elements are handles, and one shuffle of the blocks per fit
otherwise.  Every item keeps its block and its randomness.

**Lost results.**  A stateful session's result is cached and checkpointed (reliably when the SparkContext
has a checkpoint directory).  A task that Spark starts after the session ended, to recompute a lost
partition of it, is sent ``stop`` with the number of sweeps the session served; having served none, it
fails rather than return the session's first states as final, and the engine runs the session again on the
same elements, replaying its kept requests (:meth:`SweepSession.replay`).
"""

from __future__ import annotations

import logging
import operator
import socket
import threading
import traceback
import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

from crowdspark.engine.base import BlockFn
from crowdspark.engine.spark.resident import resolve
from crowdspark.engine.spark.session_net import Channel, Payload, SessionError, SessionServer, connect, encode, new_key
from crowdspark.stats import Stats, add_stats

__all__ = ["SweepSession", "SessionError", "InjectedTaskFailure", "probe", "PROBE_SECONDS"]

log = logging.getLogger(__name__)


class InjectedTaskFailure(RuntimeError):
    """Raised on purpose by ``engine.inject_task_failure`` (tests of task retries)."""

    @classmethod
    def first_attempt(cls) -> InjectedTaskFailure:
        return cls("injected failure of the first attempt of partition 0 (engine.inject_task_failure)")


# ---------------------------------------------------------------------------------------------- task side


def _session_task(address: tuple[str, int], key: bytes, stateful: bool, elements: Iterator) -> Iterator:
    """Body of one barrier task: hold the partition's blocks, serve sweeps until ``stop``.

    Yields ``(0, sweeps served)`` for a stateless session, and the partition's elements
    ``(0, (block or handle, state))`` with their final states for a stateful one.
    """
    from pyspark import BarrierTaskContext

    context = BarrierTaskContext.get()
    held = [element for tag, element in elements if tag == 0]
    blocks = [resolve(block) for block, _ in held]
    states = [state for _, state in held]
    channel = connect(address, key, context.partitionId(), context.taskAttemptId())
    try:
        served = 0
        while True:
            message = channel.receive()
            if message[0] == "stop":
                _check_caught_up(stateful, served, message[1])
                break
            _, request, fn, value, fail = message
            try:
                if fail:
                    raise InjectedTaskFailure.first_attempt()
                total: Stats = {}
                for j, block in enumerate(blocks):
                    state, stats = fn(block, states[j], value)
                    if stateful:
                        states[j] = state
                    total = add_stats(total, stats)
            except BaseException:
                channel.send(("error", request, traceback.format_exc()))
                raise
            channel.send(("stats", request, total))
            served += 1
    finally:
        channel.close()
    if not stateful:
        yield (0, served)
        return
    for (block, _), state in zip(held, states):
        yield (0, (block, state))  # the handle (or block) as it came, with its final state


# ------------------------------------------------------------------------------------------------- probe

#: how long a probe task may take to connect to the driver and complete the handshake
PROBE_SECONDS = 5.0
#: how long the probe's barrier job may wait for its tasks to be scheduled, on top of PROBE_SECONDS
_PROBE_SCHEDULING_SECONDS = 60.0


def _probe_task(address: tuple[str, int], key: bytes, seconds: float, elements: Iterator) -> Iterator:
    """Body of a probe task: connect and authenticate like a session task, then hang up.

    Yields ``(host name, None)``, or ``(host name, what failed)``: the task itself does not fail, so that
    Spark does not retry it and the driver learns the reason at once.
    """
    from pyspark import BarrierTaskContext

    context = BarrierTaskContext.get()
    host = socket.gethostname()
    try:
        channel = connect(address, key, context.partitionId(), context.taskAttemptId(), handshake_seconds=seconds)
    except SessionError as error:
        yield (host, str(error.__cause__ or error))
        return
    channel.close()
    yield (host, None)


def probe(sc, tasks: int, host: str, bind: str, seconds: float = PROBE_SECONDS) -> str | None:
    """Whether a barrier stage of ``tasks`` tasks can run and every task can reach a session server.

    A server listens on ``bind``; one barrier job of ``tasks`` tasks (so, with one task per slot, one on
    every executor) connects to ``host`` and completes the handshake within ``seconds``.

    Returns
    -------
    str or None
        ``None`` if every task got in, else what failed (for the log and the run summary).
    """
    key = new_key()
    server = SessionServer(bind, key, tasks, handshake_seconds=seconds)
    address = (host, server.port)
    try:
        job = partial(_probe_task, address, key, seconds)
        outcome = _collect_within(sc, sc.parallelize(range(tasks), tasks).barrier().mapPartitions(job),
                                  seconds + _PROBE_SCHEDULING_SECONDS)
        if isinstance(outcome, str):
            return outcome
        failed = [(task_host, error) for task_host, error in outcome if error is not None]
        if failed:
            causes = "; ".join(sorted({f"from {task_host}: {error}" for task_host, error in failed}))
            return (f"{len(failed)} of {tasks} probe tasks could not connect to the driver's sweep session at "
                    f"{host}:{server.port} within {seconds:g} s ({causes}); executors must be able to open TCP "
                    "connections to the driver's host on the session's port (docs/security.md)")
        if server.admitted != tasks:
            return (f"only {server.admitted} of {tasks} probe tasks completed the handshake with the driver's sweep "
                    f"session at {host}:{server.port}")
        return None
    finally:
        server.close()


def _collect_within(sc, rdd, seconds: float) -> list | str:
    """``rdd.collect()``, or a sentence saying why it failed or did not end within ``seconds`` (then the
    job is cancelled)."""
    group = f"crowdspark-probe-{uuid.uuid4().hex}"
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            sc.setJobGroup(group, "crowdspark: can executors reach the sweep session?", interruptOnCancel=True)
            out["rows"] = rdd.collect()
        except BaseException as error:  # reported to the caller
            out["error"] = error

    thread = threading.Thread(target=run, name="crowdspark-session-probe", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        sc.cancelJobGroup(group)
        thread.join(30)
        return (f"the probe's barrier job did not end within {seconds:g} s (its tasks could not all be scheduled "
                "at once, or could not connect)")
    if "error" in out:
        first_line = str(out["error"]).strip().splitlines()[0] if str(out["error"]).strip() else repr(out["error"])
        return f"the probe's barrier job failed: {first_line}"
    return out["rows"]


def _check_caught_up(stateful: bool, served: int, expected: int) -> None:
    """A stateful task stops only if it has served every sweep of its session: a task started after the
    session ended (Spark recomputing a lost partition of its result) holds the session's first states, and
    returning them as final would be a wrong answer."""
    if stateful and served != expected:
        raise SessionError(
            f"sweep session task: the session ended after {expected} sweeps, but this task served {served} (Spark "
            "started it after the session's end, to recompute a lost partition); its states would be stale, so it "
            "fails and the driver runs the session again"
        )


# -------------------------------------------------------------------------------------------- driver side


def _one(element: Any) -> tuple[int, int]:
    return (0, 1)


def _exchange(channels: list[Channel], request: int, payload: Payload, failing: Payload) -> list[Any]:
    """Send request ``request`` to every task and return their replies, each checked to answer it."""
    for partition, channel in enumerate(channels):
        channel.send_payload(failing if partition == 0 else payload)
    replies = [channel.receive() for channel in channels]
    for partition, reply in enumerate(replies):
        if reply[1] != request:
            raise SessionError(
                f"spark engine session: task {partition} answered request {reply[1]!r} to request {request}; "
                "the session protocol is out of step (a bug: please report it)"
            )
    return replies


class SweepSession:
    """The driver's side of a session: a :class:`~crowdspark.engine.spark.session_net.SessionServer`, the barrier
    job, and ``map_reduce`` over them.

    With ``stateful``, tasks keep the states their block function returns, and :attr:`result` (after
    :meth:`close`) is the RDD of the elements with their final states, cached and locally checkpointed
    by the session's own job.  The driver keeps every request of the session: tasks restarted by Spark
    start again from the states the session began with, so the driver replays the earlier sweeps to them
    (discarding the repeated statistics) before it resends the interrupted one.

    Parameters
    ----------
    rdd : pyspark.RDD
        The engine's cached elements ``(tag, (block or handle, state))``, with as many partitions as the
        session has tasks.
    host : str
        Address the tasks connect to.
    bind : str, optional
        Address the server listens on (default ``host``).
    stateful : bool
    storage : pyspark.StorageLevel, optional
        Storage of :attr:`result` (stateful sessions).
    reliable : bool
        Checkpoint :attr:`result` to the SparkContext's checkpoint directory (it then survives the loss of
        the executors that hold it) instead of locally.
    inject_task_failure : int
        Test hook: partition 0 fails the first time it serves this sweep (0 = off).
    """

    def __init__(self, rdd, host: str, *, bind: str | None = None, stateful: bool = False, storage=None,
                 reliable: bool = False, inject_task_failure: int = 0) -> None:
        self.input = rdd
        self.n_tasks = rdd.getNumPartitions()
        self.inject_task_failure = inject_task_failure
        key = new_key()
        self._server = SessionServer(bind or host, key, self.n_tasks)
        self.address = (host, self._server.port)
        self._job_error: BaseException | None = None
        self._job_done = False
        self._injected = False
        self._request = 0
        self._replay: list[tuple[int, Payload]] = []  # stateful: the requests served so far (id, payload), in order
        self._replay_due = False
        self.stateful = stateful
        self.served = 0
        self.restarts = 0
        self.result = None
        task = partial(_session_task, self.address, key, stateful)
        barrier = rdd.barrier().mapPartitions(task, preservesPartitioning=True)
        if stateful:
            barrier.persist(storage)
            # materialized by the session's job, and never recomputed afterwards (its tasks need the session)
            if reliable:
                barrier.checkpoint()
            else:
                barrier.localCheckpoint()
            self.result = barrier
            barrier = barrier.map(_one)
        self._job = threading.Thread(
            target=self._run_job, args=(barrier,), name="crowdspark-session-job", daemon=True,
        )
        self._job.start()
        log.info("spark engine: session of %d barrier tasks, driver listening on %s:%d, tasks connect to %s:%d",
                 self.n_tasks, bind or host, self._server.port, *self.address)

    def _run_job(self, barrier_rdd) -> None:
        try:
            # the shuffle makes the barrier stage a shuffle-map stage, which Spark resubmits when a task
            # fails (a failed barrier *result* stage aborts the job)
            barrier_rdd.reduceByKey(operator.add, 1).collect()
        except BaseException as error:  # reported to map_reduce
            self._job_error = error
        else:
            self._job_done = True
        self._server.wake()

    # the engine's calls

    def _check_job(self) -> None:
        if self._job_error is not None:
            raise SessionError(f"the session's Spark job failed: {self._job_error}") from self._job_error
        if self._job_done:
            raise SessionError("the session's Spark job ended before all tasks connected")

    def _all_connected(self) -> list[Channel]:
        return self._server.channels(self._check_job)

    def _drop_all(self) -> None:
        """Forget every connection after a failure; only tasks of a new stage attempt may join."""
        self._server.forget_all()
        self.restarts += 1
        self._replay_due = self.stateful and bool(self._replay)

    def map_reduce(self, fn: BlockFn, value: Any, sweep: int = 0) -> Stats:
        """Run ``fn`` on every block of every task and return the statistics summed in partition order."""
        self._request += 1
        while True:
            connections = self._all_connected()
            fail = bool(self.inject_task_failure) and sweep == self.inject_task_failure and not self._injected
            self._injected = self._injected or fail
            message = encode(("run", self._request, fn, value, False))
            failing = encode(("run", self._request, fn, value, True)) if fail else message
            try:
                self._catch_up(connections)
                replies = _exchange(connections, self._request, message, failing)
            except (OSError, EOFError) as error:
                log.warning("spark engine session: a task was lost (%s); waiting for Spark to restart the stage",
                            error)
                self._drop_all()
                continue
            errors = [reply for reply in replies if reply[0] == "error"]
            if errors:
                log.warning("spark engine session: a task failed; waiting for Spark to restart the stage:\n%s",
                            errors[0][2])
                self._drop_all()
                continue
            total: Stats = {}
            for reply in replies:
                total = add_stats(total, reply[2])
            if self.stateful:
                self._replay.append((self._request, message))
            self.served += 1
            return total

    def _catch_up(self, connections: list[Channel]) -> None:
        """Replay the kept requests to restarted tasks, which hold the session's initial states.

        Raises
        ------
        EOFError, OSError
            A task was lost or failed during the replay (the caller waits for Spark to restart the stage).
        """
        if not self._replay_due:
            return
        log.info("spark engine session: replaying %d sweep(s) to the restarted tasks", len(self._replay))
        for earlier_request, earlier in self._replay:
            replies = _exchange(connections, earlier_request, earlier, earlier)
            if any(reply[0] == "error" for reply in replies):
                raise EOFError("a task failed during the replay")
        self._replay_due = False

    def replay(self, requests: list[tuple[int, Payload]]) -> None:
        """Serve ``requests`` (:attr:`requests` of an earlier session on the same elements and states) to this
        session's tasks, so that they end where that session ended."""
        self._replay = list(requests)
        self._replay_due = bool(self._replay)
        self._request = max((request for request, _ in self._replay), default=0)
        while self._replay_due:
            connections = self._all_connected()
            try:
                self._catch_up(connections)
            except (OSError, EOFError) as error:
                log.warning("spark engine session: a task was lost during the replay (%s); waiting for Spark to "
                            "restart the stage", error)
                self._drop_all()

    @property
    def requests(self) -> list[tuple[int, Payload]]:
        """The requests served so far, in order (stateful sessions)."""
        return list(self._replay)

    @property
    def replay_bytes(self) -> int:
        """Size of the requests kept for a replay (stateful sessions)."""
        return sum(len(payload) for _, payload in self._replay)

    @property
    def failed(self) -> bool:
        """Whether the session's job failed (then :attr:`result` holds no states)."""
        return self._job_error is not None or not self._job_done

    @property
    def error(self) -> BaseException | None:
        """The session's job's error, if it failed."""
        return self._job_error

    def close(self) -> None:
        """Send ``stop`` to every task, wait for the job to finish, close the server."""
        # tasks that connect from now on are stopped too; a stateful one checks it served every sweep
        self._server.send_to_all(encode(("stop", len(self._replay))))
        self._job.join()
        self._server.close()
        if self._job_error is not None:
            log.warning("spark engine session: the job ended with an error after its sweeps: %s", self._job_error)
