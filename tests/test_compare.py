"""eagle-fix compare: direction per metric, threshold, matching, and every exit code."""

import copy
import json
import re
from pathlib import Path

import pytest

from eagle_fix import cli
from eagle_fix.compare import compare_records, load_side
from eagle_fix.errors import EagleFixError
from eagle_fix.results import load_jsonl

DATA = Path(__file__).parent / "data"
BASE, NEW = DATA / "fixture-base.jsonl", DATA / "fixture-new.jsonl"


def point(**kw):
    rec = {"context_len": 8192, "mode": "eager", "arm": "eagle3", "fix": "on", "status": "ok",
           "output_throughput_tok_s": 100.0, "ttft_s": 1.0}
    rec.update(kw)
    return rec


def write(tmp_path, name, records, tail=""):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def test_fixture_regression_exits_1(capsys):
    assert cli.main(["compare", str(BASE), str(NEW)]) == 1
    out = capsys.readouterr().out
    assert "16384    compile  eagle3    on   acceptance_length" in out
    assert out.count("REGRESSION") == 3
    assert "9 points matched, 3 regression(s) beyond 5%" in out


def test_same_file_exits_0(capsys):
    assert cli.main(["compare", str(BASE), str(BASE)]) == 0
    assert "0 regression(s)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "metric, base, new, verdict",
    [
        ("output_throughput_tok_s", 100.0, 90.0, "regression"),   # higher is better
        ("output_throughput_tok_s", 100.0, 110.0, "improved"),
        ("decode_throughput_tok_s", 100.0, 94.0, "regression"),
        ("acceptance_length", 2.8, 2.5, "regression"),
        ("speedup", 1.8, 2.0, "improved"),
        ("drafter_coverage", 1.0, 0.5, "regression"),
        ("drafter_coverage", 0.0, 0.5, "improved"),             # from zero: infinite change
        ("ttft_s", 1.0, 1.2, "regression"),                     # lower is better
        ("ttft_s", 1.0, 0.8, "improved"),
        ("peak_gpu_memory_bytes", 1e10, 1.2e10, "regression"),
        ("peak_host_memory_bytes", 1e9, 0.5e9, "improved"),
        ("output_throughput_tok_s", 100.0, 96.0, "ok"),          # within 5%
    ],
)
def test_direction(metric, base, new, verdict):
    cmp = compare_records([point(**{metric: base})], [point(**{metric: new})])
    assert [c.verdict for c in cmp.changes if c.metric == metric] == [verdict]
    assert bool(cmp.regressions) == (verdict == "regression")


def test_threshold():
    base, new = [point(output_throughput_tok_s=100.0)], [point(output_throughput_tok_s=92.0)]
    assert compare_records(base, new, threshold=0.05).regressions
    assert not compare_records(base, new, threshold=0.10).regressions
    assert compare_records(base, [point(output_throughput_tok_s=99.9)], threshold=0.0).regressions


def test_threshold_flag(tmp_path):
    b = write(tmp_path, "b.jsonl", [point(output_throughput_tok_s=100.0)])
    n = write(tmp_path, "n.jsonl", [point(output_throughput_tok_s=92.0)])
    assert cli.main(["compare", str(b), str(n)]) == 1
    assert cli.main(["compare", str(b), str(n), "--threshold", "0.1"]) == 0


def test_failed_in_new_is_a_regression(tmp_path, capsys):
    b = write(tmp_path, "b.jsonl", [point()])
    n = write(tmp_path, "n.jsonl", [point(status="failed", error="device-side assert",
                                          output_throughput_tok_s=None)])
    assert cli.main(["compare", str(b), str(n)]) == 1
    assert "FAILED" in capsys.readouterr().out
    # and the other way round is a fix, not a regression
    assert cli.main(["compare", str(n), str(b)]) == 0
    assert [c.verdict for c in compare_records(load_jsonl(n), load_jsonl(n)).changes] == ["failed-both"]


def test_unmatched_points_are_listed_not_gated(tmp_path, capsys):
    b = write(tmp_path, "b.jsonl", [point(), point(context_len=16384)])
    n = write(tmp_path, "n.jsonl", [point(), point(context_len=8192, mode="compile")])
    assert cli.main(["compare", str(b), str(n)]) == 0
    out = capsys.readouterr().out
    assert "only in BASE: context 16384 mode eager arm eagle3 fix on" in out
    assert "only in NEW: context 8192 mode compile arm eagle3 fix on" in out
    assert "1 points matched" in out


def test_metric_on_one_side_only_is_na():
    cmp = compare_records([point(peak_gpu_memory_bytes=None)], [point(peak_gpu_memory_bytes=5e9)])
    assert [c.verdict for c in cmp.changes if c.metric == "peak_gpu_memory_bytes"] == ["n/a"]
    assert not cmp.regressions


def test_nan_is_missing():
    cmp = compare_records([point(acceptance_length=float("nan"))], [point(acceptance_length=2.0)])
    assert [c.verdict for c in cmp.changes if c.metric == "acceptance_length"] == ["n/a"]


def test_later_line_wins():
    cmp = compare_records([point(output_throughput_tok_s=1.0), point(output_throughput_tok_s=100.0)],
                          [point(output_throughput_tok_s=100.0)])
    assert not cmp.regressions


def test_truncated_last_line_is_dropped(tmp_path):
    path = write(tmp_path, "t.jsonl", [point()], tail='{"context_len": 16384, "mo')
    with pytest.warns(UserWarning, match="truncated last line"):
        assert len(load_jsonl(path)) == 1


def asv_results(tmp_path, commit, throughput):
    """A minimal asv (format 2) results file, as `asv run -E existing` writes it."""
    d = tmp_path / "results" / "box"
    d.mkdir(parents=True, exist_ok=True)
    (d / "machine.json").write_text(json.dumps({"machine": "box", "version": 1}))
    data = {
        "commit_hash": commit, "env_name": "existing-py_x", "date": 1, "params": {}, "python": "3.11",
        "requirements": {}, "env_vars": {}, "version": 2,
        "result_columns": ["result", "params", "version", "started_at", "duration"],
        "results": {
            "bench_eagle.Sweep.track_output_throughput": [
                [throughput, None, float("nan")], [["8192", "16384", "32768"], ["'eager'"]], "1", 0, 1.0],
            "bench_eagle.PerPosition.track_per_position_acceptance": [
                [0.8, 0.5, 0.3, None, None, None], [["8192", "16384"], ["'eager'"], ["1", "2", "3"]], "1", 0, 1.0],
        },
    }
    text = json.dumps(data).replace("NaN", "NaN")  # bare NaN, as asv writes
    (d / f"{commit[:8]}-existing-py_x.json").write_text(text)
    return tmp_path / "results"


def test_asv_commits(tmp_path, capsys):
    results = asv_results(tmp_path, "a" * 40, 50.0)
    asv_results(tmp_path, "b" * 40, 40.0)
    rows = load_side("aaaa", results_dir=results)
    by_ctx = {r["context_len"]: r for r in rows}
    assert by_ctx[8192]["output_throughput_tok_s"] == 50.0
    assert by_ctx[8192]["per_position_acceptance"] == [0.8, 0.5, 0.3]
    assert by_ctx[16384]["status"] == "failed"  # null: the benchmark failed there (asv's convention)
    assert 32768 not in by_ctx  # NaN: skipped (a context the profile does not run), not a point
    assert cli.main(["compare", "a" * 8, "b" * 8, "--results-dir", str(results)]) == 1
    assert re.search(r"output_throughput_tok_s\s+50\s+40\s+-20.0%\s+REGRESSION", capsys.readouterr().out)
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

