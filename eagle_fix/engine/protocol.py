"""What the parent and the engine child say to each other, one JSON object a line: a point to measure
(`PointCommand`) and what it measured (`PointReply`). Typed here once, so the sweep, `eagle-fix ab` and the
child cannot drift apart. Reading ignores keys it does not know, so one side of `eagle-fix ab` may run
another checkout's child."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from eagle_fix.core.record import ACCEPTANCE_COLUMNS


def _known(cls: type, message: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in message.items() if k in names}


@dataclass(frozen=True)
class PointCommand:
    """Measure one point on the warm engine: `ttft_repeats` full prefills, then `repeats` decode runs of
    `batch_size` seeded prompts of `prompt_len` tokens, `output_len` tokens each."""

    prompt_len: int
    batch_size: int
    output_len: int
    seed: int = 0
    repeats: int = 1
    ttft_repeats: int = 1  # 0: the prompt is in the prefix cache already (eagle-fix ab's later rounds)
    temperature: float = 0.0  # 0: greedy; above, no per-request seed (the engine's seed fixes the draws)

    def message(self) -> dict[str, Any]:
        return {"op": "point", **asdict(self)}

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> PointCommand:
        return cls(**_known(cls, message))


EXIT = {"op": "exit"}

# vLLM's spec-decode counters and the drafter's own, taken around a point's first decode run (EAGLE3 only).
ACCEPTANCE_FIELDS = (*ACCEPTANCE_COLUMNS, "missing_hooks")


@dataclass
class PointReply:
    """A point's raw samples per metric (medians and intervals are the parent's business), the first decode
    run's output and, on the EAGLE3 arm, its acceptance counts; the worker's memory over the point."""

    prompt_len: int
    samples: dict[str, list[float]] = field(default_factory=dict)
    output_tokens: int | None = None
    output_token_ids_head: list[int] | None = None
    output_token_ids: list[int] | None = None  # the first request's, whole (eagle_fix.core.parity)
    output_logprob_margins: list[float | None] | None = None  # its tokens' top-two logprob margins (the same)
    num_drafts: int | None = None
    num_draft_tokens: int | None = None
    num_accepted_tokens: int | None = None
    accepted_per_position: list[int] | None = None
    acceptance_length: float | None = None
    per_position_acceptance: list[float] | None = None
    drafter_steps: int | None = None
    drafter_proposals: int | None = None
    drafter_empty_proposals: int | None = None
    drafter_coverage: float | None = None
    max_seq_len_drafted: int | None = None
    drafter_calls_damaged: int | None = None
    missing_hooks: list[str] | None = None
    drafter_ranks: list[dict[str, Any]] | None = None  # tensor parallel: each rank's counters and step clock
    drafter_ranks_disagree: list[str] | None = None
    worker_memory: dict[str, Any] | None = None

    def message(self) -> dict[str, Any]:
        return {"event": "point", **asdict(self)}

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> PointReply:
        return cls(**_known(cls, message))

    def acceptance(self) -> dict[str, Any]:
        """The acceptance fields this reply carries (none on the baseline arm)."""
        return {k: getattr(self, k) for k in ACCEPTANCE_FIELDS if getattr(self, k) is not None}
