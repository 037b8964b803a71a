"""The one user-error type (caught once in the CLI, printed as one line, non-zero exit), the one
parser of the positive integers users type, and the argument parser whose usage mistakes are one line."""

import argparse
from typing import Any


class OneLineParser(argparse.ArgumentParser):
    """A usage mistake is one line naming it and where the usage is (#56), not a usage text and a line;
    subcommands' parsers are of this class too (argparse's subparsers take their parent's)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class EagleFixError(Exception):
    """Bad input or an unusable environment; the message names the problem and the fix."""

    def __init__(self, message: str, *, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


# each flag's hint in its own unit: "such as 8192" names a context, and misleads for --repeats
_TOKENS = "a number of tokens such as 8192 (or 8k)"
HINTS = {
    "--contexts": _TOKENS,
    "--context": _TOKENS,
    "--max-model-len": _TOKENS,
    "--output-len": "a number of output tokens such as 256",
    "EAGLE_FIX_OUTPUT_LEN": "a number of output tokens such as 256",
    "--batch-size": "a number of requests such as 1",
    "--num-speculative-tokens": "a number of draft tokens such as 3",
    "--point-timeout": "a number of seconds such as 1800",
    "--sampling-seed": "a seed such as 1",
    "--concurrency": "a number of concurrent requests such as 4",
    "--prompts-per-slot": "a number of requests such as 8",
    "--threads": "a number of CPU threads such as 2",
}


def count_hint(flag: str) -> str:
    """What to give FLAG, in its own unit; a count (repeats, rounds, launches, blocks) unless named in HINTS."""
    return HINTS.get(flag, "a count such as 5")


def parse_positive_int(value: Any, flag: str) -> int:
    """An integer > 0 from a CLI string ("8192", "8k", "128K" accepted), or a one-line error."""
    text = str(value).strip().lower()
    mult = 1024 if text.endswith("k") else 1
    try:
        n = int(text[:-1] if mult > 1 else text) * mult
    except ValueError:
        raise EagleFixError(f"{flag} {value!r} is not a number; give {count_hint(flag)}") from None
    if n <= 0:
        raise EagleFixError(f"{flag} {value!r} must be positive; give {count_hint(flag)}")
    return n
