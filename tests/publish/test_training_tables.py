"""The draft-training table: a training.json's pieces, each with its held-out figures, and bad input in one line."""

from __future__ import annotations

import json

import pytest

from eagle_fix.core.errors import EagleFixError
from eagle_fix.publish.docs import render_table


def _piece(start, end, wall_s, acc):
    return {"from_step": start, "to_step": end, "wall_s": wall_s, "started": "2026-12-07T10:15:53+0000",
            "held_out": {"loss": 11.4766, "acc": acc} if acc else None}  # fmt: skip


def test_each_piece_is_a_row_with_its_held_out_accuracy(tmp_path):
    rec = {"settings": {"steps": 750}, "pieces": [_piece(0, 324, 4544, [0.3059, 0.2763, 0.2559]),
                                                  _piece(324, 750, 5400, None)]}  # fmt: skip
    (tmp_path / "training.json").write_text(json.dumps(rec))
    table = render_table("draft-training", ["training.json"], root=tmp_path).splitlines()
    assert len(table) == 4 and "held-out accuracy" in table[0]
    assert table[2] == "| 1 | 0-324 of 750 | 76 | 2026-12-07 10:15 | 11.48 | 0.306 / 0.276 / 0.256 |"
    assert table[3] == "| 2 | 324-750 of 750 | 90 | 2026-12-07 10:15 | - | - |"


def test_a_file_that_is_not_a_record_is_one_line(tmp_path):
    (tmp_path / "training.json").write_text("{not json")
    with pytest.raises(EagleFixError) as err:
        render_table("draft-training", ["training.json"], root=tmp_path)
    assert "\n" not in str(err.value) and "training.json" in str(err.value)
    (tmp_path / "training.json").write_text(json.dumps({"settings": {"steps": 1}, "pieces": []}))
    with pytest.raises(EagleFixError, match="holds no pieces"):
        render_table("draft-training", ["training.json"], root=tmp_path)
