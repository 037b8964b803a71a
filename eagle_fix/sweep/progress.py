"""Progress of a sweep: a tqdm bar on the terminal and one plain line per finished point, also appended to
$EAGLE_FIX_PROGRESS when set (asv shows a benchmark's output only at its end, so scripts/bench.sh follows
that file)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from eagle_fix.core import record
from eagle_fix.core.point import Point
from eagle_fix.core.settings import PROGRESS_ENV


class Progress:
    """A tqdm bar on the terminal and one plain line per finished point (context, mode, arm,
    elapsed, decode tok/s), also appended to $EAGLE_FIX_PROGRESS when set."""

    def __init__(self, total: int, initial: int, enabled: bool):
        self.start = time.monotonic()
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, unit="point", dynamic_ncols=True, file=sys.stderr)
        self.path = os.environ.get(PROGRESS_ENV)

    def status(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_description(text)

    def point(self, rec: dict[str, Any]) -> None:
        decode = rec.get("decode_throughput_tok_s")
        line = (
            f"[eagle-fix] {Point.of(rec).words()}: "
            f"{rec['status']}, {time.monotonic() - self.start:.0f} s elapsed"
            + (f", decode {decode:.1f} tok/s" if decode else "")
            + (f", acceptance {rec['acceptance_length']:.2f}" if rec.get("acceptance_length") else "")
        )
        if rec["status"] != "ok":
            line += f": {record.cause(rec.get('error'), 200)}"
        if self.bar is not None:
            self.bar.update(1)
            self.bar.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr, flush=True)
        if self.path:
            try:
                with open(self.path, "a") as f:
                    f.write(line + "\n")
            except OSError as exc:
                print(f"[eagle-fix] progress file {self.path}: {exc.strerror}", file=sys.stderr)
                self.path = None

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
