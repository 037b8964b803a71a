"""The prompts table (eagle-fix run --prompts N): acceptance with the prompt as the unit, checked against scipy's
t interval, the outputs' realism medians, and a file without such points in one line."""

from __future__ import annotations

import json

import pytest
from scipy import stats

from eagle_fix.core import record
from eagle_fix.core.errors import EagleFixError
from eagle_fix.publish.docs import render_table


def _point(accs, scores, **more):
    prompts = [
        {"seed": i, "acceptance_length": a, "output_distinct_4grams": s, "output_distinct_4grams_before_eos": None}
        for i, (a, s) in enumerate(zip(accs, scores))
    ]
    return record.new(machine_name="m1", context_len=8192, mode="eager", arm="eagle3", temperature=0.7,
                      prompts=prompts, **more)  # fmt: skip


def test_a_point_over_prompts_is_a_row_with_the_t_interval_and_medians(tmp_path):
    accs = [1.5, 1.7, 1.6, 1.9]
    rows = [_point(accs, [0.4, 0.6, 0.8, 0.9]), record.new(context_len=2048, mode="eager", arm="baseline")]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = render_table("prompts", ["r.jsonl"], root=tmp_path).splitlines()
    assert len(table) == 3  # a point of one prompt is not a row
    mean, (lo, hi) = sum(accs) / 4, stats.t.interval(0.95, 3, loc=sum(accs) / 4, scale=stats.sem(accs))
    assert table[2] == (
        f"| m1 | 8192 | eager | eagle3 | 0.7 | 4 | {mean:.2f} [{lo:.2f}, {hi:.2f}] | 1.50-1.90 | 0.70 (4) | – |"
    )


def test_a_file_without_points_over_prompts_is_one_line(tmp_path):
    (tmp_path / "r.jsonl").write_text(json.dumps(_point([1.5], [0.5])) + "\n")
    with pytest.raises(EagleFixError) as err:
        render_table("prompts", ["r.jsonl"], root=tmp_path)
    assert "\n" not in str(err.value) and "--prompts above 1" in str(err.value)
