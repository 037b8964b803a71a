"""A point of a sweep (context, mode, arm, fix arm; the profile where it matters) and its one way into words:
every message, table and file name that names a point goes through `Point.words` (issue #54)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eagle_fix.core.arms import EAGLE3

# The ways a point is put into words; each other than `text` is the shape a committed file, a generated docs
# table or a test already holds, kept as it was:
#   text   "[profile ]8192 eager eagle3[ fix on]"   messages, logs, verdicts (the default)
#   bare   "8192 eager eagle3[ on]"                 the sweep's failure lines (tests/engine pin them)
#   note   "8192 eagle3[ on] (eager)"               the report's notes (tests/publish pin them)
#   short  "8K eager EAGLE3"                        the calibration tables in docs/
#   file   "[profile-]8192-eager-eagle3[-on]"       file names (results/components/<machine>/<name>.json)
#   engine "eager-eagle3-on|none"                   an engine's log file name (no context: one engine, many points)
STYLES = ("text", "bare", "note", "short", "file", "engine")


@dataclass(frozen=True)
class Point:
    """One point; `context_len` None names an engine (the points of one mode, arm and fix arm)."""

    context_len: int | None
    mode: str
    arm: str
    fix: str | None = None
    profile: str | None = None

    @classmethod
    def of(cls, d: Mapping[str, Any], *, profile: bool = False) -> Point:
        """The point of a record, an identity dict or a table row (pandas rows too); `profile` keeps its profile."""
        ctx = d.get("context_len")
        fix = d.get("fix")
        return cls(
            None if ctx is None else int(ctx),
            d.get("mode"),
            d.get("arm"),
            fix if isinstance(fix, str) and fix else None,  # NaN from pandas is no fix arm
            d.get("profile") if profile else None,
        )

    def words(self, style: str = "text") -> str:
        """The point in words, in one of STYLES."""
        ctx = "" if self.context_len is None else str(self.context_len)
        if style == "text":
            parts = [self.profile, ctx, self.mode, self.arm, f"fix {self.fix}" if self.fix else None]
            return " ".join(p for p in parts if p)
        if style == "bare":
            return " ".join(p for p in (ctx, self.mode, self.arm, self.fix) if p)
        if style == "note":
            return " ".join(p for p in (ctx, self.arm, self.fix) if p) + f" ({self.mode})"
        if style == "short":
            k = "" if self.context_len is None else f"{self.context_len // 1024}K"
            return " ".join(p for p in (k, self.mode, "EAGLE3" if self.arm == EAGLE3.name else self.arm) if p)
        if style == "file":
            return "-".join(p for p in (self.profile, ctx, self.mode, self.arm, self.fix) if p)
        if style == "engine":
            return f"{self.mode}-{self.arm}-{self.fix or 'none'}"
        raise ValueError(f"style {style!r}: choose from {', '.join(STYLES)}")

    def __str__(self) -> str:
        return self.words()
