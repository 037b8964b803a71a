"""`eagle-fix machine`: fingerprint the hardware, record software versions, measure its limits.

Machines of one "kind" differ by up to 10x in speed while /proc/cpuinfo's model name is the same
("AMD EPYC"), so every result needs the CPU family/model/flags (or the GPU) and the limits the
engine can reach here (matmul GFLOP/s, memory GB/s) next to it; a roofline then says how far a
measured TTFT or decode rate is from what this machine could do.
"""

from __future__ import annotations

import argparse
import json

from eagle_fix.machine.fingerprint import ENGINE_FLAGS, fingerprint, git_commit, versions
from eagle_fix.machine.limits import limits
from eagle_fix.machine.roofline import matmul_peak


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object {fingerprint, versions, limits}")
    parser.add_argument(
        "--refresh", action="store_true", help="measure the limits again instead of using the day's cache"
    )


def _fmt_bytes(n: int | None) -> str:
    return f"{n / 2**30:.1f} GiB" if n else "?"


def render_text(fp: dict, vers: dict, lim: dict, commit: str | None) -> str:
    cpu, gpu = fp["cpu"], fp["cuda"]
    lines = [
        f"machine   {fp['name']}  (id {fp['id']})",
        (
            f"cpu       {cpu.get('vendor_id')} family {cpu.get('family')} model {cpu.get('model')} "
            f"stepping {cpu.get('stepping')}  {cpu.get('model_name')!r}  [{cpu.get('arch')}]"
        ),
        f"flags     {' '.join(cpu.get('flags') or []) or '(none of ' + ', '.join(ENGINE_FLAGS[:10]) + ')'}",
        f"cores     {cpu.get('cores')} usable, memory {_fmt_bytes(cpu.get('memory_total_bytes'))}",
    ]
    if gpu:
        lines.append(
            f"gpu       {gpu.get('count')} x {gpu.get('name')}, {_fmt_bytes(gpu.get('memory_total_bytes'))}, "
            f"cc {gpu.get('compute_capability')}, SM {gpu.get('max_sm_clock_mhz')} MHz, "
            f"mem {gpu.get('max_memory_clock_mhz')} MHz, driver {gpu.get('driver_version')} "
            f"(CUDA {gpu.get('cuda_driver_version')})"
        )
    else:
        lines.append("gpu       none (no NVML GPU)")
    vllm = f"{vers.get('vllm')} ({vers.get('vllm_distribution')})" if vers.get("vllm") else "not installed"
    lines.append(
        f"versions  python {vers['python']}, torch {vers.get('torch')}, vllm {vllm}, "
        f"eagle-fix {vers.get('eagle-fix')}, asv {vers.get('asv')}"
    )
    lines.append(f"commit    {commit or '(not in git)'}")
    mm = lim.get("matmul_gflops") or {}
    threads = f"{lim['threads']} thread(s) ({lim.get('threads_rule')})" if lim.get("threads") else "GPU"
    lines.append(
        f"limits    {lim.get('device')}, {threads}, measured {lim.get('measured_at')} in "
        f"{lim.get('measure_s')} s{' (cached)' if lim.get('cached') else ''}"
    )
    sizes, paths = lim.get("matmul_size"), lim.get("matmul_paths") or {}
    for name, rate in mm.items():
        size = sizes.get(name) if isinstance(sizes, dict) else sizes
        lines.append(f"          matmul {name} {rate:.1f} GFLOP/s ({size}^2, {paths.get(name) or 'torch.mm'})")
    peak, peak_dtype, peak_path = matmul_peak(lim, None)
    if peak:
        lines.append(
            f"          peak {peak:.1f} GFLOP/s: {peak_dtype}, {peak_path or 'torch.mm'} "
            f"(prefill's share of the roofline is taken of this)"
        )
    lines.append(f"          copy bandwidth {lim.get('bandwidth_gbs', 0):.2f} GB/s")
    if lim.get("contended"):
        lines.append(
            f"warning   contended: the measurement got {lim.get('cpu_share', 0):.0%} of its core(s) while "
            f"other processes kept {lim.get('others_busy_cores')} core(s) busy (steal "
            f"{lim.get('steal_cores')}, load average {lim.get('load_avg_1m')}), so these limits read "
            f"low; they are measured again next time (or run with --refresh on an idle machine)"
        )
    return "\n".join(lines)


def cli_main(args: argparse.Namespace) -> int:
    fp = fingerprint()
    vers = versions()
    lim = limits(refresh=bool(getattr(args, "refresh", False)))
    commit = git_commit()
    if getattr(args, "json", False):
        print(json.dumps({"fingerprint": fp, "versions": {**vers, "git_commit": commit}, "limits": lim}))
    else:
        print(render_text(fp, vers, lim, commit))
    return 0
