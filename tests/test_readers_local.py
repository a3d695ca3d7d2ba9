"""The pandas reader's two CSV paths (pyarrow for files without quotes, Python's strict reader for the others)
read the same files the same way and refuse the same files with the same messages; the labels it prepares
are categorical and encode like the strings they hold; Parquet string columns read from their dictionaries
give the same text."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from crowdspark.config import InputConfig
from crowdspark.errors import InputError
from crowdspark.io import pandas_reader
from crowdspark.io.cells import canonical_text, canonical_values
from crowdspark.io.pandas_reader import prepare_labels, read_csv_file, read_frame

CASES = {
    "plain": b"item,worker,label\n1,a,x\n2,b,y\n",
    "empty cell": b"item,worker,label\n1,,x\n2,b,y\n",
    "blank lines": b"\n\nitem,worker,label\n\n1,a,x\n\n2,b,y\n\n",
    "crlf": b"item,worker,label\r\n1,a,x\r\n2,b,y\r\n",
    "cr": b"item,worker,label\r1,a,x\r2,b,y\r",
    "byte-order mark": b"\xef\xbb\xbfitem,worker,label\n1,a,x\n",
    "short row": b"item,worker,label\n1,a\n",
    "long row": b"item,worker,label\n1,a,x,y\n",
    "repeated header": b"item,Item,label\n1,a,x\n",
    "spaces kept": b"item,worker,label\n 1 , a ,x\n",
    "not utf-8": b"item,worker,label\n1,\xff,x\n",
    "header only": b"item,worker,label\n",
    "empty file": b"",
    "blank file": b"\n\n",
    "nul": b"item,worker,label\n1,a\x00b,x\n",
    "no final line end": b"item,worker,label\n1,a,x",
    "unnamed column": b"item,worker,label,\n1,a,x,\n",
    "unicode": "item,worker,label\n\u00e9,\u4e2d,x\n".encode(),
    "line of spaces": b"item,worker,label\n \n1,a,x\n",
    "quoted": b'item,worker,label\n"1, a",b,"x ""y"""\n',
}


def _outcome(read):
    try:
        frame = read()
    except InputError as exc:
        return "error", str(exc)
    if frame is None:
        return None
    return list(frame.columns), [[None if pd.isna(v) else v for v in frame[c]] for c in frame.columns]


@pytest.mark.parametrize("dictionary", [(), ("worker", "label")])
@pytest.mark.parametrize("name", list(CASES))
def test_arrow_and_python_csv_readers_agree(name, dictionary, tmp_path, monkeypatch):
    path = tmp_path / "labels.csv"
    path.write_bytes(CASES[name])
    fast = _outcome(lambda: read_csv_file(str(path), "labels", "src", dictionary))
    monkeypatch.setattr(pandas_reader, "_read_csv_arrow", lambda *_: None)
    slow = _outcome(lambda: read_csv_file(str(path), "labels", "src"))
    assert fast == slow


@pytest.mark.parametrize("name, used", [("plain", True), ("empty cell", True), ("quoted", False),
                                        ("short row", False), ("empty file", False)])
def test_arrow_path_reads_files_without_quotes(name, used, tmp_path):
    path = tmp_path / "labels.csv"
    path.write_bytes(CASES[name])
    assert (pandas_reader._read_csv_arrow(str(path)) is not None) == used


def test_prepared_labels_are_sorted_categoricals():
    frame = pd.DataFrame({"item": ["b", "a", "\u00e9", "a", "Z"], "worker": ["w2", "w1", "w1", "w10", "w2"],
                          "label": ["1", "0", "1", "10", "2"]})
    labels = prepare_labels(frame, InputConfig(), "src")
    for column in ("item", "worker", "label"):
        values = labels.frame[column]
        assert isinstance(values.dtype, pd.CategoricalDtype)
        assert list(values.cat.categories) == sorted(set(frame[column]))
        assert list(values.astype(object)) == list(frame[column])
    assert list(labels.items) == ["Z", "a", "b", "\u00e9"]
    assert labels.encoding.workers == ("w1", "w10", "w2")
    assert labels.encoding.classes == ("0", "1", "2", "10")
    assert labels.frame["item"].cat.codes.dtype.itemsize <= np.dtype(np.int32).itemsize


def _write_parquet(path, columns: dict) -> None:
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), path, row_group_size=2)


def test_parquet_dictionary_columns_read_as_the_strings(tmp_path):
    folder = tmp_path / "labels"
    folder.mkdir()
    _write_parquet(folder / "a.parquet", {"item": ["1", "2", "3"], "worker": ["w2", "w1", "w2"], "label": [1, 0, 1]})
    _write_parquet(folder / "b.parquet", {"item": ["4", "5", "6"], "worker": ["w3", "w1", None], "label": [0, 0, 2]})
    plain = read_frame(str(folder), "parquet", "labels")
    coded = read_frame(str(folder), "parquet", "labels", dictionary=("worker", "label", "absent"))
    assert isinstance(coded["worker"].dtype, pd.CategoricalDtype)  # a string column
    assert not isinstance(coded["label"].dtype, pd.CategoricalDtype)  # an integer column keeps its type
    for column in ("item", "worker", "label"):
        assert canonical_values(coded[column], "labels", "src", column).tolist() == \
            canonical_values(plain[column], "labels", "src", column).tolist()
    with pytest.raises(InputError, match="column 'worker' has 1 null"):
        prepare_labels(coded, InputConfig(), "src")


def test_parquet_files_arrow_cannot_unify_are_concatenated_by_pandas(tmp_path):
    folder = tmp_path / "labels"
    folder.mkdir()
    _write_parquet(folder / "a.parquet", {"item": [1, 2], "worker": ["w1", "w2"], "label": ["x", "y"]})
    _write_parquet(folder / "b.parquet", {"item": ["3", "4"], "worker": ["w1", "w3"], "label": ["y", "y"]})
    labels = prepare_labels(read_frame(str(folder), "parquet", "labels", dictionary=("worker", "label")),
                            InputConfig(), "src")
    assert labels.frame["item"].astype(object).tolist() == ["1", "2", "3", "4"]
    assert labels.encoding.workers == ("w1", "w2", "w3")


def test_categorical_cells_have_the_text_of_their_values():
    values = pd.Series(pd.Categorical([266.0, 1.0, None, 266.0], categories=[0.5, 1.0, 266.0]))
    text = canonical_text(values, "labels", "src", "item")  # the unused 0.5 is not a value: not refused
    assert text.to_pylist() == ["266", "1", None, "266"]
    with pytest.raises(InputError, match="0.5"):
        canonical_text(pd.Series(pd.Categorical([0.5, 1.0])), "labels", "src", "item")


def test_csv_dictionary_columns_are_categoricals(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_bytes(CASES["empty cell"])
    frame = read_csv_file(str(path), "labels", "src", ("worker", "label"))
    assert isinstance(frame["worker"].dtype, pd.CategoricalDtype)
    assert isinstance(frame["label"].dtype, pd.CategoricalDtype)
    assert not isinstance(frame["item"].dtype, pd.CategoricalDtype)
    assert canonical_text(frame["worker"], "labels", "src", "worker").to_pylist() == [None, "b"]
