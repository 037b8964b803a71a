"""The docs' generated tables, remade from the committed files each names, so no doc states a number by hand."""

from __future__ import annotations

from pathlib import Path

from eagle_fix.core.errors import EagleFixError
from eagle_fix.gate import acceptance_power, calibration_tables, cost, noise_tables
from eagle_fix.publish import break_even as to_pay
from eagle_fix.publish.file_tables import (
    ab_table,
    compare_table,
    cost_table,
    gpu_check_steps_table,
    gpu_check_table,
    map_table,
    overhead_table,
    release_cost_table,
    release_fix_ab_table,
    releases_table,
)
from eagle_fix.publish.frame import select_rows
from eagle_fix.publish.prompt_tables import prompts_table
from eagle_fix.publish.tables import (
    acceptance_table,
    fix_ab_table,
    machines_table,
    noise_table,
    roofline_table,
    settings_table,
    summary_table,
)
from eagle_fix.publish.training_tables import draft_training_table
from eagle_fix.releases import registry as releases
from eagle_fix.store.results import load_results

# Every table in README.md and docs/*.md that holds measured numbers sits between
#   <!-- eagle-fix report --table KIND SOURCE... [key=value...] -->  and  <!-- end table -->
# and is regenerated from the committed files it names: `eagle-fix report --docs` rewrites them,
# `eagle-fix report --docs --check` (a test) fails when one differs.
BEGIN = "<!-- eagle-fix report --table "
END = "<!-- end table -->"

# Tables read from their files as they are (no records frame): ab files, cost, the release matrix.
FILE_TABLES = {
    "ab": ab_table,
    "cost": cost_table,
    "overhead": overhead_table,
    "releases": releases_table,
    "release-cost": release_cost_table,
    "release-fix-ab": release_fix_ab_table,
}
FILE_TABLES["map"] = map_table  # eagle-fix map files (.ndjson)
FILE_TABLES["compare"] = compare_table  # two `eagle-fix run` files, as `eagle-fix compare` judges them
# the gate's calibration (scripts/calibrate.sh): a folder of ab trials or the files themselves
FILE_TABLES["calibration"] = calibration_tables.rates_table
FILE_TABLES["calibration-pool"] = calibration_tables.pooled_table  # today's rule's real trials, every machine
FILE_TABLES["noise-floor"] = calibration_tables.floor_table
FILE_TABLES["calibration-rounds"] = calibration_tables.resampled_table
FILE_TABLES["start-order"] = calibration_tables.start_order_table
FILE_TABLES["machine-noise"] = calibration_tables.machine_noise_table
FILE_TABLES["calibration-coverage"] = calibration_tables.coverage_table
# the gate's noise (eagle-fix noise): each machine's components and plan, and the replay of the A/A pools
FILE_TABLES["gate-components"] = noise_tables.components_table
FILE_TABLES["gate-clocks"] = noise_tables.clocks_table
FILE_TABLES["gate-replay"] = noise_tables.replay_table
# the gate's simulations under the committed noise (python -m eagle_fix.gate.simulate): results/simulation
FILE_TABLES["gate-bound-coverage"] = noise_tables.coverage_table
FILE_TABLES["gate-operating-curve"] = noise_tables.operating_table
# the acceptance gate's power (scripts/calibrate_acceptance.sh): the drafter damaged on purpose
FILE_TABLES["acceptance-power"] = acceptance_power.power_table
FILE_TABLES["gate-cost"] = cost.cost_table  # what gating the cpu-quick and cpu grids costs on one machine
FILE_TABLES["gpu-check"] = gpu_check_table  # scripts/gpu-check.sh's summaries: each CUDA claim and its check
FILE_TABLES["gpu-check-steps"] = gpu_check_steps_table
FILE_TABLES["break-even"] = to_pay.table  # the acceptance needed to pay per drafted point (#54)
FILE_TABLES["draft-training"] = draft_training_table  # a trained draft's training.json, piece by piece
FILE_TABLES["prompts"] = prompts_table  # points run over several held-out prompts (eagle-fix run --prompts)
FILE_TABLES["settings"] = settings_table  # the environment variables, from eagle_fix.core.settings
# Tables of the records' newest rows (key=value arguments filter them).
DOC_TABLES = {
    "machines": machines_table,
    "summary": summary_table,
    "fix-ab": fix_ab_table,
    "acceptance": acceptance_table,
    "roofline": roofline_table,
    "noise": noise_table,
}


def render_table(kind: str, args: list[str], *, root: Path = Path(".")) -> str:
    """One named table from committed files (paths relative to root) and key=value filters. The word
    @releases stands for the files of every release eagle_fix.releases.registry declares, so that adding a
    release changes no table's list of files."""
    paths = [
        p for a in args if "=" not in a for p in (releases.table_files(kind, root) if a == "@releases" else [root / a])
    ]
    filters = [a for a in args if "=" in a]
    if kind in FILE_TABLES:
        return FILE_TABLES[kind](paths)
    if kind not in DOC_TABLES:
        raise EagleFixError(f"--table {kind}: unknown; choose one of {', '.join([*FILE_TABLES, *DOC_TABLES])}")
    table = DOC_TABLES[kind](select_rows(load_results(paths), *filters))
    if table is None:
        raise EagleFixError(f"--table {kind}: the rows of {' '.join(args)} make no such table")
    return table


def doc_blocks(text: str):
    """(start, end, kind, args) of each generated table block in a document."""
    pos = 0
    while (start := text.find(BEGIN, pos)) != -1:
        head_end = text.index("-->", start)
        words = text[start + len(BEGIN) : head_end].split()
        body_start = head_end + len("-->") + 1
        end = text.index(END, body_start)
        yield body_start, end, words[0], words[1:]
        pos = end + len(END)


def update_docs(root: Path = Path("."), *, check: bool = False) -> list[str]:
    """Regenerate every table block in README.md, docs/*.md and docs/archive/*.md; with check, only report
    which differ."""
    files = [
        root / "README.md",
        *sorted((root / "docs").glob("*.md")),
        *sorted((root / "docs" / "archive").glob("*.md")),
    ]
    stale = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        out, last = [], 0
        for start, end, kind, args in doc_blocks(text):
            fresh = render_table(kind, args, root=root) + "\n"
            if text[start:end] != fresh:
                stale.append(f"{f.relative_to(root)}: table {kind} {' '.join(args)}")
            out += [text[last:start], fresh]
            last = end
        out.append(text[last:])
        if not check:
            f.write_text("".join(out), encoding="utf-8")
    return stale
