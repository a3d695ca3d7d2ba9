"""Short strings as order-preserving 64-bit integers, so that encoding them hashes and sorts integers.

A string of at most :data:`MAX_BYTES` UTF-8 bytes is packed into one uint64 (:func:`packed_keys`): its bytes,
zero-padded to seven, most significant first, then its byte length in the lowest byte.  Two keys compare as
their strings do in byte order (code-point order, as Python compares strings): the first differing byte
decides, and when one string is a prefix of the other, the padding bytes are zeros and the length decides
the rest.  Distinct strings have distinct keys, and :func:`unpacked_text` turns keys back into the strings.

Ids and labels are short in most crowd data (``"w0866"``, ``"i000000"``, ``"3"``); longer ones are encoded by
Arrow's string hashing as before (:func:`crowdspark.io.rules.sorted_codes`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["MAX_BYTES", "NULL_KEY", "packed_keys", "unpacked_text"]

#: the longest string (in UTF-8 bytes) that packs into a key
MAX_BYTES = 7

#: the key of a null row: its length byte (255) is no string's, and it is the largest key
NULL_KEY = np.uint64(2**64 - 1)


def _offsets_and_data(chunk) -> tuple[np.ndarray, np.ndarray]:
    """The value offsets (int64, shape (m + 1,)) and the data bytes (uint8) of an Arrow string chunk."""
    import pyarrow as pa

    _, offsets, data = chunk.buffers()
    width = np.int64 if pa.types.is_large_string(chunk.type) else np.int32
    offsets = np.frombuffer(offsets, dtype=width)[chunk.offset : chunk.offset + len(chunk) + 1].astype(np.int64)
    data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
    return offsets, data


def _chunk_keys(chunk) -> np.ndarray | None:
    """Keys of one Arrow string chunk, uint64 (m,); ``None`` when a value is longer than :data:`MAX_BYTES`."""
    import pyarrow.compute as pc

    offsets, data = _offsets_and_data(chunk)
    start = offsets[:-1]
    length = offsets[1:] - start
    longest = int(length.max()) if len(length) else 0
    if longest > MAX_BYTES:
        return None
    if chunk.null_count:
        valid = np.flatnonzero(pc.is_valid(chunk).to_numpy(zero_copy_only=False))
        start, length = start[valid], length[valid]
    rows = len(start)
    packed = np.zeros((rows, 8), dtype=np.uint8)
    if rows and longest and bool(np.all(length == longest)) and int(start[-1]) - int(start[0]) == (rows - 1) * longest:
        # one length, values back to back (nulls are empty): the values are consecutive slices of the data
        packed[:, :longest] = data[int(start[0]) : int(start[0]) + rows * longest].reshape(rows, longest)
    else:
        for j in range(longest):
            present = length > j
            packed[present, j] = data[start[present] + j]
    packed[:, 7] = length
    keys = packed.view(">u8").ravel().astype(np.uint64)
    if not chunk.null_count:
        return keys
    with_nulls = np.full(len(chunk), NULL_KEY, dtype=np.uint64)
    with_nulls[valid] = keys
    return with_nulls


def packed_keys(text) -> np.ndarray | None:
    """The keys of an Arrow string or large-string Array or ChunkedArray, uint64 (m,): :data:`NULL_KEY` where
    a row is null; ``None`` when a value is longer than :data:`MAX_BYTES` bytes or the type is another."""
    import pyarrow as pa

    if not (pa.types.is_string(text.type) or pa.types.is_large_string(text.type)):
        return None
    chunks = text.chunks if isinstance(text, pa.ChunkedArray) else [text]
    keys = []
    for chunk in chunks:
        chunk_keys = _chunk_keys(chunk)
        if chunk_keys is None:
            return None
        keys.append(chunk_keys)
    return np.concatenate(keys) if keys else np.zeros(0, dtype=np.uint64)


def unpacked_text(keys: np.ndarray, arrow_type):
    """The strings of ``keys`` (uint64 (d,), no :data:`NULL_KEY`) as an Arrow array of ``arrow_type`` (string or
    large string), in the keys' order."""
    import pyarrow as pa

    packed = np.ascontiguousarray(keys, dtype=">u8").view(np.uint8).reshape(-1, 8)
    length = packed[:, 7].astype(np.int64)
    data = packed[:, :MAX_BYTES][np.arange(MAX_BYTES) < length[:, None]]
    width = np.int64 if pa.types.is_large_string(arrow_type) else np.int32
    offsets = np.concatenate([[0], np.cumsum(length)]).astype(width)
    return pa.Array.from_buffers(arrow_type, len(keys), [None, pa.py_buffer(offsets), pa.py_buffer(data.tobytes())])
