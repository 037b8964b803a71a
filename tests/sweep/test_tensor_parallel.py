"""Tensor parallelism without an engine: the profile's settings reach vLLM and the engine's environment,
the ranks' counters merge to one headline (never a sum), and the records and labels carry the TP size.
The engine itself at TP = 2 is tests/engine/test_engine.py's."""

from __future__ import annotations

import os

import pytest

from eagle_fix.core import record
from eagle_fix.core.errors import EagleFixError
from eagle_fix.engine.worker import merge_drafter_stats
from eagle_fix.machine import pinning
from eagle_fix.pairs.profiles import get_profile
from eagle_fix.publish import labels
from eagle_fix.sweep.road import engine_spec

RANK = {"spec_steps": 33, "fits_steps": 33, "proposals": 33, "max_seq_len_drafted": 4092, "damaged": 0}


def test_cpu_tp2_asks_vllm_for_two_ranks_each_on_its_core(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(pinning, "_cpu_core", lambda cpu: ("0", str(cpu)))
    spec = engine_spec(get_profile("cpu-tp2"), arm="eagle3", mode="eager", fix="on", max_model_len=4096)
    kwargs = spec.llm_kwargs()
    assert kwargs["tensor_parallel_size"] == 2
    assert kwargs["distributed_executor_backend"] == "mp"
    assert spec.env()["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"
    assert spec.env()["VLLM_CPU_KVCACHE_SPACE"] == "1"  # per rank: without it each rank claims ~21 GiB
    one = engine_spec(get_profile("cpu-quick"), arm="eagle3", mode="eager", fix="on", max_model_len=8192)
    assert "tensor_parallel_size" not in one.llm_kwargs()
    assert "VLLM_CPU_OMP_THREADS_BIND" not in one.env()


def test_rank_cores_split_evenly_keep_the_users_own_and_refuse_too_few(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    # 8 logical CPUs on 4 physical cores (hyperthread siblings cpu and cpu + 4): one per core
    monkeypatch.setattr(pinning, "_cpu_core", lambda cpu: ("0", str(cpu % 4)))
    assert pinning.rank_cpu_lists(2) == "0,1|2,3"
    assert pinning.rank_cpu_lists(4) == "0|1|2|3"
    with pytest.raises(EagleFixError, match=r"tensor_parallel_size 8 on CPU needs a core per rank.*may use 4") as exc:
        pinning.rank_cpu_lists(8)
    assert "\n" not in str(exc.value)
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "4-5|6-7")
    assert pinning.rank_cpu_lists(2) == "4-5|6-7"
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-3")  # one group: not a TP=2 binding, replaced
    assert pinning.rank_cpu_lists(2) == "0,1|2,3"


def test_ranks_merge_to_rank_0s_counters_never_their_sum():
    merged = merge_drafter_stats([{**RANK, "pid": 1}, {**RANK, "pid": 2}])
    assert merged["spec_steps"] == 33 and merged["proposals"] == 33  # summed, each step would count twice
    assert merged["ranks_disagree"] == []
    assert [r["pid"] for r in merged["ranks"]] == [1, 2]
    one = merge_drafter_stats([{**RANK, "pid": 1}])
    assert "ranks" not in one and one["spec_steps"] == 33


def test_ranks_that_disagree_are_named_and_flagged():
    lazy = {**RANK, "proposals": 20, "max_seq_len_drafted": 2047, "missing_hooks": ["propose"]}
    merged = merge_drafter_stats([{**RANK, "missing_hooks": []}, lazy])
    assert merged["ranks_disagree"] == ["proposals", "max_seq_len_drafted"]
    assert merged["missing_hooks"] == ["propose"]  # every rank's
    rec = {"num_drafts": 32, "drafter_ranks_disagree": merged["ranks_disagree"]}
    (flag,) = [f for f in record.flags(rec) if f.startswith("ranks_disagree")]
    assert "proposals, max_seq_len_drafted" in flag and "rank 0" in flag


def test_records_carry_the_tp_size_and_the_memory_of_each_rank():
    assert record.upgrade({"profile": "cpu", "context_len": 8192})["tensor_parallel_size"] == 1
    rec: dict = {}
    point = {
        "worker_host_peak_bytes": 30,
        "workers": [{"worker_host_peak_bytes": 10, "pid": 1}, {"worker_host_peak_bytes": 20, "pid": 2}],
    }
    engine = {"vllm_kv_cache_bytes": 4, "workers": [{"vllm_kv_cache_bytes": 2}, {"vllm_kv_cache_bytes": 2}]}
    record.worker_memory(rec, engine, point)
    assert rec["worker_host_peak_bytes"] == 30
    assert rec["memory_ranks"] == [
        {"rank": 0, "worker_host_peak_bytes": 10, "vllm_kv_cache_bytes": 2},
        {"rank": 1, "worker_host_peak_bytes": 20, "vllm_kv_cache_bytes": 2},
    ]
    single: dict = {}
    record.worker_memory(single, {"vllm_kv_cache_bytes": 4}, {"worker_host_peak_bytes": 30})
    assert single["memory_ranks"] is None


def test_the_workload_label_names_the_tp_size_above_one():
    recs = [{"profile": "cpu-tp2", "arm": "eagle3", "output_len": 128, "num_speculative_tokens": 3}]
    assert labels.workload_label(recs) == "cpu-tp2, 128 out, k=3"  # a record before TP was recorded
    assert labels.workload_label([{**recs[0], "tensor_parallel_size": 2}]) == "cpu-tp2, 128 out, k=3, TP=2"
    # the regime is named where it is not the copy workload decoded greedily: old series keep their label
    assert labels.workload_label([{**recs[0], "workload": "copy", "temperature": 0.0}]) == "cpu-tp2, 128 out, k=3"
    chat = [{**recs[0], "profile": "cpu-chat", "workload": "chat", "temperature": 0.7}]
    assert labels.workload_label(chat) == "cpu-chat, 128 out, k=3, chat text, T=0.7"
    assert labels.workload_label([{**recs[0], "tensor_parallel_size": 1}]) == "cpu-tp2, 128 out, k=3"
