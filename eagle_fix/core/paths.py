"""Where `results/` is: the one place that says so (issue #54). Two answers, each kept as users rely on it:

- `results_dir()`: `results/` of the working directory, as a relative path: where a run writes and where the
  commands read by default (`eagle-fix compare`, `report`, asv's records), so the paths written into records
  and said in messages stay relative to the checkout they ran in; `root=` puts it under another tree.
- `committed_results()`: the `results/` beside the installed package (the checkout's committed evidence:
  the gate's variance components, the acceptance calibration, the 8B-shape CPU records), found from any
  working directory, and the folder a calibration knob must never write into."""

from __future__ import annotations

from pathlib import Path

RESULTS = "results"
# the checkout the package runs from (eagle_fix/core/paths.py -> the repository root)
REPO = Path(__file__).resolve().parents[2]


def results_dir(*parts: str, root: str | Path | None = None) -> Path:
    """`results/` (and PARTS under it) of the working directory, relative; under ROOT when given."""
    base = Path(RESULTS) if root is None else Path(root) / RESULTS
    return base.joinpath(*parts)


def committed_results(*parts: str) -> Path:
    """`results/` (and PARTS under it) of the package's checkout, absolute, whatever the working directory."""
    return results_dir(*parts, root=REPO)
