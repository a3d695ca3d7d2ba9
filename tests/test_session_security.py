"""The sweep session's server and channels: nothing is deserialized before both sides are authenticated, a
peer cannot stall or exhaust the server, and the server's failures fail the run instead of hanging it."""

from __future__ import annotations

import logging
import os
import pickle
import socket
import struct
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest

from crowdspark.engine.spark import session_net
from crowdspark.engine.spark.session_net import (
    MAX_FRAME_BYTES, Channel, FrameError, SessionError, SessionServer, channel_keys, connect, encode, new_key,
)

LOOPBACK = "127.0.0.1"


class CreatesFile:
    """Unpickling this creates ``path``: the payload an attacker would send (``open`` stands in for
    ``os.system``)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def live_payload(tmp_path, name: str = "pwned") -> tuple[bytes, Any]:
    """A pickle that creates a file when loaded, checked to do so (so a test using it can fail)."""
    probe = tmp_path / "probe"
    pickle.loads(pickle.dumps(CreatesFile(str(probe)))).close()
    assert probe.exists()
    marker = tmp_path / name
    return pickle.dumps(CreatesFile(str(marker)), protocol=5), marker


def within(seconds: float, fn: Callable[[], Any]) -> Any:
    """``fn()``'s result, or a test failure if it takes more than ``seconds`` (instead of a hung suite)."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as error:  # handed to the test
            out["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


def eventually(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    """Whether ``condition()`` holds within ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def dropped(sock: socket.socket, seconds: float = 10.0) -> bool:
    """Whether the peer closed ``sock`` within ``seconds`` (reading and discarding what it sent)."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def intrude(address: tuple[str, int], data: bytes) -> bool:
    """Connect, send ``data`` without any handshake, and say whether the server dropped the connection."""
    with socket.create_connection(address) as sock:
        sock.sendall(data)
        return dropped(sock)


@pytest.fixture
def key() -> bytes:
    return new_key()


@pytest.fixture
def server(key):
    server = SessionServer(LOOPBACK, key, 2, handshake_seconds=2.0)
    yield server
    server.close()


def serves(server: SessionServer, key: bytes) -> None:
    """Two real tasks connect; the server hands out their channels, and frames go both ways."""
    address = (LOOPBACK, server.port)
    tasks = [within(10, lambda p=p: connect(address, key, p, 10 + p)) for p in range(2)]
    channels = within(10, server.channels)
    try:
        for partition, channel in enumerate(channels):
            channel.send(("run", partition))
            assert tasks[partition].receive() == ("run", partition)
            tasks[partition].send(("stats", partition, {"n": np.arange(3)}))
            reply = channel.receive()
            assert reply[:2] == ("stats", partition) and reply[2]["n"].tolist() == [0, 1, 2]
    finally:
        for task in tasks:
            task.close()


# ------------------------------------------------------------------------------------ unauthenticated peers


def test_a_pickle_from_an_unauthenticated_peer_is_never_loaded(server, key, tmp_path, caplog):
    payload, marker = live_payload(tmp_path)
    address = (LOOPBACK, server.port)
    with caplog.at_level(logging.WARNING, logger=session_net.__name__):
        for data in (
            struct.pack("!Q", len(payload)) + payload,  # a session frame
            struct.pack("!i", len(payload)) + payload,  # a multiprocessing.connection message
            payload,
        ):
            assert intrude(address, data)
    assert not marker.exists()
    assert server.error is None
    assert sum("did not complete the handshake" in r.getMessage() for r in caplog.records) == 3
    serves(server, key)


def test_a_huge_length_before_authentication_is_not_allocated(server, key):
    address = (LOOPBACK, server.port)
    assert intrude(address, struct.pack("!Q", 2**62))
    assert intrude(address, struct.pack("!i", -1) + struct.pack("!Q", 2**62))
    assert server.error is None  # no MemoryError in a server thread
    serves(server, key)


@pytest.mark.alone
def test_a_silent_peer_blocks_nobody_and_is_dropped_at_the_deadline(key, caplog):
    server = SessionServer(LOOPBACK, key, 2, handshake_seconds=5.0)
    with caplog.at_level(logging.WARNING, logger=session_net.__name__):
        silent = socket.create_connection((LOOPBACK, server.port))
        try:
            start = time.perf_counter()
            serves(server, key)  # while the silent peer holds its connection
            assert time.perf_counter() - start < server.handshake_seconds
            assert dropped(silent, seconds=server.handshake_seconds + 5)
        finally:
            silent.close()
            server.close()
        # the warning follows the drop
        assert eventually(lambda: any("TimeoutError" in r.getMessage() for r in caplog.records))


def test_a_task_with_another_key_is_refused(server, key):
    with pytest.raises(SessionError, match="sweep session.*failed.*digest sent was rejected"):
        connect((LOOPBACK, server.port), new_key(), 0, 1)
    assert server.error is None
    serves(server, key)


def test_connections_beyond_the_handshake_limit_are_closed_at_once(server, monkeypatch, caplog):
    monkeypatch.setattr(session_net, "MAX_HANDSHAKES", 1)
    with caplog.at_level(logging.WARNING, logger=session_net.__name__):
        with socket.create_connection((LOOPBACK, server.port)):
            time.sleep(0.3)  # the first one is in its handshake
            with socket.create_connection((LOOPBACK, server.port)) as second:
                assert dropped(second, seconds=1.0)
    assert any("handshakes in progress already" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------------------------------------ frames


def channel_pair(key: bytes | None = None, nonce: bytes = bytes(16)) -> tuple[Channel, Channel, socket.socket,
                                                                                 socket.socket]:
    """A driver channel and a task channel over a socket pair, keyed as after a handshake; and the sockets."""
    key = key or new_key()
    hello = struct.pack("!qq", 0, 1)
    driver, task = socket.socketpair()
    return (Channel(driver, channel_keys(key, hello, nonce, driver=True)),
            Channel(task, channel_keys(key, hello, nonce, driver=False)), driver, task)


def frame_bytes(payload: bytes, tag: bytes = bytes(32)) -> bytes:
    """A frame as it goes on the wire, with the given tag."""
    return struct.pack("!Q", len(payload)) + payload + tag


def test_a_frame_above_the_limit_is_refused_before_it_is_read():
    receiver, _, driver, task = channel_pair()
    try:
        task.sendall(struct.pack("!Q", 2**62))
        with pytest.raises(SessionError, match=f"announced, above the limit of {MAX_FRAME_BYTES} bytes"):
            receiver.receive()
    finally:
        driver.close()
        task.close()


def test_a_large_frame_goes_through():
    receiver, sender, driver, task = channel_pair()
    try:
        big = np.arange(3 * 2**20, dtype=np.float64)  # 24 MiB: sent without joining it to its header
        thread = threading.Thread(target=sender.send_payload, args=(encode({"n": big}),))
        thread.start()
        assert np.array_equal(receiver.receive()["n"], big)
        thread.join()
    finally:
        driver.close()
        task.close()


def test_a_frame_above_the_limit_is_not_sent(monkeypatch):
    monkeypatch.setattr(session_net, "MAX_FRAME_BYTES", 1000)
    channel, _, driver, task = channel_pair()
    try:
        with pytest.raises(SessionError, match="frame of 1001 bytes is above the limit of 1000 bytes.*sweep_mode=jobs"):
            channel.send_payload(session_net.Payload(bytes(1001)))
        channel.send_payload(session_net.Payload(bytes(1000)))
        task.settimeout(5)
        assert len(_read_all(task, 8 + 1000 + 32)) == 8 + 1000 + 32  # only the frame within the limit went out
        task.settimeout(0.2)
        with pytest.raises(TimeoutError):
            task.recv(1)
    finally:
        driver.close()
        task.close()


def test_a_frame_without_the_right_tag_is_never_unpickled(tmp_path):
    payload, marker = live_payload(tmp_path)
    receiver, sender, driver, task = channel_pair()
    try:
        task.sendall(frame_bytes(payload))  # injected into the connection: the attacker has no channel key
        with pytest.raises(FrameError, match="frame 0 on this connection failed authentication"):
            receiver.receive()
        assert not marker.exists()
    finally:
        driver.close()
        task.close()


def _wire(payload_obj: Any, key: bytes, nonce: bytes = bytes(16), count: int = 1) -> bytes:
    """The bytes a task's channel writes for ``count`` frames of ``payload_obj``."""
    _, sender, driver, task = channel_pair(key, nonce)
    try:
        for _ in range(count):
            sender.send(payload_obj)
        driver.settimeout(5)
        size = len(encode(payload_obj).data) + 8 + 32
        return _read_all(driver, size * count)
    finally:
        driver.close()
        task.close()


def test_a_changed_replayed_or_moved_frame_is_refused():
    key = new_key()
    stats = {"n": np.arange(5.0)}
    one = _wire(stats, key)
    cases = {
        "changed": one[:-40] + bytes([one[-40] ^ 1]) + one[-39:],  # one bit of the pickle
        "replayed": _wire(stats, key, count=2)[len(one):],  # frame 1 arrives first: its sequence number is 1
        "from another connection": _wire(stats, key, nonce=b"x" * 16),
        "of another session": _wire(stats, new_key()),
    }
    for name, data in cases.items():
        receiver, _, driver, task = channel_pair(key)
        try:
            task.sendall(data)
            with pytest.raises(FrameError):
                receiver.receive()
        finally:
            driver.close()
            task.close()
    receiver, _, driver, task = channel_pair(key)
    try:  # the frame as sent is accepted
        task.sendall(one)
        assert receiver.receive()["n"].tolist() == [0, 1, 2, 3, 4]
    finally:
        driver.close()
        task.close()


class Interceptor:
    """A TCP relay between tasks and a session server that can inject bytes into either direction."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server((LOOPBACK, 0))
        self.address = self.listener.getsockname()[:2]
        self.to_task: socket.socket | None = None
        self.to_driver: socket.socket | None = None
        self._ready = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        task_side, _ = self.listener.accept()
        driver_side = socket.create_connection(self.target)
        self.to_task, self.to_driver = task_side, driver_side
        for source, sink in ((task_side, driver_side), (driver_side, task_side)):
            threading.Thread(target=self._relay, args=(source, sink), daemon=True).start()
        self._ready.set()

    @staticmethod
    def _relay(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        self._ready.wait(10)
        for sock in (self.listener, self.to_task, self.to_driver):
            if sock is not None:
                sock.close()


@pytest.mark.parametrize("towards", ["task", "driver"])
def test_a_pickle_injected_into_an_authenticated_connection_is_never_loaded(tmp_path, towards):
    """An on-path attacker waits for the handshake to complete, then writes a frame into the connection."""
    payload, marker = live_payload(tmp_path)
    key = new_key()
    server = SessionServer(LOOPBACK, key, 1)
    relay = Interceptor((LOOPBACK, server.port))
    try:
        task = within(10, lambda: connect(relay.address, key, 0, 1))
        (driver,) = within(10, server.channels)
        victim = task if towards == "task" else driver
        (relay.to_task if towards == "task" else relay.to_driver).sendall(frame_bytes(payload))
        with pytest.raises(FrameError):
            within(10, victim.receive)
        assert not marker.exists()
        task.close()
    finally:
        relay.close()
        server.close()


def _read_all(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        data += sock.recv(n - len(data))
    return data


# ------------------------------------------------------------------------------- failures of the server


@pytest.mark.alone
def test_a_failure_of_the_accept_thread_fails_the_wait_at_once(monkeypatch):
    def broken(self, sock, peer):
        sock.close()
        raise RuntimeError("injected failure of the accept thread")

    monkeypatch.setattr(SessionServer, "_start_handshake", broken)
    key = new_key()
    server = SessionServer(LOOPBACK, key, 1)
    try:
        socket.create_connection((LOOPBACK, server.port)).close()
        start = time.perf_counter()
        with pytest.raises(SessionError, match="server failed.*injected failure of the accept thread"):
            within(10, server.channels)
        assert time.perf_counter() - start < 5
        with pytest.raises(SessionError, match="cannot reach"):  # tasks are refused from now on
            connect((LOOPBACK, server.port), key, 0, 1, handshake_seconds=2)
    finally:
        server.close()


def test_a_failure_of_a_handshake_thread_fails_the_wait_at_once(monkeypatch):
    def broken(self, channel, partition, attempt_id):
        raise RuntimeError("injected failure of a handshake thread")

    monkeypatch.setattr(SessionServer, "_admit", broken)
    key = new_key()
    server = SessionServer(LOOPBACK, key, 1)
    try:
        connect((LOOPBACK, server.port), key, 0, 1).close()
        with pytest.raises(SessionError, match="injected failure of a handshake thread"):
            within(10, server.channels)
    finally:
        server.close()


def test_an_authenticated_task_with_an_unknown_partition_fails_the_session(server, key):
    connect((LOOPBACK, server.port), key, 7, 1).close()
    with pytest.raises(SessionError, match=r"partition 7, outside \[0, 2\)"):
        within(10, server.channels)


# --------------------------------------------------------------------------------------------- task side


def fake_driver(behave: Callable[[socket.socket], None]) -> tuple[tuple[str, int], threading.Thread]:
    """A server on a free port that accepts one connection and runs ``behave`` on it."""
    listener = socket.create_server((LOOPBACK, 0))

    def run() -> None:
        with listener:
            sock, _ = listener.accept()
            with sock:
                try:
                    behave(sock)
                except OSError:
                    pass  # the task hung up

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return listener.getsockname()[:2], thread


def run_task(monkeypatch, address: tuple[str, int], key: bytes, stateful: bool = False,
             elements: list | None = None) -> list:
    """The real barrier-task body against ``address``, with a stand-in for Spark's task context."""
    import pyspark

    from crowdspark.engine.spark.session import _session_task

    class Context:
        def partitionId(self) -> int:
            return 0

        def taskAttemptId(self) -> int:
            return 1

    monkeypatch.setattr(pyspark.BarrierTaskContext, "get", classmethod(lambda cls: Context()))
    return within(20, lambda: list(_session_task(address, key, stateful, iter(elements or []))))


def pickles_first(sock: socket.socket, payload: bytes) -> None:
    """A driver that sends a pickle at once, as a session frame."""
    sock.sendall(struct.pack("!Q", len(payload)) + payload)
    dropped(sock)


def lets_anyone_in(sock: socket.socket, payload: bytes) -> None:
    """A driver that lets the task in without checking, cannot answer the task's challenge, sends a pickle."""
    sock.sendall(os.urandom(32))
    sock.recv(64)  # the task's answer and its challenge, not checked
    sock.sendall(bytes(32))  # an answer it cannot compute
    sock.sendall(struct.pack("!Q", len(payload)) + payload)
    dropped(sock)


@pytest.mark.parametrize(("driver", "error"), [
    (pickles_first, "handshake with the driver's sweep session.*failed.*digest received was wrong"),
    (lets_anyone_in, "handshake with the driver's sweep session.*failed.*digest received was wrong"),
])
def test_the_task_refuses_a_driver_without_the_key(monkeypatch, tmp_path, driver, error):
    payload, marker = live_payload(tmp_path)
    address, thread = fake_driver(partial(driver, payload=payload))
    with pytest.raises(SessionError, match=error):
        run_task(monkeypatch, address, new_key())
    thread.join(10)
    assert not marker.exists()


@pytest.mark.alone
def test_the_task_gives_up_on_a_silent_driver_at_the_deadline():
    address, thread = fake_driver(lambda sock: dropped(sock, seconds=10))
    start = time.perf_counter()
    with pytest.raises(SessionError, match="no complete handshake within 1 s"):
        connect(address, new_key(), 0, 1, handshake_seconds=1.0)
    assert time.perf_counter() - start < 5
    thread.join(15)


def test_the_task_serves_an_authenticated_driver(monkeypatch):
    """The same task body as above, against the real server: it runs the sweep it is sent and stops."""
    key = new_key()
    server = SessionServer(LOOPBACK, key, 1)
    try:
        out: dict[str, list] = {}

        def task() -> None:
            out["yield"] = run_task(monkeypatch, (LOOPBACK, server.port), key)

        thread = threading.Thread(target=task)
        thread.start()
        (channel,) = within(10, server.channels)
        channel.send(("run", 1, _count_blocks, None, False))
        assert channel.receive() == ("stats", 1, {})
        channel.send(("stop", 1))
        thread.join(20)
        assert out["yield"] == [(0, 1)]  # one sweep served
    finally:
        server.close()


def _count_blocks(block, state, value):
    return state, {"n": 1}


def _next_state(block, state, value):
    return state + 1, {}


@pytest.mark.parametrize("late", [False, True])
def test_a_stateful_task_returns_its_states_only_if_it_served_the_whole_session(monkeypatch, late):
    """A task Spark starts after the session ended (to recompute a lost partition of its result) is sent
    ``stop`` at once: it holds the session's first states and must fail, not return them as final."""
    key = new_key()
    server = SessionServer(LOOPBACK, key, 1)
    out: dict[str, Any] = {}

    def task() -> None:
        try:
            out["yield"] = run_task(monkeypatch, (LOOPBACK, server.port), key, stateful=True,
                                    elements=[(0, ("block", 0))])
        except SessionError as error:
            out["error"] = error

    try:
        thread = threading.Thread(target=task)
        thread.start()
        (channel,) = within(10, server.channels)
        if not late:
            for request in (1, 2):
                channel.send(("run", request, _next_state, None, False))
                assert channel.receive() == ("stats", request, {})
        channel.send(("stop", 2))  # the session served two sweeps
        thread.join(20)
    finally:
        server.close()
    if late:
        assert "yield" not in out
        assert "ended after 2 sweeps, but this task served 0" in str(out["error"])
    else:
        assert out["yield"] == [(0, ("block", 2))]


# ------------------------------------------------------------------------------------- with Spark: the session


def _count_labels(block, state, value):
    return state, {"n": np.array(float(block.n_labels))}


def _temp_blocks():
    import pandas as pd

    from tests.helpers import DATA, frames_to_blocks

    return frames_to_blocks(pd.read_csv(DATA / "temp" / "labels.csv", dtype=str))


@pytest.mark.spark
@pytest.mark.alone
def test_sweep_session_serves_its_tasks_despite_intruders(spark, tmp_path):
    """The report's attacks on a real session: a pickle that would run code, a frame header claiming 2^62
    bytes, and a peer that connects and says nothing. None is deserialized, none stops the sweeps."""
    from crowdspark.engine.spark.session import SweepSession
    from crowdspark.engine.spark.engine import _with_empty_state

    payload, marker = live_payload(tmp_path)
    blocks, _ = _temp_blocks()
    session = SweepSession(spark.sparkContext.parallelize(blocks, 2).map(_with_empty_state), LOOPBACK)
    silent = socket.create_connection(session.address)
    try:
        assert intrude(session.address, struct.pack("!Q", len(payload)) + payload)
        assert not marker.exists()
        assert intrude(session.address, struct.pack("!Q", 2**62) + bytes(56))  # read as a 64-byte answer
        for sweep in range(2):
            stats = within(60, lambda: session.map_reduce(_count_labels, None, sweep))
            assert stats["n"] == sum(b.n_labels for b in blocks)
        assert not marker.exists()
    finally:
        silent.close()
        within(60, session.close)
    assert session.restarts == 0


@pytest.mark.spark
@pytest.mark.alone
def test_a_failure_of_the_session_server_fails_map_reduce(spark, monkeypatch):
    from crowdspark.engine.spark.session import SweepSession
    from crowdspark.engine.spark.engine import _with_empty_state

    def broken(self, channel, partition, attempt_id):
        channel.close()
        raise RuntimeError("injected failure of a handshake thread")

    monkeypatch.setattr(SessionServer, "_admit", broken)
    blocks, _ = _temp_blocks()
    session = SweepSession(spark.sparkContext.parallelize(blocks, 2).map(_with_empty_state), LOOPBACK)
    try:
        with pytest.raises(SessionError, match="server failed.*injected failure of a handshake thread"):
            within(60, lambda: session.map_reduce(_count_labels, None))
    finally:
        within(120, session.close)  # the tasks are refused, so the job fails and ends
    assert session.failed


class _DriverOnTheLan:
    """A SparkContext whose ``spark.driver.host`` is a LAN address (as without ``SPARK_LOCAL_IP``)."""

    def __init__(self, sc, host: str) -> None:
        self._sc, self._host = sc, host

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sc, name)

    def getConf(self):
        return self._sc.getConf().set("spark.driver.host", self._host)


@pytest.mark.spark
@pytest.mark.alone
def test_a_session_on_a_local_master_listens_on_loopback_only(spark, caplog):
    """Even when ``spark.driver.host`` is a LAN address (192.0.2.1: documentation range, not this machine)."""
    from crowdspark.engine.spark.engine import SparkEngine

    blocks, _ = _temp_blocks()
    engine = SparkEngine(spark.sparkContext.parallelize(blocks, 2), sweep_mode="session")
    engine.sc = _DriverOnTheLan(engine.sc, "192.0.2.1")
    try:
        engine.begin_sweeps(stateful=False)
        with caplog.at_level(logging.INFO, logger="crowdspark.engine.spark.session"):
            stats = within(60, lambda: engine.map_reduce(_count_labels, None, stateful=False))
        assert engine.session_report()["sessions"] == 1
    finally:
        within(60, engine.close)
    assert stats["n"] == sum(b.n_labels for b in blocks)
    assert any(f"listening on {LOOPBACK}:" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("master", "conf", "expected"),
    [
        ("local[2]", {"spark.driver.host": "10.0.0.5"}, (LOOPBACK, LOOPBACK)),
        ("local-cluster[2,1,1024]", {"spark.driver.host": "10.0.0.5"}, (LOOPBACK, LOOPBACK)),
        ("yarn", {"spark.driver.host": "10.0.0.5"}, ("10.0.0.5", "10.0.0.5")),
        ("k8s://https://api:6443", {"spark.driver.host": "driver-svc", "spark.driver.bindAddress": "10.1.2.3"},
         ("10.1.2.3", "driver-svc")),
    ],
)
def test_session_addresses_are_the_narrowest_that_work(master, conf, expected):
    from crowdspark.engine.spark.engine import session_addresses

    assert session_addresses(master, conf) == expected


def test_session_addresses_need_the_driver_host_on_a_cluster():
    from crowdspark.engine.spark.engine import session_addresses
    from crowdspark.errors import ConfigError

    with pytest.raises(ConfigError, match="spark.driver.host is not set on the master 'yarn'.*spark.sweep_mode=jobs"):
        session_addresses("yarn", {})
