"""The one point record: identity, schema upgrade, the JSON-lines file, flags and speedup."""

from __future__ import annotations

import json
import os

import pytest

from eagle_fix.core import metrics, record
from eagle_fix.core.errors import EagleFixError


def test_new_has_every_field_and_refuses_unknown_names():
    rec = record.new(context_len=8192, mode="eager")
    assert set(rec) == set(record.FIELDS) and rec["schema"] == record.SCHEMA_VERSION
    with pytest.raises(KeyError, match="contxt_len"):
        record.new(contxt_len=8192)


def test_schema_1_records_read_as_schema_2_without_inventing_samples():
    old = {"context_len": 8192, "mode": "eager", "arm": "baseline", "decode_throughput_tok_s": 50.0, "batch_size": 1}
    rec = record.upgrade(old)
    assert rec["schema"] == 1 and rec["samples"] is None and rec["flags"] == []
    assert rec["tpot_ms"] == pytest.approx(20.0)


def test_records_before_the_regime_was_recorded_are_the_copy_workload_decoded_greedily():
    old = {"context_len": 8192, "mode": "eager", "arm": "baseline", "batch_size": 1}
    rec = record.upgrade(old)
    assert (rec["workload"], rec["temperature"]) == ("copy", 0.0)
    assert record.key(rec) == record.key(record.upgrade({**old, "workload": "copy", "temperature": 0}))
    assert record.key(rec) != record.key(record.upgrade({**old, "workload": "chat"}))
    assert record.IDENTITY[-2:] == ("workload", "temperature")


def test_torn_last_line_is_dropped_and_a_bad_middle_line_names_file_and_line(tmp_path):
    path = tmp_path / "run.jsonl"
    record.append(path, record.new(context_len=8192, mode="eager", status="ok"))
    record.append(path, record.new(context_len=16384, mode="eager", status="failed"))
    with open(path, "a") as f:
        f.write('{"context_len": 32768, "sta')  # a sweep killed mid-write
    with pytest.warns(UserWarning, match="torn last line"):
        assert [r["context_len"] for r in record.read(path)] == [8192, 16384]
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "garbage", lines[1]]) + "\n")
    with pytest.raises(EagleFixError, match=rf"{path}:2: not a JSON line"):
        record.read(path)


def test_a_full_disk_is_one_line_and_keeps_what_was_written(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with pytest.raises(EagleFixError, match=r"cannot write /dev/full: No space left on device; the lines already"):
        record.append(__import__("pathlib").Path("/dev/full"), record.new(context_len=8192, mode="eager"))


def test_committed_schema_1_files_stay_readable():
    from conftest import ROOT

    recs = record.read(ROOT / "results" / "runs" / "vm-8c0f126b-cpu.jsonl")
    assert len(recs) == 16 and all(r["schema"] == 1 for r in recs)
    assert len(record.index(recs)) == 16  # 16 distinct identities


def test_flags_name_what_the_counters_hide():
    zero = {"num_drafts": 31, "drafter_coverage": 0.0, "num_speculative_tokens": 3}
    assert [f.split(":")[0] for f in record.flags(zero)] == ["zero_filled_drafts"]
    overrun = {
        "num_drafts": 31,
        "drafter_coverage": 1.0,
        "draft_rotary_positions": 2048,
        "max_seq_len_drafted": 4093,
        "num_speculative_tokens": 3,
    }
    assert [f.split(":")[0] for f in record.flags(overrun)] == ["rotary_cache_overrun"]
    assert record.flags(dict(overrun, draft_rotary_positions=8192)) == []
    assert [f.split(":")[0] for f in record.flags({"doctor_error": "doctor exited 1"})] == ["doctor_failed"]


def test_speedup_is_decode_over_the_same_points_baseline():
    eagle = record.new(
        profile="cpu",
        context_len=8192,
        mode="eager",
        arm="eagle3",
        fix="on",
        batch_size=1,
        output_len=64,
        num_speculative_tokens=3,
        decode_throughput_tok_s=90.0,
    )
    base = record.new(
        profile="cpu",
        context_len=8192,
        mode="eager",
        arm="baseline",
        batch_size=1,
        output_len=64,
        decode_throughput_tok_s=60.0,
    )
    assert record.baseline_key(eagle) == record.key(base)
    assert record.speedup(eagle, base) == pytest.approx(1.5)
    assert record.speedup(eagle, None) is None


def test_nan_from_pandas_does_not_break_identity():
    a = record.new(context_len=8192.0, mode="eager", num_speculative_tokens=float("nan"))
    b = record.new(context_len=8192, mode="eager", num_speculative_tokens=None)
    assert record.key(a) == record.key(b)


def test_every_asv_form_is_lower_is_better_and_its_own_inverse():
    for m in (*metrics.METRICS, metrics.PER_POSITION):
        if m.asv is None:
            continue
        if m.to_asv is None:  # tracked as is: must already be lower-is-better
            assert not m.higher_is_better, m
        else:
            assert m.higher_is_better, m  # transformed because higher is better
            for v in (0.25, 0.9, 3.0):
                assert m.to_asv(m.to_asv(v)) == pytest.approx(v)
                assert m.to_asv(v * 1.1) < m.to_asv(v)  # better record -> lower asv value
    assert json.dumps(record.new())  # serialisable


def test_busy_judges_the_load_over_the_point_where_the_record_has_it():
    quiet_end = {"machine": {"cpu": {"cores": 2}}, "load_avg_1m": 1.9, "load_avg_mean": 3.0, "load_avg_max": 6.5}
    assert record.busy(quiet_end) == "machine busy (load up to 6.5 during the point on 2 cores)"
    assert record.busy({**quiet_end, "load_avg_max": 3.9}) is None
    # records older than the sampling: the reading at the point's end
    assert record.busy({"machine": {"cpu": {"cores": 2}}, "load_avg_1m": 22.0}) == "machine busy (load 22.0 on 2 cores)"
    assert record.busy({"machine": {"cpu": {"cores": 2}}, "load_avg_1m": None}) is None


def test_the_sweep_samples_the_load_while_a_point_runs(monkeypatch):
    import time

    from eagle_fix.sweep import loop as sweep

    loads = iter([1.0, 5.0, 3.0] + [2.0] * 1000)
    monkeypatch.setattr(sweep.os, "getloadavg", lambda: (next(loads), 0.0, 0.0))
    sampler = sweep.LoadSampler(interval_s=0.01)
    assert sampler.stop() is None  # nothing started
    sampler.start(os.getpid())
    time.sleep(0.2)
    during = sampler.stop()
    assert during["load_avg_max"] == 5.0 and 1.0 < during["load_avg_mean"] < 5.0
    assert set(during) <= set(record.FIELDS) and sampler.stop() == during
    if os.path.exists("/proc/stat"):
        assert during["other_busy_cores"] is not None and during["other_busy_cores"] >= 0


def test_records_say_their_limits_were_cached_and_how_old_they_were():
    import datetime as dt

    from eagle_fix.sweep import loop as sweep

    now = dt.datetime(2026, 1, 2, 0, 0, tzinfo=dt.UTC)
    lim = sweep.limits_with_age({"measured_at": "2026-01-01T22:00:00+00:00", "cached": True}, now=now)
    assert (lim["cached"], lim["age_s"]) == (True, 7200)
    assert sweep.limits_with_age({"cached": False}, now=now)["age_s"] is None
    assert sweep.limits_with_age(None) is None


def test_a_point_is_matched_to_its_record_the_same_way_everywhere(monkeypatch):
    """One matcher (record.is_point) for asv's tracked numbers and the dashboard's labels: an EAGLE3 record
    from before the fix A/B (no `fix`) is the fix-on point in both, never the off or upstream one; a
    baseline record matches whatever fix is asked (it has none)."""
    from eagle_fix.core import record
    from eagle_fix.publish import labels
    from eagle_fix.store import asv

    monkeypatch.delenv("EAGLE_FIX_ASV_FIX", raising=False)
    old = {"context_len": 8192, "mode": "eager", "arm": "eagle3", "status": "ok", "tpot_ms": 10.0}
    base = {"context_len": 8192, "mode": "eager", "arm": "baseline", "fix": None, "status": "ok", "tpot_ms": 20.0}
    assert record.is_point(old, context_len=8192, mode="eager", arm="eagle3", fix="on")
    assert record.is_point(old, context_len=8192, mode="eager", arm="eagle3")
    assert not record.is_point(old, context_len=8192, mode="eager", arm="eagle3", fix="off")
    assert record.is_point(base, context_len=8192, mode="eager", arm="baseline", fix="off")
    assert asv.point_value([old, base], "tpot_ms", context_len=8192, mode="eager") == 10.0
    assert labels._point([old, base], context_len=8192, mode="eager", arm="eagle3", fix="on") is old
    assert labels._point([old, base], context_len=8192, mode="eager", arm="eagle3", fix="off") is None
    monkeypatch.setenv("EAGLE_FIX_ASV_FIX", "off")
    with pytest.raises(asv.PointFailed, match="not in the sweep's records"):
        asv.point_value([old, base], "tpot_ms", context_len=8192, mode="eager")
