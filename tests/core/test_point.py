"""A point has one way into words; each style is the shape a committed file, docs table or test holds."""

import math

import pytest

from eagle_fix.core import record
from eagle_fix.core.point import STYLES, Point


def test_every_style_of_one_point():
    p = Point(8192, "eager", "eagle3", "off", profile="cpu-quick")
    assert p.words() == "cpu-quick 8192 eager eagle3 fix off"
    assert Point(8192, "eager", "eagle3", "off").words() == "8192 eager eagle3 fix off"
    assert Point(4096, "compile", "eagle3", "off").words("bare") == "4096 compile eagle3 off"
    assert Point(4096, "compile", "baseline").words("bare") == "4096 compile baseline"
    assert Point(8192, "compile", "eagle3", "on").words("note") == "8192 eagle3 on (compile)"
    assert Point(32768, "eager", "eagle3").words("short") == "32K eager EAGLE3"
    assert Point(8192, "eager", "baseline").words("short") == "8K eager baseline"
    assert Point(8192, "eager", "baseline", profile="cpu").words("file") == "cpu-8192-eager-baseline"
    assert Point(None, "eager", "eagle3", "on").words("engine") == "eager-eagle3-on"
    assert Point(None, "eager", "baseline").words("engine") == "eager-baseline-none"
    assert set(STYLES) == {"text", "bare", "note", "short", "file", "engine"}
    with pytest.raises(ValueError, match="choose from text"):
        p.words("loud")


def test_a_record_a_row_and_an_identity_give_the_same_point():
    rec = {"profile": "cpu", "context_len": 8192.0, "mode": "eager", "arm": "baseline", "fix": math.nan}
    assert Point.of(rec) == Point(8192, "eager", "baseline")  # pandas' NaN is no fix arm, 8192.0 is 8192
    assert Point.of(rec, profile=True).profile == "cpu"
    key = record.key({**rec, "arm": "eagle3", "fix": "on"})
    assert record.describe(key) == "cpu 8192 eager eagle3 fix on"
