"""The sweep session's network side: a driver server that admits only holders of the session key, and channels.

Nothing here knows Spark; :mod:`crowdspark.engine.spark.session` runs the barrier job over it.

**Handshake.**  A task connects to the :class:`SessionServer` and is admitted in two steps, neither of which
deserializes anything:

1. mutual authentication with the session key (:func:`new_key`, 32 random bytes), fixed-size messages
   only (:func:`_authenticate`): the driver sends a 32-byte random challenge; the task answers with the
   HMAC-SHA256 of it under the key (labelled "task") and its own 32-byte challenge; the driver checks the
   answer and only then answers the task's challenge (the HMAC-SHA256 of both challenges, labelled
   "driver"), which the task checks.  The labels keep either answer from being replayed as the other;
2. the task's hello, a fixed 16-byte struct (partition id, task attempt id), and the driver's reply, 16
   random bytes (the channel's nonce).  Both sides derive the channel's two keys, one per direction, from
   the session key, the hello and the nonce (:func:`channel_keys`).

Each connection shakes hands in its own thread under a deadline (:data:`HANDSHAKE_SECONDS`): a peer that
sends nothing or garbage is logged (warning) and dropped, and never delays another connection.  At most
:data:`MAX_HANDSHAKES` run at once; connections beyond that are closed at once (with a warning).  The first
:data:`DROP_WARNINGS` drops are logged one by one, with their peers and reasons; after them, one line per
:data:`DROP_LOG_SECONDS` says how many more were dropped (:class:`DropLog`), so a flood of connections cannot
flood the driver's log.  Any other
error in the server's threads is kept in :attr:`SessionServer.error` and raised by
:meth:`SessionServer.channels` as a :class:`SessionError`, and the server stops listening.

**Frames.**  After the handshake, both sides exchange frames over a :class:`Channel`: an 8-byte length, a
pickle (protocol 5) of at most :data:`MAX_FRAME_BYTES`, and a 32-byte tag, the HMAC-SHA256 under the
direction's channel key of the frame's sequence number, its length and the SHA-256 of the pickle.  The
receiver checks the tag before it unpickles anything: a frame changed, dropped, replayed, reordered or
moved from another connection fails the check, and the receiver raises :class:`FrameError` without
unpickling it.  Frames are authenticated, not encrypted (``docs/security.md``).  The SHA-256 of a payload is
computed once (:func:`encode`), however many channels it is sent to.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import pickle
import secrets
import socket
import struct
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import AuthenticationError
from typing import Any

__all__ = [
    "SessionError", "FrameError", "Channel", "Payload", "SessionServer", "connect", "new_key", "encode",
    "channel_keys", "HANDSHAKE_SECONDS", "MAX_HANDSHAKES", "MAX_FRAME_BYTES", "DropLog", "DROP_WARNINGS",
    "DROP_LOG_SECONDS",
]

log = logging.getLogger(__name__)

#: a connection that has not completed its handshake after this many seconds is dropped
HANDSHAKE_SECONDS = 30.0
#: handshakes in progress at once; connections beyond are closed at once
MAX_HANDSHAKES = 64
#: dropped connections a session logs one by one (peer and reason); later ones are counted
DROP_WARNINGS = 5
#: after the first :data:`DROP_WARNINGS`, at most one line per this many seconds says how many more were dropped
DROP_LOG_SECONDS = 60.0
#: largest frame either side reads after the handshake (a larger length means a broken stream)
MAX_FRAME_BYTES = 1 << 32
_KEY_BYTES = 32
_HEADER = struct.Struct("!Q")
_HELLO = struct.Struct("!qq")  # partition id, task attempt id
_NONCE_BYTES = 16
_TAG_BYTES = 32
_SEQUENCE = struct.Struct("!QQ")  # a frame's sequence number and length, as its tag covers them
#: payloads up to this size go out in one write with their header (as multiprocessing.connection does)
_JOIN_BELOW = 16384
_POLL_SECONDS = 0.5
_CHALLENGE_BYTES = 32
_TASK_PROOF = b"crowdspark sweep session: the task holds the key\0"
_DRIVER_PROOF = b"crowdspark sweep session: the driver holds the key\0"
#: what a peer that does not complete the handshake makes it raise
_HANDSHAKE_FAILURES = (OSError, EOFError, AuthenticationError)


class SessionError(RuntimeError):
    """The sweep session failed: its Spark job, its server, or its protocol (the message says which)."""


class FrameError(SessionError):
    """A frame's tag is wrong: it was not sent by the other end of this channel, in this order, as it is."""


def new_key() -> bytes:
    """A fresh random session key (32 bytes)."""
    return secrets.token_bytes(_KEY_BYTES)


class Payload:
    """A frame's payload: a pickle and its SHA-256 (computed once, for every channel it is sent to).

    Attributes
    ----------
    data : bytes
    digest : bytes
        SHA-256 of ``data`` (32 bytes).
    """

    __slots__ = ("data", "digest")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.digest = hashlib.sha256(data).digest()

    def __len__(self) -> int:
        return len(self.data)


def encode(obj: Any) -> Payload:
    """The payload of a frame holding ``obj`` (a pickle, protocol 5); one payload may go to many channels."""
    return Payload(pickle.dumps(obj, protocol=5))


def channel_keys(key: bytes, hello: bytes, nonce: bytes, *, driver: bool) -> tuple[bytes, bytes]:
    """The keys ``(send, receive)`` of one side of a channel.

    Both are derived from the session ``key``, the task's ``hello`` and the driver's ``nonce`` (HMAC-SHA256),
    one per direction, so that a frame is valid only on its own connection and in its own direction.
    """
    base = hmac.digest(key, b"crowdspark sweep session channel\0" + hello + nonce, "sha256")
    to_task = hmac.digest(base, b"driver to task", "sha256")
    to_driver = hmac.digest(base, b"task to driver", "sha256")
    return (to_task, to_driver) if driver else (to_driver, to_task)


def _tag(key: bytes, sequence: int, size: int, digest: bytes) -> bytes:
    return hmac.digest(key, _SEQUENCE.pack(sequence, size) + digest, "sha256")


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


class Channel:
    """An authenticated connection: frames of pickles, both ways, each with its tag.

    Parameters
    ----------
    sock : socket.socket
        A connected, blocking socket whose peer has completed the handshake.
    keys : (bytes, bytes)
        This side's ``(send, receive)`` keys (:func:`channel_keys`).
    """

    def __init__(self, sock: socket.socket, keys: tuple[bytes, bytes]) -> None:
        self._sock = sock
        self._send_key, self._receive_key = keys
        self._sent = 0
        self._received = 0
        self._send_lock = threading.Lock()
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, obj: Any) -> None:
        self.send_payload(encode(obj))

    def send_payload(self, payload: Payload) -> None:
        """Send a frame holding ``payload`` (from :func:`encode`), without copying a large payload.

        Raises
        ------
        SessionError
            ``payload`` is above :data:`MAX_FRAME_BYTES` (nothing is sent).
        """
        size = len(payload.data)
        if size > MAX_FRAME_BYTES:
            raise SessionError(
                f"sweep session: a frame of {size} bytes is above the limit of {MAX_FRAME_BYTES} bytes; "
                "set spark.sweep_mode=jobs for a model this large"
            )
        with self._send_lock:
            tag = _tag(self._send_key, self._sent, size, payload.digest)
            self._sent += 1
            header = _HEADER.pack(size)
            if size < _JOIN_BELOW:
                self._sock.sendall(header + payload.data + tag)
            else:
                self._sock.sendall(header)
                self._sock.sendall(payload.data)
                self._sock.sendall(tag)

    def receive(self) -> Any:
        """The next frame's object, unpickled only after its tag is checked.

        Raises
        ------
        EOFError, OSError
            The connection was closed or broke.
        SessionError
            The frame's length is above :data:`MAX_FRAME_BYTES` (nothing of it is read).
        FrameError
            The frame's tag is wrong (nothing of it is unpickled).
        """
        (size,) = _HEADER.unpack(_read_exact(self._sock, _HEADER.size))
        if size > MAX_FRAME_BYTES:
            raise SessionError(
                f"sweep session: a frame of {size} bytes announced, above the limit of {MAX_FRAME_BYTES} bytes; "
                "the stream is broken (a bug: please report it)"
            )
        data = _read_exact(self._sock, size)
        tag = _read_exact(self._sock, _TAG_BYTES)
        expected = _tag(self._receive_key, self._received, size, hashlib.sha256(data).digest())
        if not hmac.compare_digest(tag, expected):
            raise FrameError(
                f"sweep session: frame {self._received} on this connection failed authentication (its tag does "
                "not match): it was changed, replayed or injected on the way; nothing of it was unpickled"
            )
        self._received += 1
        return pickle.loads(data)

    def close(self) -> None:
        self._sock.close()


class _Deadline:
    """Shuts ``sock`` down (waking any read or write blocked on it) if the ``with`` block outlives ``seconds``.

    The block then raises :class:`TimeoutError`, whatever it did.
    """

    def __init__(self, sock: socket.socket, seconds: float) -> None:
        self._sock = sock
        self._seconds = seconds
        self._lock = threading.Lock()
        self._ended = False
        self._expired = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def _expire(self) -> None:
        with self._lock:
            if self._ended:
                return
            self._expired = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # closed already

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._timer.cancel()
        with self._lock:
            self._ended = True
            expired = self._expired
        if expired:
            raise TimeoutError(f"no complete handshake within {self._seconds:g} s")


class DropLog:
    """The warnings of a session's dropped connections, rate-limited.

    The first ``first`` drops are logged one by one; each later one is counted, and a drop at least
    ``seconds`` after the last line logs one line with the count since then; :meth:`flush` logs what is
    still counted (when the session closes).  Thread-safe: handshake threads call :meth:`dropped`.

    Parameters
    ----------
    first : int
    seconds : float
    clock : callable
        Monotonic seconds (a test's clock).
    """

    def __init__(self, first: int = DROP_WARNINGS, seconds: float = DROP_LOG_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.first = first
        self.seconds = seconds
        self._clock = clock
        self._lock = threading.Lock()
        self.total = 0
        self._counted = 0
        self._since = 0.0

    def dropped(self, message: str, *args: Any) -> None:
        """Count a dropped connection; log ``message % args`` if it is one of the first ones."""
        with self._lock:
            self.total += 1
            if self.total <= self.first:
                if self.total == self.first:
                    message += (f"; further drops are counted and logged once per {self.seconds:g} s")
                log.warning(message, *args)
                self._since = self._clock()
                return
            self._counted += 1
            if self._clock() - self._since >= self.seconds:
                self._summarize()

    def flush(self) -> None:
        """Log the drops counted since the last line, if any."""
        with self._lock:
            if self._counted:
                self._summarize()

    def _summarize(self) -> None:
        now = self._clock()
        log.warning("sweep session: dropped %d more connection(s) in the last %.0f s (%d in all, the first %d "
                    "logged one by one above)", self._counted, now - self._since, self.total, self.first)
        self._counted = 0
        self._since = now


def _proof(key: bytes, label: bytes, *challenges: bytes) -> bytes:
    """The HMAC-SHA256 under ``key`` of ``label`` followed by ``challenges``: 32 bytes."""
    return hmac.digest(key, label + b"".join(challenges), "sha256")


def _check_proof(received: bytes, expected: bytes) -> None:
    if not hmac.compare_digest(received, expected):
        raise AuthenticationError("digest received was wrong")


def _authenticate(sock: socket.socket, key: bytes, *, server: bool) -> None:
    """Mutual challenge-response over ``sock`` (blocking): the server checks the client first.

    Raises
    ------
    AuthenticationError
        The peer's answer is not the HMAC of the challenge under ``key``.
    EOFError
        The peer closed the connection (on the task's side: before the driver's answer, which is how the
        driver refuses the task's, raised as an ``AuthenticationError``).
    """
    if server:
        challenge = secrets.token_bytes(_CHALLENGE_BYTES)
        sock.sendall(challenge)
        answer = bytes(_read_exact(sock, _TAG_BYTES + _CHALLENGE_BYTES))
        _check_proof(answer[:_TAG_BYTES], _proof(key, _TASK_PROOF, challenge))
        sock.sendall(_proof(key, _DRIVER_PROOF, answer[_TAG_BYTES:], challenge))
    else:
        theirs = bytes(_read_exact(sock, _CHALLENGE_BYTES))
        mine = secrets.token_bytes(_CHALLENGE_BYTES)
        sock.sendall(_proof(key, _TASK_PROOF, theirs) + mine)
        try:
            answer = bytes(_read_exact(sock, _TAG_BYTES))
        except EOFError as error:
            raise AuthenticationError("digest sent was rejected (the driver closed the connection)") from error
        _check_proof(answer, _proof(key, _DRIVER_PROOF, mine, theirs))


def connect(address: tuple[str, int], key: bytes, partition: int, attempt_id: int,
            handshake_seconds: float = HANDSHAKE_SECONDS) -> Channel:
    """Task side: connect to the session's server, authenticate both ways, say hello.

    Raises
    ------
    SessionError
        The server cannot be reached, or the handshake fails (one side does not hold the key, a deadline
        passed, the connection broke): nothing the server sent is deserialized.
    """
    host, port = address
    try:
        sock = socket.create_connection(address, timeout=handshake_seconds)
    except OSError as error:
        raise SessionError(
            f"cannot reach the driver's sweep session at {host}:{port} ({error}); the session has ended (a cached "
            "sweep was recomputed after it) or executors cannot connect to the driver's host: set "
            "spark.sweep_mode=jobs"
        ) from error
    try:
        sock.settimeout(None)
        hello = _HELLO.pack(partition, attempt_id)
        with _Deadline(sock, handshake_seconds):
            _authenticate(sock, key, server=False)
            sock.sendall(hello)
            nonce = bytes(_read_exact(sock, _NONCE_BYTES))
    except _HANDSHAKE_FAILURES as error:
        sock.close()
        raise SessionError(
            f"the handshake with the driver's sweep session at {host}:{port} failed ({error!r}): the server or "
            "this task does not hold the session key, or the connection broke; nothing the server sent was "
            "deserialized"
        ) from error
    return Channel(sock, channel_keys(key, hello, nonce, driver=False))


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


class SessionServer:
    """The driver's server: admits the tasks that complete the handshake, one channel per partition.

    A channel from a newer task attempt replaces the partition's older one; after :meth:`forget_all`, only
    attempts newer than every one seen so far are admitted (the tasks of a restarted stage).

    Parameters
    ----------
    host : str
        Address to listen on (port chosen by the system).
    key : bytes
        The session key (:func:`new_key`).
    n_partitions : int
        Tasks say which partition they hold, in ``[0, n_partitions)``.
    handshake_seconds : float
        Deadline of a connection's handshake.
    """

    def __init__(self, host: str, key: bytes, n_partitions: int,
                 handshake_seconds: float = HANDSHAKE_SECONDS) -> None:
        self.n_partitions = n_partitions
        self.handshake_seconds = handshake_seconds
        self._key = key
        self._listener = socket.create_server((host, 0), family=_family(host))
        self._listener.settimeout(_POLL_SECONDS)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Condition()
        self._channels: dict[int, Channel] = {}
        self._handshakes = 0
        self._min_attempt_id = -1  # attempts up to this id belong to failed stage attempts
        self._seen_attempt_id = -1
        self._to_all: Payload | None = None
        self._closed = False
        self.error: BaseException | None = None
        self.drops = DropLog()
        self._acceptor = threading.Thread(target=self._accept_loop, name="crowdspark-session-accept", daemon=True)
        self._acceptor.start()

    # threads

    def _accept_loop(self) -> None:
        try:
            while not self._closed and self.error is None:
                try:
                    sock, peer = self._listener.accept()
                except TimeoutError:
                    continue
                except OSError:
                    if self._closed or self.error is not None:
                        return  # the listener was closed
                    raise
                self._start_handshake(sock, peer)
        except BaseException as error:  # kept for channels(): the session cannot admit tasks any more
            self._fail(error)

    def _start_handshake(self, sock: socket.socket, peer: Any) -> None:
        with self._lock:
            full = self._handshakes >= MAX_HANDSHAKES
            if not full:
                self._handshakes += 1
        if full:
            self.drops.dropped("sweep session: dropped a connection from %s: %d handshakes in progress already",
                               _name(peer), MAX_HANDSHAKES)
            sock.close()
            return
        try:
            threading.Thread(target=self._handshake, args=(sock, peer), name="crowdspark-session-handshake",
                             daemon=True).start()
        except BaseException:
            with self._lock:
                self._handshakes -= 1
            sock.close()
            raise

    def _handshake(self, sock: socket.socket, peer: Any) -> None:
        try:
            try:
                sock.settimeout(None)
                with _Deadline(sock, self.handshake_seconds):
                    _authenticate(sock, self._key, server=True)
                    hello = bytes(_read_exact(sock, _HELLO.size))
                    nonce = secrets.token_bytes(_NONCE_BYTES)
                    sock.sendall(nonce)
            except _HANDSHAKE_FAILURES as error:
                self.drops.dropped("sweep session: dropped a connection from %s that did not complete the "
                                   "handshake (%r)", _name(peer), error)
                sock.close()
                return
            partition, attempt_id = _HELLO.unpack(hello)
            self._admit(Channel(sock, channel_keys(self._key, hello, nonce, driver=True)), partition, attempt_id)
        except BaseException as error:  # kept for channels()
            sock.close()
            self._fail(error)
        finally:
            with self._lock:
                self._handshakes -= 1

    def _admit(self, channel: Channel, partition: int, attempt_id: int) -> None:
        if not 0 <= partition < self.n_partitions:
            channel.close()
            raise SessionError(
                f"sweep session: an authenticated task said it holds partition {partition}, outside "
                f"[0, {self.n_partitions}) (a bug: please report it)"
            )
        with self._lock:
            if self._closed or attempt_id <= self._min_attempt_id:
                channel.close()  # a late task, or one of a failed stage attempt
                return
            old = self._channels.pop(partition, None)
            if old is not None:
                old.close()
            self._channels[partition] = channel
            self._seen_attempt_id = max(self._seen_attempt_id, attempt_id)
            if self._to_all is not None:
                _send_quietly(channel, self._to_all)
            self._lock.notify_all()

    def _fail(self, error: BaseException) -> None:
        with self._lock:  # the listener is closed before any waiter sees the error
            first = self.error is None
            if first:
                self.error = error
            self._listener.close()  # tasks that connect from now on are refused at once
            self._lock.notify_all()
        if first:
            log.error("sweep session: the server failed; the session cannot admit tasks any more",
                      exc_info=(type(error), error, error.__traceback__))

    # the session's calls

    def channels(self, check: Callable[[], None] | None = None) -> list[Channel]:
        """The channels of partitions ``0 .. n_partitions - 1``, once every partition has one.

        ``check`` runs at every wake-up (at least every 0.5 s, and after :meth:`wake`) and may raise.

        Raises
        ------
        SessionError
            The server failed (then it admits no task any more).
        """
        with self._lock:
            while True:
                if self.error is not None:
                    raise SessionError(f"the sweep session's server failed: {self.error!r}") from self.error
                if check is not None:
                    check()
                if len(self._channels) == self.n_partitions:
                    return [self._channels[p] for p in range(self.n_partitions)]
                self._lock.wait(_POLL_SECONDS)

    @property
    def admitted(self) -> int:
        """How many partitions have a channel (tasks that completed the handshake and were not forgotten)."""
        with self._lock:
            return len(self._channels)

    def wake(self) -> None:
        """Make a waiting :meth:`channels` run its check now."""
        with self._lock:
            self._lock.notify_all()

    def forget_all(self) -> None:
        """Close every channel; from now on only task attempts newer than every one seen are admitted."""
        with self._lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()
            self._min_attempt_id = self._seen_attempt_id

    def send_to_all(self, payload: Payload) -> None:
        """Send ``payload`` to every admitted task, and to every task admitted from now on (e.g. ``stop``)."""
        with self._lock:
            self._to_all = payload
            for channel in self._channels.values():
                _send_quietly(channel, payload)

    def close(self) -> None:
        """Stop listening and close every channel."""
        self._closed = True
        self._listener.close()
        self._acceptor.join()
        with self._lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()
        self.drops.flush()


def _name(peer: Any) -> str:
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)


def _send_quietly(channel: Channel, payload: Payload) -> None:
    try:
        channel.send_payload(payload)
    except OSError:
        pass  # the task is gone already
