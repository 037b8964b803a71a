"""How noisy this machine is without any engine: a single-thread fp32 matmul loop (compute)
and a 64 MiB tensor copy (memory bandwidth), each timed for SECONDS and cut into one-second windows;
the CV of the windows' medians is the machine's own floor under any decode measurement. Run it on
an idle machine: python scripts/machine_noise.py [SECONDS] > results/calibration/floor/machine-noise.json"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def windows(fn, seconds: float) -> list[float]:
    """Median milliseconds of fn() per one-second window."""
    out, t_end = [], time.monotonic() + seconds
    while time.monotonic() < t_end:
        times, w_end = [], time.monotonic() + 1.0
        while time.monotonic() < w_end:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1000)
        out.append(statistics.median(times))
    return out


def seconds_arg(raw: str) -> float:
    """SECONDS: each loop's length, at least one one-second window."""
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value >= 1:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number of seconds of at least 1, such as 30")
    return value


def main() -> None:
    from eagle_fix.core.errors import OneLineParser

    parser = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("seconds", nargs="?", type=seconds_arg, default=30.0, help="seconds per loop (default 30)")
    seconds = parser.parse_args().seconds
    import torch  # after the arguments: --help and a bad SECONDS answer at once

    torch.set_num_threads(1)
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    src = torch.randn(64 * 2**20 // 4)
    dst = torch.empty_like(src)
    from eagle_fix.core import stats
    from eagle_fix.machine.fingerprint import fingerprint

    result = {
        "machine": fingerprint()["name"],
        "seconds_each": seconds,
        "cpus": sorted(os.sched_getaffinity(0)),
        "load_avg_1m_before": os.getloadavg()[0],
    }
    for name, fn in (
        ("matmul_512_x20_ms", lambda: [a @ b for _ in range(20)]),
        ("copy_64mib_ms", lambda: dst.copy_(src)),
    ):
        w = windows(fn, seconds)
        result[name] = {"window_medians": [round(x, 3) for x in w], "cv": stats.cv(w), "min": min(w), "max": max(w)}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
