"""A trained draft's record (its training.json) as the docs' table, so the figures of a training run that took
hours in pieces are quoted from the committed record, never typed by hand."""

from __future__ import annotations

import json
from pathlib import Path

from eagle_fix.core.errors import EagleFixError
from eagle_fix.publish.tables import md_table


def draft_training_table(paths: list[Path]) -> str:
    """One row per piece of each record: the steps it ran, its wall time and start, and the held-out windows'
    loss and accuracy per draft step (training-time test) when it ended."""
    rows = []
    for path in paths:
        try:
            rec = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise EagleFixError(f"--table draft-training: {path} is not a readable training.json ({exc})") from None
        for i, piece in enumerate(rec.get("pieces") or (), 1):
            held = piece.get("held_out") or {}
            acc = held.get("acc") or []
            rows.append([
                str(i), f"{piece['from_step']}-{piece['to_step']} of {rec['settings']['steps']}",
                f"{piece['wall_s'] / 60:.0f}", piece["started"][:16].replace("T", " "),
                f"{held['loss']:.2f}" if "loss" in held else "-",
                " / ".join(f"{a:.3f}" for a in acc) or "-",
            ])  # fmt: skip
    if not rows:
        raise EagleFixError(f"--table draft-training: {' '.join(map(str, paths))} holds no pieces")
    head = ["piece", "steps", "wall (min)", "started (UTC)", "held-out loss (weighted sum over TTT steps)",
            "held-out accuracy, TTT step 1 / 2 / 3"]  # fmt: skip
    return md_table(head, rows)
