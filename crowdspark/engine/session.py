"""Sweep sessions: every sweep of a fit in one long-running Spark job (the Spark engine's session mode).

A Spark job costs tens of milliseconds before any work is done (scheduling, task serialization, the Python
worker round trip, a broadcast and a tree reduction); one Dawid-Skene iteration on 10M labels is only about
0.1 s of numpy per core, so one job per sweep cannot use two cores well.  In session mode the engine runs
**one barrier job** (Spark's barrier execution mode: all tasks start together) whose tasks hold their
blocks in memory and serve the driver's sweeps:

1. each task connects to a small TCP server on the driver (:class:`SweepSession`) and says which
   partition it holds, authenticated by a random secret that travels with the task closure;
2. per sweep the driver sends every task the block function and the global parameters (pickled once),
   each task runs the function on its blocks and sends back its summed statistics;
3. the driver adds the statistics in partition order (so the result does not depend on which task answers
   first), runs the model's global step as usual, and sends the next sweep;
4. at the end the driver sends ``stop`` and the job finishes.

This is the pattern of XGBoost's and Horovod's Spark integrations (barrier stage + a tracker on the
driver).  Models with per-item state (samplers, collapsed VI) keep their states in the tasks during a
session; when it ends, the tasks return the blocks with their final states, which the session's own job
caches and locally checkpoints, so the engine's RDD of states moves on without lineage back through the
session.  Spark's own ``BarrierTaskContext.allGather`` was measured first and rejected: about 1 s per call
(its JVM side polls once a second).

**Failures.**  If a task fails, Spark kills its siblings and resubmits the whole barrier stage; the new
tasks connect again (their task attempt ids are higher than any seen before the failure) and the driver
sends the interrupted sweep again.  Sweeps are pure functions of the blocks, the states and the parameters
(randomness comes from (seed, sweep, item key)), so the retried sweep gives the same statistics.  Restarted
tasks of a stateful session hold the states the session began with: the driver keeps the session's
requests and replays them first (which is why stateful sessions end every ``engine.session_sweeps``
sweeps, or earlier when the kept requests pass 256 MiB).  If the job fails for good, the driver raises its error.

**Where it runs.**  Tasks must reach the driver's Python process on a TCP port: always true on a local
master, and on clusters where executors can connect to ``spark.driver.host``.  Barrier mode also needs a
slot for every task at once and no dynamic allocation, so the session uses at most ``slots`` tasks.  With
more partitions than slots, the cached elements are dealt one by one over the tasks by a shuffle first
(``spark._regroup``; a barrier stage cannot narrow-coalesce its parent, SPARK-24820): cheap in resident
mode, where the elements are handles, and one shuffle of the blocks per fit otherwise.  Every item keeps
its block and its randomness.
"""

from __future__ import annotations

import hmac
import logging
import operator
import pickle
import secrets
import socket
import struct
import threading
import traceback
from collections.abc import Iterator
from functools import partial
from typing import Any

from crowdspark.engine.base import BlockFn
from crowdspark.engine.resident import resolve
from crowdspark.stats import Stats, add_stats

__all__ = ["SweepSession", "SessionError", "InjectedTaskFailure"]

log = logging.getLogger(__name__)

_HEADER = struct.Struct("!Q")
_POLL_SECONDS = 0.5


class SessionError(RuntimeError):
    """The session's Spark job failed (the message carries the task's error)."""


class InjectedTaskFailure(RuntimeError):
    """Raised on purpose by ``engine.inject_task_failure`` (tests of task retries)."""

    @classmethod
    def first_attempt(cls) -> InjectedTaskFailure:
        return cls("injected failure of the first attempt of partition 0 (engine.inject_task_failure)")


def _frame(obj: Any) -> bytes:
    payload = pickle.dumps(obj, protocol=5)
    return _HEADER.pack(len(payload)) + payload


def _read_exact(sock: socket.socket, n: int) -> bytearray:
    buffer = bytearray(n)
    view = memoryview(buffer)
    done = 0
    while done < n:
        got = sock.recv_into(view[done:], n - done)
        if got == 0:
            raise EOFError("connection closed")
        done += got
    return buffer


def _receive(sock: socket.socket) -> Any:
    (size,) = _HEADER.unpack(_read_exact(sock, _HEADER.size))
    return pickle.loads(_read_exact(sock, size))


# ---------------------------------------------------------------------------------------------- task side


def _session_task(address: tuple[str, int], secret: str, stateful: bool, elements: Iterator) -> Iterator:
    """Body of one barrier task: hold the partition's blocks, serve sweeps until ``stop``.

    Yields ``(0, sweeps served)`` for a stateless session, and the partition's elements
    ``(0, (block or handle, state))`` with their final states for a stateful one.
    """
    from pyspark import BarrierTaskContext

    context = BarrierTaskContext.get()
    held = [element for tag, element in elements if tag == 0]
    blocks = [resolve(block) for block, _ in held]
    states = [state for _, state in held]
    try:
        sock = socket.create_connection(address)
    except OSError as error:
        raise SessionError(
            f"cannot reach the driver's sweep session at {address[0]}:{address[1]} ({error}); the session has "
            "ended (a cached sweep was recomputed after it) or executors cannot connect to the driver's host: "
            "set engine.sweep_mode=jobs"
        ) from error
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(_frame(("hello", secret, context.partitionId(), context.taskAttemptId())))
        served = 0
        while True:
            message = _receive(sock)
            if message[0] == "stop":
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
                sock.sendall(_frame(("error", request, traceback.format_exc())))
                raise
            sock.sendall(_frame(("stats", request, total)))
            served += 1
    finally:
        sock.close()
    if not stateful:
        yield (0, served)
        return
    for (block, _), state in zip(held, states):
        yield (0, (block, state))  # the handle (or block) as it came, with its final state


# -------------------------------------------------------------------------------------------- driver side


def _one(element: Any) -> tuple[int, int]:
    return (0, 1)


def _stop(sock: socket.socket) -> None:
    try:
        sock.sendall(_frame(("stop",)))
    except OSError:
        pass  # the task is gone already


class SweepSession:
    """The driver's side of a session: a TCP server, the barrier job, and ``map_reduce`` over them.

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
        Address the tasks connect to (the driver's host).
    stateful : bool
    storage : pyspark.StorageLevel, optional
        Storage of :attr:`result` (stateful sessions).
    inject_task_failure : int
        Test hook: partition 0 fails the first time it serves this sweep (0 = off).
    """

    def __init__(self, rdd, host: str, *, stateful: bool = False, storage=None, inject_task_failure: int = 0) -> None:
        self.n_tasks = rdd.getNumPartitions()
        self.inject_task_failure = inject_task_failure
        self._secret = secrets.token_hex(16)
        self._server = socket.create_server((host, 0))
        self._server.settimeout(_POLL_SECONDS)
        self.address = (host, self._server.getsockname()[1])
        self._lock = threading.Condition()
        self._connections: dict[int, socket.socket] = {}
        self._min_attempt_id = -1  # connections from task attempts up to this id belong to failed attempts
        self._seen_attempt_id = -1
        self._job_error: BaseException | None = None
        self._job_done = False
        self._closed = False
        self._injected = False
        self._stopping = False
        self._request = 0
        self._replay: list[tuple[int, bytes]] = []  # stateful: the requests served so far (id, frame), in order
        self._replay_due = False
        self.stateful = stateful
        self.served = 0
        self.restarts = 0
        self.result = None
        self._acceptor = threading.Thread(target=self._accept, name="crowdspark-session-accept", daemon=True)
        self._acceptor.start()
        task = partial(_session_task, self.address, self._secret, stateful)
        barrier = rdd.barrier().mapPartitions(task, preservesPartitioning=True)
        if stateful:
            barrier.persist(storage)
            barrier.localCheckpoint()  # materialized by the session's job; never recomputed afterwards
            self.result = barrier
            barrier = barrier.map(_one)
        self._job = threading.Thread(
            target=self._run_job, args=(barrier,), name="crowdspark-session-job", daemon=True,
        )
        self._job.start()
        log.info("spark engine: session of %d barrier tasks, driver at %s:%d", self.n_tasks, *self.address)

    # the two background threads

    def _run_job(self, barrier_rdd) -> None:
        try:
            # the shuffle makes the barrier stage a shuffle-map stage, which Spark resubmits when a task
            # fails (a failed barrier *result* stage aborts the job)
            barrier_rdd.reduceByKey(operator.add, 1).collect()
        except BaseException as error:  # reported to map_reduce
            with self._lock:
                self._job_error = error
                self._lock.notify_all()
        else:
            with self._lock:
                self._job_done = True
                self._lock.notify_all()

    def _accept(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._server.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            try:
                sock.settimeout(30.0)
                hello = _receive(sock)
                sock.settimeout(None)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except (OSError, EOFError, pickle.UnpicklingError):
                sock.close()
                continue
            if (
                not isinstance(hello, tuple) or len(hello) != 4 or hello[0] != "hello"
                or not hmac.compare_digest(str(hello[1]), self._secret)
            ):
                log.warning("spark engine session: rejected a connection without the session's secret")
                sock.close()
                continue
            _, _, partition, attempt_id = hello
            with self._lock:
                if attempt_id <= self._min_attempt_id:
                    sock.close()  # a task of a failed stage attempt
                    continue
                old = self._connections.pop(partition, None)
                if old is not None:
                    old.close()
                self._connections[partition] = sock
                self._seen_attempt_id = max(self._seen_attempt_id, attempt_id)
                if self._stopping:
                    _stop(sock)
                self._lock.notify_all()

    # the engine's calls

    def _all_connected(self) -> list[socket.socket]:
        with self._lock:
            while len(self._connections) < self.n_tasks:
                if self._job_error is not None:
                    raise SessionError(f"the session's Spark job failed: {self._job_error}") from self._job_error
                if self._job_done:
                    raise SessionError("the session's Spark job ended before all tasks connected")
                self._lock.wait(_POLL_SECONDS)
            return [self._connections[p] for p in range(self.n_tasks)]

    def _drop_all(self) -> None:
        """Forget every connection after a failure; only tasks of a new stage attempt may join."""
        with self._lock:
            for sock in self._connections.values():
                sock.close()
            self._connections.clear()
            self._min_attempt_id = self._seen_attempt_id
        self.restarts += 1
        self._replay_due = self.stateful and bool(self._replay)

    def _exchange(self, connections: list[socket.socket], request: int, message: bytes, failing: bytes) -> list[Any]:
        """Send request ``request`` to every task and return their replies, each checked to answer it."""
        for partition, sock in enumerate(connections):
            sock.sendall(failing if partition == 0 else message)
        replies = [_receive(sock) for sock in connections]
        for partition, reply in enumerate(replies):
            if reply[1] != request:
                raise SessionError(
                    f"spark engine session: task {partition} answered request {reply[1]!r} to request {request}; "
                    "the session protocol is out of step (a bug: please report it)"
                )
        return replies

    def map_reduce(self, fn: BlockFn, value: Any, sweep: int = 0) -> Stats:
        """Run ``fn`` on every block of every task and return the statistics summed in partition order."""
        self._request += 1
        while True:
            connections = self._all_connected()
            fail = bool(self.inject_task_failure) and sweep == self.inject_task_failure and not self._injected
            self._injected = self._injected or fail
            message = _frame(("run", self._request, fn, value, False))
            failing = _frame(("run", self._request, fn, value, True)) if fail else message
            try:
                if self._replay_due:  # restarted tasks hold the session's initial states
                    log.info("spark engine session: replaying %d sweep(s) to the restarted tasks", len(self._replay))
                    for earlier_request, earlier in self._replay:
                        replies = self._exchange(connections, earlier_request, earlier, earlier)
                        if any(reply[0] == "error" for reply in replies):
                            break
                    else:
                        self._replay_due = False
                    if self._replay_due:
                        raise EOFError("a task failed during the replay")
                replies = self._exchange(connections, self._request, message, failing)
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

    @property
    def replay_bytes(self) -> int:
        """Size of the requests kept for a replay (stateful sessions)."""
        return sum(len(frame) for _, frame in self._replay)

    @property
    def failed(self) -> bool:
        """Whether the session's job failed (then :attr:`result` holds no states)."""
        return self._job_error is not None or not self._job_done

    def close(self) -> None:
        """Send ``stop`` to every task, wait for the job to finish, close the server."""
        with self._lock:
            self._stopping = True  # tasks that connect from now on are stopped by the acceptor
            for sock in self._connections.values():
                _stop(sock)
        self._job.join()
        self._closed = True
        self._server.close()
        self._acceptor.join()
        with self._lock:
            for sock in self._connections.values():
                sock.close()
            self._connections.clear()
        if self._job_error is not None:
            log.warning("spark engine session: the job ended with an error after the fit: %s", self._job_error)
