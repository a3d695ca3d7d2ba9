"""Short strings packed into order-preserving integers, and the encoding that uses them (``sorted_codes``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from crowdspark.io.rules import sorted_codes
from crowdspark.io.short_text import MAX_BYTES, NULL_KEY, packed_keys, unpacked_text

# one- and two-byte characters, and NUL, which zero padding must not confuse with the end of a string
ALPHABET = ["a", "b", "z", "0", "9", "\x00", "é", "ß"]


def _random_values(rng: np.random.Generator, rows: int, longest: int) -> list[str | None]:
    values = ["".join(rng.choice(ALPHABET, int(rng.integers(0, longest + 1)))) for _ in range(rows)]
    return [None if rng.random() < 0.2 else v for v in values]


def _expected(values: list[str | None]) -> tuple[list[str], np.ndarray]:
    """The sorted distinct values (Python's order is code-point order) and each row's index, -1 for null."""
    dictionary = sorted({v for v in values if v is not None})
    position = {v: i for i, v in enumerate(dictionary)}
    return dictionary, np.array([-1 if v is None else position[v] for v in values], dtype=np.int32)


@pytest.mark.parametrize("arrow_type", [pa.string(), pa.large_string()])
def test_sorted_codes_matches_python_order_for_short_and_long_strings(arrow_type) -> None:
    rng = np.random.default_rng(7)
    packed = 0
    for trial in range(300):
        values = _random_values(rng, int(rng.integers(0, 50)), int(rng.integers(0, 6)))
        array = pa.array(values, type=arrow_type)
        if trial % 3 == 1 and len(array) > 3:  # a slice: its offsets start inside the buffers
            array = array.slice(2, len(array) - 3)
            values = values[2:-1]
        if trial % 2:
            half = len(array) // 2
            array = pa.chunked_array([array.slice(0, half), array.slice(half)], type=arrow_type)
        packed += packed_keys(array) is not None
        dictionary, codes = sorted_codes(array)
        expected_dictionary, expected_codes = _expected(values)
        assert dictionary.type == arrow_type
        assert dictionary.to_pylist() == expected_dictionary
        assert codes.dtype == np.int32
        np.testing.assert_array_equal(codes, expected_codes)
    assert 0 < packed < 300  # both the packed path and Arrow's string hashing ran


def test_keys_sort_as_their_strings_and_unpack_to_them() -> None:
    values = ["", "\x00", "\x00\x00", "a", "a\x00", "a\x00b", "ab", "abcdefg", "b", "é", "z" * MAX_BYTES]
    keys = packed_keys(pa.array(values))
    assert keys is not None and keys.dtype == np.uint64
    assert [values[i] for i in np.argsort(keys)] == sorted(values)
    assert len(set(keys.tolist())) == len(values)
    assert unpacked_text(keys, pa.string()).to_pylist() == values


def test_nulls_get_the_null_key_and_long_or_other_types_are_not_packed() -> None:
    keys = packed_keys(pa.array(["a", None, "b"]))
    assert keys is not None and keys[1] == NULL_KEY and NULL_KEY > max(keys[0], keys[2])
    assert packed_keys(pa.array(["short", "x" * (MAX_BYTES + 1)])) is None
    assert packed_keys(pa.array(["a", "b"]).dictionary_encode()) is None
    assert packed_keys(pa.array([1, 2])) is None


def test_values_of_one_length_with_nulls_between_them() -> None:
    values = ["ab", None, "cd", None, None, "ef", "gh", None]
    for array in (pa.array(values), pa.array(values).slice(1, 6), pa.chunked_array([pa.array(values[:3]),
                                                                                    pa.array(values[3:])])):
        expected = values[1:7] if len(array) == 6 else values
        dictionary, codes = sorted_codes(array)
        assert dictionary.to_pylist() == _expected(expected)[0]
        np.testing.assert_array_equal(codes, _expected(expected)[1])
