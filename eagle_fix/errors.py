"""The one user-error type: caught once in the CLI, printed as one line, non-zero exit."""


class EagleFixError(Exception):
    """Bad input or an unusable environment; the message names the problem and the fix."""

    def __init__(self, message: str, *, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code
