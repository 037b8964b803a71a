"""An `eagle-fix ab` result: each point's verdicts from its paired rounds (eagle_fix.gate.verdict's rules),
the file's summary and exit code, its table, and reading a committed file back (the calibration and the
report read them)."""

from __future__ import annotations

import json
import math
import os
import statistics
from pathlib import Path
from typing import Any

from eagle_fix.core import acceptance, metrics, nested, record, stats
from eagle_fix.core.errors import EagleFixError
from eagle_fix.core.point import Point
from eagle_fix.gate import acceptance_power, verdict

# Metrics judged on the paired rounds: (record column, higher is better).
PAIRED = tuple((m, metrics.METRIC[m].higher_is_better) for m in verdict.PAIRED)
DEFAULT_ALPHA = verdict.DEFAULT_ALPHA


def verdicts(
    entry: dict[str, Any],
    threshold: float,
    *,
    k: int | None,
    alpha: float = DEFAULT_ALPHA,
    synthetic: bool = False,
    launch: dict[str, Any] | None = None,
    final: bool = True,
    acceptance_alpha: float | None = None,
) -> dict[str, Any]:
    """Every metric of one point, judged by eagle_fix.gate.verdict on the rounds both sides measured;
    `synthetic`: the profile set acceptance (vLLM's synthetic sampler), so it is shown, not judged.
    `launch`: the launch-level test's settings ({"sigma": {metric: sd or None}, "sigma_round": {...},
    "source": words, "alpha_look": level of one look}); without it (files before schema 6) the sign test
    over the rounds, which counts the rounds of one launch as independent (kept to re-read old files).
    One speed metric is gated (gated_metric); the others are shown. `acceptance_alpha`: the acceptance test's
    level (its share of the run's alpha; default `alpha`)."""
    status = entry["status"]
    failed = verdict.status(status.get("base", "ok") == "ok", status.get("new", "ok") == "ok")  # mid-point: ok so far
    if failed is not None:
        return {"status": {"verdict": failed.verdict}}
    pairs = [p for p in entry["pairs"] if "base" in p and "new" in p]
    gated = gated_metric(entry)
    out: dict[str, Any] = {}
    for metric, _ in PAIRED:
        if pairs and not any(p["base"].get(metric) is not None or p["new"].get(metric) is not None for p in pairs):
            continue  # measured by neither side (an engine or checkout without it): no row, as in compare
        b = [p["base"][metric] for p in pairs if p["base"].get(metric) and p["new"].get(metric)]
        n = [p["new"][metric] for p in pairs if p["base"].get(metric) and p["new"].get(metric)]
        if launch is not None:
            v = verdict.launches(
                nested.blocks_of(pairs, metric),
                metric=metric,
                sigma_launch=(launch.get("sigma") or {}).get(metric),
                sigma_round=(launch.get("sigma_round") or {}).get(metric),
                source=launch.get("source", ""),
                threshold=threshold,
                alpha_look=launch.get("alpha_look", alpha),
                final=final,
                curve=launch.get("curve"),
            )
        else:
            v = verdict.noisy(b, n, metric=metric, threshold=threshold, alpha=alpha, paired=True)
        why = verdict.ungated_why((entry.get("clocks") or {}).get(metric))
        if why is None and metric != gated:
            why = f"{verdict.SHOWN} (the gated speed metric is {gated or 'none here'})"
        if why is not None:  # its change shown, no claim
            v = verdict.shown_only(v, why)
        out[metric] = {
            **v.detail,
            "verdict": v.verdict,
            "change": v.change,
            "evidence": v.evidence,
            "power": v.power,
            "base_median": stats.median(b),
            "new_median": stats.median(n),
            "ratios": stats.paired_ratios(b, n),
        }
        means = launch_means(pairs, metric) if launch is not None else None
        if means is not None:  # the columns of the estimator the test judges: new_mean / base_mean - 1 is the change
            out[metric]["base_mean"], out[metric]["new_mean"] = means
        # what each start order gave on its own: on identical sides the two should straddle 1
        by_start = ratios_by_start_order(pairs, metric)
        if by_start:
            out[metric]["median_ratio_by_start_order"] = {
                f"{first}_started_first": stats.median(rs) for first, rs in by_start.items()
            }
    first = entry["pairs"][0] if entry["pairs"] else {}
    fb, fn = first.get("base") or {}, first.get("new") or {}
    if synthetic and fb.get("acceptance_length") is not None:
        v = verdict.synthetic_acceptance()
        out["acceptance_length"] = {
            "verdict": v.verdict,
            "base": fb["acceptance_length"],
            "new": fn.get("acceptance_length"),
            "evidence": v.evidence,
            "power": v.power,
        }
    elif fb.get("num_drafts") and fn.get("num_drafts"):
        a = alpha if acceptance_alpha is None else acceptance_alpha
        prompts = [first, *(entry.get("acceptance_prompts") or [])]
        if len(prompts) > 1:  # greedy: the prompt is the unit (schema 8)
            b = [(q.get("base") or {}).get("acceptance_length") for q in prompts]
            n = [(q.get("new") or {}).get("acceptance_length") for q in prompts]
            v = verdict.acceptance_over_prompts(b, n, alpha=a)
            bn = [(x, y) for x, y in zip(b, n) if x and y]
            base_len = statistics.geometric_mean([x for x, _ in bn]) if bn else fb["acceptance_length"]
            new_len = statistics.geometric_mean([y for _, y in bn]) if bn else fn["acceptance_length"]
        else:  # one prompt a side (files before schema 8, sampled points): vLLM's counts
            v = acceptance_power.judged(fb, fn, entry.get("identity") or {}, k=k or 1, alpha=a)  # as compare
            base_len, new_len = fb["acceptance_length"], fn["acceptance_length"]
        out["acceptance_length"] = {
            **{key: v.detail[key] for key in ("prompts", "df", "threshold", "ci95") if key in v.detail},
            "verdict": v.verdict,
            "p": v.detail.get("p"),
            "change": v.change,
            "base": base_len,
            "new": new_len,
            "evidence": v.evidence,
            "power": v.power,
        }
        shares = (fb.get("output_distinct_4grams"), fn.get("output_distinct_4grams"))
        if any(acceptance.is_loop(x) for x in shares):  # a loop's acceptance may hide a partial drafter loss
            out["acceptance_length"]["loop"] = acceptance.loop_line(point_words(entry.get("identity") or {}), *shares)
    cb, cn = fb.get("drafter_coverage"), fn.get("drafter_coverage")
    if (synthetic or (fb.get("num_drafts") and fn.get("num_drafts"))) and cb is not None and cn is not None:
        v = verdict.exact(cb, cn, higher_is_better=True)
        out["drafter_coverage"] = {"verdict": v.verdict, "base": cb, "new": cn, "power": v.power}
    return out


def gated_metric(entry: dict[str, Any]) -> str | None:
    """The point's one gated speed metric (verdict.gated_speed): step_ms where both sides measured it in some
    round on a clock that carries a verdict, else TPOT."""
    pairs = [p for p in entry.get("pairs") or [] if "base" in p and "new" in p]

    def measured(m: str) -> bool:
        return any(p["base"].get(m) and p["new"].get(m) for p in pairs)

    return verdict.gated_speed(measured, entry.get("clocks"))


def launch_means(pairs: list[dict[str, Any]], metric: str) -> tuple[float, float] | None:
    """Each side's geometric mean over the launch pairs (each pair's rounds averaged in logs first), from the
    rounds both sides measured: the ratio of the two is exactly the launch test's estimate (the mean of the
    blocks' mean log ratios, eagle_fix.core.nested.blocks_of), so the table's columns cannot disagree in sign."""
    grouped: dict[int, list[tuple[float, float]]] = {}
    for p in pairs:
        b, n = (p.get("base") or {}).get(metric), (p.get("new") or {}).get(metric)
        if b and n and b > 0 and n > 0:
            grouped.setdefault(int(p.get("block") or 0), []).append((math.log(b), math.log(n)))
    if not grouped:
        return None
    lb = statistics.fmean(statistics.fmean(x for x, _ in g) for g in grouped.values())
    ln = statistics.fmean(statistics.fmean(y for _, y in g) for g in grouped.values())
    return math.exp(lb), math.exp(ln)


def family_sizes(points: list[dict[str, Any]], *, synthetic: bool) -> dict[str, int]:
    """How many tests each question holds in a run of POINTS (identities): one gated speed row a point, one
    acceptance row a drafted point (none where the profile sets acceptance). The Bonferroni share alpha / size
    is what a point is judged at while it runs (its looks split it further); Holm at the end can only add."""
    drafted = sum(1 for d in points if d.get("num_speculative_tokens"))
    return {"speed": max(1, len(points)), "acceptance": max(1, 0 if synthetic else drafted)}


def apply_family(result: dict[str, Any]) -> dict[str, Any]:
    """Holm over each question's rows of a whole run (verdict.FAMILY_RULE) at the run's alpha: the gated speed
    row of every point, entering with min(1, looks * p) (alpha spent evenly over its plan's looks, so a point
    stopped early at alpha / (tests * looks) is always kept), and the acceptance row of every drafted point.
    A row is a regression only where Holm rejects it and its change is beyond the threshold (acceptance: any
    drop). Each row records its family; returns the file's `family` summary."""
    alpha, threshold = result.get("alpha", DEFAULT_ALPHA), result["threshold"]
    rows: dict[str, list[tuple[dict[str, Any], float, bool]]] = {"speed": [], "acceptance": []}
    for entry in result["points"]:
        gated = entry.get("gated_metric")
        v = entry["verdicts"].get(gated) if gated else None
        if v is not None and v.get("p") is not None:
            looks = int((entry.get("design") or {}).get("looks") or 1)
            rows["speed"].append((v, min(1.0, looks * v["p"]), metrics.METRIC[gated].higher_is_better))
        a = entry["verdicts"].get("acceptance_length")
        if a is not None and a.get("p") is not None:
            rows["acceptance"].append((a, a["p"], True))
    out = {}
    for question, items in rows.items():
        reject, adjusted = verdict.holm([p for _, p, _ in items], alpha)
        for (v, p, higher_is_better), r, adj in zip(items, reject, adjusted):
            v["verdict"] = verdict.family_verdict(
                v["verdict"],
                reject=r,
                change=v.get("change"),
                threshold=threshold if question == "speed" else v.get("threshold", 0.0),
                higher_is_better=higher_is_better,
            )
            v["family"] = {"question": question, "tests": len(items), "p_looks": p, "p_holm": adj, "rejected": r}
            if len(items) > 1:
                v["evidence"] = f"{v.get('evidence', '')}; Holm over {len(items)} points: {verdict.p_text(adj)}"
        out[question] = {"rule": verdict.FAMILY_RULE, "alpha": alpha, "tests": len(items), "rejected": sum(reject)}
    return out


def ratios_by_start_order(
    pairs: list[dict[str, Any]], metric: str, file_order: list[str] | None = None
) -> dict[str, list[float]]:
    """The paired ratios new/base of `metric`, by which side's engine was started first ("base" or
    "new"): each pair's own `start_order`, else `file_order` (files before blocks had one per file)."""
    out: dict[str, list[float]] = {}
    for p in pairs:
        b, n = (p.get("base") or {}).get(metric), (p.get("new") or {}).get(metric)
        first = (p.get("start_order") or file_order or [None])[0]
        if b and n and first:
            out.setdefault(first, []).append(n / b)
    return out


def summary(result: dict[str, Any], *, strict: bool) -> dict[str, Any]:
    bad = verdict.failing(strict)
    counts: dict[str, int] = {}
    failing = []
    for entry in result["points"]:
        for metric, v in entry["verdicts"].items():
            counts[v["verdict"]] = counts.get(v["verdict"], 0) + 1
            if v["verdict"] in bad:
                failing.append(f"{record.describe(record.key(entry['identity']))} {metric}: {v['verdict']}")
    return {"counts": counts, "failing": failing, "exit_code": 1 if failing else 0}


def _as_verdict(v: dict[str, Any]) -> verdict.Verdict:
    """A stored verdict back as eagle_fix.gate.verdict's (files of schema 1 lack the power fields)."""
    return verdict.Verdict(
        v["verdict"],
        v.get("change"),
        v.get("evidence", ""),
        v.get("power", ""),
        v.get("detectable"),
        speed="base_median" in v and "power" in v and v["verdict"] != verdict.NOT_GATED,
    )


def point_words(d: dict[str, Any]) -> str:
    """A point's identity in ab's words (eagle_fix.core.point)."""
    return Point.of(d).words()


def format_ab(result: dict[str, Any], *, strict: bool = False) -> str:
    """The table of eagle_fix.gate.verdict (medians of the rounds, the median ratio's change), and a summary."""
    rows = []
    judged = []
    for entry in result["points"]:
        d = entry["identity"]
        for metric, v in entry["verdicts"].items():
            if "base_mean" in v:  # the launch test's estimator in all three columns (schema 7)
                b, n = verdict.number_cell(v["base_mean"]), verdict.number_cell(v["new_mean"])
                evidence = v.get("evidence")
            elif "base_median" in v:  # files before schema 7: the rounds' medians beside the test's change
                b, n = verdict.number_cell(v["base_median"]), verdict.number_cell(v["new_median"])
                evidence = v.get("evidence")
                if evidence is None:  # a file of schema 1: its interval, labelled with its real coverage
                    ci = v.get("ci95")
                    evidence = f"[{ci[0]:+.1%}, {ci[1]:+.1%}] {stats.interval_label(v.get('coverage'))}" if ci else ""
            else:
                b, n = verdict.number_cell(v.get("base")), verdict.number_cell(v.get("new"))
                evidence = v.get("evidence") or (verdict.p_text(v["p"]) if v.get("p") is not None else "")
            judged.append(_as_verdict(v))
            rows.append(
                (
                    d,
                    metric,
                    b,
                    n,
                    verdict.change_cell(v.get("change")),
                    evidence,
                    verdict.verdict_cell(v["verdict"], v.get("power", ""), strict=strict),
                )
            )
    lines = verdict.table(rows)
    if any("base_mean" in v for e in result["points"] for v in e["verdicts"].values()):
        lines.append(verdict.COLUMNS_LINE)
    elif any("base_median" in v for e in result["points"] for v in e["verdicts"].values()):
        lines.append("columns: a speed row's base and new are the rounds' medians, its change the test's own estimate")
    lines += [v["loop"] for e in result["points"] for v in e["verdicts"].values() if v.get("loop")]
    vb, vn = result["base"]["versions"].get("vllm"), result["new"]["versions"].get("vllm")
    lines.append(f"base: {result['base']['python']} (vLLM {vb}) {result['base']['env'] or ''}".rstrip())
    lines.append(f"new:  {result['new']['python']} (vLLM {vn}) {result['new']['env'] or ''}".rstrip())
    blind = verdict.power_line(judged, result.get("min_detectable", verdict.MIN_DETECTABLE))
    if blind:
        lines.append(blind)
    verdicts = [v["verdict"] for e in result["points"] for v in e["verdicts"].values()]
    lines.append(
        verdict.summary_line(
            len(result["points"]),
            verdicts,
            threshold=result["threshold"],
            alpha=result.get("alpha", DEFAULT_ALPHA),
            strict=strict,
            what=f"points x {rounds_label(result)} on {result['machine']['name']}",
        )
    )
    lines += [f"failing: {f}" for f in result["summary"]["failing"]]
    return "\n".join(lines)


def point_rounds(result: dict[str, Any], entry: dict[str, Any]) -> tuple[int, int]:
    """(rounds, blocks) one point ran: its own (schema 5), else the file's."""
    rounds = entry.get("rounds") or result["rounds"]
    return rounds, entry.get("blocks") or min(result.get("blocks", 1), rounds)


def rounds_label(result: dict[str, Any]) -> str:
    """The rounds (and blocks) the file's points ran, in words: "64 rounds in 2 blocks", or per mode."""
    by_mode: dict[str, tuple[int, int]] = {}
    for entry in result["points"]:
        by_mode.setdefault(entry["identity"]["mode"], point_rounds(result, entry))
    if not by_mode:
        return f"{result['rounds']} rounds" if result.get("rounds") else "default rounds"
    text = verdict.rounds_text({m: r for m, (r, _) in by_mode.items()})
    blocks = sorted({b for _, b in by_mode.values()})
    return text + (f" in {'/'.join(map(str, blocks))} blocks" if blocks != [1] else "")


def read_ab(path: str | os.PathLike) -> dict[str, Any]:
    """A committed `eagle-fix ab` result, or a one-line error."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise EagleFixError(f"{path}: not a readable eagle-fix ab file ({exc})", exit_code=2) from None
    if data.get("kind") != "eagle-fix ab":
        raise EagleFixError(f"{path}: not an eagle-fix ab file (kind {data.get('kind')!r})", exit_code=2)
    return data
