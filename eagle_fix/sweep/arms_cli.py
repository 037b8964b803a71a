"""`eagle-fix arms` (and `eagle-fix run --arms` with no value): the arms a sweep can compare, from the
registry (eagle_fix.core.arms), so the names `--arms` takes are read where they are defined."""

from __future__ import annotations

import argparse

from eagle_fix.core import arms
from eagle_fix.pairs.profiles import PROFILES


def arms_table() -> str:
    """One row per registered arm: what `--arms` takes, vLLM's method, whether it needs a draft checkpoint,
    whether it runs the fix arms (`--fix`), whether this release's sweep runs it, and its label."""
    import pandas as pd

    rows = [
        {
            "arm": a.name,
            "method": a.method or "-",
            "needs draft": "yes" if a.needs_draft else "no",
            "takes fix": "yes" if a.takes_fix else "no",
            "runs": "yes" if a.name in arms.ENGINE_ARMS else "not yet",
            "label": a.label,
        }
        for a in arms.ARMS.values()
    ]
    return pd.DataFrame(rows).to_string(index=False)


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    """No options: the table is the registry's."""


def cli_main(args: argparse.Namespace) -> int:
    print(arms_table())
    print(
        f"\ndefault: --arms {','.join(arms.DEFAULT_ARMS)}; --fix {','.join(arms.FIX_ARMS)} applies to arms that take the fix"
    )
    for a in arms.ARMS.values():  # what an arm's draft is on the profiles that say (draft_model on CPU: the target)
        noted = sorted({p.arm_note(a.name) for p in PROFILES.values()} - {""})
        for note in noted:
            where = ",".join(n for n, p in PROFILES.items() if p.arm_note(a.name) == note)
            print(f"{a.name} on {where}: {note}")
    return 0
