"""The report's first screen (and scripts/bench.sh's last words): the answers of eagle_fix.publish.answers in a
few lines, each with the file it comes from, the real target's first."""

from __future__ import annotations

from pathlib import Path

from eagle_fix.publish import break_even as to_pay
from eagle_fix.publish.answers import (
    CEILING,
    REALISTIC,
    constant_lines,
    fix_abs,
    gate_lines,
    headline,
    interval_note,
    kilo,
    md_table,
    real_headline,
    real_target,
    regime_figures,
    regime_rows,
    regimes,
    served,
    span,
)


def summary_markdown(results: Path, machine: str, *, root: Path | None = None) -> list[str]:
    """The report's first screen: the answers in a few lines, each with the file it comes from."""
    root = root or results.parent

    def rel(p: str | Path) -> str:
        try:
            return str(Path(p).resolve().relative_to(root.resolve()))
        except ValueError:
            return str(p)

    md = ["## Summary", ""]
    real = real_target(results)
    if real:
        files = ", ".join(f"`{rel(f)}`" for f in real["files"])
        md += [f"**{real_headline(real)}** ({files})", ""]
    groups = regimes(results)
    realistic = [g for g in groups if g["cells"][REALISTIC]]
    if realistic:
        g = realistic[0]
        md += [f"**{headline(g)}**", ""]
    else:
        md += ["**Realistic regime (chat pair, workload `chat`): not measured in these results.**", ""]
    abs_ = fix_abs(results)
    for ab in abs_:
        md += [
            f"- **Fix A/B** (newest: `{ab['machine']}`, {ab['engine']}, {ab['workload']}, "
            f"{'/'.join(map(kilo, ab['contexts']))}; "
            f"`{rel(ab['file'])}`), past the draft's 2048 positions: " + "; ".join(ab["arms"]) + "."
        ]
    if not abs_:
        md += ["- **Fix A/B**: none in these results (`EAGLE_FIX_ASV_FIX=off scripts/bench.sh` runs one)."]
    for g in realistic:
        head, rows = regime_rows(g)
        files = [rel(f) for w in (REALISTIC, CEILING) for f in g["files"][w]]
        md += [
            f"- **Speedup and acceptance per context** on `{g['machine']}`, {g['engine']} (greedy, fix on; "
            f"{interval_note(g)}; "
            + ", ".join(f"`{f}`" for f in files[:3])
            + (f" and {len(files) - 3} more" if len(files) > 3 else "")
            + "):",
            "",
            md_table(head, rows),
            "",
        ]
        md += [f"  {line}." for line in constant_lines(g)]
    others = [g for g in groups if not g["cells"][REALISTIC]]
    if others:
        md.append(
            "- **Best case only** (copy workload, no realistic run): "
            + "; ".join(f"`{g['machine']}` {span(regime_figures(g, CEILING)['speedup'])}" for g in others)
            + " (tables below)."
        )
    maps = served(results)
    if maps:
        md.append(
            "- **Served break-even** (where EAGLE3's served output throughput falls below the baseline's, whole interval):"
        )
        md += [f"  - `{m['workload']}` on `{m['machine']}`: {m['line']} (`{rel(m['file'])}`)" for m in maps]
    else:
        md.append("- **Served break-even**: no `eagle-fix map` file in these results.")
    md += to_pay.summary(results, [g["machine"] for g in realistic] or None)
    md += [f"- **The gate on this machine** (`{machine}`, `results/gate/`): what `eagle-fix ab` would run per point:"]
    md += ["  - " + line for line in gate_lines(machine)]
    md.append("")
    return md
