"""The synthetic dated lake: what each day holds, and that a day's draws do not depend on the others."""

from __future__ import annotations

import numpy as np
import pandas as pd

from crowdspark.lake import LakeSpec, make_lake, write_lake


def test_days_new_workers_a_new_class_and_a_missing_day():
    spec = LakeSpec(days=6, items_per_day=40, labels_per_item=3, n_workers=10, new_workers_per_day=2,
                    new_class_day=4, missing_days=(2,), seed=1)
    lake = make_lake(spec)
    per_day = lake.labels.groupby("date")
    assert sorted(per_day.groups) == [spec.date(d) for d in (0, 1, 3, 4, 5)]
    assert per_day.size().eq(40 * 3).all()
    assert (lake.labels.groupby(["item", "worker"]).size() == 1).all()  # distinct workers per item
    classes = per_day["label"].agg(lambda s: set(s))
    assert classes[spec.date(3)] <= {"0", "1", "2"} and "3" in classes[spec.date(5)]
    assert set(lake.truth["truth"]) == {"0", "1", "2", "3"}
    workers = per_day["worker"].agg(lambda s: set(s))
    joined_late = {f"w{k:04d}" for k in range(10 + 2 * 3, 10 + 2 * 5)}  # joined on days 4 and 5
    assert not joined_late & set().union(*(workers[spec.date(d)] for d in (0, 1, 3)))


def test_drifting_workers_and_spammers_label_as_planted():
    spec = LakeSpec(days=2, items_per_day=3000, labels_per_item=4, n_workers=6, drifting_workers=2,
                    drift=(0.9, 0.4), spammers=2, accuracy=(0.8, 0.8), n_classes=4, seed=2)
    lake = make_lake(spec)
    merged = lake.labels.merge(lake.truth, on="item")
    correct = (merged["label"] == merged["truth"]).groupby([merged["worker"], merged["date"]]).mean()
    for worker in lake.drifting:
        assert abs(correct[(worker, spec.date(0))] - 0.9) < 0.05
        assert abs(correct[(worker, spec.date(1))] - 0.4) < 0.05
    spammers = [f"w{k:04d}" for k in (6, 7)]
    for worker in spammers:
        assert abs(correct[(worker, spec.date(0))] - 0.25) < 0.05
    planted = lake.accuracy.set_index(["worker", "date"])["accuracy"]
    assert np.isnan(planted[(spammers[0], spec.date(0))]) and planted[("w0002", spec.date(1))] == 0.8


def test_a_days_labels_do_not_depend_on_which_days_are_written(tmp_path):
    spec = LakeSpec(days=4, items_per_day=20, n_workers=8, revisit=0.5, seed=5)
    lake = make_lake(spec)
    write_lake(lake, str(tmp_path / "all"))
    gold = write_lake(lake, str(tmp_path / "some"), days=[spec.date(2)])
    some = pd.read_parquet(tmp_path / "some" / f"date={spec.date(2)}" / "part-0.parquet")
    full = pd.read_parquet(tmp_path / "all" / f"date={spec.date(2)}" / "part-0.parquet")
    pd.testing.assert_frame_equal(some, full)
    assert sorted(p.name for p in (tmp_path / "some").iterdir()) == [f"date={spec.date(2)}"]
    assert len(pd.read_parquet(gold)) == 4 * 20
    # revisited items come back the next day with new labels
    items_day_3 = set(lake.labels.loc[lake.labels["date"] == spec.date(3), "item"])
    assert any(item.startswith("d002-") for item in items_day_3)
