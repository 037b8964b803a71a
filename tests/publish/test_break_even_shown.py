"""The acceptance needed to pay, shown (eagle_fix.publish.break_even): the docs table from committed run
files, its refusals, the picture, and the words for the damage-knob check."""

import statistics

import pytest

from conftest import ROOT
from eagle_fix.core import record
from eagle_fix.core.errors import EagleFixError
from eagle_fix.publish import break_even
from eagle_fix.publish.docs import render_table

CHAT = "results/runs/chat/cpu-intel-f6m167-2c-8d487f-be033578-cpu-chat.jsonl"


def test_the_docs_table_gives_tau_star_per_context_and_mode_from_the_committed_records():
    table = render_table("break-even", [CHAT], root=ROOT)
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    assert [(r[1], r[2]) for r in rows] == [(c, m) for c in ("8K", "16K", "32K") for m in ("eager", "compile")]
    recs = record.read(ROOT / CHAT)
    for row in rows:
        context = {"8K": 8192, "16K": 16384, "32K": 32768}[row[1]]
        arm = {r["arm"]: r for r in recs if r["context_len"] == context and r["mode"] == row[2]}
        spec = statistics.median(arm["eagle3"]["samples"]["step_ms"])
        plain = statistics.median(arm["baseline"]["samples"]["step_ms"])
        assert row[5:8] == [f"{plain:.2f}", f"{spec:.2f}", row[7]] and row[7].startswith(f"{spec / plain:.2f} [")
        assert row[9].startswith(f"{arm['eagle3']['acceptance_length'] / (spec / plain):.2f} [")
        assert row[11] in ("yes", "**no**")


def test_the_table_refuses_in_one_line_what_holds_no_pair(tmp_path):
    with pytest.raises(EagleFixError, match=r"^--table break-even: no run files in .*; name \.jsonl files or folders$"):
        break_even.table([tmp_path])
    only = tmp_path / "only-eagle3.jsonl"
    only.write_text("".join(line + "\n" for line in (ROOT / CHAT).read_text().splitlines() if '"eagle3"' in line))
    with pytest.raises(EagleFixError, match="no drafted point has a baseline twin"):
        break_even.table([only])


def test_the_picture_is_drawn_per_profile_and_nothing_without_acceptance(tmp_path):
    points = break_even.file_points(ROOT / CHAT)
    (group,) = break_even.groups(points)
    assert break_even.figure(group, tmp_path / "p.png").stat().st_size > 10_000
    none = {**group, "points": [{**p, "acceptance": None} for p in points]}
    assert break_even.figure(none, tmp_path / "none.png") is None and not (tmp_path / "none.png").exists()


def test_the_check_says_where_prediction_and_measurement_part():
    p = break_even.file_points(ROOT / CHAT)[0]
    parted = {**p, "agree": False, "damage": 0.3, "predicted": 1.5, "measured": 0.9}
    words = break_even.check_words([p, parted, {**p, "agree": None}])
    assert words.startswith("predicted and measured speedup agree within their intervals at 1 of 2 points")
    assert "they part at 8K eager damage 0.3 (predicted 1.50, measured 0.90)" in words
