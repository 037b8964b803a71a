"""What fixes one engine (`EngineSpec`: the pair, the arm, the mode, the engine's knobs) and how it becomes
`vllm.LLM`'s keyword arguments and the engine process's environment. `eagle_fix.sweep.road` builds every spec
from a profile; nothing else does."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from eagle_fix.core.arms import BASELINE, EAGLE3, FIX_ARMS, Arm, arm
from eagle_fix.engine.worker import WORKER_EXTENSION
from eagle_fix.fix.plugin import MODE_ENV
from eagle_fix.pairs.profiles import speculative_config

# The fix arm of a run -> the plugin's mode (EAGLE_FIX_MODE) in the engine's processes: `on` adds what the
# engine lacks (auto), `off` is the original bug on purpose (revert), `upstream` the engine as installed (off).
PLUGIN_MODE_OF_ARM = {f.name: f.plugin_mode for f in FIX_ARMS.values()}
# vLLM's names (CompilationMode, CUDAGraphMode): the grid's settings of a compiled engine. An eager
# engine (enforce_eager) is NONE and NONE whatever is asked.
COMPILATION_MODES = ("NONE", "STOCK_TORCH_COMPILE", "DYNAMO_TRACE_ONCE", "VLLM_COMPILE")
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")


@dataclass(frozen=True)
class EngineSpec:
    """Everything that fixes one engine; points at different contexts share it."""

    target: str
    draft: str | None  # None: an arm without a draft checkpoint (the baseline, n-gram)
    mode: str  # eager | compile
    fix: str | None  # on | off | upstream (None for baseline)
    max_model_len: int
    num_speculative_tokens: int = 3
    load_format: str = "auto"
    synthetic_acceptance_length: float | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_gib: float | None = None  # CPU: VLLM_CPU_KVCACHE_SPACE
    max_num_seqs: int = 8
    gpu_memory_utilization: float | None = None  # CUDA only
    seed: int = 0
    hf_overrides: dict[str, Any] | None = None  # the target's config.json overrides (vLLM hf_overrides)
    # None: vLLM's default for a compiled engine (VLLM_COMPILE; its default CUDA-graph mode on CUDA)
    compilation_mode: str | None = None
    cudagraph_mode: str | None = None
    kv_cache_memory_bytes: int | None = None  # CUDA: the KV budget the points need (not a device share)
    tensor_parallel_size: int = 1
    distributed_executor_backend: str | None = None
    cpu_threads_bind: str | None = None  # CPU, TP > 1: VLLM_CPU_OMP_THREADS_BIND, one CPU list per rank
    workload: str = "copy"  # what the prompts are made of (eagle_fix.core.workload.WORKLOADS)
    # the arm (eagle_fix.core.arms) the engine runs; None (a spec from an older parent): EAGLE3 with a
    # draft, else the baseline
    arm: str | None = None
    # the n-gram arm's prompt-lookup windows (vLLM prompt_lookup_min / max; None on other arms)
    prompt_lookup_min: int | None = None
    prompt_lookup_max: int | None = None
    dtype: str | None = None  # vLLM `dtype` of both models; None: vLLM's "auto"

    @property
    def arm_entry(self) -> Arm:
        """The engine's arm from the registry."""
        if self.arm is not None:
            return arm(self.arm)
        return EAGLE3 if self.draft is not None else BASELINE

    @property
    def speculates(self) -> bool:
        """Whether the engine drafts (vLLM's spec-decode counters and the drafter's counters are read)."""
        return self.arm_entry.speculates

    def llm_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of vllm.LLM for this engine."""
        kwargs: dict[str, Any] = {
            "model": self.target,
            "max_model_len": self.max_model_len,
            "enforce_eager": self.mode == "eager",
            "skip_tokenizer_init": True,
            "disable_log_stats": False,  # get_metrics() needs stats on
            "load_format": self.load_format,
            "seed": self.seed,
            "max_num_seqs": self.max_num_seqs,
            "enable_prefix_caching": True,  # the measured run reuses the TTFT run's prefill
        }
        if self.dtype:
            kwargs["dtype"] = self.dtype  # the draft takes the target's (vLLM's SpeculativeConfig)
        if self.max_num_batched_tokens:
            kwargs["max_num_batched_tokens"] = self.max_num_batched_tokens
        if self.gpu_memory_utilization:
            kwargs["gpu_memory_utilization"] = self.gpu_memory_utilization
        if self.kv_cache_memory_bytes:
            kwargs["kv_cache_memory_bytes"] = int(self.kv_cache_memory_bytes)
        if self.tensor_parallel_size > 1:
            kwargs["tensor_parallel_size"] = self.tensor_parallel_size
            if self.distributed_executor_backend:
                kwargs["distributed_executor_backend"] = self.distributed_executor_backend
        if self.mode != "eager":
            compilation = {
                k: v for k, v in (("mode", self.compilation_mode), ("cudagraph_mode", self.cudagraph_mode)) if v
            }
            if compilation:
                kwargs["compilation_config"] = compilation
        if self.hf_overrides:
            # A dict applies to the target's config only: vLLM gives the draft its own overrides.
            kwargs["hf_overrides"] = dict(self.hf_overrides)
        # every engine, baseline too: the memory RPCs (and the drafter's counters) live in the worker
        kwargs["worker_extension_cls"] = WORKER_EXTENSION
        if self.speculates:
            lookup = (self.prompt_lookup_min, self.prompt_lookup_max)
            kwargs["speculative_config"] = speculative_config(
                self.draft,
                self.num_speculative_tokens,
                self.synthetic_acceptance_length,
                method=self.arm_entry.method,
                prompt_lookup=lookup if None not in lookup else None,
            )
        return kwargs

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> EngineSpec:
        """The spec a parent sent. Fields this release does not know are dropped (a newer parent's
        settings), so one side of `eagle-fix ab` may run another checkout's child."""
        data = json.loads(text)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def env(self) -> dict[str, str]:
        env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        env[MODE_ENV] = PLUGIN_MODE_OF_ARM[self.fix or "on"]
        if self.kv_cache_gib:
            env["VLLM_CPU_KVCACHE_SPACE"] = f"{self.kv_cache_gib:g}"
        if self.cpu_threads_bind:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.cpu_threads_bind
        return env
