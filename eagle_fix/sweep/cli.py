"""`eagle-fix run`: the sweep's command line (arguments in eagle_fix.sweep.plan, the loop in eagle_fix.sweep.loop)."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from eagle_fix.core import record
from eagle_fix.core.point import Point
from eagle_fix.pairs.profiles import PROFILES, get_profile
from eagle_fix.sweep import arms_cli
from eagle_fix.sweep.loop import run_sweep
from eagle_fix.sweep.plan import RunArgs, add_cli_args  # noqa: F401  (cli.py reads add_cli_args here)

SUMMARY_COLUMNS = [
    "context_len",
    "mode",
    "arm",
    "fix",
    "status",
    "output_throughput_tok_s",
    "decode_throughput_tok_s",
    "ttft_s",
    "acceptance_length",
    "drafter_coverage",
    "speedup",
    "peak_host_memory_bytes",
]


def summary_table(records: list[dict[str, Any]]) -> str:
    import pandas as pd

    if not records:
        return "(no points)"
    df = pd.DataFrame(records)
    df = df[[c for c in SUMMARY_COLUMNS if c in df.columns]].copy()
    if "peak_host_memory_bytes" in df:
        df["peak_host_memory_bytes"] = (df["peak_host_memory_bytes"].astype(float) / 2**30).round(2)
        df = df.rename(columns={"peak_host_memory_bytes": "host_GiB"})
    return df.to_string(index=False, float_format=lambda v: f"{v:.3g}", na_rep="-")


def cli_main(args: argparse.Namespace) -> int:
    """Exit 0 when every point is ok, 1 when any point failed (after every line and the summary). `--arms`
    with no value lists the arms (eagle-fix arms) and runs nothing."""
    if args.arms is None:
        return arms_cli.cli_main(args)
    run_args = RunArgs.from_cli_args(args)
    if run_args.out is None:
        out = Path("runs") / f"{run_args.profile or 'default'}-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        run_args = replace(run_args, out=out)
    records = run_sweep(run_args)
    print(summary_table(records))
    profile = get_profile(records[0]["profile"]) if records and records[0].get("profile") in PROFILES else None
    for name in dict.fromkeys(r.get("arm") for r in records):
        if profile is not None and isinstance(name, str) and profile.arm_note(name):
            print(f"note: {name} on {profile.name}: {profile.arm_note(name)}")
    failed = [r for r in records if r["status"] != "ok"]
    print(f"\n{len(records)} points ({len(failed)} failed) in {run_args.out}", file=sys.stderr)
    if failed:
        for r in failed:
            print(
                f"failed: {Point.of(r).words('bare')}: {record.cause(r.get('error'), 300)}",
                file=sys.stderr,
            )
        print(
            f"re-run failed points with: eagle-fix run ... --out {run_args.out} --resume (after removing their lines)",
            file=sys.stderr,
        )
        return 1
    return 0
