"""`eagle-fix report`: markdown tables and PNG plots per profile from asv results and run JSON lines."""

from __future__ import annotations

import argparse
import html
import math
from pathlib import Path

from eagle_fix.errors import EagleFixError
from eagle_fix import record
from eagle_fix.results import load_results

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
    ("decode_throughput", "Decode throughput (after the first token)", "tokens/s", "decode_throughput_tok_s",
     ("eagle3", "baseline")),
    ("acceptance_length", "Acceptance length (1 + accepted / drafts)", "tokens per step", "acceptance_length", ("eagle3",)),
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
        df.loc[need, "speedup"] = [record.speedup(rec, baselines.get(key(rec))) for rec in df[need].to_dict("records")]
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
            error = str(row.get("error") or "")
            cause = error.split("cause: ", 1)[1].split(";")[0] if "cause: " in error else error.splitlines()[0][:60]
            return f"failed: {cause}"
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
            ax.plot(g["context_len"], ys, marker="o" if mode == "compile" else "s",
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


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="*", metavar="RESULTS", default=["results"],
                        help="`eagle-fix run` .jsonl files, asv results .json files, or folders (default: results/)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: %(default)s)")


def cli_main(args: argparse.Namespace) -> int:
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
