"""eagle-fix report and the results loader: DataFrame content, markdown table, PNGs on disk."""

import json
import shutil
from pathlib import Path

import pytest

from eagle_fix import cli
from eagle_fix.errors import EagleFixError
from eagle_fix.report import fill_speedup, latest, markdown_table, write_report
from eagle_fix.results import load_results

DATA = Path(__file__).parent / "data"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_load_results_frame():
    df = load_results([DATA / "fixture-base.jsonl", DATA / "fixture-new.jsonl"])
    assert len(df) == 18
    assert set(df["source"]) == {"jsonl"}
    assert set(df["vllm_version"]) == {"0.32.0", "0.33.0"}
    assert set(df["device_name"]) == {"cpu"}
    row = df[(df.context_len == 16384) & (df["mode"] == "compile") & (df.arm == "eagle3")
             & (df.vllm_version == "0.33.0")].iloc[0]
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
    assert table[0].startswith("| context | mode | arm | fix | status | output tok/s |")
    assert table[1].startswith("|---|")
    assert len(table) == 2 + 9
    assert "| 16384 | eager | eagle3 | off | ok | 14.00 | 15.00 | 1.00 | 0% | 0.93x | 4.20 | – | 2.24 | 40960 |" in table
    assert table[2].startswith("| 8192 |")  # sorted by context, numerically


def test_speedup_from_a_baseline_run_apart(tmp_path):
    common = {"profile": "cpu", "vllm_version": "0.32.0", "device": {"name": "cpu"}, "context_len": 131072,
              "mode": "eager", "batch_size": 1, "output_len": 64, "status": "ok"}
    (tmp_path / "eagle3.jsonl").write_text(json.dumps(
        {**common, "arm": "eagle3", "fix": "on", "decode_throughput_tok_s": 4.0, "speedup": None}) + "\n")
    (tmp_path / "baseline.jsonl").write_text(json.dumps(
        {**common, "arm": "baseline", "fix": None, "decode_throughput_tok_s": 5.0, "speedup": None}) + "\n"
        + json.dumps({**common, "mode": "compile", "arm": "baseline", "fix": None,
                      "decode_throughput_tok_s": 8.0, "speedup": None}) + "\n")
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
    assert "## Profile `cpu-quick`" in md
    assert "vLLM 0.32.0, 9 points (0 failed)" in md and "vLLM 0.33.0, 9 points (0 failed)" in md
    assert "| 16384 | compile | eagle3 | on | ok | 27.00 |" in md  # the NEW fixture's throughput
    pngs = sorted(p.name for p in (out / "cpu-quick").glob("*.png"))
    assert pngs == ["acceptance_length.png", "decode_throughput.png", "drafter_coverage.png", "memory.png", "throughput.png"]
    for name in pngs:
        data = (out / "cpu-quick" / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000
        assert f"![{name[:-4]}](cpu-quick/{name})" in md
    page = (out / "index.html").read_text()
    assert '<img src="cpu-quick/throughput.png"' in page and "<table>" in page


def test_report_reads_asv_results(tmp_path):
    from test_compare import asv_results  # tests/ is on sys.path (rootdir, no __init__)

    results = asv_results(tmp_path, "a" * 40, 50.0)
    runs = results / "runs"
    runs.mkdir()
    shutil.copy(DATA / "fixture-base.jsonl", runs / f"box-{'a' * 8}-cpu-quick.jsonl")
    df = load_results([results])
    asv = df[df.source == "asv"]
    assert set(asv["profile"]) == {"cpu-quick"}  # from the records of the sweep behind the asv run
    assert asv.set_index("context_len").loc[8192, "tpot_ms"] == 50.0  # asv's number
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
