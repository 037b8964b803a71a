"""The report's matplotlib plots: one line per series against context, small multiples past 8 lines, the map's heatmap."""

from __future__ import annotations

import math
from pathlib import Path

from eagle_fix.core import record
from eagle_fix.core.arms import speculates
from eagle_fix.publish.frame import GIB, with_machines
from eagle_fix.served.summary import parse_load, summarize

# name, title, y label, column(s), arms drawn
PLOTS = (
    (
        "throughput",
        "Output throughput (end to end: prefill included)",
        "output tokens/s",
        "output_throughput_tok_s",
        ("eagle3", "baseline"),
    ),
    (
        "decode_throughput",
        (
            "Decode throughput (after the first token), median and its interval (95%, or the "
            "samples' range below 6 samples: 1 - 2*0.5^n)"
        ),
        "tokens/s",
        "decode_throughput_tok_s",
        ("eagle3", "baseline"),
    ),
    (
        "acceptance_length",
        "Acceptance length (1 + accepted / drafts), 95% count interval",
        "tokens per step",
        "acceptance_length",
        ("eagle3",),
    ),
    (
        "roofline",
        "Decode traffic as % of the measured memory bandwidth",
        "% of bandwidth",
        "decode_pct_of_bandwidth",
        ("eagle3", "baseline"),
    ),
    ("drafter_coverage", "Drafter coverage (share of steps that drafted)", "fraction", "drafter_coverage", ("eagle3",)),
    # kv: the KV cache the point's context holds (vLLM's usage x the cache), beside the peaks of the whole engine,
    # whose KV cache is reserved up front for the longest context and so is flat across contexts
    (
        "memory",
        "Peak memory (kv: the KV cache in use at the point's context)",
        "GiB",
        ("peak_gpu_memory_bytes", "peak_host_memory_bytes", "peak_kv_memory_bytes"),
        ("eagle3", "baseline"),
    ),
)


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
FACETS = (
    ("machine_id", "output_len", "batch_size"),
    ("mode",),
    ("vllm_version",),
    ("fix",),
    ("num_speculative_tokens",),
)
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
        key = {
            k: record.plain(v) if not (isinstance(v, float) and math.isnan(v)) else None for k, v in zip(SERIES, values)
        }
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
        dims += [
            d for d in facet if len({s[d] for s in series if d != "num_speculative_tokens" or speculates(s["arm"])}) > 1
        ]
    return dims


def _describe(s: dict, dims) -> str:
    words = {
        "machine_id": s["machine_name"],
        "output_len": f"{s['output_len']} out" if s["output_len"] else "out ?",
        "num_speculative_tokens": f"k={s['num_speculative_tokens']}" if s["num_speculative_tokens"] else None,
        "batch_size": f"batch {s['batch_size']}",
        "vllm_version": f"vLLM {s['vllm_version']}",
        "arm": s["arm"],
        "mode": s["mode"],
        "fix": f"fix {s['fix']}" if s["fix"] else None,
        "column": s["column"].split("_")[1] if s.get("column") else None,
    }
    return ", ".join(w for d in dims if (w := words.get(d)))


def plot_figure(df, title: str, ylabel: str, columns, arms):
    """The matplotlib figure of one plot, or None when no row has the number. Each line's gid is its
    series key (machine fingerprint, workload, release, arm, mode, fix, column) joined by '|'."""
    # matplotlib here, not at the top: `eagle-fix --help` imports this module and stays fast
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
        cut += [(key, members[i : i + MAX_SERIES]) for i in range(0, len(members), MAX_SERIES)]
    dims = [*SERIES, *(["column"] if len(columns) > 1 else [])]

    def values(d):  # k is the EAGLE3 arm's; the baseline's None is no second value
        return {s.get(d) for s in series if d != "num_speculative_tokens" or speculates(s["arm"])}

    varying = [d for d in dims if d not in facet and len(values(d)) > 1]
    shared = [d for d in dims if d not in facet and d not in varying]
    # one colour per line apart from its arm (the arm is the line style, the mode the marker)
    colour_keys = sorted({tuple(str(s.get(d)) for d in varying if d != "arm") for s in series})
    cmap = plt.get_cmap("tab10" if len(colour_keys) <= 10 else "tab20")
    colour = {k: cmap(i % cmap.N) for i, k in enumerate(colour_keys)}

    ncols = 1 if len(cut) == 1 else 2
    nrows = math.ceil(len(cut) / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(7.5 * ncols, 4.2 * nrows + 1.2), squeeze=False, layout="constrained"
    )
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
            cont = ax.errorbar(
                g["context_len"].astype(float),
                ys,
                yerr=err,
                capsize=3,
                marker=MODE_MARKER.get(s["mode"], "^"),
                linestyle=ARM_STYLE.get(s["arm"], ":"),
                color=colour[tuple(str(s.get(d)) for d in varying if d != "arm")],
                label=label,
            )
            cont.lines[0].set_gid("|".join(str(s.get(d)) for d in [*SERIES, "column"]))
            handles.setdefault(label, cont)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ctxs, [f"{c / 1024:g}K" for c in ctxs])
        ax.set_xlabel("context length (tokens, log2)")
        ax.set_ylabel(ylabel)
        if facet:
            ax.set_title(_describe(members[0], facet), fontsize=9)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(cut) :]:
        ax.set_visible(False)
    common = _describe(series[0], shared)
    fig.suptitle(title + (f"\n{common}" if common else "") + _graphs_note(df, columns), fontsize=10)
    # below the axes, never over the data
    widest = max(len(label) for label in handles)
    fig.legend(
        list(handles.values()),
        list(handles),
        loc="outside lower center",
        fontsize=7,
        ncol=max(1, min(3, len(handles), (110 * ncols) // (widest + 8))),
        frameon=False,
    )
    return fig


def _graphs_note(df, columns) -> str:
    """Under a GPU memory plot whose compiled points captured CUDA graphs: their peaks are not comparable with
    the eager ones (graph replays allocate nothing; the record's gpu_peak_comparable_across_modes)."""
    if "peak_gpu_memory_bytes" not in columns or "gpu_peak_comparable_across_modes" not in df:
        return ""
    apart = df[df["gpu_peak_comparable_across_modes"].astype(object).eq(False)]
    if apart.empty:
        return ""
    graphs = ", ".join(sorted({str(m) for m in apart["cudagraph_mode"].dropna()})) or "on"
    return f"\ncompiled GPU peaks with CUDA graphs ({graphs}) are not comparable with eager ones"


def save_plot(df, out: Path, name: str, title: str, ylabel: str, columns, arms) -> Path | None:
    """One plot of PLOTS as out/<name>.png; None when no row has the number."""
    # matplotlib here, not at the top: `eagle-fix --help` imports this module and stays fast
    import matplotlib.pyplot as plt

    fig = plot_figure(df, title, ylabel, columns, arms)
    if fig is None:
        return None
    path = out / f"{name}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def map_heatmap(records: list[dict], out: Path) -> Path | None:
    """Context x concurrency heatmap of the paired EAGLE3 / baseline output-throughput ratio (its estimate,
    its interval written in each cell), one panel per mode and fix; None without a ratio to draw."""
    # matplotlib here, not at the top: `eagle-fix --help` imports this module and stays fast
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    summary = [c for c in summarize(records) if not parse_load(c["load"])[1]]
    panels = sorted({(c["mode"], str(c["fix"])) for c in summary})
    if not any(c["throughput_ratio"]["ratio"] is not None for c in summary):
        return None
    contexts = sorted({c["context_len"] for c in summary})
    concs = sorted({parse_load(c["load"])[0] for c in summary})
    meds = [c["throughput_ratio"]["ratio"] for c in summary if c["throughput_ratio"]["ratio"] is not None]
    spread = max(abs(m - 1.0) for m in meds) or 0.1
    norm = TwoSlopeNorm(vcenter=1.0, vmin=1.0 - spread * 1.05, vmax=1.0 + spread * 1.05)
    fig, axes = plt.subplots(
        1,
        len(panels),
        figsize=(1.6 + 1.5 * len(concs) * len(panels), 1.4 + 0.9 * len(contexts)),
        squeeze=False,
        layout="constrained",
    )
    for ax, (mode, fix) in zip(axes[0], panels):
        grid = [[math.nan] * len(concs) for _ in contexts]
        for c in summary:
            if (c["mode"], str(c["fix"])) != (mode, fix) or c["throughput_ratio"]["ratio"] is None:
                continue
            i, j = contexts.index(c["context_len"]), concs.index(parse_load(c["load"])[0])
            s = c["throughput_ratio"]
            grid[i][j] = s["ratio"]
            text = f"{s['ratio']:.2f}" + (f"\n[{s['ci95'][0]:.2f}, {s['ci95'][1]:.2f}]" if s["ci95"] else "")
            ax.text(j, i, text, ha="center", va="center", fontsize=8)
        image = ax.imshow(grid, cmap="RdBu", norm=norm, aspect="auto", origin="lower")
        ax.set_xticks(range(len(concs)), [str(c) for c in concs])
        ax.set_yticks(range(len(contexts)), [str(c) for c in contexts])
        ax.set_xlabel("max concurrency")
        ax.set_ylabel("context (tokens)")
        ax.set_title(f"{mode}, fix {fix}", fontsize=9)
    fig.colorbar(image, ax=list(axes[0]), label="EAGLE3 / baseline output throughput")
    fig.suptitle(
        "Served throughput ratio (paired rounds, [interval over launches]); below 1: speculation costs", fontsize=9
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
