"""`eagle-fix map`: EAGLE3 against no speculation under load, served by vLLM's OpenAI server and
loaded by vLLM's own client (`eagle_fix.served.server`), over contexts x load x arm x mode x fix.

The load is vLLM bench's `--max-concurrency` (every request sent at once, at most c in flight) or
its `--request-rate` (Poisson arrivals). Each cell runs `prompts_per_slot x c` requests (rate mode:
`prompts_per_slot x` the largest concurrency), each a distinct prompt of the suite's seeded workload
(`eagle_fix.core.workload.workload_prompts`: the sweep profile's workload, copy or chat; a new seed per
cell, round and arm: no request shares a prefix
with another, so no cascade attention or prefix-cache shortcut), of `context - output_len - k - 1`
tokens, greedy, `output_len` tokens out.

Per mode, the grid runs `launches` times, each on fresh servers, one per arm (EAGLE3 per fix arm, and the
baseline); the one not being measured is paused (SIGSTOP of its group, as `eagle-fix ab` does: an idle
vLLM busy-polls). Within a launch every cell is measured in `rounds` paired rounds, ABBA (`ab.round_order`).
A launch carries its own offset, so the intervals of the EAGLE3 / baseline ratios take the launch as the
unit (`summary.summarize`: a t interval over the launches' mean log ratios).

Each measurement is one JSON line: vLLM bench's result JSON under vLLM's own keys (per-request lists
dropped, as `vllm bench serve` does without --save-detailed) beside ours (`OUR_KEYS`): identity,
machine, load, the server's settings (prefix caching), the drafter's coverage from the plugin's
counters in the server's worker (or null and why). A server that dies mid-cell makes a failed cell
carrying the cause its log names; the next cell starts a fresh server.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import os
import re
import subprocess
import time
import zlib
from pathlib import Path
from typing import Any

from eagle_fix.core import arms, record
from eagle_fix.core.errors import EagleFixError
from eagle_fix.core.workload import workload_prompts
from eagle_fix.engine import lifecycle
from eagle_fix.engine.logs import log_tail
from eagle_fix.engine.spec import EngineSpec
from eagle_fix.gate.ab import round_order
from eagle_fix.machine import fingerprint
from eagle_fix.pairs.profiles import DEFAULT_PROFILES, MAP_PROFILES, PROFILES, MapProfile
from eagle_fix.served import client
from eagle_fix.served.server import ServerDied, ServerProcess, check_port
from eagle_fix.served.summary import KIND, load_label, parse_load
from eagle_fix.sweep import road
from eagle_fix.sweep.load import LoadSampler
from eagle_fix.sweep.plan import injected

# how long a server whose /health stopped answering may take to be seen dead (a SIGKILLed group exits
# its engine core first; the API server, holding GiBs, a moment later)
DEATH_SETTLE_S = 5.0

SCHEMA = 1
# vLLM bench's per-request lists: dropped from the record (vllm bench serve drops them too unless
# --save-detailed); the record keeps its summaries.
DROPPED = (
    "input_lens",
    "output_lens",
    "start_times",
    "ttfts",
    "itls",
    "generated_texts",
    "errors",
    "latencies",
    "queue_times",
)
# Our keys beside vLLM's (never one of vLLM's names: a reader tells whose a number is by its name).
OUR_KEYS = (
    "schema",
    "kind",
    "profile",
    "context_len",
    "prompt_len",
    "load",
    "arm",
    "mode",
    "fix",
    "launch",
    "round",
    "position",
    "output_len",
    "num_speculative_tokens",
    "prefix_caching",
    "workload",
    "temperature",
    "status",
    "error",
    "seed",
    "server_tpot_ms",
    "drafter_coverage",
    "drafter_steps",
    "drafter_proposals",
    "max_seq_len_drafted",
    "drafter_counters_error",
    "kv_cache_capacity_tokens",
    "kv_max_concurrency",
    "server_startup_s",
    "server_restarts",
    "server_args",
    "server_log",
    "bench_command",
    "machine_id",
    "machine_name",
    "machine",
    "vllm_version",
    "torch_version",
    "git_commit",
    "env",
    "load_avg_mean",
    "load_avg_max",
    "other_busy_cores",
    "timestamp",
    "wall_s",
)


@dataclasses.dataclass(frozen=True)
class MapArgs:
    profile: str = DEFAULT_PROFILES["map"]
    out: Path | None = None
    contexts: tuple[int, ...] | None = None
    concurrencies: tuple[int, ...] | None = None
    request_rates: tuple[float, ...] | None = None
    modes: tuple[str, ...] | None = None
    fixes: tuple[str, ...] | None = None
    arms: tuple[str, ...] = ("eagle3", "baseline")
    rounds: int | None = None
    launches: int | None = None
    output_len: int | None = None
    prompts_per_slot: int | None = None
    prefix_caching: bool | None = None
    port: int | None = None
    seed: int = 0
    log_dir: Path | None = None
    cell_timeout_s: float = 1800.0
    startup_timeout_s: float = 1800.0


@dataclasses.dataclass(frozen=True)
class Grid:
    name: str
    sweep_profile: Any  # models.Profile
    contexts: tuple[int, ...]
    loads: tuple[str, ...]
    modes: tuple[str, ...]
    fixes: tuple[str, ...]
    arms: tuple[str, ...]
    rounds: int
    output_len: int
    prompts_per_slot: int
    prefix_caching: bool
    max_concurrency: int
    launches: int = 1

    def cells(self) -> list[dict[str, Any]]:
        return [
            {"context_len": c, "load": load, "mode": m}
            for m in self.modes
            for c in self.contexts
            for load in self.loads
        ]

    def num_prompts(self, load: str) -> int:
        conc, _ = parse_load(load)
        return self.prompts_per_slot * (conc or self.max_concurrency)


def resolve(args: MapArgs) -> Grid:
    """The grid: a MAP_PROFILES entry, or any sweep profile with the load axis from flags (defaults 1..16)."""
    if args.profile in MAP_PROFILES:
        mp = MAP_PROFILES[args.profile]
    elif args.profile in PROFILES:
        mp = MapProfile(
            args.profile,
            args.profile,
            PROFILES[args.profile].contexts,
            (1, 2, 4, 8, 16),
            fixes=("on",),
            modes=("eager", "compile"),
        )
    else:
        raise EagleFixError(
            f"unknown profile {args.profile!r}: choose one of {', '.join([*MAP_PROFILES, *PROFILES])}", exit_code=2
        )
    prof = PROFILES[mp.profile]
    contexts = args.contexts or mp.contexts
    concs = args.concurrencies if args.concurrencies is not None else mp.concurrencies
    rates = args.request_rates if args.request_rates is not None else mp.request_rates
    loads = tuple(load_label(c, None) for c in concs) + tuple(load_label(None, r) for r in rates)
    if not loads:
        raise EagleFixError("no load: give --concurrency and/or --request-rate", exit_code=2)
    modes = args.modes or mp.modes
    fixes = args.fixes or mp.fixes
    for m in modes:
        if m not in record.ENGINE_MODES:
            raise EagleFixError(f"--modes {m!r}: choose from {', '.join(record.ENGINE_MODES)}", exit_code=2)
    for f in fixes:
        if f not in record.FIX_ARMS:
            raise EagleFixError(f"--fix {f!r}: choose from {', '.join(record.FIX_ARMS)}", exit_code=2)
    for a in args.arms:
        if not (arms.is_eagle3(a) or arms.is_baseline(a)):  # the served map runs EAGLE3 against the baseline
            raise EagleFixError(f"--arms {a!r}: choose from {', '.join(record.ARMS)} (served)", exit_code=2)
    output_len = args.output_len or mp.output_len
    k = prof.num_speculative_tokens
    short = [c for c in contexts if c - output_len - k - 1 < 16]
    if short:
        raise EagleFixError(f"context {short[0]} leaves no prompt for {output_len} output tokens", exit_code=2)
    return Grid(
        mp.name,
        prof,
        tuple(contexts),
        loads,
        tuple(modes),
        tuple(fixes),
        tuple(args.arms),
        args.rounds or mp.rounds,
        output_len,
        args.prompts_per_slot or mp.prompts_per_slot,
        mp.prefix_caching if args.prefix_caching is None else args.prefix_caching,
        max(concs or (1,)),
        args.launches or mp.launches,
    )


def engine_spec(grid: Grid, arm: str, mode: str, fix: str | None, *, seed: int = 0) -> EngineSpec:
    """The server's engine, on the sweep's road (eagle_fix.sweep.road): long enough for the longest context,
    as many sequences as the largest load keeps in flight (under a request rate, every request of the cell
    may be)."""
    in_flight = max([grid.max_concurrency] + [grid.num_prompts(ld) for ld in grid.loads if ld.startswith("r")])
    return road.engine_spec(
        grid.sweep_profile,
        arm=arm,
        mode=mode,
        fix=fix,
        max_model_len=max(grid.contexts),
        max_num_seqs=in_flight,
        seed=seed,
    )


def prompt_len(grid: Grid, context_len: int) -> int:
    """As the sweep's: the sequence ends at the context, with room for the output and k draft positions."""
    return road.prompt_len(
        context_len, output_len=grid.output_len, num_speculative_tokens=grid.sweep_profile.num_speculative_tokens
    )


def cell_seed(
    base: int, context_len: int, load: str, round_: int, arm: str, fix: str | None, mode: str, launch: int = 0
) -> int:
    """A workload seed of its own per cell, launch, round and arm: no two requests of the run share a prompt
    (launch 0 keeps the seeds of maps made before launches)."""
    key = f"{context_len}/{load}/{round_}/{arm}/{fix}/{mode}" + (f"/{launch}" if launch else "")
    return (base * 1_000_003 + zlib.crc32(key.encode())) % (2**31)


_KV_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
_KV_CONC = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")


def kv_capacity(log_path: Path) -> tuple[int | None, float | None]:
    """vLLM's own lines at start: its KV cache in tokens and how many requests of max_model_len fit."""
    tokens = conc = None
    for line in log_tail(log_path, 4_000_000):
        if m := _KV_TOKENS.search(line):
            tokens = int(m.group(1).replace(",", ""))
        if m := _KV_CONC.search(line):
            conc = float(m.group(2))
    return tokens, conc


class Servers:
    """The servers of one mode (one per arm/fix), started lazily, restarted after a death, and all
    but the measured one paused."""

    def __init__(self, grid: Grid, mode: str, log_dir: Path, args: MapArgs, launch: int = 0):
        self.grid, self.mode, self.log_dir, self.args, self.launch = grid, mode, log_dir, args, launch
        self.up: dict[tuple[str, str | None], Any] = {}
        self.restarts: dict[tuple[str, str | None], int] = {}
        self.start_error: dict[tuple[str, str | None], str] = {}

    def get(self, arm: str, fix: str | None):
        """The arm's server, resumed and healthy, the others paused; raises ServerDied when it cannot start."""
        key = (arm, fix if arms.takes_fix(arm) else None)
        for other, srv in self.up.items():
            if other != key:
                srv.pause()
        srv = self.up.get(key)
        if srv is not None:
            srv.resume()
            if srv.healthy(30.0):
                return srv
            srv.kill()
            del self.up[key]
            self.restarts[key] = self.restarts.get(key, 0) + 1
        if key in self.start_error:
            raise ServerDied(self.start_error[key])
        tag, launch = (f"-fix-{key[1]}" if key[1] else ""), (f"-launch{self.launch}" if self.launch else "")
        name = f"server-{self.mode}-{arm}{tag}{launch}-{self.restarts.get(key, 0)}.log"
        try:
            srv = ServerProcess(
                engine_spec(self.grid, arm, self.mode, key[1], seed=self.args.seed),
                self.log_dir / name,
                port=self.args.port if not self.up else None,
                prefix_caching=self.grid.prefix_caching,
                startup_timeout_s=self.args.startup_timeout_s,
            )
        except ServerDied as exc:
            self.start_error[key] = f"server could not start: {exc}"
            raise ServerDied(self.start_error[key]) from None
        self.up[key] = srv
        return srv

    def close(self) -> None:
        for srv in self.up.values():
            srv.close()
        self.up.clear()


def measure(
    grid: Grid,
    servers: Servers,
    cell: dict[str, Any],
    arm: str,
    fix: str | None,
    round_: int,
    position: int,
    common: dict[str, Any],
    args: MapArgs,
) -> dict[str, Any]:
    """One arm of one cell in one round: a server, vLLM's client, the drafter's counters; one record."""
    lifecycle.check()
    conc, rate = parse_load(cell["load"])
    n = grid.num_prompts(cell["load"])
    plen = prompt_len(grid, cell["context_len"])
    seed = cell_seed(args.seed, cell["context_len"], cell["load"], round_, arm, fix, cell["mode"], servers.launch)
    rec: dict[str, Any] = {
        **dict.fromkeys(OUR_KEYS),
        **common,
        "profile": grid.name,
        "context_len": cell["context_len"],
        "prompt_len": plen,
        "load": cell["load"],
        "arm": arm,
        "mode": cell["mode"],
        "fix": fix if arms.takes_fix(arm) else None,
        "launch": servers.launch,
        "round": round_,
        "position": position,
        "output_len": grid.output_len,
        "num_speculative_tokens": grid.sweep_profile.num_speculative_tokens if arms.speculates(arm) else None,
        "prefix_caching": grid.prefix_caching,
        "workload": grid.sweep_profile.workload,
        "temperature": client.TEMPERATURE,
        "seed": seed,
        # vLLM bench's own names for the load, filled here too so a failed cell carries them
        "max_concurrency": conc,
        "request_rate": rate if rate else "inf",
        "num_prompts": n,
    }
    t0 = time.monotonic()
    srv = None
    try:
        srv = servers.get(arm, fix)
    except ServerDied as exc:
        rec.update(status="failed", error=str(exc), wall_s=round(time.monotonic() - t0, 2))
        return rec
    key = (arm, rec["fix"])
    rec.update(
        server_startup_s=round(srv.startup_s, 2),
        server_restarts=servers.restarts.get(key, 0),
        server_args=srv.args,
        server_log=_relative(srv.log_path, args),
    )
    rec["kv_cache_capacity_tokens"], rec["kv_max_concurrency"] = kv_capacity(srv.log_path)
    vocab = grid.sweep_profile.target_config()["vocab_size"]
    workload, target = grid.sweep_profile.workload, str(srv.spec.target)
    prompts = workload_prompts(workload, plen, n, vocab_size=vocab, seed=seed, target=target)
    where = servers.log_dir / "prompts" / f"{seed}.jsonl"
    dataset = client.write_prompts(where, prompts, vocab, workload=workload, target=target)
    argv = client.bench_args(
        srv.base_url,
        str(srv.spec.target),
        dataset,
        num_prompts=n,
        output_len=grid.output_len,
        max_concurrency=conc,
        request_rate=rate,
        seed=seed,
    )
    rec["bench_command"] = client.bench_command(argv)
    counter_error = srv.reset_drafter_stats() if arms.speculates(arm) else None
    srv.mark(f"point {json.dumps({k: rec[k] for k in ('context_len', 'load', 'arm', 'fix', 'round')})}")
    before = srv.metrics()
    sampler = LoadSampler()
    sampler.start(srv.pid)
    result, client_error = None, None
    try:
        result = client.run_bench(argv, args.cell_timeout_s)
        rec["server_tpot_ms"] = client.server_tpot_ms(before, srv.metrics())
    except Exception as exc:  # noqa: BLE001 -- a client error is a failed cell, the run goes on
        lifecycle.check()
        client_error = f"client: {type(exc).__name__}: {' '.join(str(exc).split())}"[:500]
    finally:
        rec.update(sampler.stop() or {})
    rec["wall_s"] = round(time.monotonic() - t0, 2)
    if result is not None:
        errors = [e for e in (result.get("errors") or []) if e]
        rec.update({k: v for k, v in result.items() if k not in DROPPED and k not in OUR_KEYS})
        if result.get("failed") or not result.get("completed"):
            first = " ".join(str(errors[0]).split())[-300:] if errors else "no error text"
            client_error = f"{result.get('failed', n)} of {n} requests failed: {first}"
    if not srv.alive() or not srv.healthy(30.0):
        # dead, or up with its engine core gone (/health answers 503): the log after this cell's
        # mark names why; the next cell gets a fresh server (Servers.get). A SIGKILLed server of a few
        # GiB is still exiting when its engine core is gone: give it a moment to be seen dead.
        if srv.proc is not None and srv.alive():
            with contextlib.suppress(subprocess.TimeoutExpired):
                srv.proc.wait(timeout=DEATH_SETTLE_S)
        what = "server died during the cell" if not srv.alive() else "server stopped answering /health during the cell"
        rec.update(status="failed", error=srv.death_message(what))
        return rec
    if client_error:
        rec.update(status="failed", error=client_error)
        return rec
    rec["status"] = "ok"
    if arms.speculates(arm):
        counters, why = srv.drafter_stats()
        if counters is not None:
            steps, proposals = counters.get("spec_steps"), counters.get("proposals")
            rec.update(
                drafter_steps=steps,
                drafter_proposals=proposals,
                max_seq_len_drafted=counters.get("max_seq_len_drafted"),
                drafter_coverage=proposals / steps if steps and proposals is not None else None,
            )
        rec["drafter_counters_error"] = why or counter_error
    return rec


def _relative(path: Path, args: MapArgs) -> str:
    base = args.out.parent if args.out else Path.cwd()
    try:
        return os.path.relpath(path, base)
    except ValueError:
        return str(path)


def run_map(args: MapArgs, *, emit=None) -> list[dict[str, Any]]:
    """The whole grid; every record is appended to args.out as it is made (and passed to `emit`)."""
    lifecycle.install_signal_handlers()
    grid = resolve(args)
    if args.port is not None:
        check_port(args.port)
    out = args.out
    log_dir = args.log_dir or ((out.parent / f"{out.stem}-logs") if out else Path("runs") / "map-logs")
    fp = fingerprint.fingerprint()
    versions = fingerprint.versions()
    common = {
        "schema": SCHEMA,
        "kind": KIND,
        "machine_id": fp["id"],
        "machine_name": fp.get("name"),
        "machine": fp,
        "vllm_version": versions.get("vllm"),
        "torch_version": versions.get("torch"),
        "git_commit": fingerprint.git_commit(),
        "env": injected() or None,
    }
    served = sorted((arms.arm(a) for a in grid.arms), key=lambda a: not a.speculates)  # the baseline last
    sides = [(a.name, f) for a in served for f in (grid.fixes if a.takes_fix else [None])]
    records = []
    for mode, launch in ((m, n) for m in grid.modes for n in range(grid.launches)):
        # every launch starts its servers afresh; ABBA (ab.round_order, the baseline as "base") within
        # it, shifted by one in odd launches so each arm's server starts first in half of them
        servers = Servers(grid, mode, log_dir, args, launch)
        try:
            for cell in (c for c in grid.cells() if c["mode"] == mode):
                for r in range(grid.rounds):
                    order = sides[::-1] if round_order(r + launch)[0] == "base" else sides
                    for position, (arm, fix) in enumerate(order):
                        rec = measure(grid, servers, cell, arm, fix, r, position, common, args)
                        rec["timestamp"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
                        if out is not None:
                            record.append(out, rec)
                        records.append(rec)
                        if emit:
                            emit(rec)
        finally:
            servers.close()
    return records


# ============================================================================ command line
