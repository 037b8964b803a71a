"""The gate's noise (eagle-fix noise, eagle_fix.gate.components) and its replay on the committed A/A trials
(eagle_fix.gate.replay): what a launch and a round cost, read from the files, and why the launch is the unit."""

from __future__ import annotations

import datetime
import json

import pytest

from conftest import ROOT
from eagle_fix import cli
from eagle_fix.gate import components, replay

CAL = ROOT / "results" / "calibration"


def _span_file(path, blocks, rounds, launch_s, round_s):
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    pairs = [{"round": r, "block": r * blocks // rounds} for r in range(rounds)]
    span = datetime.timedelta(seconds=blocks * launch_s + rounds * round_s)
    data = {
        "started": start.isoformat(),
        "finished": (start + span).isoformat(),
        "points": [{"pairs": pairs}],
    }
    path.write_text(json.dumps(data))
    return path


def test_costs_are_solved_from_the_spans_of_files_of_two_designs(tmp_path):
    """Files before schema 6 kept only their span: with two designs (64 and 128 rounds in 2 launch pairs) the
    launch pair's and the round's costs are both solved; with one design the round's cost must be given."""
    files = [_span_file(tmp_path / f"{r}-{i}.json", 2, r, 110.0, 1.5) for r in (64, 128) for i in range(3)]
    got = components.costs_from(files)
    assert got["launch_s"] == pytest.approx(110.0, abs=0.5) and got["round_s"] == pytest.approx(1.5, abs=0.01)
    one = [f for f in files if f.name.startswith("64-")]
    assert components.costs_from(one) is None
    given = components.costs_from(one, round_s=1.5)
    assert given["launch_s"] == pytest.approx(110.0, abs=0.5) and "the round's cost given" in given["from"]


def test_the_committed_pools_show_the_old_rule_false_alarms_and_the_launch_level_test_does_not(tmp_path):
    """Replayed out of sample (leave one run out) from the committed A/A trials of the compiled 8K baseline on
    cpu-amd-f23m49 (10 runs of 2 launch pairs): the old rule (the sign test over the rounds of two launches, each
    round counted as independent) rejects identical sides far more often than its alpha, because every round of a
    launch shares its offset; the launch-level t-test, its calibration the other runs, stays near its alpha. The
    file says which run was held out and how many distinct trials stand behind each rate."""
    folder = CAL / "gate-compile-baseline-r128-cpu-amd-f23m49-2c-811fcd"
    files = sorted(folder.glob("*.json"))
    kind = components.PointKind("cpu-quick", 8192, "compile", "baseline")
    trials, names = replay.pool_named(files, kind)
    assert len(trials) == 10 and all(len(t) == 2 for t in trials)  # the A/A trials, two launch pairs each
    costs = components.costs_from(files, round_s=2.2)
    out = replay.replay(
        trials, n=400, launch_s=costs["launch_s"], round_s=costs["round_s"], sources=names, shifts=(0.0,)
    )
    assert out["out_of_sample"] == "leave one run out"
    assert [h["run"] for h in out["held_out"]] == [str(f) for f in files if f.name.startswith("0-")]
    aa = {r["alpha"]: r for r in out["fixed"] if r["shift"] == 0.0}
    assert 10 < aa[0.05]["distinct"] <= 400
    assert aa[0.01]["round_level"] > 0.15 and aa[0.05]["round_level"] > 0.25, aa  # the old rule: far above alpha
    assert aa[0.05]["launch_level"] < aa[0.05]["round_level"] / 2, aa
    # out of sample, one held-out run of ten (0-01: a launch pair at -7.7%) is significant: about 10%, the rest 0
    assert aa[0.01]["launch_level"] <= 0.12, aa
    # the plans need more launch pairs than a held-out run of 2 has: not replayed there, and said so
    seq = {(r["shift"], r["alpha"]): r for r in out["sequential"]}
    assert all(r["folds"] == 0 or r["n"] for r in seq.values())


def test_a_pool_of_one_run_is_held_out_by_pairs_of_launch_pairs():
    rng = __import__("random").Random(1)
    from eagle_fix.core import nested

    run = [nested.Block(i, tuple(rng.gauss(0, 0.05) for _ in range(16)), i % 2 == 0) for i in range(8)]
    folds = replay.held_out_runs([run], ["aa.json"])
    assert [name for name, _, _ in folds] == [f"aa.json launch pairs {i}-{i + 1}" for i in (1, 3, 5, 7)]
    for _, held, rest in folds:
        assert len(held) == 2 and len(rest[0]) == 6 and not set(held) & set(rest[0])


def test_replay_without_costs_is_one_line(tmp_path, capsys):
    """Old files of one design and no round cost: the replay cannot size its plan, and says what to give."""
    folder = CAL / "gate-compile-baseline-r128-cpu-amd-f23m49-2c-811fcd"
    argv = ["noise", "--from", str(folder), "--replay", str(tmp_path / "r.json"), "--folder", str(tmp_path)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "give --round-s" in err[0]
    assert not (tmp_path / "r.json").exists()
    assert cli.main(["noise", "--from", str(tmp_path / "missing"), "--folder", str(tmp_path)]) == 2
    assert "no such file or folder" in capsys.readouterr().err


def test_a_point_kind_without_a_record_takes_the_nearest_context_of_this_machine_then_another_machine(tmp_path):
    """components.find: this machine's record of the point kind; else this machine's of the same mode and arm
    (the same profile first) at the nearest context; else the most cautious other machine's of the point kind;
    each says so."""

    def rec(machine, context, sigma):
        data = {
            "kind": components.KIND,
            "machine": machine,
            "point": {"profile": "cpu", "context_len": context, "mode": "eager", "arm": "eagle3"},
            "metrics": {"step_ms": {"sigma_launch": sigma, "sigma_launch_upper": sigma}},
        }
        components.write(data, tmp_path)

    rec("here", 8192, 0.01)
    rec("here", 65536, 0.02)
    rec("there", 16384, 0.03)
    rec("elsewhere", 16384, 0.04)
    kind = components.PointKind("cpu", 16384, "eager", "eagle3")
    data, source = components.find("here", kind, tmp_path)
    assert data["point"]["context_len"] == 8192
    assert source == "recorded for here as cpu-8192-eager-eagle3: none as cpu-16384-eager-eagle3"
    # another profile of this machine, same mode and arm, before another machine
    data, source = components.find("here", components.PointKind("cpu-quick", 16384, "eager", "eagle3"), tmp_path)
    assert data["machine"] == "here" and data["point"]["context_len"] == 8192
    data, source = components.find("new-box", kind, tmp_path)
    assert data["machine"] == "elsewhere" and source == "borrowed from elsewhere: none recorded for new-box"
    data, source = components.find("there", kind, tmp_path)
    assert data["machine"] == "there" and source == "recorded for there"
    assert components.find("new-box", components.PointKind("cpu", 8192, "compile", "eagle3"), tmp_path) == (None, "")


def test_a_grid_costs_each_points_plan_at_its_records_costs(tmp_path, monkeypatch):
    """eagle_fix.gate.cost: a point's first look is look_every launch pairs of (launch + rounds x round), its
    plan max_blocks of them; a point with no record anywhere has no cost, and says so."""
    from eagle_fix.gate import cost

    plan = {"rounds": 10, "max_blocks": 6, "look_every": 2}
    data = {
        "kind": components.KIND,
        "machine": "here",
        "point": {"profile": "cpu-quick", "context_len": 8192, "mode": "eager", "arm": "eagle3"},
        "metrics": {"step_ms": {"sigma_launch": 0.01, "sigma_launch_upper": 0.01}},
        "costs": {"launch_s": 60.0, "round_s": 3.0},
        "plan": plan,
    }
    components.write(data, tmp_path)
    monkeypatch.setattr(components, "FOLDER", tmp_path)
    got = cost.point_cost("here", components.PointKind("cpu-quick", 8192, "eager", "eagle3"))
    assert (got["look_s"], got["plan_s"]) == (2 * 90.0, 6 * 90.0) and got["source"] == "recorded for here"
    none = cost.point_cost("here", components.PointKind("cpu-quick", 8192, "compile", "eagle3"))
    assert none["look_s"] is None and none["source"] == "no record on any machine"
    table = cost.cost_table([str(tmp_path / "here")])
    assert "| cpu-quick | 4 | 1: 1 its own | 3 | 9 |" in table


def test_every_committed_record_holds_the_bound_its_sources_give():
    """Each results/gate record, recomputed from its sources: the same launch sd, upper bound, degrees of freedom
    and F; its F bound by hand from scipy's F quantile; a bound of 0 nowhere, the floor only where F sits in its
    own lower 5% tail and the pivotal bound is 0 too."""
    from pathlib import Path

    from eagle_fix.core import nested

    st = pytest.importorskip("scipy.stats")
    records = [p for p in sorted((ROOT / "results" / "gate").glob("*/*.json")) if "-aa-" not in p.name]
    records = [json.loads(p.read_text()) for p in records]
    records = [r for r in records if r.get("kind") == components.KIND]
    assert len(records) >= 7
    for rec in records:
        kind = components.PointKind(**rec["point"])
        files = [ROOT / s for s in rec["sources"]]
        assert rec["schema"] == components.SCHEMA
        for metric, got in rec["metrics"].items():
            trials, _ = components.trials_from([Path(f) for f in files], kind, metric)
            c = nested.estimate(trials)
            assert got["sigma_launch_upper"] == pytest.approx(c.sigma_launch_upper, rel=1e-9), (rec["machine"], metric)
            assert (got["df_launch"], got["df_round"]) == (c.df_launch, c.df_round)
            assert got["sigma_launch_upper"] > 0
            f_low = st.f.ppf(0.05, got["df_launch"], got["df_round"])
            share = got["sigma_round"] ** 2 / got["rounds_per_block"]
            exact = got["block_var"] / f_low - share
            assert got["f_upper"] == pytest.approx(max(exact, 0.0) ** 0.5, rel=1e-9, abs=1e-15)
            assert (got["f_upper"] == 0) == (got["f_p_low"] < 0.05)
            if got["upper_is_floor"]:
                assert got["f_upper"] == got["pivotal_upper"] == 0
                assert got["sigma_launch_upper"] == nested.LAUNCH_SD_FLOOR
            else:
                assert got["sigma_launch_upper"] == max(got["f_upper"], got["pivotal_upper"])


def test_the_three_records_of_issue_53_are_recomputed():
    """8d487f eager EAGLE3, 4265ea eager and f25m17 eager baseline held a launch bound of exactly 0; recomputed,
    from their pooled A/A files all three bound the model step above 0 (the third's F sits in its own lower 4.4%
    tail, its pivotal bound does not); the 8-pair measuring run of 8d487f alone gives issue 53's exact figures."""
    from eagle_fix.core import nested

    gate = ROOT / "results" / "gate"
    for machine, point, floor in (
        ("cpu-intel-f6m167-2c-8d487f", "cpu-quick-8192-eager-eagle3", False),
        ("cpu-intel-f6m167-2c-4265ea", "cpu-quick-8192-eager-eagle3", False),
        ("cpu-amd-f25m17-2c-6ac754", "cpu-quick-8192-eager-baseline", False),
    ):
        m = json.loads((gate / machine / f"{point}.json").read_text())["metrics"]["step_ms"]
        assert m["upper_is_floor"] is floor and m["sigma_launch_upper"] >= nested.LAUNCH_SD_FLOOR
    aa = gate / "cpu-intel-f6m167-2c-8d487f" / "cpu-quick-8192-eager-eagle3-aa-20261205-001932.json"
    kind = components.PointKind("cpu-quick", 8192, "eager", "eagle3")
    c = nested.estimate(components.trials_from([aa], kind, "step_ms")[0])
    assert (c.df_launch, c.df_round) == (6, 56)
    assert c.f_stat == pytest.approx(0.327, abs=5e-4) and c.f_p_low == pytest.approx(0.08, abs=5e-3)
    assert c.f_upper == pytest.approx(0.0097, abs=5e-5) and c.sigma_launch_upper >= c.f_upper


def test_the_docs_state_the_bound_the_test_and_the_rule_as_coded():
    """docs/statistics.md's launch section names the functions that compute the bound, the test and the rule,
    each of which exists, and the constants it states are the code's."""
    from eagle_fix.core import nested

    text = (ROOT / "docs" / "statistics.md").read_text(encoding="utf-8")
    section = text[text.index("## The launch is the unit") : text.index("## The old rule's calibration")]
    for name in (
        "estimate",
        "fit_block_means",
        "launch_upper_bound",
        "pivotal_upper_bound",
        "launch_test",
        "run_df",
        "decide",
        "power_at",
        "plan",
        "LAUNCH_SD_FLOOR",
        "UPPER_CONFIDENCE",
    ):
        assert f"nested.{name}" in section, name
        assert hasattr(nested, name), name
    assert "Components.block_variance_estimate" in section and hasattr(nested.Components, "block_variance_estimate")
    assert f"({nested.LAUNCH_SD_FLOOR:.1%})" in section
    assert f"one-sided {nested.UPPER_CONFIDENCE:.0%} upper bound" in section
    from eagle_fix.core import variance

    assert f"({variance.PIVOT_DRAWS} seeded draws, `eagle_fix.core.variance.PIVOT_DRAWS`" in section
    assert "t₀.₉(df)" in section and nested.FUTILITY_CONFIDENCE == 0.9
    assert "blocks − 2" in section and nested.run_df(4) == 2 and nested.run_df(2) == 1
    assert "scipy.stats.f" in section and "scipy.stats.t" in section
    assert len(text.encode()) <= 40 * 1024


def test_pool_estimates_from_every_committed_aa_file_of_the_machine_and_point_kind(tmp_path, capsys):
    """`eagle-fix noise --pool`: the measuring run, the clock run and the calibration's A/A trials of 8d487f's 8K
    eager EAGLE3 in one record (its sources say which), not the +5% trials; a machine without any is refused."""
    argv = ["noise", "--pool", "--machine", "cpu-intel-f6m167-2c-8d487f", "--folder", str(tmp_path)]
    assert cli.main(argv) == 0
    [rec] = tmp_path.glob("*/cpu-quick-8192-eager-eagle3.json")
    data = json.loads(rec.read_text())
    sources = data["sources"]
    assert any("/clock/" in s for s in sources) and any("-aa-" in s for s in sources)
    assert sum("launch-cpu-intel-f6m167-2c-8d487f/0-" in s for s in sources) == 10
    assert not any("/0.05-" in s for s in sources)
    assert data["metrics"]["step_ms"]["blocks"] == 36 and data["metrics"]["step_ms"]["df_launch"] == 34
    capsys.readouterr()
    assert cli.main([*argv[:3], "nowhere", "--folder", str(tmp_path)]) == 2
    assert "no A/A file" in capsys.readouterr().err


def test_the_operating_curve_is_the_rule_simulated_and_could_detect_reads_it(tmp_path):
    """simulate.operating_curve runs `ab`'s rule (launch_test pooled with the record, decide at each look) on runs
    from the record's noise: a small version rises from near 0 at no change to near 1 at 8%; could_detect reads
    the 90% point of the committed curves; detectable interpolates between the curve's points."""
    from eagle_fix.gate import simulate

    rec = json.loads((ROOT / "results/gate/cpu-intel-f6m167-2c-8d487f/cpu-quick-8192-eager-eagle3.json").read_text())
    curve = simulate.operating_curve(rec, n=60, seed=1)
    rows = {r["shift"]: r["exit_1"] for r in curve["rows"]}
    assert rows[0.0] <= 0.1 and rows[0.08] >= 0.9 and curve["plan"]["rounds"] == rec["plan"]["rounds"]
    rows = [{"shift": 0.03, "exit_1": 0.5}, {"shift": 0.05, "exit_1": 1.0}]
    assert simulate.detectable(rows) == pytest.approx(0.046)
    assert simulate.detectable(rows[:1]) is None
    committed = json.loads((ROOT / "results/simulation/operating-curves.json").read_text())
    mine = next(
        c for c in committed["curves"] if c["machine"] == rec["machine"] and c["point"] == "cpu-quick-8192-eager-eagle3"
    )
    assert simulate.could_detect(rec["machine"], "cpu-quick-8192-eager-eagle3") == mine["detect_90"]
    assert all(c["detect_90"] is not None and c["detect_90"] <= 0.05 for c in committed["curves"])  # 5% caught in 90%
    assert simulate.could_detect("nowhere", "x", folder=tmp_path) is None


def test_the_committed_coverage_of_the_bound_is_at_least_93_percent():
    """results/simulation/launch-bound-coverage.json: every cell (record design, noise shape, true launch sd) of
    the bound as used covers the true launch sd in at least 93% of simulated pools; a small fresh run agrees."""
    from eagle_fix.gate import simulate

    data = json.loads((ROOT / "results/simulation/launch-bound-coverage.json").read_text())
    assert data["confidence"] == 0.95 and len(data["rows"]) >= 7 * 2 * 3
    low = [r for r in data["rows"] if r["as_used_covers"] < 0.93]
    assert not low, low
    rec = json.loads((ROOT / "results/gate/cpu-intel-f6m167-2c-8d487f/cpu-quick-8192-eager-eagle3.json").read_text())
    small = simulate.coverage([rec], n=20, seed=3)
    assert len(small["rows"]) == len(simulate.SHAPES) * len(simulate.LAUNCH_SDS)
    assert all(r["as_used_covers"] >= 0.8 for r in small["rows"])


def test_one_file_of_two_launch_pairs_is_not_estimable_and_says_so(tmp_path, capsys):
    """gpu-check's noise step measures 2 launch pairs: after the start order no degree of freedom bounds the launch
    sd, so the record says 'not estimable' and the plan states nothing, instead of a crash (NaN rounds) or a number."""
    one = CAL / "launch-cpu-intel-f6m167-2c-8d487f" / "0-01.json"
    assert cli.main(["noise", "--from", str(one), "--folder", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "launch sd not estimable" in out and "catches nothing it can state" in out
    (written,) = tmp_path.glob("*/*.json")
    plan = json.loads(written.read_text())["plan"]
    assert plan["detectable"] is None or plan["detectable"] != plan["detectable"]  # None or NaN, never a figure
