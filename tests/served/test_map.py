"""eagle-fix map: the grid, the records (vLLM bench's keys beside ours), the paired ratios and the
break-even concurrency, the report's heatmap and table; marked `engine`, the served path on its
smallest cell and a server killed mid-cell."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT
from eagle_fix.core import metrics
from eagle_fix.core.errors import EagleFixError
from eagle_fix.pairs.profiles import MAP_PROFILES
from eagle_fix.served import cli as map_cli
from eagle_fix.served import map as emap
from eagle_fix.served import summary as map_summary


def test_quick_profile_is_the_stated_grid():
    grid = emap.resolve(emap.MapArgs(profile="cpu-map-quick"))
    assert grid.contexts == (2048, 8192) and grid.loads == ("c1", "c2", "c4", "r1")
    assert grid.modes == ("eager",) and grid.fixes == ("on",) and grid.arms == ("eagle3", "baseline")
    assert grid.output_len == 128 and grid.rounds == 2 and grid.launches == 4 and grid.num_prompts("r1") == 8
    assert len(grid.cells()) * len(grid.arms) * grid.rounds * grid.launches == 128
    assert MAP_PROFILES["cpu-map-quick"].prefix_caching is False


def test_a_sweep_profile_gets_the_full_load_axis():
    grid = emap.resolve(emap.MapArgs(profile="cpu-quick", request_rates=(0.5,)))
    assert grid.loads == ("c1", "c2", "c4", "c8", "c16", "r0.5")
    assert grid.modes == ("eager", "compile")
    assert grid.num_prompts("r0.5") == grid.prompts_per_slot * 16


def test_bad_arguments_are_one_line():
    with pytest.raises(EagleFixError, match="unknown profile 'nope'"):
        emap.resolve(emap.MapArgs(profile="nope"))
    with pytest.raises(EagleFixError, match="--modes 'fast'"):
        emap.resolve(emap.MapArgs(modes=("fast",)))
    with pytest.raises(EagleFixError, match="leaves no prompt"):
        emap.resolve(emap.MapArgs(contexts=(64,)))
    type("NS", (), {})()
    with pytest.raises(EagleFixError, match="name it .ndjson"):
        from eagle_fix.cli import build_parser

        map_cli.from_cli_args(build_parser().parse_args(["map", "--out", "results/x.jsonl"]))
    with pytest.raises(EagleFixError, match="--request-rate"):
        map_cli._floats("0", "--request-rate")


def test_the_calibration_knobs_never_reach_committed_maps(monkeypatch):
    from eagle_fix.cli import build_parser

    monkeypatch.setenv("EAGLE_FIX_INJECT_SLOWDOWN", "0.05")
    with pytest.raises(
        EagleFixError,
        match="EAGLE_FIX_INJECT_SLOWDOWN is set: results/map/x.ndjson is under the committed results/ folder",
    ) as exc:
        map_cli.from_cli_args(build_parser().parse_args(["map", "--out", "results/map/x.ndjson"]))
    assert exc.value.exit_code == 2
    monkeypatch.setenv("EAGLE_FIX_INJECT_SLOWDOWN", "fast")  # a bad value is one line even without --out
    with pytest.raises(EagleFixError, match="EAGLE_FIX_INJECT_SLOWDOWN='fast' is not a number"):
        map_cli.from_cli_args(build_parser().parse_args(["map"]))


def test_seeds_differ_per_cell_round_and_arm():
    seeds = {
        emap.cell_seed(0, c, load, r, arm, "on", "eager")
        for c in (2048, 8192)
        for load in ("c1", "c2")
        for r in range(3)
        for arm in ("eagle3", "baseline")
    }
    assert len(seeds) == 24


def _rec(arm, context, load, rnd, thr, tpot, *, status="ok", acc=3.5, cov=1.0, error=None):
    rec = {
        "schema": 1,
        "kind": map_summary.KIND,
        "profile": "p",
        "context_len": context,
        "load": load,
        "arm": arm,
        "mode": "eager",
        "fix": "on" if arm == "eagle3" else None,
        "round": rnd,
        "status": status,
        "error": error,
    }
    if status == "ok":
        rec.update(output_throughput=thr, median_tpot_ms=tpot, server_tpot_ms=tpot * 0.9)
        if arm == "eagle3":
            rec.update(spec_decode_acceptance_length=acc, drafter_coverage=cov, kv_max_concurrency=9.5)
    return rec


def _records():
    recs = []
    # context 2048: EAGLE3 faster at c1, slower from c2 in every round; 8192: faster everywhere
    for rnd in range(3):
        for load, ratio in (("c1", 1.5 + 0.01 * rnd), ("c2", 0.8 + 0.01 * rnd), ("c4", 0.7 + 0.01 * rnd)):
            recs += [
                _rec("baseline", 2048, load, rnd, 100.0, 10.0),
                _rec("eagle3", 2048, load, rnd, 100.0 * ratio, 10.0 / ratio),
            ]
        for load in ("c1", "c2", "c4"):
            recs += [_rec("baseline", 8192, load, rnd, 50.0, 20.0), _rec("eagle3", 8192, load, rnd, 60.0 + rnd, 18.0)]
    return recs


def test_paired_ratios_and_break_even():
    summary = map_summary.summarize(_records())
    cell = next(c for c in summary if c["context_len"] == 2048 and c["load"] == "c2")
    assert cell["throughput_ratio"]["n"] == 3
    # one launch (no `launch` key: maps made before launches): the rounds' median and their range
    assert cell["throughput_ratio"]["basis"] == "rounds" and cell["throughput_ratio"]["launches"] == 1
    assert cell["throughput_ratio"]["ratio"] == pytest.approx(0.81)
    assert cell["throughput_ratio"]["ci95"] == pytest.approx([0.80, 0.82])
    assert cell["throughput_ratio"]["coverage"] == pytest.approx(0.75)
    assert cell["tpot_ratio"]["ratio"] == pytest.approx(1 / 0.81)
    assert cell["server_tpot_ratio"]["ratio"] == pytest.approx(1 / 0.81)
    assert map_summary.ratio_label(cell["throughput_ratio"]) == "range, 75% cov, 1 launch"
    be = map_summary.break_even(summary)
    assert be[("p", "eager", "on", 2048)]["interval"] == 2
    assert be[("p", "eager", "on", 8192)]["interval"] is None  # not reached in the grid
    assert be[("p", "eager", "on", 8192)]["concurrencies"] == [1, 2, 4]


def test_each_served_cell_states_the_acceptance_it_needs_to_pay():
    """tau* = acceptance x (EAGLE3 / baseline server TPOT): at 2048 c2 EAGLE3's TPOT is 1/0.81 of the
    baseline's at acceptance 3.5, so a draft must accept 3.5 / 0.81 = 4.32 there to pay; the interval is the
    ratio's times the acceptance; a cell without acceptance has none; the map's table shows it."""
    from eagle_fix.publish.file_tables import _tau_star

    summary = map_summary.summarize(_records())
    cell = next(c for c in summary if c["context_len"] == 2048 and c["load"] == "c2")
    t = cell["tau_star"]
    assert t["acceptance"] == 3.5 and t["estimate"] == pytest.approx(3.5 / 0.81)
    assert t["ci95"] == pytest.approx([3.5 * x for x in cell["server_tpot_ratio"]["ci95"]])
    fast = next(c for c in summary if c["context_len"] == 2048 and c["load"] == "c1")["tau_star"]
    assert fast["estimate"] < fast["acceptance"]  # EAGLE3 paid there: the draft accepts more than it needs
    no_acc = map_summary.summarize([{**r, "spec_decode_acceptance_length": None} for r in _records()])
    assert all(c["tau_star"] is None for c in no_acc)
    assert _tau_star(t) == f"{3.5 / 0.81:.2f} [{t['ci95'][0]:.2f}, {t['ci95'][1]:.2f}]" and _tau_star(None) == "–"


def _launch_records(offsets, scatter=0.02):
    """One cell measured in len(offsets) launches of 2 rounds: EAGLE3 / baseline = 0.9 x the launch's
    offset, the rounds scattered by +-scatter around it."""
    recs = []
    for launch, offset in enumerate(offsets):
        for rnd, wobble in enumerate((1 + scatter, 1 - scatter)):
            ratio = 0.9 * offset * wobble
            for arm, thr in (("baseline", 100.0), ("eagle3", 100.0 * ratio)):
                rec = _rec(arm, 2048, "c1", rnd, thr, 10.0 * 100.0 / thr)
                rec["launch"] = launch
                recs.append(rec)
    return recs


def test_the_launch_is_the_unit_of_a_cells_interval():
    """Rounds of one launch share its offset: the interval is a t interval over the launches' mean log
    ratios (df = launches - 1), at 95%: launches that disagree widen it, rounds that scatter within a
    launch do not narrow or widen it beyond their launch's mean."""
    import math

    offsets = (1.0, 1.06, 0.95, 1.02)
    cell = map_summary.summarize(_launch_records(offsets))[0]
    s = cell["throughput_ratio"]
    means = [math.log(0.9 * o) + 0.5 * math.log((1.02) * (0.98)) for o in offsets]
    m = sum(means) / 4
    sd = math.sqrt(sum((x - m) ** 2 for x in means) / 3)
    assert s["basis"] == "launches" and s["launches"] == 4 and s["n"] == 8 and s["coverage"] == 0.95
    assert s["ratio"] == pytest.approx(math.exp(m))
    assert s["ci95"] == pytest.approx([math.exp(m - 3.1824463 * sd / 2), math.exp(m + 3.1824463 * sd / 2)])
    assert map_summary.ratio_label(s) == "95% t, 4 launches"
    # identical launches: the interval closes on the ratio, however the rounds scatter within them
    same = map_summary.summarize(_launch_records((1.0, 1.0, 1.0)))[0]["throughput_ratio"]
    assert same["ci95"] == pytest.approx([0.9 * math.sqrt(1.02 * 0.98)] * 2)


def test_a_failed_round_drops_its_pair_and_keeps_its_cause():
    recs = _records()
    dead = next(
        r for r in recs if r["arm"] == "eagle3" and r["context_len"] == 2048 and r["load"] == "c1" and r["round"] == 1
    )
    dead.update(
        status="failed",
        error="worker VllmWorker-0 killed by SIGKILL; server died during the cell; "
        "cause: RuntimeError: boom; log: x.log",
    )
    dead.pop("output_throughput")
    cell = next(c for c in map_summary.summarize(recs) if c["context_len"] == 2048 and c["load"] == "c1")
    assert cell["throughput_ratio"]["n"] == 2
    assert cell["failed"] == ["eagle3 round 1: worker VllmWorker-0 killed by SIGKILL; RuntimeError: boom"]


def test_records_keep_vllms_keys_apart_from_ours():
    """Our keys never take one of vLLM bench's names, so a record is vLLM's result plus ours."""
    vllm_keys = {
        "output_throughput",
        "median_tpot_ms",
        "p99_tpot_ms",
        "median_ttft_ms",
        "median_itl_ms",
        "spec_decode_acceptance_length",
        "spec_decode_per_position_acceptance_rates",
        "completed",
        "failed",
        "duration",
        "request_rate",
        "max_concurrency",
        "num_prompts",
        "date",
        "backend",
    }
    assert not vllm_keys & set(emap.OUR_KEYS)


def test_vllm_bench_keys_are_in_the_metric_registry():
    """vLLM's names enter the registry as what they are, next to ours for the same quantity."""
    for key in (
        "output_throughput",
        "median_tpot_ms",
        "p99_tpot_ms",
        "median_ttft_ms",
        "median_itl_ms",
        "spec_decode_acceptance_length",
        "spec_decode_per_position_acceptance_rates",
    ):
        m = metrics.VLLM_BENCH_METRIC[key]
        assert m.unit and m.label
    assert metrics.VLLM_BENCH_METRIC["median_tpot_ms"].ours == "tpot_ms"
    assert metrics.VLLM_BENCH_METRIC["spec_decode_acceptance_length"].ours == "acceptance_length"
    assert all(
        m.ours is None or m.ours in metrics.METRIC or m.ours == "per_position_acceptance"
        for m in metrics.VLLM_BENCH_METRICS
    )


def test_read_map_drops_a_torn_last_line_and_refuses_other_files(tmp_path):
    f = tmp_path / "m.ndjson"
    f.write_text("\n".join(json.dumps(r) for r in _records()[:4]) + '\n{"kind": "eagle-f')
    assert len(map_summary.read_map(f)) == 4
    f.write_text(json.dumps({"context_len": 1, "mode": "eager"}) + "\n")
    with pytest.raises(EagleFixError, match="not an `eagle-fix map` record"):
        map_summary.read_map(f)


def test_report_heatmap_and_table(tmp_path):
    from eagle_fix.publish import docs, file_tables, plots

    f = tmp_path / "m.ndjson"
    f.write_text("\n".join(json.dumps(r) for r in _records()) + "\n")
    table = docs.render_table("map", [str(f)])
    assert "| 2048 |" in table and "0.810 [0.800, 0.820]" in table
    assert "break-even" in table.lower()
    lines = file_tables.map_break_even_lines(map_summary.summarize(map_summary.read_map(f)))
    assert any("2048" in line and "concurrency 2" in line for line in lines)
    assert any("8192" in line and "not reached" in line for line in lines)
    png = plots.map_heatmap(map_summary.read_map(f), tmp_path / "heat.png")
    assert png is not None and png.stat().st_size > 1000


# ----------------------------------------------------------------------------- the real server


@pytest.mark.engine
def test_smallest_cell_served(tmp_path):
    """One context, concurrency 1 and 2, EAGLE3 only, a few tokens out, through `eagle-fix map`: one
    record per cell with vLLM bench's keys, our identity and the drafter's coverage; no server left."""
    import subprocess
    import sys

    out = tmp_path / "m.ndjson"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "eagle_fix.cli",
            "map",
            "--contexts",
            "1024",
            "--concurrency",
            "1,2",
            "--request-rate",
            "",
            "--arms",
            "eagle3",
            "--rounds",
            "1",
            "--launches",
            "1",
            "--output-len",
            "16",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = map_summary.read_map(out)
    assert [(r["load"], r["status"]) for r in recs] == [("c1", "ok"), ("c2", "ok")]
    for r in recs:
        assert r["completed"] == r["num_prompts"] == 2 * r["max_concurrency"]
        assert r["total_output_tokens"] == 16 * r["num_prompts"]
        for key in (
            "output_throughput",
            "median_tpot_ms",
            "p99_tpot_ms",
            "median_ttft_ms",
            "median_itl_ms",
            "spec_decode_acceptance_length",
            "spec_decode_per_position_acceptance_rates",
        ):
            assert key in r, key
        assert r["spec_decode_acceptance_length"] > 1.5
        assert r["drafter_coverage"] == 1.0 and r["drafter_counters_error"] is None
        assert r["server_tpot_ms"] > 0  # the engine's own TPOT from the server's /metrics
        assert r["prefix_caching"] is False and r["machine_id"] and r["vllm_version"]
        assert r["bench_command"].startswith("vllm bench serve ")
    assert recs[0]["server_log"] == recs[1]["server_log"]  # one server for both cells
    assert _servers_left(tmp_path) == []


def _servers_left(folder: Path) -> list[int]:
    import psutil

    return [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if "eagle_fix.served.server" in " ".join(p.info["cmdline"] or [])
        and str(folder) in " ".join(p.info["cmdline"] or [])
    ]


@pytest.mark.engine
@pytest.mark.slow  # 81 s; in CI tests/engine/test_faults.py kills the offline engine's worker mid-point
def test_server_killed_mid_cell_fails_that_cell_and_the_next_goes_on(tmp_path):
    """The server's process group SIGKILLed while vLLM's client waits: that cell is failed with the
    log's cause, and the next cell runs on a fresh server."""
    from eagle_fix.engine import lifecycle

    out = tmp_path / "m.ndjson"
    args = emap.MapArgs(
        profile="cpu-map-quick",
        out=out,
        contexts=(1024,),
        concurrencies=(1, 2),
        request_rates=(),
        arms=("eagle3",),
        rounds=1,
        launches=1,
        output_len=256,
        log_dir=tmp_path / "logs",
    )
    killed: list[int] = []

    def running(text: str) -> bool:
        """A request in flight on the server, by its own /metrics (a fixed sleep after the cell's mark
        raced a fast cell: it finished before the kill and was rightly 'ok')."""
        port = re.search(r"engine ready \(pid \d+, port (\d+)", text)
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{port.group(1)}/metrics", timeout=5).read()
        except OSError:
            return False
        gauge = re.search(rb"^vllm:num_requests_running\{[^}]*\} ([0-9.]+)", body, re.MULTILINE)
        return bool(gauge and float(gauge.group(1)) >= 1)

    def killer():
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not killed:
            for pgid in lifecycle.groups():
                log = next((tmp_path / "logs").glob("server-*-0.log"), None)
                text = log.read_text(errors="replace") if log else ""
                if " point " in text and running(text):  # inside the cell: the client waits for tokens
                    os.killpg(pgid, signal.SIGKILL)
                    killed.append(pgid)
                    return
            time.sleep(0.05)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    try:
        recs = emap.run_map(args)
    finally:
        lifecycle.uninstall_signal_handlers()
    t.join(5)
    assert killed
    first, second = recs
    assert first["status"] == "failed" and "server died during the cell" in first["error"]
    assert "killed by SIGKILL" in first["error"] and "log: " in first["error"]
    assert second["status"] == "ok" and second["server_restarts"] == 1
    assert second["server_log"] != first["server_log"]


class _FakeServer:
    """What measure() asks of a server, without vLLM: always up, no counters."""

    def __init__(self, log_path: Path):
        from eagle_fix.engine.spec import EngineSpec

        self.spec = EngineSpec(target="/models/t", draft=None, mode="eager", fix=None, max_model_len=2048)
        self.startup_s, self.args, self.log_path, self.pid = 1.0, ["--port", "1"], log_path, os.getpid()
        self.base_url = "http://127.0.0.1:1"
        log_path.write_text("")

    def reset_drafter_stats(self):
        return None

    def drafter_stats(self):
        return None, "fake"

    def mark(self, text):
        pass

    def metrics(self):
        return None

    def alive(self):
        return True

    def healthy(self, timeout_s=10.0):
        return True


def test_a_client_error_fails_its_cell_and_the_run_goes_on(tmp_path, monkeypatch):
    from eagle_fix.served import client

    class FakeServers:
        def __init__(self, grid, mode, log_dir, args, launch=0):
            log_dir.mkdir(parents=True, exist_ok=True)
            self.log_dir, self.restarts, self.srv = log_dir, {}, _FakeServer(log_dir / "server.log")
            self.launch = launch

        def get(self, arm, fix):
            return self.srv

        def close(self):
            pass

    outcomes = iter(
        [
            RuntimeError("Cannot connect to host 127.0.0.1:1"),
            {
                "completed": 1,
                "failed": 1,
                "errors": ["", "Traceback ...\nClientPayloadError: broken"],
                "output_throughput": 1.0,
            },
            {
                "completed": 4,
                "failed": 0,
                "errors": ["", "", "", ""],
                "output_throughput": 9.0,
                "median_tpot_ms": 2.0,
                "ttfts": [0.1] * 4,
            },
        ]
    )

    def fake_bench(argv, timeout_s):
        out = next(outcomes)
        if isinstance(out, Exception):
            raise out
        return out

    monkeypatch.setattr(emap, "Servers", FakeServers)
    monkeypatch.setattr(client, "run_bench", fake_bench)
    out = tmp_path / "m.ndjson"
    try:
        recs = emap.run_map(
            emap.MapArgs(
                out=out,
                contexts=(1024,),
                concurrencies=(1, 2, 4),
                request_rates=(),
                arms=("baseline",),
                rounds=1,
                launches=1,
                output_len=16,
            )
        )
    finally:
        from eagle_fix.engine import lifecycle

        lifecycle.uninstall_signal_handlers()
    assert [r["status"] for r in recs] == ["failed", "failed", "ok"]
    assert recs[0]["error"] == "client: RuntimeError: Cannot connect to host 127.0.0.1:1"
    assert recs[1]["error"].startswith("1 of 4 requests failed: ") and "ClientPayloadError: broken" in recs[1]["error"]
    assert len(map_summary.read_map(out)) == len(recs) == 3
    assert recs[2]["output_throughput"] == 9.0 and recs[2]["error"] is None
    assert "ttfts" not in recs[2] and "errors" not in recs[2]  # vLLM's per-request lists are dropped


def test_each_launch_starts_fresh_servers_and_alternates_which_starts_first(tmp_path, monkeypatch):
    """--launches 2 --rounds 2: a Servers per launch (fresh servers), every record names its launch, ABBA
    within a launch, shifted in the odd one so each arm's server starts first once; no prompt repeats."""
    from eagle_fix.engine import lifecycle
    from eagle_fix.served import client

    made = []

    class FakeServers:
        def __init__(self, grid, mode, log_dir, args, launch=0):
            log_dir.mkdir(parents=True, exist_ok=True)
            self.log_dir, self.restarts, self.launch = log_dir, {}, launch
            self.srv = _FakeServer(log_dir / f"server-{launch}.log")
            made.append(launch)

        def get(self, arm, fix):
            return self.srv

        def close(self):
            pass

    monkeypatch.setattr(emap, "Servers", FakeServers)
    monkeypatch.setattr(client, "run_bench", lambda argv, timeout_s: {"completed": 2, "output_throughput": 1.0})
    try:
        recs = emap.run_map(
            emap.MapArgs(contexts=(1024,), concurrencies=(1,), request_rates=(), rounds=2, launches=2, output_len=16)
        )
    finally:
        lifecycle.uninstall_signal_handlers()
    assert made == [0, 1]
    assert [(r["launch"], r["round"], r["arm"]) for r in recs] == [
        (0, 0, "baseline"),
        (0, 0, "eagle3"),
        (0, 1, "eagle3"),
        (0, 1, "baseline"),
        (1, 0, "eagle3"),
        (1, 0, "baseline"),
        (1, 1, "baseline"),
        (1, 1, "eagle3"),
    ]
    assert len({r["seed"] for r in recs}) == len(recs)
    assert emap.cell_seed(0, 2048, "c1", 1, "eagle3", "on", "eager") == emap.cell_seed(
        0, 2048, "c1", 1, "eagle3", "on", "eager", 0
    )  # launch 0 keeps the seeds of maps made before launches
