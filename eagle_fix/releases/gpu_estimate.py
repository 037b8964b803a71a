"""How long a CUDA profile's asv grid takes on one H100, before any GPU has run it: the points' work (FLOPs of
each prefill, bytes of each decode step: eagle_fix.machine.roofline.point_work) at the share of the limits this
suite's 8B-shape points reached on CPU (results/runs/cpu-8b, the same model shapes), on an H100's datasheet
limits, plus engine starts that no CPU figure scales to (stated assumptions). An estimate marked unverified
until a GPU measures it: `scripts/bench.sh` prints it for the quick CUDA profile it runs by default.

    python -m eagle_fix.releases.gpu_estimate [PROFILE]      one line (default gpu-quick)
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

from eagle_fix.core import arms, record
from eagle_fix.core.errors import EagleFixError
from eagle_fix.core.paths import committed_results
from eagle_fix.fix.checkpoint import read_config
from eagle_fix.machine.roofline import point_work
from eagle_fix.pairs.profiles import get_profile

CPU_RECORDS = committed_results("runs", "cpu-8b")
# H100 SXM datasheet: dense bf16 tensor-core peak and HBM3 bandwidth (not measured here)
H100 = {"name": "H100 SXM (datasheet)", "peak_gflops": 989_000.0, "bandwidth_gbs": 3350.0}
# Engine starts on one GPU, assumed (no CPU figure scales to them: Python, loading, torch.compile, CUDA-graph
# capture): an eager 8B-shape engine with dummy weights, and a compiled one with cold inductor caches.
START_S = {"eager": 60.0, "compile": 150.0}
ARMS = arms.DEFAULT_ARMS
MODES = ("eager", "compile")
REPEATS, TTFT_REPEATS = 5, 1  # the asv suite's samples per point (eagle-fix run's defaults)


def cpu_shares(folder: Path = CPU_RECORDS) -> dict[str, float]:
    """The median share of the limits the CPU's 8B-shape points reached: prefill of the matmul peak, decode
    of the copy bandwidth (shares above 100% are withheld on the records and left out here)."""
    recs = [r for f in sorted(folder.glob("*.jsonl")) for r in record.read(f) if r.get("status") == "ok"]
    got = {}
    for key in ("prefill_pct_of_peak_flops", "decode_pct_of_bandwidth"):
        vals = [r[key] for r in recs if isinstance(r.get(key), (int, float)) and 0 < r[key] <= 100]
        if not vals:
            raise EagleFixError(f"no {key} in {folder}: the estimate needs the CPU's 8B-shape records")
        got[key] = statistics.median(vals) / 100
    return got


def estimate(name: str = "gpu-quick", *, shares: dict[str, float] | None = None) -> dict[str, Any]:
    """Seconds of the profile's asv grid (EAGLE3 and baseline, eager and compiled, its contexts) on one H100."""
    prof = get_profile(name)
    if prof.device != "cuda" or prof.target is None or prof.draft is None:
        raise EagleFixError(f"profile {name!r}: the estimate is for a CUDA profile with its own pair")
    shares = shares or cpu_shares()
    tcfg, dcfg = prof.target_config(), read_config(prof.draft, "draft")
    flops = H100["peak_gflops"] * 1e9 * shares["prefill_pct_of_peak_flops"]
    bw = H100["bandwidth_gbs"] * 1e9 * shares["decode_pct_of_bandwidth"]
    compute = 0.0
    for arm in ARMS:
        for ctx in prof.contexts:
            w = point_work(tcfg, dcfg if arms.is_eagle3(arm) else None, context_len=ctx, k=prof.num_speculative_tokens)
            prefill = w["prefill_flops"] / flops * (TTFT_REPEATS + REPEATS)  # each decode run prefills too
            if arms.is_eagle3(arm):
                acc = prof.synthetic_acceptance_length or 1.0
                step = w["eagle3_bytes_per_verified_step"] / bw * prof.output_len / acc
            else:
                step = w["target_bytes_per_step"] / bw * prof.output_len
            compute += (prefill + step * REPEATS) * len(MODES)
    starts = sum(START_S[m] for m in MODES) * len(ARMS)
    return {
        "profile": name,
        "device": H100["name"],
        "seconds": compute + starts,
        "compute_s": compute,
        "starts_s": starts,
        "shares": shares,
        "verified": False,
    }


def line(est: dict[str, Any]) -> str:
    s = est["shares"]
    return (
        f"{est['profile']}: about {est['seconds'] / 60:.0f} min on one {est['device']}, UNVERIFIED until a GPU "
        f"measures it ({est['starts_s'] / 60:.0f} min of engine starts, assumed; {est['compute_s'] / 60:.1f} min of "
        f"points at the CPU's measured {s['prefill_pct_of_peak_flops']:.0%} of peak FLOPs and "
        f"{s['decode_pct_of_bandwidth']:.0%} of bandwidth, scaled by the roofline)"
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        print(line(estimate(args[0] if args else "gpu-quick")))
    except EagleFixError as exc:
        print(f"gpu_estimate: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
