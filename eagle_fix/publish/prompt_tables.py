"""Points measured over several held-out prompts (`eagle-fix run --prompts N`) as the docs' table: acceptance with
the prompt as the unit and the outputs' realism, so a claim about "8 prompts at 8K" is read from the records."""

from __future__ import annotations

import statistics
from pathlib import Path

from scipy import stats as st

from eagle_fix.core import record
from eagle_fix.core.errors import EagleFixError
from eagle_fix.publish.tables import md_table

CONFIDENCE = 0.95


def mean_interval(values: list[float]) -> tuple[float, float, float] | None:
    """Mean and its t interval (n - 1 degrees of freedom), the prompt as the unit; None below two values."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    low, high = st.t.interval(CONFIDENCE, len(values) - 1, loc=mean, scale=st.sem(values))
    return mean, float(low), float(high)


def _median(entries: list[dict], key: str) -> str:
    vals = [e[key] for e in entries if isinstance(e.get(key), (int, float))]
    return f"{statistics.median(vals):.2f} ({len(vals)})" if vals else "–"


def prompts_table(paths: list[Path]) -> str:
    """One row per point that ran more than one prompt: how many, the acceptance length's mean over prompts with
    its 95% t interval, its range, and the median distinct 4-grams of the outputs (every token; before the first
    end-of-sequence where the record scores so), each with the count of prompts it is over."""
    rows = []
    for path in paths:
        for r in record.read(Path(path)):
            entries = r.get("prompts") or []
            if len(entries) < 2:
                continue
            acc = [e["acceptance_length"] for e in entries if isinstance(e.get("acceptance_length"), (int, float))]
            ci = mean_interval(acc)
            rows.append([
                r.get("machine_name") or r.get("machine_id") or "–", str(r["context_len"]), r["mode"], r["arm"], f"{r.get('temperature') or 0:g}",
                str(len(entries)) + (" (stopped)" if r.get("prompts_error") else ""),
                f"{ci[0]:.2f} [{ci[1]:.2f}, {ci[2]:.2f}]" if ci else "–",
                f"{min(acc):.2f}-{max(acc):.2f}" if acc else "–",
                _median(entries, "output_distinct_4grams"), _median(entries, "output_distinct_4grams_before_eos"),
            ])  # fmt: skip
    if not rows:
        raise EagleFixError(f"--table prompts: {' '.join(map(str, paths))} holds no point run with --prompts above 1")
    head = ["machine", "context", "mode", "arm", "T", "prompts", "acceptance length, mean [95% t ci]", "range",
            "distinct 4-grams, median (n)", "before EOS, median (n)"]  # fmt: skip
    return md_table(head, rows)
