"""`eagle-fix ab`: the same points measured in two environments side by side, in alternating rounds.

Two venvs with different vLLM releases, one venv with different environment variables (e.g.
EAGLE_FIX_MODE), or two checkouts: both sides' engines are kept up at once (one per side per
(mode, arm, fix)), and each round measures the point once on each side, so machine drift falls on
both. The order within a round alternates ABBA (`round_order`, recorded per pair): whatever the second
measurement of a round inherits from the first then falls on each side equally often.

The launch is the unit (docs/statistics.md, eagle_fix.core.nested): one engine instance runs a few percent
faster or slower than another for its whole life, and every round of a launch shares that offset. So a point
runs in launch pairs (blocks): each block after the first closes both engines and starts them afresh in the
order opposite to the block before (per pair: `block`, `start_order`), and the verdict is on the blocks' mean
log ratios against the launch variance `eagle-fix noise` recorded for the machine (eagle_fix.gate.design).
With a recorded plan a point stops at the first look that settles every gated metric (regression, improved,
or no change of the threshold), else at the plan's last block; --rounds/--blocks give a fixed design judged
at its end. Each sample decodes at most `verdict.DEFAULT_SAMPLE_TOKENS` tokens unless --output-len says
otherwise. The side not being measured is paused (SIGSTOP of its process group): an idle vLLM worker
busy-polls after each step, which on a few cores lands on the other side's measurement. The load over each
side's measurement is recorded per pair. Greedy acceptance is judged over several prompts (the prompt as the
unit), coverage and status exactly. Exit
codes as `eagle-fix compare`.

How the two sides share the machine is decided before any engine starts (eagle_fix.gate.sharing) and
recorded in the file (`sharing`, `sharing_reason`): on CPU both engines stay up and the idle one is
paused ("paused"); on one GPU each side gets half the device and a KV budget sized to the points
("split-memory"), or, when two engines cannot fit or the device's memory is unknown, one side's engine at a
time ("one-at-a-time"). When a side's engine cannot start, the point is recorded as failed with its cause.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import functools
import json
import sys
import time
from pathlib import Path
from typing import Any

from eagle_fix.core import acceptance, metrics, nested
from eagle_fix.core.errors import EagleFixError
from eagle_fix.engine import lifecycle
from eagle_fix.engine.lifecycle import Interrupted
from eagle_fix.engine.offline import CHILD_MODULE, EngineDied, EngineProcess
from eagle_fix.engine.protocol import PointReply
from eagle_fix.gate import verdict
from eagle_fix.gate.ab_args import (  # noqa: F401 - re-exported: `eagle_fix.gate.ab` is the command's module
    DEFAULT_ALPHA,
    DEFAULT_BLOCKS,
    DEFAULT_ROUNDS,
    DEFAULT_SAMPLE_TOKENS,
    DEFAULT_THRESHOLD,
    ABArgs,
    add_cli_args,
    side_info,
)
from eagle_fix.gate.ab_result import (
    PAIRED,
    apply_family,
    family_sizes,
    format_ab,
    gated_metric,
    point_words,
    summary,
    verdicts,
)
from eagle_fix.gate.design import design_for
from eagle_fix.gate.sharing import (
    engine_need_bytes,
    measure_alone,
    one_engine_up,
    restart,
    sharing_plan,
)
from eagle_fix.machine import device
from eagle_fix.machine.fingerprint import fingerprint, git_commit
from eagle_fix.sweep.load import LoadSampler
from eagle_fix.sweep.loop import groups
from eagle_fix.sweep.plan import plan, point_timeout, resolve

# 2: verdicts of eagle_fix.gate.verdict, `alpha` and `min_detectable` recorded (1: a 95%-interval rule).
# 3: ABBA within a round (`order` per pair and file; before: base first). 4: rounds in `blocks` of fresh
# engines, start order alternating (`block`, `start_order` per pair). 5: each point's own `rounds`/`blocks`
# (the file's `rounds`: --rounds or null).
# 6: the launch is the unit (eagle_fix.core.nested): each point records its `design` (rounds per launch pair,
# launch pairs at most, looks), its `launch_test` settings, its `looks` and why it `stopped`, the seconds each
# launch pair took (`launch_s`) and each round (`wall_s` per pair), and the load over each side's measurement
# (`load` per side). Files of schema 5 and before were judged by the sign test over the rounds.
# 7: one speed metric is gated per point (`gated_metric`: step_ms, else TPOT; the others are shown, verdict
# "not gated"); each question (speed, acceptance) gets one alpha over the run's points: a point runs at its
# Bonferroni share (`family_sizes`), then Holm over the run (`family` for the file, `family` per row); the speed
# rows' `base_mean` / `new_mean` are the launch test's estimator (geometric means over the launches), whose
# ratio is the row's `change`. Files of schema 6 and before gated every paired metric, each at alpha.
# 8: a drafted greedy point decodes --acceptance-prompts seeded prompts a side (`acceptance_prompts`: the
# prompts after the speed rounds' own, each with its `seed`), and its acceptance row is judged over them, the
# prompt as the unit (verdict.acceptance_over_prompts: `prompts`, `df`, `threshold`, `change`); the acceptance
# row carries its `change`, so Holm's threshold applies to it. Files of schema 7 and before judged the first
# round's drafts on vLLM's counts, and their acceptance rows had no `change` (Holm left them within noise).
SCHEMA = 8
# The order of the two sides in round r: base first in even rounds, new first in odd ones.
ORDER = "abba"
# Which side's engine starts first in a group's first block (both stay up, paused in turn); each later
# block of a point restarts both in the opposite order. Recorded in every file and pair: the engine started first
# can run slower than the other on identical sides (docs/statistics.md).
START_ORDER = ("base", "new")


def block_of(r: int, rounds: int, blocks: int) -> int:
    """The block round r of `rounds` falls in: `blocks` runs of consecutive rounds, as equal as the
    division allows (never more blocks than rounds)."""
    return r * min(blocks, rounds) // rounds


def round_order(r: int) -> tuple[str, str]:
    """Which side round r measures first: ABBA, so each side goes first in half the rounds (an even
    number of rounds balances exactly) and no order effect can pose as a change between the sides."""
    return ("base", "new") if r % 2 == 0 else ("new", "base")


def run_ab(args: ABArgs) -> dict[str, Any]:
    """Measure every point on both sides in alternating rounds; returns the whole result (every pair)."""
    lifecycle.install_signal_handlers()  # engines never outlive the command, on both sides
    run = resolve(args.run)
    if args.run.output_len is None and DEFAULT_SAMPLE_TOKENS and run.output_len > DEFAULT_SAMPLE_TOKENS:
        # the calibrated sample length; a profile whose own is shorter keeps its own
        run = resolve(dataclasses.replace(args.run, output_len=DEFAULT_SAMPLE_TOKENS))
    sides = {
        "base": side_info(args.base_python, args.base_env, "--base-python"),
        "new": side_info(args.new_python, args.new_env, "--new-python"),
    }
    fp = fingerprint()
    log_dir = (args.out.parent / f"{args.out.stem}-logs") if args.out else Path("runs") / "ab-logs"
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "kind": "eagle-fix ab",
        "machine": fp,
        "machine_id": fp["id"],
        "git_commit": git_commit(),
        "base": sides["base"],
        "new": sides["new"],
        # --rounds, or None: each point's mode's default; every point records the rounds and blocks it ran
        "rounds": args.rounds,
        "blocks": args.blocks,
        "output_len": run.output_len,
        "threshold": args.threshold,
        "alpha": args.alpha,
        "min_detectable": verdict.MIN_DETECTABLE,
        "started": _now(),
        "points": [],
        # the side not being measured is paused (SIGSTOP), or stopped under "one-at-a-time"; files
        # without this key ran both at once
        "idle_side": "paused",
        # the order within each round (round_order); files without this key measured base first
        "order": ORDER,
        # a group's first block; each later block of a point swaps it, each pair says its own.
        # Files without this key started base first too
        "start_order": list(START_ORDER),
    }
    synthetic = run.profile.synthetic_acceptance_length is not None
    result["family_sizes"] = family_sizes([run.identity(p) for p in plan(run)], synthetic=synthetic)
    shares = {q: args.alpha / n for q, n in result["family_sizes"].items()}
    started = time.monotonic()
    total, total_error = device.gpu_total_bytes() if run.profile.device == "cuda" else (None, None)
    try:
        for group in groups(plan(run)):
            spec = run.engine_spec(group[0])
            share = sharing_plan(run.profile.device, engine_need_bytes(run, spec), total, total_error)
            if share.get("gpu_memory_utilization"):
                spec = dataclasses.replace(spec, gpu_memory_utilization=share["gpu_memory_utilization"])
            # the first group's plan is the file's; a group that differs is recorded on its points
            result.setdefault("sharing", share["sharing"])
            result.setdefault("sharing_reason", share["reason"])
            if share["sharing"] == "one-at-a-time":
                result["idle_side"] = "stopped"
            engines: dict[str, Any] = {"base": None, "new": None}
            # the order the engines now up were started in; a point's later blocks restart and swap it
            start_order = list(START_ORDER)
            try:
                launched = None
                if share["sharing"] != "one-at-a-time":
                    t0 = time.monotonic()
                    for side in start_order:
                        engines[side] = _start(spec, log_dir, side, group[0], sides)
                    launched = round(time.monotonic() - t0, 2)
                for p in group:
                    # the point runs at its Bonferroni share of the speed question's alpha (split over its looks)
                    design, launch = design_for(dataclasses.replace(args, alpha=shares["speed"]), run, p, fp["name"])
                    entry = _measure(
                        run,
                        p,
                        engines,
                        args,
                        spec,
                        log_dir,
                        sides,
                        design=design,
                        launch=launch,
                        sharing=share["sharing"],
                        start_order=start_order,
                        launch_s=launched,
                        acceptance_alpha=shares["acceptance"],
                    )
                    launched = None
                    if share["sharing"] != result["sharing"]:
                        entry["sharing"], entry["sharing_reason"] = share["sharing"], share["reason"]
                    result["points"].append(entry)
                    _progress(entry, started)
            finally:
                for e in engines.values():
                    if e is not None and not isinstance(e, Exception):
                        e.close()
    except Interrupted as exc:
        raise Interrupted(f"{exc}: {len(result['points'])} points measured, nothing written", exc.signum) from None
    result["finished"] = _now()
    result["family"] = apply_family(result)
    result["summary"] = summary(result, strict=args.strict)
    return result


def _start(spec, log_dir: Path, side: str, p, sides, suffix: str = "") -> Any:
    """One side's engine, or the EngineDied that says why it could not start."""
    log = log_dir / f"{side}-{p.words('engine')}-{int(time.time())}{suffix}.log"
    try:
        return _engine(spec, log, sides[side])
    except EngineDied as exc:
        return exc


def _engine(spec, log: Path, side: dict[str, Any]) -> EngineProcess:
    """A side's engine, run by the side's interpreter as its own checkout's engine child."""
    return EngineProcess(
        spec, log, python=side["python"], env=side["env"], child_module=side.get("child_module") or CHILD_MODULE
    )


def _measure(
    run,
    p,
    engines,
    args: ABArgs,
    spec,
    log_dir,
    sides,
    *,
    design: nested.Plan,
    launch: dict[str, Any],
    sharing: str = "paused",
    start_order: list[str] | None = None,
    launch_s: float | None = None,
    acceptance_alpha: float | None = None,
) -> dict[str, Any]:
    """One point by its design: launch pairs (blocks) of `design.rounds` rounds, each round measuring both sides
    in round_order(r) (the pair keeps its `order`; the ratio is new / base whichever went first). Each block
    after the first closes both engines and starts them in the order opposite to `start_order` (updated in
    place), so the launches' start orders balance. After every `design.look_every` blocks the gated metric
    is judged at the look's level (eagle_fix.core.nested.decide); the point stops once it is settled
    (a regression, an improvement, or no change of the threshold), else at the plan's last block. A side
    whose engine died is restarted once per point. Under "one-at-a-time" the other side's engine is stopped
    before a side's is started, so one engine at a time holds the GPU. `launch_s`: what starting the
    group's engines took, when this point's first block is that start."""
    identity = run.identity(p)
    entry: dict[str, Any] = {
        "identity": identity,
        "design": design.as_dict(),
        "launch_test": launch,
        "clocks": {m: c for m, c in metrics.clocks_on(run.profile.device).items() if m in dict(PAIRED)},
        "status": {},
        "error": {},
        "pairs": [],
        "launch_s": [launch_s] if launch_s is not None else [],
        "looks": [],
    }
    alone = sharing == "one-at-a-time"
    start_order = list(START_ORDER) if start_order is None else start_order
    synthetic = run.profile.synthetic_acceptance_length is not None
    k = identity["num_speculative_tokens"]

    def unusable(side: str) -> None:
        entry["status"][side], entry["error"][side] = "failed", str(engines[side]).splitlines()[0][:500]

    # one round of this point: each side measured once (kwargs: r, block, fresh, and a prompt's seed)
    measure_round = functools.partial(
        _round, run, p, engines, entry, spec, log_dir, sides, alone=alone, unusable=unusable
    )
    for side in ("base", "new"):
        if not alone and isinstance(engines[side], Exception):  # one-at-a-time tries a fresh start per point
            unusable(side)
    r = 0
    stopped = f"the plan's last look ({design.max_blocks} launches)"
    for block in range(design.max_blocks):
        if block > 0 and not alone:
            start_order[:] = start_order[::-1]
            t0 = time.monotonic()
            restart(
                engines,
                start_order,
                lambda side, block=block: _start(spec, log_dir, side, p, sides, suffix=f"-block{block}"),
            )
            entry["launch_s"].append(round(time.monotonic() - t0, 2))
            for side in ("base", "new"):
                if entry["status"].get(side) != "failed" and isinstance(engines[side], Exception):
                    unusable(side)
        for i in range(design.rounds):
            pair = measure_round(r=r, block=block, fresh=i == 0 or alone)
            if not alone:
                pair["start_order"] = list(start_order)
            entry["pairs"].append(pair)
            r += 1
        d = identity
        print(
            f"[eagle-fix ab] {point_words(d)}: launch pair {block + 1} of at most {design.max_blocks} done, {r} rounds",
            file=sys.stderr,
            flush=True,
        )
        if any(entry["status"].get(side) == "failed" for side in ("base", "new")):
            stopped = "a side failed"
            break
        if (block + 1) % design.look_every == 0:
            final = block + 1 == design.max_blocks
            looked = verdicts(
                entry, args.threshold, k=k, alpha=args.alpha, synthetic=synthetic, launch=launch, final=final
            )
            gated = gated_metric(entry)
            speed = {m: v["verdict"] for m, v in looked.items() if m == gated}
            entry["looks"].append({"after_blocks": block + 1, "verdicts": speed})
            if speed and all(v != "continue" for v in speed.values()):
                if not final:
                    stopped = f"settled after {block + 1} of {design.max_blocks} launches: " + ", ".join(
                        f"{m} {v}" for m, v in speed.items()
                    )
                break
    n_prompts = greedy_prompts(run, args, p, synthetic)
    if n_prompts > 1 and not any(entry["status"].get(side) == "failed" for side in ("base", "new")):
        _acceptance_prompts(run, entry, n_prompts, measure_round)
    for side in ("base", "new"):
        entry["status"].setdefault(side, "ok")
    entry["rounds"], entry["blocks"] = r, len({pp["block"] for pp in entry["pairs"]})
    entry["stopped"] = stopped
    entry["pinning"] = {
        side: (getattr(e, "ready", None) or {}).get("pinning")
        for side, e in engines.items()
        if e is not None and not isinstance(e, Exception)
    }
    entry["gated_metric"] = gated_metric(entry)
    entry["verdicts"] = verdicts(
        entry,
        args.threshold,
        k=k,
        alpha=args.alpha,
        synthetic=synthetic,
        launch=launch,
        final=True,
        acceptance_alpha=acceptance_alpha,
    )
    return entry


def _round(
    run, p, engines, entry, spec, log_dir, sides, *, r, block, fresh, alone, unusable, seed: int | None = None
) -> dict[str, Any]:
    """One round: each side measured once, in round_order(r), the other side paused; the load over each.
    `seed`: another prompt than the run's (an acceptance prompt, decoded once with its prefill)."""
    order = round_order(r)
    pair: dict[str, Any] = {"round": r, "order": list(order), "block": block}
    t0 = time.monotonic()
    for side in order:
        if entry["status"].get(side) == "failed":
            continue
        if alone:
            one_engine_up(engines, side, lambda side=side: _start(spec, log_dir, side, p, sides))
            if isinstance(engines[side], Exception):
                unusable(side)
                continue
        # a fresh engine has no cached prompt: it pays its prefill in a TTFT run first
        cmd = run.command(p, repeats=1, ttft_repeats=1 if fresh and seed is None else 0, seed=seed)
        measure_alone(engines, side)
        sampler = LoadSampler()
        sampler.start(getattr(engines[side], "pid", None))
        try:
            res = engines[side].run_point(cmd, timeout_s=point_timeout(run, p))
        except EngineDied as exc:
            entry["status"][side], entry["error"][side] = "failed", str(exc).splitlines()[0][:500]
            log = log_dir / f"{side}-{p.words('engine')}-{int(time.time())}-restart.log"
            try:  # the next point gets a fresh engine
                engines[side] = _engine(spec, log, sides[side])
            except EngineDied as again:
                engines[side] = again
            continue
        finally:
            load = sampler.stop()
        pair[side] = {**_pair_numbers(res), "load": load}
    pair["wall_s"] = round(time.monotonic() - t0, 3)
    return pair


def greedy_prompts(run, args: ABArgs, p, synthetic: bool) -> int:
    """How many prompts a point's acceptance is judged over: --acceptance-prompts for a drafted greedy point
    whose acceptance is the draft's own; 1 (the speed rounds' prompt) otherwise (sampled points are judged by
    the launch spread of their calibration, eagle_fix.gate.acceptance_power)."""
    drafted = run.identity(p).get("num_speculative_tokens")
    if not drafted or synthetic or float(run.args.temperature) != 0.0:
        return 1
    return args.acceptance_prompts


def _acceptance_prompts(run, entry, n: int, measure_round) -> None:
    """Greedy acceptance over prompts (verdict.acceptance_over_prompts): after the speed rounds, each side
    decodes --acceptance-prompts - 1 more seeded prompts of the point (seeds after the run's, each with its
    prefill, ABBA), so the verdict's unit is the prompt. Their times are not speed samples: they stay out of
    `pairs`. Recorded as `acceptance_prompts`, each with its `seed`."""
    started = time.monotonic()
    prompts = entry.setdefault("acceptance_prompts", [])
    for j in range(1, n):
        seed = int(run.args.seed) + j
        pair = measure_round(r=j, block=-1, fresh=False, seed=seed)
        pair["seed"] = seed
        prompts.append(pair)
        if any(entry["status"].get(side) == "failed" for side in ("base", "new")):
            break
    print(
        f"[eagle-fix ab] {point_words(entry['identity'])}: acceptance over {len(prompts) + 1} prompts "
        f"({time.monotonic() - started:.0f} s)",
        file=sys.stderr,
        flush=True,
    )


def _pair_numbers(res: PointReply) -> dict[str, Any]:
    """What one side's measurement of one round keeps: the first sample of each paired metric, the TTFT
    where it paid one, the acceptance counts and how far the output is from a loop."""
    s = res.samples or {}
    out = {m: (s.get(m) or [None])[0] for m, _ in PAIRED}
    if s.get("ttft_s"):
        out["ttft_s"] = s["ttft_s"][0]
    for k in ("num_drafts", "num_accepted_tokens", "acceptance_length", "drafter_coverage", "output_token_ids_head"):
        if getattr(res, k) is not None:
            out[k] = getattr(res, k)
    if (share := acceptance.output_diversity({"output_token_ids": res.output_token_ids})) is not None:
        out["output_distinct_4grams"] = round(share, 4)  # whether its acceptance is a loop's (the tokens stay out)
    return out


def _progress(entry: dict[str, Any], started: float) -> None:
    d = entry["identity"]
    gated = entry.get("gated_metric") or "status"
    tp = entry["verdicts"].get(gated, {})
    print(
        f"[eagle-fix ab] {point_words(d)}: "
        f"{time.monotonic() - started:.0f} s, {gated} {tp.get('verdict', entry['verdicts'].get('status', {}).get('verdict'))}",
        file=sys.stderr,
        flush=True,
    )


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def cli_main(args: argparse.Namespace) -> int:
    """Exit 0: no regression; 1: a regression or a point that failed only on the new side; 2: unusable input
    (any refusal, whichever parser raised it: a refused input must never read as a regression in CI)."""
    try:
        ab = ABArgs.from_cli_args(args)
        result = run_ab(ab)
    except Interrupted:
        raise
    except EagleFixError as exc:
        raise EagleFixError(str(exc), exit_code=2) from None
    if ab.out:
        ab.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(format_ab(result, strict=ab.strict))
    return result["summary"]["exit_code"]
