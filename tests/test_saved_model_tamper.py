"""Saved models someone else could have written: every tampered variant of a real run's ``_model/`` is refused
with an InputError (exit 2 on the command line), within seconds and without allocating more than a bound the
description gives, and never by unpickling anything."""

from __future__ import annotations

import functools
import json
import resource
import shutil
import struct
import subprocess
import sys
import time
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from crowdspark.cli import main
from crowdspark.errors import EXIT_BAD_INPUT, InputError
from crowdspark.io import saved_model
from crowdspark.io.datatree import DOCUMENT, tree_to_bytes
from crowdspark.io.saved_model import MODEL_FOLDER, load_saved_model

DATA = Path(__file__).resolve().parents[1] / "data" / "rte"
RUN = ["aggregate", "--labels", str(DATA / "labels.csv"), "--gold", str(DATA / "truth.csv"), "--engine", "local",
       "--algorithm", "ds", "--quiet"]
#: what reading one tampered model may allocate (the valid one is ~20 KB of arrays)
MEMORY_BOUND = 64 * 2**20
#: how much CPU time refusing one may take (under tracemalloc, which slows allocations down)
SECONDS = 5.0


@pytest.fixture(scope="module")
def valid(tmp_path_factory) -> Path:
    """The output of a real ds run (its ``_model/`` is what the variants tamper with)."""
    out = tmp_path_factory.mktemp("valid") / "run"
    assert main([*RUN, "--output", str(out)]) == 0
    return out


# ---- writing archives by hand -------------------------------------------------------------------------------

def _npy_header(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    """An ``.npy`` 1.0 header claiming ``shape`` of ``descr``."""
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    pad = 64 - (10 + len(text) + 1) % 64
    text = text + " " * pad + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1")


def _zip(entries: list[tuple[str, bytes, int, int, int]]) -> bytes:
    """A zip archive of ``(name, deflated bytes, crc, declared uncompressed size, method)`` entries, with the
    directory saying what the caller says (which may be a lie)."""
    body, directory = b"", b""
    for name, data, crc, size, method in entries:
        raw = name.encode()
        offset = len(body)
        body += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc, len(data), size, len(raw), 0)
        body += raw + data
        directory += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0x21, crc, len(data), size,
                                 len(raw), 0, 0, 0, 0, 0, offset) + raw
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(directory), len(body), 0)
    return body + directory + end


def _stored(name: str, payload: bytes, size: int | None = None) -> tuple[str, bytes, int, int, int]:
    return name, payload, zlib.crc32(payload), len(payload) if size is None else size, 0


@functools.lru_cache(maxsize=1)
def _stream(zero_bytes: int) -> tuple[bytes, int, int]:
    """A raw deflate stream of a float64 ``.npy`` of ``zero_bytes`` zero bytes (about 1 KB per MiB), its CRC-32
    and its inflated size."""
    header = _npy_header((zero_bytes // 8,))
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = packer.compress(header) + packer.flush(zlib.Z_FULL_FLUSH)
    zeros = bytes(2**20)
    chunk = packer.compress(zeros) + packer.flush(zlib.Z_FULL_FLUSH)  # self-contained: repeats concatenate
    stream = head + chunk * (zero_bytes // 2**20) + packer.flush()
    crc = zlib.crc32(header)
    for _ in range(zero_bytes // 2**20):
        crc = zlib.crc32(zeros, crc)
    return stream, crc, len(header) + zero_bytes


def _bomb(honest: bool = True) -> bytes:
    """About 2 MB of ``params.npz`` whose one entry inflates to a 2 GiB float64 array (its zip directory
    says so when ``honest``, else it claims 80 bytes of data)."""
    stream, crc, size = _stream(2**31)
    return _zip([("log_pi.npy", stream, crc, size if honest else size - 2**31 + 80, 8)])


def _npy(array: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


# ---- the variants ---------------------------------------------------------------------------------------------

def _json(folder: Path) -> dict:
    return json.loads((folder / "model.json").read_text())


def _set_json(**changes) -> Callable[[Path], None]:
    def tamper(folder: Path) -> None:
        document = _json(folder)
        document.update(changes)
        (folder / "model.json").write_text(json.dumps(document))
    return tamper


def _raw_json(text: str | bytes) -> Callable[[Path], None]:
    def tamper(folder: Path) -> None:
        (folder / "model.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    return tamper


def _params(change: Callable[[dict], None]) -> Callable[[Path], None]:
    """Rewrite ``params.npz`` as a valid data archive of changed values."""
    def tamper(folder: Path) -> None:
        params = dict(load_saved_model(str(folder)).params)
        change(params)
        (folder / "params.npz").write_bytes(tree_to_bytes(params))
    return tamper


def _params_bytes(make: Callable[[Path], bytes]) -> Callable[[Path], None]:
    def tamper(folder: Path) -> None:
        (folder / "params.npz").write_bytes(make(folder))
    return tamper


def _plain(**arrays: np.ndarray) -> bytes:
    """A format-1 ``params.npz``: plain ``numpy.savez`` arrays (pickled object arrays allowed by the writer)."""
    return _zip([_stored(f"{name}.npy", _npy(array)) for name, array in arrays.items()])


def _log_pi(folder: Path) -> np.ndarray:
    return np.asarray(load_saved_model(str(folder)).params["log_pi"])


def _set(key: str, value: Callable[[np.ndarray], np.ndarray]) -> Callable[[Path], None]:
    return _params(lambda p: p.__setitem__(key, value(np.array(p[key]))))


def _nan(a: np.ndarray) -> np.ndarray:
    a.flat[3] = np.nan
    return a


def _deep(depth: int = 200_000) -> str:
    return "[" * depth + "]" * depth


def _tree_document(text: str) -> Callable[[Path], None]:
    def make(folder: Path) -> bytes:
        document = np.frombuffer(text.encode(), dtype=np.uint8)
        return _zip([_stored(f"{DOCUMENT}.npy", _npy(document))])
    return _params_bytes(make)


def _workers(folder: Path) -> list[str]:
    return _json(folder)["workers"]


VARIANTS: dict[str, Callable[[Path], None]] = {
    # the description
    "json truncated": lambda f: (f / "model.json").write_bytes((f / "model.json").read_bytes()[:40]),
    "json garbage bytes": _raw_json(b"\xff\xfe\x00garbage\x80"),
    "json nested 200000 deep": _raw_json('{"format": 2, "parameters": ' + _deep() + "}"),
    "json a list": _raw_json("[2, 3]"),
    "format true": _set_json(format=True),
    "no workers": lambda f: (f / "model.json").write_text(json.dumps({k: v for k, v in _json(f).items()
                                                                      if k != "workers"})),
    "algorithm a number": _set_json(algorithm=7),
    "algorithm unknown": _set_json(algorithm="os.system"),
    "classes an object": _set_json(classes={"0": 1}),
    "classes repeated": _set_json(classes=["0", "0"]),
    "workers nested": _set_json(workers=[["a"], "b"]),
    "seed a string": lambda f: _set_json(parameters={**_json(f)["parameters"], "seed": "0"})(f),
    "max_iter negative": lambda f: _set_json(parameters={**_json(f)["parameters"], "max_iter": -5})(f),
    "huge json: 100000 workers": lambda f: _set_json(workers=[f"w{i}" for i in range(100_000)])(f),
    "three classes, matrices of two": _set_json(classes=["0", "1", "2"]),
    "fewer workers than matrices": lambda f: _set_json(workers=_workers(f)[:-10])(f),
    # the archive
    "npz truncated": lambda f: (f / "params.npz").write_bytes((f / "params.npz").read_bytes()[:300]),
    "npz garbage": _params_bytes(lambda f: b"PK\x03\x04" + bytes(range(256)) * 4),
    "npz missing": lambda f: (f / "params.npz").unlink(),
    "object array (pickle)": _params_bytes(lambda f: _plain(log_pi=np.array([{"x": 1}, None], dtype=object))),
    "huge shape header, small entry": _params_bytes(lambda f: _zip([_stored("log_pi.npy", _npy_header((2**40,))
                                                                                + bytes(64))])),
    "zip directory claims 2 GiB": _params_bytes(lambda f: _zip([_stored("log_pi.npy", _npy_header((2**28,))
                                                                                + bytes(64), size=2**31)])),
    "2 MB npz inflating to 2 GiB": _params_bytes(lambda f: _bomb()),
    "2 MB npz inflating to 2 GiB, 100000 workers listed": lambda f: (
        _set_json(workers=[f"w{i}" for i in range(100_000)])(f), _params_bytes(lambda f: _bomb())(f)),
    "npz inflating to 2 GiB, directory lies": _params_bytes(lambda f: _bomb(honest=False)),
    "structured dtype": _params_bytes(lambda f: _plain(log_pi=np.zeros(3, dtype=[("a", "<f8"), ("b", "<i4")]))),
    "strings for matrices": _set("log_pi", lambda a: a.astype(str)),
    "tree document nested 200000 deep": _tree_document('{"dict": {"x": ' + '{"list": [' * 200_000 + "]}" * 200_000
                                                       + "}}"),
    "tree document unknown node": _tree_document('{"dict": {"log_pi": {"pickle": "a0"}}}'),
    # the values
    "NaN in log_pi": _set("log_pi", _nan),
    "inf in log_alpha": _set("log_alpha", lambda a: np.full_like(a, np.inf)),
    "probabilities above 1": _set("log_pi", lambda a: np.abs(a)),
    "rows not summing to 1": _set("log_pi", lambda a: a - 0.5),
    "class proportions not summing to 1": _set("log_alpha", lambda a: np.log(np.full_like(a, 0.9))),
    "matrices of 3 classes": _set("log_pi", lambda a: np.log(np.full((a.shape[0], 3, 3), 1 / 3))),
    "matrices for fewer workers": _set("log_pi", lambda a: a[: len(a) // 2]),
    "matrices for more workers": _set("log_pi", lambda a: np.concatenate([a, a])),
    "missing log_alpha": _params(lambda p: p.pop("log_alpha")),
    "extra array": _params(lambda p: p.__setitem__("payload", np.zeros(10))),
    "format-1 plain arrays, probabilities above 1": _params_bytes(lambda f: _plain(
        log_pi=np.full((len(_workers(f)), 2, 2), 0.1), log_alpha=np.log([0.5, 0.5]))),
    "init_stats with NaN": lambda f: (f / "init_stats.npz").write_bytes(tree_to_bytes(
        {"confusion": np.full((len(_workers(f)), 2, 2), np.nan), "classes": np.ones(2)})),
}


def _tampered(valid: Path, tmp_path: Path, name: str) -> Path:
    out = tmp_path / "run"
    shutil.copytree(valid, out)
    VARIANTS[name](out / MODEL_FOLDER)
    return out


def test_there_are_at_least_28_variants():
    assert len(VARIANTS) >= 28


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_a_tampered_saved_model_is_refused_quickly_and_within_bounded_memory(valid, tmp_path, name):
    path = _tampered(valid, tmp_path, name)
    tracemalloc.start()
    started = time.process_time()  # CPU time: what the reader spends, whatever else the machine runs
    try:
        with pytest.raises(InputError, match=r"--warm-start .*(cannot be read|format)"):
            load_saved_model(str(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    seconds = time.process_time() - started
    assert peak < MEMORY_BOUND, f"{name}: {peak / 2**20:.0f} MiB"
    assert seconds < SECONDS, f"{name}: {seconds:.1f} s"


def test_the_valid_model_reads(valid):
    saved = load_saved_model(str(valid))
    assert saved.algorithm == "ds" and saved.params["log_pi"].shape == (len(saved.workers), 2, 2)


def test_a_description_larger_than_the_bound_is_not_read(valid, tmp_path, monkeypatch):
    path = _tampered(valid, tmp_path, "algorithm a number")
    monkeypatch.setattr(saved_model, "MAX_DESCRIPTION_BYTES", 100)
    with pytest.raises(InputError, match="more than the 100 a saved model's description may hold"):
        load_saved_model(str(path))


def test_the_archive_budget_follows_the_description():
    small = saved_model.array_budget(164, 2, 1)
    assert small < 16 * 2**20  # a 2 GiB claim for rte's 164 workers and 2 classes is far over it
    assert saved_model.array_budget(1_640, 2, 1) > 9 * small  # linear in the workers (mmsr: quadratic)


# ---- the command line: exit 2 under a memory limit ------------------------------------------------------------

#: the address space a command-line run gets (a 2 GiB array does not fit; a ds run on rte does)
ADDRESS_SPACE = 1536 * 2**20
CLI_VARIANTS = ["2 MB npz inflating to 2 GiB", "2 MB npz inflating to 2 GiB, 100000 workers listed",
                "npz inflating to 2 GiB, directory lies", "zip directory claims 2 GiB",
                "huge shape header, small entry", "json nested 200000 deep", "matrices for fewer workers",
                "probabilities above 1", "NaN in log_pi", "tree document nested 200000 deep", "object array (pickle)"]


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "crowdspark", *args], capture_output=True, text=True, timeout=120,
                          preexec_fn=_limited)


@pytest.mark.slow
def test_the_command_line_warm_starts_from_the_valid_model_under_the_limit(valid, tmp_path):
    done = _cli(*RUN, "--output", str(tmp_path / "next"), "--warm-start", str(valid))
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("name", CLI_VARIANTS)
def test_the_command_line_refuses_a_tampered_warm_start_with_exit_2(valid, tmp_path, name):
    path = _tampered(valid, tmp_path, name)
    done = _cli(*RUN, "--output", str(tmp_path / "next"), "--warm-start", str(path))
    assert done.returncode == EXIT_BAD_INPUT, done.stderr[-2000:]
    assert "crowdspark: error: --warm-start" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "next").exists()


@pytest.mark.slow
@pytest.mark.parametrize("summary", [_deep(), '{"classes": ' + _deep() + "}", '{"classes": 5}'])
def test_the_command_line_refuses_a_tampered_run_given_to_initial_workers_with_exit_2(valid, tmp_path, summary):
    run = tmp_path / "run"
    shutil.copytree(valid, run)
    (run / "summary.json").write_text(summary)
    done = _cli(*RUN, "--output", str(tmp_path / "next"), "--initial-workers", str(run))
    assert done.returncode == EXIT_BAD_INPUT, done.stderr[-2000:]
    assert "--initial-workers" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_every_algorithms_saved_model_reads_back(tmp_path):
    """The checks accept what every model writes (its declared domains are what its fit gives)."""
    from crowdspark.models.registry import algorithm_names

    bluebird = DATA.parent / "bluebird"
    for name in algorithm_names():
        out = tmp_path / name
        extra = ["--set", "gold.fit_fraction=0.3"] if name == "gold-mv" else []
        assert main(["aggregate", "--labels", str(bluebird / "labels.csv"), "--gold", str(bluebird / "truth.csv"),
                     "--engine", "local", "--quiet", "--algorithm", name, "--output", str(out), *extra]) == 0, name
        saved = load_saved_model(str(out))
        assert saved.algorithm == name and len(saved.workers) > 0
