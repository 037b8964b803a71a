"""The one user-error type (caught once in the CLI, printed as one line, non-zero exit) and the one
parser of the positive integers users type."""

from typing import Any


class EagleFixError(Exception):
    """Bad input or an unusable environment; the message names the problem and the fix."""

    def __init__(self, message: str, *, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


def parse_positive_int(value: Any, flag: str) -> int:
    """An integer > 0 from a CLI string ("8192", "8k", "128K" accepted), or a one-line error."""
    text = str(value).strip().lower()
    mult = 1024 if text.endswith("k") else 1
    try:
        n = int(text[:-1] if mult > 1 else text) * mult
    except ValueError:
        raise EagleFixError(f"{flag} {value!r} is not a number; give a positive integer such as 8192") from None
    if n <= 0:
        raise EagleFixError(f"{flag} {value!r} must be positive; give a positive integer such as 8192")
    return n
