"""The pandas reader's two CSV paths (pyarrow for files without quotes, Python's strict reader for the others)
read the same files the same way and refuse the same files with the same messages; the labels it prepares
are categorical and encode like the strings they hold."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdspark.config import InputConfig
from crowdspark.errors import InputError
from crowdspark.io import pandas_reader
from crowdspark.io.pandas_reader import prepare_labels, read_csv_file

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


@pytest.mark.parametrize("name", list(CASES))
def test_arrow_and_python_csv_readers_agree(name, tmp_path, monkeypatch):
    path = tmp_path / "labels.csv"
    path.write_bytes(CASES[name])
    fast = _outcome(lambda: read_csv_file(str(path), "labels", "src"))
    monkeypatch.setattr(pandas_reader, "_read_csv_arrow", lambda _: None)
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
