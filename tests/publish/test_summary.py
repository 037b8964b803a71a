"""The report's first screen (eagle_fix.publish.answers): the fix A/B with its causes, the realistic regime's
speedups beside the ceiling's, the served break-even, and the plan `eagle-fix ab` would run on the machine,
each from the committed file it names; scripts/bench.sh prints it."""

import shutil
import statistics
import subprocess
import sys

import pytest

from conftest import ROOT, asv_conf
from eagle_fix.core import record
from eagle_fix.gate import components
from eagle_fix.publish import answers, summary
from eagle_fix.publish.report import write_report

RESULTS = ROOT / "results"
CHAT = RESULTS / "runs" / "chat" / "cpu-intel-f6m167-2c-8d487f-be033578-cpu-chat.jsonl"
BEST = RESULTS / "runs" / "chat" / "cpu-intel-f6m167-2c-8d487f-be033578-cpu-best-case.jsonl"
FIX_AB = RESULTS / "runs" / "fix-ab" / "cpu-quick-fix-ab.jsonl"
MAP = RESULTS / "map" / "cpu-intel-f6m167-2c-8d487f-1dbb114e-cpu-map-chat.ndjson"
MACHINE = "cpu-intel-f6m167-2c-8d487f"  # a machine with recorded gate noise (results/gate/)
SCREEN = 45  # lines: a tall screen, and the summary must fit it


def speedup_at(path, context: int, mode: str) -> float:
    """EAGLE3 decode throughput over the baseline's at one point, straight from the committed records."""
    recs = record.read(path)
    arm = {r["arm"]: r for r in recs if r["context_len"] == context and r["mode"] == mode}
    return arm["eagle3"]["decode_throughput_tok_s"] / arm["baseline"]["decode_throughput_tok_s"]


@pytest.fixture(scope="module")
def small_results(tmp_path_factory):
    """A results folder of the chat pair, its best case, the fix A/B and the chat map, as committed."""
    root = tmp_path_factory.mktemp("answers") / "results"
    for src, sub in ((CHAT, "runs/chat"), (BEST, "runs/chat"), (FIX_AB, "runs/fix-ab"), (MAP, "map")):
        (root / sub).mkdir(parents=True, exist_ok=True)
        shutil.copy(src, root / sub / src.name)
    return root


@pytest.fixture(scope="module")
def report(small_results, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "eagle-fix"
    write_report([small_results], out, machine=MACHINE)
    return out / "report.md"


def test_the_report_opens_with_the_summary_on_one_screen(report):
    lines = report.read_text().splitlines()
    assert lines[:3] == ["# eagle-fix report", "", "## Summary"]
    assert "## Details" in lines, "the detailed tables follow the summary under their own heading"
    sections = [x[4:] for x in lines if x.startswith("### ")]
    contents = lines[lines.index("## Details") + 2]
    assert sections and all(s in contents for s in sections), (contents, sections)  # a reader skips to one
    screen = lines[: lines.index("## Details")]
    assert len(screen) <= SCREEN, f"the summary is {len(screen)} lines"
    # the headline is the realistic figure; the copy workload is named the ceiling
    assert screen[4].startswith("**Realistic regime (chat pair"), screen[4]
    assert "The ceiling (tiny pair on its copy workload" in screen[4]
    assert screen[4].index("Realistic") < screen[4].index("ceiling")


def test_the_summary_names_the_fix_ab_with_its_cause(report):
    text = report.read_text().split("## Details")[0]
    fix = next(line for line in text.splitlines() if line.startswith("- **Fix A/B**"))
    assert "cpu-quick-fix-ab.jsonl" in fix
    assert "fix `off`: compile failed at 4K, 8K:" in fix and "index out of bounds" in fix
    assert "fix `upstream`" in fix and "drafter ran in 0% of steps" in fix
    assert "fix `on`: compile and eager acceptance 4.00, drafter ran in 100% of steps" in fix


def test_the_summary_puts_the_regimes_speedups_side_by_side_with_intervals(report):
    text = report.read_text().split("## Details")[0]
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    head = rows["context"]
    assert "`chat` eager: speedup" in head and "`copy` (ceiling) eager: speedup" in head
    assert head.index("`chat`") < head.index("`copy`")
    for context, k in ((8192, "8K"), (16384, "16K"), (32768, "32K")):
        cells = [c.strip() for c in rows[k].strip("|").split("|")]
        chat = f"{speedup_at(CHAT, context, 'eager'):.2f}x ["
        best = f"{speedup_at(BEST, context, 'eager'):.2f}x ["
        assert cells[1].startswith(chat) and cells[5].startswith(best), (k, cells)
    assert "1.95x [1.78, 2.08] (loop)" in rows["32K"], "the compiled 32K chat point's output is a loop"
    # the bounds name their real coverage: 3 samples an arm make a range covering 75%, not a 95% interval
    assert "speedup bounds: EAGLE3's decode interval over the baseline's (range, 75% cov)" in text
    assert "acceptance: 95% interval of vLLM's counts" in text


def test_the_summary_gives_the_served_break_even_and_says_what_is_not_measured(report):
    text = report.read_text().split("## Details")[0]
    assert (
        f"`chat` on `{MACHINE}`: 2K eager: never clearly loses" in text and "8K eager: loses from concurrency 1" in text
    )
    assert MAP.name in text
    assert "not measured yet" not in text
    # the break-even acceptance tau* = speculative step / plain step, from the committed records' own step times
    recs = record.read(CHAT)
    arm = {r["arm"]: r for r in recs if r["context_len"] == 8192 and r["mode"] == "eager"}
    tau_star = statistics.median(arm["eagle3"]["samples"]["step_ms"]) / statistics.median(
        arm["baseline"]["samples"]["step_ms"]
    )
    line = next(x for x in text.splitlines() if x.startswith(f"  - `cpu-chat` on `{MACHINE}`:"))
    assert f"8K eager {tau_star:.2f} [" in line and f"(accepts {arm['eagle3']['acceptance_length']:.2f})" in line
    assert "Acceptance needed to pay (break-even τ* = speculative step / plain step" in text


def test_the_summary_gives_the_gate_plan_recorded_for_the_machine(report):
    text = report.read_text().split("## Details")[0]
    data = components.read(MACHINE, components.PointKind("cpu-quick", 8192, "eager", "eagle3"))
    plan = data["plan"]
    line = next(x for x in text.splitlines() if "cpu-quick-8192-eager-eagle3:" in x)
    assert "(recorded here)" in line
    assert f"plan {plan['rounds']} rounds x ≤ {plan['max_blocks']} launch pairs" in line
    assert f"catches {plan['detectable']:.1%} with {plan['power']:.0%} power, false alarms {plan['alpha']:.0%}" in line


def test_a_machine_without_recorded_noise_is_told_whose_record_ab_borrows():
    lines = answers.gate_lines("a-new-machine")
    assert lines and all("borrowed from `" in x or "no noise recorded" in x for x in lines), lines


def test_results_without_the_realistic_regime_say_so(tmp_path):
    (tmp_path / "runs").mkdir()
    shutil.copy(FIX_AB, tmp_path / "runs" / FIX_AB.name)
    md = "\n".join(summary.summary_markdown(tmp_path, MACHINE))
    assert "Realistic regime (chat pair, workload `chat`): not measured" in md
    assert "Served break-even**: no `eagle-fix map` file" in md


def test_bench_sh_prints_the_summary_at_its_end(report, tmp_path):
    """bench.sh's last step: the published report's summary, without the markdown's bold marks."""
    html = report.parent.parent
    conf = asv_conf(tmp_path, tmp_path / "results", html)
    proc = subprocess.run(
        [sys.executable, "-m", "eagle_fix.publish.bench_summary", "--config", str(conf)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out[0] == "## Summary" and out[2].startswith("Realistic regime (chat pair") and "**" not in proc.stdout
    assert "## Details" not in proc.stdout and out[-1].startswith("(from ")
    bench = (ROOT / "scripts" / "bench.sh").read_text()
    assert "-m eagle_fix.publish.bench_summary" in bench


def test_the_summary_print_refuses_a_missing_report_in_one_line(tmp_path):
    conf = asv_conf(tmp_path, tmp_path / "results", tmp_path / "html")
    proc = subprocess.run(
        [sys.executable, "-m", "eagle_fix.publish.bench_summary", "--config", str(conf)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "no report there" in proc.stderr


def test_spans_and_folded_panels():
    assert answers.span([0.62, 1.12]) == "0.62x–1.12x" and answers.span([1.0, 1.0], "%") == "100%"
    from eagle_fix.publish.story import constant_panels

    run = {
        "records": [
            {"arm": "eagle3", "status": "ok", "acceptance_length": a, "drafter_coverage": 1.0, "context_len": c}
            for a, c in ((4.0, 8192), (2.5, 16384))
        ]
    }
    assert constant_panels([run]) == {"drafter_coverage": "100%"}  # acceptance varies: its panel stays


def test_the_report_draws_the_acceptance_needed_to_pay_per_profile(report):
    """Details: a section per profile's tau* and its picture (speedup against acceptance length), named in the
    contents line."""
    text = report.read_text()
    details = text.split("## Details")[1]
    assert "### Acceptance needed to pay" in details
    contents = details.splitlines()[2]
    assert "Acceptance needed to pay" in contents
    pictures = sorted((report.parent / "break-even").glob("*.png"))
    assert {p.name for p in pictures} >= {f"cpu-{MACHINE}.png", f"cpu-chat-{MACHINE}.png"}, pictures
    assert all(p.stat().st_size > 10_000 for p in pictures)
    assert f"![cpu-chat-{MACHINE}](break-even/cpu-chat-{MACHINE}.png)" in details


REAL = RESULTS / "real-target" / "runs"
REAL_GREEDY = REAL / "cpu-amd-f25m1-2c-3853ad-cpu-real-greedy.jsonl"
REAL_FIX_AB = REAL / "cpu-amd-f25m1-2c-3853ad-cpu-real-fix-ab-4096.jsonl"


def test_the_summary_leads_with_the_real_target_and_its_fix_ab(small_results, tmp_path):
    """With the real target's files beside the others (results/real-target/runs), the first screen opens with
    the real model's figure (greedy speedups side by side with the baseline in one run, acceptance, drafter
    coverage), and its fix A/B comes before the other pairs', with the `on` rows a later run re-measured."""
    root = tmp_path / "results"
    shutil.copytree(small_results, root)
    (root / "real-target" / "runs").mkdir(parents=True)
    for src in (REAL_GREEDY, REAL_FIX_AB):
        shutil.copy(src, root / "real-target" / "runs" / src.name)
    md = summary.summary_markdown(root, MACHINE)
    first = md[2]
    assert first.startswith("**Real target (SmolLM2-135M-Instruct, pretrained"), first
    speedups = [speedup_at(REAL_GREEDY, c, m) for c in (2048, 4096, 8192) for m in ("eager", "compile")]
    assert f"greedy over 2K–8K, EAGLE3 decodes {min(speedups):.2f}x–{max(speedups):.2f}x as fast" in first, first
    acc = [r["acceptance_length"] for r in record.read(REAL_GREEDY) if r["arm"] == "eagle3"]
    assert f"accepting {min(acc):.2f}–{max(acc):.2f} tokens a step" in first
    assert "T = 0.7" not in first  # no sampled file here
    assert REAL_GREEDY.name in first
    assert md.index(first) < next(i for i, x in enumerate(md) if x.startswith("**Realistic regime (chat pair"))
    fixes = [x for x in md if x.startswith("- **Fix A/B**")]
    assert REAL_FIX_AB.name in fixes[0] and FIX_AB.name in fixes[1], fixes
    assert "compile failed at 4K: worker VllmWorker-0 killed by SIGABRT; index out of bounds" in fixes[0]
    assert "fix `on`: compile and eager acceptance 1.72, drafter ran in 100% of steps" in fixes[0], fixes[0]
