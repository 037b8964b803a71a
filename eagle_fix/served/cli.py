"""eagle-fix map's command line: its arguments (every check in from_cli_args, each error naming its flag), the
map file's summary, writing the tokenizer, and the run itself."""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

from eagle_fix.core import record
from eagle_fix.core.errors import EagleFixError, parse_positive_int
from eagle_fix.pairs.profiles import DEFAULT_PROFILES, MAP_PROFILES
from eagle_fix.pairs.tokenizer import write_tokenizer
from eagle_fix.served.map import MapArgs, run_map
from eagle_fix.served.summary import format_summary, num, read_map, summarize
from eagle_fix.sweep.plan import refuse_injected_delay


def _floats(text: str | None, flag: str) -> tuple[float, ...] | None:
    if text is None:
        return None
    out = []
    for part in (p for p in text.split(",") if p.strip()):
        try:
            v = float(part)
        except ValueError:
            raise EagleFixError(f"{flag} {part!r} is not a number", exit_code=2) from None
        if not v > 0 or math.isinf(v):
            raise EagleFixError(f"{flag} {part!r} must be a positive finite rate (requests/s)", exit_code=2)
        out.append(v)
    return tuple(out)


def _ints(text: str | None, flag: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    return tuple(parse_positive_int(p, flag) for p in text.split(",") if p.strip())


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--profile",
        default=DEFAULT_PROFILES["map"],
        help=f"{' | '.join(MAP_PROFILES)}, or a sweep profile (its pair and contexts, concurrency "
        f"1,2,4,8,16, eager and compile) (default: %(default)s)",
    )
    parser.add_argument("--out", type=Path, help="the map file: one JSON line per cell, round and arm (.ndjson)")
    parser.add_argument("--contexts", help="comma-separated context lengths (default: the profile's)")
    parser.add_argument("--concurrency", help="comma-separated --max-concurrency values of vLLM's client")
    parser.add_argument("--request-rate", help="comma-separated --request-rate values (requests/s, Poisson)")
    parser.add_argument("--modes", help="eager,compile (default: the profile's)")
    parser.add_argument("--fix", help="on,off,upstream (the EAGLE3 arms; default: the profile's)")
    parser.add_argument("--arms", default="eagle3,baseline", help="eagle3,baseline (default: %(default)s)")
    parser.add_argument("--rounds", help="paired rounds per cell and launch (default: the profile's)")
    parser.add_argument(
        "--launches", help="server launches per cell, the unit of the intervals (default: the profile's)"
    )
    parser.add_argument("--output-len", help="output tokens per request (default: the profile's)")
    parser.add_argument("--prompts-per-slot", help="requests per cell = this x the concurrency")
    parser.add_argument(
        "--prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the servers' prefix cache (default: the profile's, off)",
    )
    parser.add_argument("--port", type=int, help="the first server's port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--seed", type=int, default=0, help="workload seed (default: %(default)s)")
    parser.add_argument("--log-dir", type=Path, help="server logs and prompt files (default: beside --out)")
    parser.add_argument("--cell-timeout", type=float, default=1800.0, help="seconds per cell before it fails")
    parser.add_argument("--summary", type=Path, metavar="FILE", help="print the summary of a map file; run nothing")
    parser.add_argument(
        "--write-tokenizer",
        type=Path,
        metavar="DIR",
        help="write tokenizer.json and tokenizer_config.json for the model in DIR; run nothing",
    )


def from_cli_args(args: argparse.Namespace) -> MapArgs:
    def csv(text):
        return tuple(p.strip() for p in text.split(",") if p.strip()) if text else None

    out = args.out
    if out is not None:
        if out.suffix == ".jsonl":
            raise EagleFixError(
                f"--out {out}: name it .ndjson; a .jsonl under results/ is read as `eagle-fix run` "
                f"records by eagle-fix report",
                exit_code=2,
            )
        if out.is_dir() or not out.parent.is_dir():
            raise EagleFixError(f"--out {out}: give a file path in an existing folder", exit_code=2)
    if args.port is not None and not 1 <= args.port <= 65535:
        raise EagleFixError(
            f"--port {args.port}: not a TCP port; give one between 1024 and 65535, or none for a free one",
            exit_code=2,
        )
    # the calibration knobs reach the served engine too (the plugin loads in its engine core)
    refuse_injected_delay(out, exit_code=2)
    return MapArgs(
        profile=args.profile,
        out=out,
        contexts=_ints(args.contexts, "--contexts"),
        concurrencies=_ints(args.concurrency, "--concurrency"),
        request_rates=_floats(args.request_rate, "--request-rate"),
        modes=csv(args.modes),
        fixes=csv(args.fix),
        arms=csv(args.arms) or ("eagle3", "baseline"),
        rounds=parse_positive_int(args.rounds, "--rounds") if args.rounds else None,
        launches=parse_positive_int(args.launches, "--launches") if args.launches else None,
        output_len=parse_positive_int(args.output_len, "--output-len") if args.output_len else None,
        prompts_per_slot=parse_positive_int(args.prompts_per_slot, "--prompts-per-slot")
        if args.prompts_per_slot
        else None,
        prefix_caching=args.prefix_caching,
        port=args.port,
        seed=args.seed,
        log_dir=args.log_dir,
        cell_timeout_s=args.cell_timeout,
    )


def cli_main(args: argparse.Namespace) -> int:
    if args.write_tokenizer:
        for f in write_tokenizer(args.write_tokenizer):
            print(f"wrote {f}")
        return 0
    if args.summary:
        records = read_map(args.summary)
        if not records:  # empty, or one torn line: a summary of nothing would say nothing and pass
            raise EagleFixError(
                f"--summary {args.summary}: no `eagle-fix map` records in it; give a map file written by "
                f"`eagle-fix map --out`",
                exit_code=2,
            )
        print(format_summary(summarize(records)))
        return 0
    margs = from_cli_args(args)
    started = time.monotonic()

    def emit(rec: dict[str, Any]) -> None:
        where = f"launch {rec.get('launch', 0)} round {rec['round']}"
        what = f"{rec['mode']} {rec['context_len']} {rec['load']} {rec['arm']} {where}: " + (
            f"{rec.get('output_throughput', 0):.1f} tok/s, TPOT {rec.get('median_tpot_ms', 0):.1f} ms"
            + (f" (server {rec['server_tpot_ms']:.1f} ms)" if num(rec.get("server_tpot_ms")) is not None else "")
            + (
                f", acceptance {rec['spec_decode_acceptance_length']:.2f}"
                if num(rec.get("spec_decode_acceptance_length")) is not None
                else ""
            )
            if rec["status"] == "ok"
            else f"FAILED: {record.cause(rec.get('error'))}"
        )
        print(f"[{(time.monotonic() - started) / 60:5.1f} min] {what}", file=sys.stderr, flush=True)

    records = run_map(margs, emit=emit)
    print(format_summary(summarize(records)))
    failed = sum(r["status"] != "ok" for r in records)
    print(
        f"{len(records)} measurements ({failed} failed) in {(time.monotonic() - started) / 60:.1f} min"
        + (f"; records: {margs.out}" if margs.out else "")
    )
    return 1 if failed else 0
