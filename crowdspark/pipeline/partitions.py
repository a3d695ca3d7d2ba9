"""Which day partitions a chain of incremental nights has read, and the days that arrived after the night that
should have read them.

Every run of ``incremental.mode = "on"`` writes ``_incremental/partitions.json``: the fingerprint of every day of
the input up to its as-of date, which is what its chain (:mod:`crowdspark.io.chain`) has fitted::

    {"days": {"2026-11-01": {"files": 1, "bytes": 5123}, "2026-11-02": {"files": 1, "bytes": 5087}}}

(:meth:`crowdspark.pipeline.days.DayReader.partitions`: files and bytes of a day partition folder, or the labels
of a day of an input that is not partitioned).  The next night lists the input's days up to the previous run's
as-of date and compares (:func:`compare`):

* a day the record does not hold is **late**: it arrived after the night that should have read it.  The carried
  statistics are sums over labels, so its labels are fitted like a new day's (its items already carried are
  refitted with all their labels);
* a day whose fingerprint differs from the record, or that is gone, was **rewritten**: the labels the chain
  fitted from it cannot be taken back one by one, and the night stops (a full refit reads every day again).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from crowdspark.errors import InputError

__all__ = ["PARTITIONS_FILE", "Partitions", "read_partitions", "compare", "describe", "payload"]

log = logging.getLogger(__name__)

PARTITIONS_FILE = "_incremental/partitions.json"

#: a day's fingerprint: ``files`` and ``bytes`` of its partition folder, or its ``labels``
Fingerprint = dict[str, int]


@dataclass(frozen=True)
class Partitions:
    """What a night found comparing the input with its chain's record.

    Attributes
    ----------
    late : list of str
        Days the input holds up to the previous run's as-of date that the chain has not read.
    rewritten : list of str
        Days the chain read whose fingerprint changed, or that are gone.
    """

    late: list[str]
    rewritten: list[str]


def read_partitions(run: str, spark: Any = None) -> dict[str, Fingerprint] | None:
    """The record of the run at ``run`` (``day -> fingerprint``), ``None`` when it has none (a run written
    before runs recorded their partitions).

    Raises
    ------
    InputError
        When the record exists but is not one.
    """
    from crowdspark.io.files import files_for

    path = f"{run.rstrip('/')}/{PARTITIONS_FILE}"
    files = files_for(path, spark)
    if not files.exists(path):
        return None
    try:
        days = json.loads(files.read_bytes(path).decode("utf-8"))["days"]
        if not isinstance(days, dict) or not all(isinstance(v, dict) for v in days.values()):
            raise ValueError(f"\"days\" must map days to fingerprints, but holds {str(days)[:100]}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path!r} is not a record of the days a run read ({type(exc).__name__}: {exc}); run a "
                         "full refit (--full-refit)") from exc
    return days


def _same(before: Fingerprint, now: Fingerprint) -> bool:
    """Whether two fingerprints agree on every key both hold (one engine may count labels, the other files)."""
    return all(before[key] == now[key] for key in set(before) & set(now))


def compare(record: dict[str, Fingerprint], lake: dict[str, Fingerprint]) -> Partitions:
    """The late and rewritten days of ``lake`` (the input's days up to the previous run's as-of date) against the
    chain's ``record``."""
    late = sorted(set(lake) - set(record))
    rewritten = sorted(day for day, before in record.items() if day not in lake or not _same(before, lake[day]))
    return Partitions(late, rewritten)


def describe(record: dict[str, Fingerprint], lake: dict[str, Fingerprint], days: list[str]) -> str:
    """The rewritten ``days``, each with its recorded and current fingerprint (the first five)."""
    shown = [f"{day}: {record[day]} -> {lake.get(day, 'gone')}" for day in days[:5]]
    return "; ".join(shown) + (f" and {len(days) - 5} more" if len(days) > 5 else "")


def payload(lake: dict[str, Fingerprint]) -> dict[str, Any]:
    """``partitions.json`` of a run whose chain has read the days ``lake``."""
    return {"days": dict(sorted(lake.items()))}
