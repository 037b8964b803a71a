"""The arm and fix-arm registries: every name users type resolves to one typed entry, and anything else is
one line naming the known ones (issue #54)."""

import pytest

from eagle_fix.core import arms, record
from eagle_fix.core.arms import BASELINE, EAGLE3, FIX_OFF, FIX_ON, FIX_UPSTREAM, arm, fix_arm
from eagle_fix.core.errors import EagleFixError
from eagle_fix.engine.spec import PLUGIN_MODE_OF_ARM
from eagle_fix.sweep.plan import RunArgs, resolve


def test_the_registry_holds_every_method_once_with_what_it_needs():
    assert list(arms.ARMS) == ["eagle3", "baseline", "ngram", "draft_model", "mtp"]
    assert arm("eagle3") is EAGLE3 and arm("baseline") is BASELINE
    assert [a.name for a in arms.ARMS.values() if a.speculates] == ["eagle3", "ngram", "draft_model", "mtp"]
    # only the EAGLE family's draft has a rotary cache of its own that the fix raises
    assert [a.name for a in arms.ARMS.values() if a.takes_fix] == ["eagle3"]
    assert [a.name for a in arms.ARMS.values() if a.needs_draft] == ["eagle3", "draft_model"]
    assert BASELINE.method is None and arms.NGRAM.method == "ngram" and arms.MTP.method == "mtp"


def test_an_unknown_arm_is_one_line_naming_the_known_ones():
    with pytest.raises(EagleFixError) as e:
        arm("medusa")
    msg = str(e.value)
    assert "\n" not in msg and "'medusa'" in msg
    assert "eagle3,baseline,ngram,draft_model,mtp" in msg
    with pytest.raises(EagleFixError, match="choose from on,off,upstream"):
        fix_arm("maybe")


def test_fix_arms_carry_the_plugin_mode_and_the_doctors_word():
    assert [f.plugin_mode for f in (FIX_ON, FIX_OFF, FIX_UPSTREAM)] == ["auto", "revert", "off"]
    assert (FIX_ON.doctor_word, FIX_OFF.doctor_word, FIX_UPSTREAM.doctor_word) == ("fixed", "broken", None)
    assert fix_arm("upstream") is FIX_UPSTREAM
    # the older names still import, and the engine's mode table is the registry's
    assert record.FIX_ARMS == ("on", "off", "upstream") and record.ARMS == ("eagle3", "baseline")
    assert PLUGIN_MODE_OF_ARM == {"on": "auto", "off": "revert", "upstream": "off"}


def test_the_sweep_refuses_an_arm_the_engine_cannot_run_yet_before_anything_starts(tmp_path):
    out = tmp_path / "r.jsonl"
    unwired = [n for n in arms.ARMS if n not in arms.ENGINE_ARMS]
    for name in unwired:
        with pytest.raises(EagleFixError) as e:
            resolve(RunArgs(profile="cpu-quick", contexts=(8192,), arms=(name, "baseline"), out=out))
        assert "\n" not in str(e.value) and f"--arms {name}:" in str(e.value)
    with pytest.raises(EagleFixError, match="unknown; choose from eagle3,baseline,ngram,draft_model,mtp"):
        resolve(RunArgs(profile="cpu-quick", contexts=(8192,), arms=("medusa",), out=out))
    assert not out.exists()


def test_what_a_records_arm_is_asked_of_its_name_even_where_a_file_holds_none():
    assert arms.speculates("ngram") and not arms.speculates("baseline") and not arms.speculates(None)
    assert arms.takes_fix("eagle3") and not arms.takes_fix("ngram") and not arms.takes_fix(float("nan"))
    assert arms.is_baseline("baseline") and not arms.is_baseline("eagle3") and not arms.is_baseline(None)
    assert arms.is_eagle3(EAGLE3) and not arms.is_eagle3("draft_model") and arms.known("medusa") is None
    # a record of the fix arm `on`, or one from before the fix A/B that names none
    assert arms.is_fix_on("on") and not arms.is_fix_on("upstream") and not arms.is_fix_on(None)
    assert arms.is_fix_on(None, unnamed_is_on=True) and arms.is_fix_on(float("nan"), unnamed_is_on=True)
    assert not arms.is_fix_on("off", unnamed_is_on=True)
    # old records (no fix key) still read as the fix-on EAGLE3 point, the baseline as no fix arm
    assert record.fix_arm({"arm": "eagle3"}) == "on" and record.fix_arm({"arm": "baseline", "fix": None}) is None
    assert record.is_point(
        {"arm": "eagle3", "context_len": 8192, "mode": "eager"}, context_len=8192, mode="eager", arm="eagle3"
    )
