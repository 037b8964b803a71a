"""`eagle-fix gpu-check` without a GPU: one line where it cannot run, one line per bad argument, and its CUDA
judgements on records shaped as a CUDA run writes them (the branch CI cannot reach: no GPU here). The
rehearsal on this machine's own engine runs is tests/engine/test_engine.py::test_the_gpu_check_rehearsed_on_this_sweep."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT, eagle_fix_cli, run_script
from eagle_fix.core.errors import EagleFixError
from eagle_fix.pairs.profiles import get_profile
from eagle_fix.releases import gpu_check, gpu_claims
from eagle_fix.releases.gpu_check import GpuCheckArgs, Step, execute, fresh_work, records_file, steps
from eagle_fix.releases.gpu_claims import StepRun, judge


def script(*args, path=None):
    env = {"PYTHON": sys.executable, **({"PATH": path} if path is not None else {})}
    return run_script("scripts/gpu-check.sh", *args, env=env)


def test_without_a_gpu_the_script_and_the_command_answer_in_one_line():
    proc = script()
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "gpu-check: no GPU here (no nvidia-smi on PATH); on a CPU machine rehearse it: scripts/gpu-check.sh --rehearse"
    ]
    # past the script (nvidia-smi present, no CUDA device): the command's own line
    proc = eagle_fix_cli("gpu-check")
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        (
            "eagle-fix gpu-check: error: no CUDA device here (torch.cuda.is_available() is False); on a CPU machine "
            "run it with --rehearse"
        )
    ]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--only", "hooks,bogus"], "--only bogus: no such step; give some of hooks,doctor,fix-ab"),
        (["--only", "setup,x"], "or a group setup,fix-eager,fix-compile,memory,noise"),
        (["--deadline", "0"], "--deadline 0: give seconds, a positive integer such as 270"),
        (["--deadline", "2m"], "--deadline 2m: give seconds"),
        (["--out", "eagle_fix"], "--out eagle_fix is a folder; give a file path such as eagle_fix/gpu-check.json"),
        (["--work", "eagle_fix"], "--work eagle_fix holds another run's records; give a new or empty folder"),
        (["--records", "fix-ab=/no/such.jsonl"], "--records fix-ab=/no/such.jsonl: no such file /no/such.jsonl"),
        (["--records", "probe=x"], "give STEP=FILE[,FILE...] with STEP fix-ab, dummy or damage"),
        (["--context", "2048"], "--context 2048: the checks need a context past the draft's 2048"),
    ],
)
def test_bad_arguments_are_one_line(argv, words):
    before = sorted((ROOT / ".gpu-check").glob("*")) if (ROOT / ".gpu-check").is_dir() else []
    proc = eagle_fix_cli("gpu-check", "--rehearse", *argv)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1 and words in proc.stderr, proc.stderr
    after = sorted((ROOT / ".gpu-check").glob("*")) if (ROOT / ".gpu-check").is_dir() else []
    assert after == before  # refused before anything ran: no work folder made


def test_torch_only_into_a_folder_is_refused_before_the_probe(tmp_path):
    """Issue 56's case 15: `--torch-only --out <a folder>` ended in a traceback after the probe ran."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "nvidia-smi").write_text("#!/bin/sh\necho fake\n")
    (bin_ / "nvidia-smi").chmod(0o755)
    folder = tmp_path / "out"
    folder.mkdir()
    proc = script("--torch-only", "--out", str(folder), path=f"{bin_}:{os.environ['PATH']}")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"gpu-check: --out {folder} is a folder; give a file path such as {folder}/probe.json"
    ]
    assert list(folder.iterdir()) == []


def test_torch_only_is_the_probe_alone(tmp_path):
    """A GPU box with torch and no vLLM: the probe needs neither the project's venv nor vLLM (a fake
    nvidia-smi gets past the script's GPU check; torch here has no CUDA, so every answer is a reason)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "nvidia-smi").write_text("#!/bin/sh\necho fake\n")
    (bin_ / "nvidia-smi").chmod(0o755)
    out = tmp_path / "probe.json"
    proc = script("--torch-only", "--out", str(out), path=f"{bin_}:{os.environ['PATH']}")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(out.read_text())
    assert got["cuda_available"] is False and got["step_clock"] == {"error": "torch.cuda.is_available() is False"}
    assert "error" in got["nvml"]


def _cuda_records(upstream_runner="v2", cause="CUDA error: device-side assert triggered"):
    base = {"arm": "eagle3", "context_len": 8192, "model_runner": "v2", "status": "ok", "num_drafts": 40}
    on = {"acceptance_length": 3.9, "drafter_proposals": 40, "drafter_coverage": None, "max_seq_len_drafted": 8300}
    return [
        {**base, **on, "mode": "eager", "fix": "on", "output_token_ids": [1, 2, 3]},
        {**base, **on, "mode": "compile", "fix": "on", "output_token_ids": [1, 2, 3]},
        {**base, "mode": "compile", "fix": "off", "status": "failed", "error": f"engine died; cause: {cause}"},
        {**base, "mode": "eager", "fix": "off", "acceptance_length": 1.0, "drafter_proposals": 40, "flags": []},
        {**base, **on, "mode": "eager", "fix": "upstream", "model_runner": upstream_runner},
    ]


def test_the_cuda_judgements_on_a_v2_run():
    dummy = {
        "arm": "eagle3",
        "mode": "eager",
        "status": "ok",
        "device": {"kind": "cuda"},
        "clocks": {"step_ms": "host"},
        "step_ms": 12.5,
        "vllm_kv_cache_bytes": 1 << 30,
        "vllm_weights_bytes": 16 << 30,
        "torch_peak_allocated_bytes": 20 << 30,
        "peak_gpu_memory_bytes": 40 << 30,
        "gpu_memory_scope": "process",
    }
    probe = {
        "nvml": {"v1_used": 5, "v2_used": 4, "v2_reserved": 1, "sampler_used": 4, "sampler_reads": "v2"},
        "step_clock": {"host_ms": 0.4, "device_ms": 30.0, "host_over_device": 0.013},
    }
    compiled = {
        **dummy,
        "mode": "compile",
        "cudagraph_mode": "FULL_AND_PIECEWISE",
        "vllm_cudagraph_pool_bytes": 1 << 28,
    }
    gpu = {
        "name": "NVIDIA H100 80GB HBM3",
        "driver_version": "580.65",
        "cuda_driver_version": "13.0",
        "compute_capability": "9.0",
        "memory_total_bytes": 85520809984,
    }
    machine = {"fingerprint": {"cuda": gpu}, "limits": {"device": "cuda", "peak_gflops": 7e5, "bandwidth_gbs": 2900}}
    runs = {
        "hooks": StepRun(rc=0, tail="12 passed"),
        "doctor": StepRun(rc=0, report={"model_runner": "v2", "verdict": "fixed", "vllm_version": "0.33.0"}),
        "fix-ab": StepRun(records=_cuda_records()),
        "dummy": StepRun(records=[dummy, compiled]),
        "machine": StepRun(rc=0, report=machine),
        "damage": StepRun(why_not="step not chosen"),
        "noise": StepRun(why_not="step not chosen"),
        "probe": StepRun(rc=0, report=probe),
    }
    status = {r["check"]: r["status"] for r in judge(runs, cuda=True)}
    assert {k for k, v in status.items() if v != "passed"} == {"damage", "noise"}, status
    # the CPU twin's cause is no answer on CUDA, V1's zero-filled upstream is no answer on V2, a host clock
    # slower than the device is no sign of asynchronous launches, a coverage shown on V2 is a claim it cannot make
    runs["fix-ab"] = StepRun(records=_cuda_records(upstream_runner="v1", cause="index out of bounds: 0 <= tmp9 < 2048"))
    runs["probe"] = StepRun(rc=0, report={**probe, "step_clock": {"host_over_device": 1.2}})
    failed = {r["check"] for r in judge(runs, cuda=True) if r["status"] == "failed"}
    assert failed == {"fix-off-compile-dies", "upstream-per-runner", "host-clock"}
    recs = _cuda_records()
    recs[0]["drafter_coverage"] = 1.0
    runs["fix-ab"] = StepRun(records=recs)
    assert {r["check"]: r["status"] for r in judge(runs, cuda=True)}["v2-coverage"] == "failed"


def test_a_check_with_nothing_to_read_is_not_run_never_passed():
    runs = {
        name: StepRun(records=[], rc=0, report={})
        for name in ("hooks", "doctor", "fix-ab", "dummy", "damage", "noise", "probe")
    }
    rows = {r["check"]: r for r in judge(runs, cuda=False)}
    for name in ("fix-on-drafts", "fix-off-compile-dies", "parity", "memory-in-worker", "damage"):
        assert rows[name]["status"] == "not run" and rows[name]["line"].startswith("no "), rows[name]
    assert all(c.claim and c.docs for c in gpu_claims.CHECKS)


def _cpu_dummy(**kw):
    rec = {"arm": "eagle3", "mode": "eager", "status": "ok", "device": {"kind": "cpu"}, "clocks": {"step_ms": "wall"}}
    return {
        **rec,
        "step_ms": 10.4,
        "vllm_kv_cache_bytes": 1,
        "vllm_weights_bytes": 1,
        "worker_host_peak_bytes": 1,
        **kw,
    }


def test_a_null_step_ms_is_a_finding_not_a_traceback():
    """V2 has not yet been seen to report a step time on a real engine: a null is named and fails its own
    check; every other check is still judged."""
    runs = {"hooks": StepRun(rc=0, tail="12 passed"), "dummy": StepRun(records=[_cpu_dummy(step_ms=None)])}
    rows = {r["check"]: r for r in judge(runs, cuda=False)}
    assert rows["step-clock"]["status"] == "failed"
    assert "step_ms null (the engine reported no step time)" in rows["step-clock"]["line"]
    assert rows["hooks"]["status"] == "passed" and rows["memory-in-worker"]["status"] == "passed"
    runs["dummy"] = StepRun(records=[_cpu_dummy()])
    assert {r["check"]: r["status"] for r in judge(runs, cuda=False)}["step-clock"] == "passed"


def test_a_judge_that_raises_fails_its_own_check_with_the_cause(monkeypatch):
    def broken(runs, cuda):
        return 1 / 0

    checks = tuple(
        dataclasses.replace(c, judge=broken) if c.name == "memory-in-worker" else c for c in gpu_claims.CHECKS
    )
    monkeypatch.setattr(gpu_claims, "CHECKS", checks)
    runs = {"hooks": StepRun(rc=0, tail="12 passed"), "dummy": StepRun(records=[_cpu_dummy()])}
    rows = {r["check"]: r for r in judge(runs, cuda=False)}
    assert rows["memory-in-worker"]["status"] == "failed"
    assert rows["memory-in-worker"]["line"] == "the judgement raised ZeroDivisionError: division by zero"
    assert rows["step-clock"]["status"] == "passed" and rows["hooks"]["status"] == "passed"


@pytest.mark.parametrize(
    "death", ["CUDA error: device-side assert triggered", "CUDA error: an illegal memory access was encountered"]
)
def test_the_fix_off_judges_name_either_cuda_death(death):
    """The CUDA rotary kernel reads past the cache with no bounds check: the engine may stop with an illegal
    memory access instead of the device-side assert, compiled or eager; either is named as such."""
    recs = _cuda_records(cause=death)
    eager_off = next(r for r in recs if (r["mode"], r["fix"]) == ("eager", "off"))
    eager_off.update(status="failed", error=f"engine died; cause: {death}", acceptance_length=None)
    rows = {r["check"]: r for r in judge({"fix-ab": StepRun(records=recs)}, cuda=True)}
    name = "a device-side assert" if "assert" in death else "an illegal memory access"
    for check in ("fix-off-compile-dies", "fix-off-eager-silent"):
        assert rows[check]["status"] == "passed" and f"failed ({name})" in rows[check]["line"], rows[check]
    assert "expected: a device-side assert or an illegal memory access" in rows["fix-off-compile-dies"]["line"]
    # on CPU neither is the answer (inductor's bounds check is), and a dead eager engine is no silent garbage
    assert judge({"fix-ab": StepRun(records=recs)}, cuda=False)[3]["status"] == "failed"


# ---------------------------------------------------------------- the run: fakes of the steps (python -c)


def _py(code):
    return (sys.executable, "-c", code)


def _fake_plan(work, out, fix_ab="import time; time.sleep(60)"):
    """hooks and doctor as they answer on CPU; the doctor reads the summary as it stands when it runs; an
    fix-ab step from `fix_ab` (its records file is RECORDS); the other steps do nothing."""
    doctor = (
        "import json; s = json.load(open(OUT)); "
        "seen = [c['status'] for c in s['checks'] if c['check'] == 'hooks'][0]; "
        "print(json.dumps({'model_runner': 'v1', 'verdict': 'limited', 'vllm_version': 'x', 'seen_hooks': seen}))"
    ).replace("OUT", repr(str(out)))
    plan = [Step("hooks", _py("print('12 passed')")), Step("doctor", _py(doctor))]
    fix_ab = fix_ab.replace("RECORDS", repr(str(records_file(work, "fix-ab"))))
    plan.append(Step("fix-ab", _py(fix_ab), records=True))
    plan += [
        Step(n, _py("pass"), records=n in ("damage", "dummy")) for n in ("damage", "dummy", "machine", "probe", "noise")
    ]
    return plan


def _args(**kw):
    return GpuCheckArgs(False, False, (), (), {}, None, None, False, **kw)


def _execute(plan, work, out, **kw):
    names = [s.name for s in plan]
    return execute(plan, names, _args(**kw), work=work, root=ROOT, out=out, cuda=False, machine="m")


def test_a_deadline_cuts_the_running_step_and_still_writes_the_summary(tmp_path):
    """The step running at the deadline is stopped (SIGTERM); the steps after it are `not run` with the
    deadline as the reason; the summary was already written after each earlier step."""
    work, out = tmp_path / "work", tmp_path / "summary.json"
    work.mkdir()
    drafted = {"acceptance_length": 3.9, "drafter_proposals": 40, "max_seq_len_drafted": 8300}
    record = json.dumps({"arm": "eagle3", "context_len": 8192, "mode": "eager", "fix": "on", "status": "ok", **drafted})
    fix_ab = f"import time; open(RECORDS, 'a').write({record!r} + '\\n'); time.sleep(60)"
    t0 = time.monotonic()
    rc = _execute(_fake_plan(work, out, fix_ab), work, out, deadline=4)
    took = time.monotonic() - t0
    assert took < 4 + gpu_check.STOP_GRACE_S and took >= 3.5, took
    got = json.loads(out.read_text())
    assert got["steps"]["doctor"]["report"]["seen_hooks"] == "passed"  # written after the hooks step
    assert got["steps"]["fix-ab"]["cut"] == "cut by the deadline (--deadline 4 s)"
    assert len(got["steps"]["fix-ab"]["records"]) == 1  # what it measured before the cut is kept
    for name in ("damage", "dummy", "machine", "probe", "noise"):
        assert got["steps"][name]["why_not"] == "the deadline (--deadline 4 s) came first"
    rows = {r["check"]: r for r in got["checks"]}
    assert rows["hooks"]["status"] == rows["doctor"]["status"] == "passed"
    assert rows["fix-off-compile-dies"]["status"] == "not run"
    assert rows["fix-off-compile-dies"]["line"].startswith("cut by the deadline (--deadline 4 s): no ")
    # a pass on a cut step's partial records is no pass: the step never finished
    assert rows["fix-on-drafts"]["status"] == "not run" and "before it finished" in rows["fix-on-drafts"]["line"]
    assert {rows[c]["status"] for c in ("damage", "noise", "memory-in-worker", "limits-on-device")} == {"not run"}
    assert "deadline" in rows["noise"]["line"]
    assert rc == 0 and not list(tmp_path.glob(".summary.json.*.tmp"))


def test_a_second_run_in_the_same_checkout_judges_only_its_own_records(tmp_path):
    """Each run gets a fresh work folder: the second's fix A/B wrote nothing, so its fix checks are not run,
    never judged on the first run's records."""
    base = tmp_path / ".gpu-check"
    record = json.dumps({"arm": "eagle3", "context_len": 8192, "mode": "eager", "fix": "on", "status": "ok"})
    first, second = fresh_work(base, "all"), fresh_work(base, "all")
    assert first != second and first.parent == second.parent == base
    out1, out2 = tmp_path / "one.json", tmp_path / "two.json"
    _execute(_fake_plan(first, out1, f"open(RECORDS, 'w').write({record!r} + '\\n')"), first, out1)
    _execute(_fake_plan(second, out2, "pass"), second, out2)
    one, two = (json.loads(p.read_text()) for p in (out1, out2))
    assert len(one["steps"]["fix-ab"]["records"]) == 1 and two["steps"]["fix-ab"]["records"] == []
    assert {r["check"]: r["status"] for r in one["checks"]}["fix-on-drafts"] == "failed"  # judged: 0 proposals
    assert {r["check"]: r["line"] for r in two["checks"]}["fix-on-drafts"] == "no fix-on point past 2048 in the records"


def test_the_groups_cover_every_step_in_order_of_value(tmp_path):
    """`--only` groups: hooks and doctor, then the fix A/B eager (with the damaged drafter), then compiled,
    then memory, then the noise; every step in one of them; an engine step narrowed to its group's modes."""
    grouped = [n for names, _ in gpu_check.GROUPS.values() for n in names]
    assert set(grouped) == set(gpu_check.STEP_NAMES) and grouped.count("fix-ab") == 2  # eager, then compiled
    only, modes = gpu_check.expand_only(("fix-eager",))
    assert only == ("fix-ab", "damage") and modes["fix-ab"] == ("eager",)
    plan = {s.name: s for s in steps(True, tmp_path, modes=modes)}
    assert "--modes eager --profile gpu-tiny" in " ".join(plan["fix-ab"].argv)
    assert "--point-timeout 180" in " ".join(plan["fix-ab"].argv) and plan["fix-ab"].timeout_s <= 480
    cpu = {s.name: s for s in steps(False, tmp_path)}
    assert "--point-timeout" not in " ".join(cpu["fix-ab"].argv) and cpu["fix-ab"].timeout_s == 1800
    assert "--modes eager,compile" in " ".join(cpu["fix-ab"].argv)


@pytest.mark.engine
@pytest.mark.slow  # 122 s; in CI the deadline's cut, its reasons and the kept summary are the fake plan's tests above
def test_the_rehearsal_with_a_deadline_keeps_what_it_measured(tmp_path):
    """Issue 52's bar: `--rehearse --deadline 120` on this machine ends within 150 s with the hooks and doctor
    judged and every other step judged or not run with the deadline as its reason (the real engine starts
    on CPU for the fix A/B and is stopped there)."""
    out = tmp_path / "summary.json"
    t0 = time.monotonic()
    proc = eagle_fix_cli("gpu-check", "--rehearse", "--deadline", "120", "--out", str(out), timeout=300)
    took = time.monotonic() - t0
    assert took < 150, (took, proc.stderr[-3000:])
    got = json.loads(out.read_text())
    rows = {r["check"]: r for r in got["checks"]}
    assert rows["hooks"]["status"] == rows["doctor"]["status"] == "passed", rows
    for row in rows.values():
        assert row["status"] in ("passed", "failed") or "deadline" in row["line"] or "CUDA only" in row["line"], row
    steps_ = got["steps"]
    assert all(s["exit"] is not None or "deadline" in (s["why_not"] or "") for s in steps_.values()), steps_
    assert any(s["cut"] or "deadline" in (s["why_not"] or "") for s in steps_.values())  # 120 s is too short here


def _bench_default(tmp_path, cuda):
    """scripts/bench.sh's profile-default lines, run as the script runs them, with torch faked to see a GPU
    (or none): the lines themselves, read from the script."""
    lines = (ROOT / "scripts" / "bench.sh").read_text().splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("export EAGLE_FIX_PROFILE="))
    fake = tmp_path / f"torch-{cuda}"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text(f"class cuda:\n    is_available = staticmethod(lambda: {cuda})\n")
    env = {k: v for k, v in os.environ.items() if k != "EAGLE_FIX_PROFILE"}
    code = "set -euo pipefail\n" + "\n".join(lines[at : at + 2]) + '\necho "profile=$EAGLE_FIX_PROFILE"'
    proc = subprocess.run(
        ["bash", "-c", code],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(fake)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()


def test_bench_on_cuda_runs_the_quick_grid_with_its_estimate(tmp_path):
    """On CUDA scripts/bench.sh's default is gpu-quick (gpu-dummy's whole grid on request, as cpu-quick is to
    cpu), with its time on one H100 printed and marked unverified; on CPU the default stays the full cpu grid."""
    got = _bench_default(tmp_path, cuda=True)
    assert got[-1] == "profile=gpu-quick"
    assert got[0].startswith("bench: gpu-quick: about ") and "UNVERIFIED until a GPU measures it" in got[0], got
    assert _bench_default(tmp_path, cuda=False) == ["profile=cpu"]


def test_the_quick_cuda_grid_fits_a_first_visit():
    """gpu-quick: at most 10 minutes on one H100 by the estimate (the CPU's measured shares of its limits on
    the same 8B shapes, on an H100's datasheet limits, plus assumed engine starts); the whole grid is not."""
    from eagle_fix.releases import gpu_estimate

    quick, whole = gpu_estimate.estimate("gpu-quick"), gpu_estimate.estimate("gpu-dummy")
    assert quick["seconds"] <= 600 and quick["verified"] is False
    assert whole["seconds"] > 2 * quick["seconds"] and whole["starts_s"] == quick["starts_s"]
    assert 0 < quick["shares"]["prefill_pct_of_peak_flops"] <= 1 and 0 < quick["shares"]["decode_pct_of_bandwidth"] <= 1
    assert get_profile("gpu-quick").target == get_profile("gpu-dummy").target
    with pytest.raises(EagleFixError, match="a CUDA profile"):
        gpu_estimate.estimate("cpu-quick")


def test_a_signalled_check_stops_its_step_and_keeps_the_summary(tmp_path):
    """A call's time limit ends gpu-check with SIGTERM: the step running is stopped with it (no orphan
    measures on), the summary names it and the steps after it, and the exit code says which signal."""
    work, out, pid_file = tmp_path / "work", tmp_path / "summary.json", tmp_path / "step.pid"
    work.mkdir()
    fix_ab = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    code = (
        "import sys; from pathlib import Path; sys.path.insert(0, 'tests/releases'); sys.path.insert(0, 'tests')\n"
        "import test_gpu_check as t\n"
        f"work, out = Path({str(work)!r}), Path({str(out)!r})\n"
        f"sys.exit(t._execute(t._fake_plan(work, out, {fix_ab!r}), work, out))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    for _ in range(300):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.1)
    proc.send_signal(15)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + 15, err
    step_pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(step_pid, 0)
    got = json.loads(out.read_text())
    assert got["steps"]["fix-ab"]["cut"] == "stopped by SIGTERM to gpu-check"
    assert got["steps"]["noise"]["why_not"] == "gpu-check was stopped by SIGTERM"
    assert {r["check"]: r["status"] for r in got["checks"]}["hooks"] == "passed"
