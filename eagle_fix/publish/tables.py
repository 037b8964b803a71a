"""Markdown tables of the records' points (summary, fix A/B, acceptance, roofline, noise, machines), and their cells."""

from __future__ import annotations

import math

from eagle_fix.core import acceptance, arms, record, settings, stats
from eagle_fix.publish.frame import GIB, sort_rows, with_machines, workload_columns

TABLE_COLUMNS = (
    ("context_len", "context", "{:.0f}"),
    ("mode", "mode", "{}"),
    ("arm", "arm", "{}"),
    ("fix", "fix", "{}"),
    ("status", "status", "{}"),
    ("runner", "runner", "{}"),
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


def format_cell(value, fmt: str, column: str) -> str:
    """One table cell: "–" for a missing number, bytes of memory columns in GiB, else the value in fmt."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if column.endswith("memory_bytes"):
        value = value / GIB
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def _runner(row) -> str:
    """The model runner, and whether acceptance was synthetic (gpu-dummy's random weights accept
    nothing, so the engine is told an acceptance rate: its acceptance numbers are not measured)."""
    runner = row.get("model_runner")
    text = runner if isinstance(runner, str) and runner else "–"
    return text + (" (synthetic acceptance)" if row.get("synthetic_acceptance") is True else "")


def markdown_table(df) -> str:
    """One GitHub-flavoured markdown table of the given rows, sorted by machine, workload and point;
    a machine column always, a workload column where the rows differ in it."""
    df = sort_rows(with_machines(df))
    columns = [*workload_columns(df), *TABLE_COLUMNS]
    head = [label for _, label, _ in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for _, row in df.iterrows():
        row = row.to_dict()
        row["runner"] = _runner(row)
        lines.append("| " + " | ".join(format_cell(row.get(c), fmt, c) for c, _, fmt in columns) + " |")
    return "\n".join(lines)


def fix_ab_table(df) -> str | None:
    """The fix A/B at a glance: acceptance length / drafter coverage per machine x fix arm x mode x
    context, or the failure's cause. None when the rows hold a single fix arm."""
    ab = with_machines(df[df["arm"].map(arms.takes_fix).astype(bool) & df["fix"].notna()])
    if ab["fix"].nunique() < 2:
        return None

    def cell(row) -> str:
        if row["status"] != "ok":
            return f"failed: {record.cause(row.get('error'), 100)}"
        cov = row.get("drafter_coverage")
        cov_text = "–" if cov is None or (isinstance(cov, float) and math.isnan(cov)) else f"{cov:.0%}"
        return f"{format_cell(row['acceptance_length'], '{:.2f}', 'acceptance_length')} / {cov_text}"

    lead = workload_columns(ab)
    ctxs = sorted(int(c) for c in ab["context_len"].unique())
    lines = [
        "| "
        + " | ".join(label for _, label, _ in lead)
        + " | fix | doctor | mode | "
        + " | ".join(f"{c}" for c in ctxs)
        + " |",
        "|" + "|".join("---" for _ in lead) + "|---|---|---|" + "|".join("---" for _ in ctxs) + "|",
    ]
    keys = [c for c, _, _ in lead] + ["fix", "mode"]
    for values, g in ab.astype({c: object for c, _, _ in lead}).groupby(keys, sort=True, dropna=False):
        by_ctx = {int(r["context_len"]): cell(r) for _, r in g.iterrows()}
        state = g["fix_state"].dropna().iloc[0] if "fix_state" in g and g["fix_state"].notna().any() else "–"
        head = [format_cell(v, fmt, c) for v, (c, _, fmt) in zip(values, lead)]
        fix, mode = values[-2:]
        lines.append(
            "| "
            + " | ".join(head)
            + f" | {fix} | {state} | {mode} | "
            + " | ".join(by_ctx.get(c, "–") for c in ctxs)
            + " |"
        )
    return "\n".join(lines)


def _ci(row, column: str, fmt: str, label: bool = False) -> str:
    """The number and its interval; `label`: followed by the interval's real coverage (median_label)."""
    value = row.get(column)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    text = fmt.format(value)
    iv = (row.get("ci95") or {}).get(column) if isinstance(row.get("ci95"), dict) else None
    if not iv:
        return text
    text = f"{text} [{fmt.format(iv[0])}, {fmt.format(iv[1])}]"
    return f"{text} {median_label(row, column)}" if label else text


def median_label(row, column: str) -> str:
    """What a record's interval of a median really covers: "95% ci" from 6 samples on, below that
    the samples' (min, max), "range, 75% cov" (1 - 2*0.5^n), so a heading never calls it 95%."""
    samples = row.get("samples") if isinstance(row.get("samples"), dict) else {}
    n = len(samples.get(column) or [])
    if n < 2 and isinstance(row.get("repeats"), (int, float)) and not math.isnan(row["repeats"]):
        n = int(row["repeats"])  # a record that kept no samples of this column: its repeats
    return stats.interval_label(stats.median_ci_coverage(n)) if n >= 2 else "interval of unknown coverage"


def _labelled_column(cells: list[str], labels: list[str | None], name: str) -> tuple[str, list[str]]:
    """A column of intervals under one heading: the heading names their coverage when every interval
    shares it ("decode tok/s [range, 93.75% cov]"), else each cell names its own. labels[i] is None
    where cell i has no interval."""
    seen = {x for x in labels if x is not None}
    if len(seen) <= 1:
        return f"{name} [{seen.pop() if seen else '95% ci'}]", cells
    return f"{name} [interval]", [f"{c} ({x})" if x else c for c, x in zip(cells, labels)]


def _lead(df, r) -> list[str]:
    """A row's machine cell and its cells of the workload columns the rows differ in."""
    return [format_cell(r.get(c), fmt, c) for c, _, fmt in workload_columns(df)]


def _lead_head(df) -> list[str]:
    return [label for _, label, _ in workload_columns(df)]


def md_table(head: list[str], rows: list[list[str]]) -> str:
    """A markdown table of the given heading and rows of cells."""
    return "\n".join(
        ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        + ["| " + " | ".join(r) + " |" for r in rows]
    )


def summary_table(df) -> str:
    """The headline table: decode throughput and acceptance with their 95% intervals where the
    records have samples (schema 2), coverage, speedup, TTFT, host memory."""
    df = with_machines(df)
    rows, labels = [], []
    for _, r in df.iterrows():
        r = r.to_dict()
        rows.append(
            [
                *_lead(df, r),
                f"{r['context_len']:.0f}",
                r["mode"],
                r["arm"]
                + (f" ({r['fix']})" if isinstance(r.get("fix"), str) and not arms.is_fix_on(r.get("fix")) else ""),
                _ci(r, "decode_throughput_tok_s", "{:.1f}"),
                _ci(r, "acceptance_length", "{:.2f}"),
                format_cell(r.get("drafter_coverage"), "{:.0%}", "drafter_coverage"),
                format_cell(r.get("speedup"), "{:.2f}x", "speedup"),
                format_cell(r.get("ttft_s"), "{:.1f}", "ttft_s"),
                format_cell(r.get("peak_host_memory_bytes"), "{:.2f}", "peak_host_memory_bytes"),
            ]
        )
        has_interval = "[" in rows[-1][len(_lead_head(df)) + 3]
        labels.append(median_label(r, "decode_throughput_tok_s") if has_interval else None)
    at = len(_lead_head(df)) + 3
    head, cells = _labelled_column([row[at] for row in rows], labels, "decode tok/s")
    for row, cell in zip(rows, cells):
        row[at] = cell
    # acceptance's interval is a count interval (Wilson, the draft as the unit): a real 95% at any size
    return md_table(
        [
            *_lead_head(df),
            "context",
            "mode",
            "arm",
            head,
            "accept len [95% ci]",
            "coverage",
            "speedup",
            "TTFT s",
            "host GiB",
        ],
        rows,
    )


def acceptance_table(df) -> str:
    """vLLM's counts behind acceptance: drafts, accepted tokens, the interval (drafts as the unit), and
    how far the point's output is from a loop (eagle_fix.core.acceptance.output_diversity)."""
    df = with_machines(df[df["arm"].map(arms.speculates).astype(bool)])
    rows = []
    for _, r in df.iterrows():
        r = r.to_dict()
        ppa = r.get("per_position_acceptance")
        per = " / ".join(f"{x:.2f}" for x in ppa) if isinstance(ppa, list) and ppa else "–"
        rows.append(
            [
                *_lead(df, r),
                f"{r['context_len']:.0f}",
                r["mode"],
                str(r.get("fix") or "–"),
                r["status"],
                format_cell(r.get("num_drafts"), "{:.0f}", "n"),
                format_cell(r.get("num_accepted_tokens"), "{:.0f}", "n"),
                _ci(r, "acceptance_length", "{:.2f}"),
                per,
                format_cell(r.get("drafter_coverage"), "{:.0%}", "c"),
                format_cell(acceptance.output_diversity(r), "{:.2f}", "o"),
            ]
        )
    return md_table(
        [
            *_lead_head(df),
            "context",
            "mode",
            "fix",
            "status",
            "drafts",
            "accepted",
            "acceptance length [95% ci]",
            "per position",
            "coverage",
            "output distinct 4-grams",
        ],
        rows,
    )


def roofline_table(df) -> str:
    """Where each point stands against the limits measured in the same run (eagle_fix.machine.roofline)."""
    df = with_machines(df)
    rows = []
    for _, r in df.iterrows():
        r = r.to_dict()
        lim = r.get("limits") if isinstance(r.get("limits"), dict) else {}
        # the roofline holds EAGLE3's speculative step and the plain one; another method has neither
        sol = r.get("sol_decode_tok_s_eagle3") if arms.is_eagle3(r["arm"]) else None
        sol = r.get("sol_decode_tok_s_baseline") if arms.is_baseline(r["arm"]) else sol
        rows.append(
            [
                *_lead(df, r),
                f"{r['context_len']:.0f}",
                r["mode"],
                r["arm"],
                format_cell(r.get("ttft_s"), "{:.2f}", "t"),
                format_cell(r.get("prefill_pct_of_peak_flops"), "{:.1f}%", "p"),
                format_cell(r.get("decode_throughput_tok_s"), "{:.1f}", "d"),
                format_cell(r.get("decode_pct_of_bandwidth"), "{:.1f}%", "b"),
                format_cell(sol, "{:.0f}", "s"),
                format_cell((lim.get("matmul_gflops") or {}).get("bf16"), "{:.0f}", "g"),
                format_cell(lim.get("bandwidth_gbs"), "{:.1f}", "w"),
            ]
        )
    return md_table(
        [
            *_lead_head(df),
            "context",
            "mode",
            "arm",
            "TTFT s",
            "prefill % of peak",
            "decode tok/s",
            "decode % of bandwidth",
            "speed-of-light tok/s",
            "bf16 GFLOP/s",
            "GB/s",
        ],
        rows,
    )


def noise_table(df) -> str:
    """How much a point's decode samples scatter, per way of timing them: the wall-clock span of a
    sample (decode throughput) and the median of its engine steps (step_ms), from the same samples."""
    df = with_machines(df)
    rows, labels, both = [], [], []
    for _, r in df.iterrows():
        r = r.to_dict()
        samples = r.get("samples") if isinstance(r.get("samples"), dict) else {}
        decode = samples.get("decode_throughput_tok_s") or []
        decode_cv, step_cv = stats.cv(decode), stats.cv(samples.get("step_ms") or [])
        if decode_cv is not None and step_cv is not None:
            both.append((decode_cv, step_cv))
        rows.append(
            [
                *_lead(df, r),
                f"{r['context_len']:.0f}",
                r["mode"],
                r["arm"],
                str(len(decode) or "–"),
                format_cell(decode_cv, "{:.1%}", "cv"),
                format_cell(step_cv, "{:.1%}", "cv"),
                _ci(r, "step_ms", "{:.2f}"),
            ]
        )
        labels.append(median_label(r, "step_ms") if "[" in rows[-1][-1] else None)
    head, cells = _labelled_column([row[-1] for row in rows], labels, "step ms")
    for row, cell in zip(rows, cells):
        row[-1] = cell
    table = md_table(
        [
            *_lead_head(df),
            "context",
            "mode",
            "arm",
            "samples",
            "CV of decode tok/s (wall clock)",
            "CV of step ms (median engine step)",
            head,
        ],
        rows,
    )
    if len(both) < 2:
        return table
    wall, step = stats.median([w for w, _ in both]), stats.median([s for _, s in both])
    lower = sum(s < w for w, s in both)
    return (
        f"{table}\n\nOver the {len(both)} points timed both ways: median CV {wall:.1%} by the wall clock, "
        f"{step:.1%} by the engine step; the step's CV is the lower in {lower} of {len(both)}."
    )


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
        rows.append(
            [
                fp.get("name", "?"),
                fp["id"],
                str(cpu.get("model_name", "–")),
                f"{cpu.get('family')}/{cpu.get('model')}/{cpu.get('stepping')}",
                " ".join(cpu.get("flags") or []) or "–",
                str(cpu.get("cores", "–")),
                format_cell(cpu.get("memory_total_bytes"), "{:.1f}", "memory_bytes"),
                format_cell(lim.get("threads"), "{:.0f}", "n"),
                format_cell(mm.get("bf16"), "{:.0f}", "g"),
                format_cell(mm.get("fp32"), "{:.0f}", "g"),
                format_cell(lim.get("bandwidth_gbs"), "{:.1f}", "w"),
                "yes" if lim.get("contended") else "no",
            ]
        )
    return md_table(
        [
            "machine",
            "id",
            "CPU",
            "family/model/stepping",
            "flags",
            "cores",
            "GiB",
            "threads",
            "bf16 GFLOP/s",
            "fp32 GFLOP/s",
            "copy GB/s",
            "contended",
        ],
        rows,
    )


def settings_table(paths=()) -> str:
    """The environment variables the suite reads, from their one declaration (eagle_fix.core.settings): the
    docs' list is generated, never written by hand. `paths` is unused (a table kind like the others)."""
    kinds = {"user": "", "calibration": "test-only: ", "internal": "set by the suite: "}
    rows = [
        [f"`{s.name}`", kinds[s.kind] + s.meaning, s.default, s.read_by]
        for kind in kinds
        for s in settings.SETTINGS
        if s.kind == kind
    ]
    return md_table(["variable", "what it does", "unset", "read by"], rows)
