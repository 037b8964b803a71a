"""Which target/draft pair a run uses (shipped tiny pair, real-shape configs, user checkpoints) and with which
engine knobs: the named profiles of the sweep and of `eagle-fix map`, so a run names its setup in one word."""

from __future__ import annotations

import dataclasses
import functools
import pathlib
from typing import Any

from eagle_fix.core.arms import ARMS, EAGLE3, ENGINE_ARMS
from eagle_fix.core.errors import EagleFixError
from eagle_fix.fix.checkpoint import read_config
from eagle_fix.pairs import smollm

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"
TINY = DATA / "tiny"
CHAT = DATA / "chat"
CONFIGS = DATA / "configs"

# where the real target is converted on first use (ignored by git), and where its trained draft is committed
REAL_TARGET = smollm.DEFAULT_OUT
REAL_DRAFT = DATA / "real" / "draft"


def real_refusals() -> tuple[tuple[str, str], ...]:
    """cpu-real refuses EAGLE3 until `eagle-fix train-real-draft` has written its draft (issue 55 item 2)."""
    if (REAL_DRAFT / "config.json").is_file():
        return ()
    why = "its EAGLE3 draft is not trained yet (issue #55 item 2: eagle-fix train-real-draft, or pass --draft DIR)"
    return ((EAGLE3.name, why),)


FULL_SWEEP = (8192, 16384, 32768, 65536, 131072)


def tiny_pair() -> tuple[pathlib.Path, pathlib.Path]:
    """The shipped trained pair: a 4-layer Llama target (131072 positions, llama3 RoPE) and a
    1-layer EAGLE3 draft with max_position_embeddings 2048, as in the original report."""
    return TINY / "target", TINY / "draft"


def chat_pair() -> tuple[pathlib.Path, pathlib.Path]:
    """The realistic regime's pair (eagle-fix train-chat): the tiny pair's shapes with a 1024-token byte-level
    BPE vocabulary, trained on ShareGPT chat; the draft learnt the target's distribution, still 2048 positions."""
    return CHAT / "target", CHAT / "draft"


def real_shape_configs() -> tuple[pathlib.Path, pathlib.Path]:
    """config.json-only folders of Llama-3.1-8B-Instruct and yuhuili's EAGLE3 draft (dummy weights)."""
    return CONFIGS / "llama-3.1-8b-instruct", CONFIGS / "eagle3-llama3.1-instruct-8b"


def real_shape_70b_configs() -> tuple[pathlib.Path, pathlib.Path]:
    """config.json-only folders of Llama-3.3-70B-Instruct (its published shapes) and an EAGLE3 draft of
    matching shapes (the 8B draft's fields at the 70B's widths: one layer, 2048 positions, 32000 draft
    vocabulary), for tensor-parallel runs with dummy weights."""
    return CONFIGS / "llama-3.3-70b-instruct", CONFIGS / "eagle3-llama3.3-instruct-70b"


@dataclasses.dataclass(frozen=True)
class Profile:
    """One named way to run the sweep: which pair, which contexts, which engine knobs."""

    name: str
    target: pathlib.Path | None
    draft: pathlib.Path | None
    load_format: str  # "auto" (real weights) or "dummy" (random weights from config.json)
    contexts: tuple[int, ...]
    synthetic_acceptance_length: float | None  # random weights accept nothing: fake a rate
    device: str  # "cpu" or "cuda"
    output_len: int = 512  # 128 drafts at acceptance 4: acceptance interval [3.91, 4.00] (docs/statistics.md)
    num_speculative_tokens: int = 3
    batch_size: int = 1
    kv_cache_gib: float | None = None  # VLLM_CPU_KVCACHE_SPACE on CPU; None = engine default
    gpu_memory_utilization: float | None = None
    # vLLM `hf_overrides` of the target as (key, value) pairs (a frozen profile stays hashable):
    # e.g. (("num_hidden_layers", 8),) for a reduced depth. The draft's config is never overridden.
    hf_overrides: tuple[tuple[str, Any], ...] = ()
    # CUDA: vLLM `kv_cache_memory_bytes`. None sizes it from what the sweep's longest sequences need
    # (eagle_fix.machine.roofline.kv_budget_bytes), so the engine's memory follows the points, not a share of
    # the device (with a share, every point and arm reads the same reserved figure).
    kv_cache_memory_bytes: int | None = None
    # vLLM `max_num_batched_tokens` (the prefill chunk); None: vLLM's default.
    max_num_batched_tokens: int | None = None
    # A compiled engine's vLLM CompilationMode and CUDAGraphMode by name; None: vLLM's defaults.
    # `--compilation-mode` / `--cudagraph-mode` override them per run.
    compilation_mode: str | None = None
    cudagraph_mode: str | None = None
    # vLLM's tensor parallelism: the target and the draft sharded over this many workers, started by
    # the executor backend ("mp": one process per rank). On CPU the suite binds each rank to its own
    # cores (VLLM_CPU_OMP_THREADS_BIND, eagle_fix.machine.pinning.rank_cpu_lists); kv_cache_gib is per rank.
    tensor_parallel_size: int = 1
    distributed_executor_backend: str | None = None
    # What the prompts are made of: `copy` (the synthetic best case) or `chat` (held-out ShareGPT text, the
    # realistic regime; the target must ship a tokenizer.json). eagle_fix.core.workload.WORKLOADS
    workload: str = "copy"
    # The n-gram arm's prompt-lookup windows (vLLM prompt_lookup_min / max): the shortest and longest
    # suffix of the sequence it looks up earlier in the context to draft what followed it there.
    ngram_lookup_min: int = 2
    ngram_lookup_max: int = 4
    # arms the profile refuses, each with why: (arm name, reason), e.g. a draft not trained yet
    refused_arms: tuple[tuple[str, str], ...] = ()
    # the target is converted on first use (eagle_fix.pairs.smollm.ensure) before the sweep reads it
    converts_target: bool = False
    # output realism (distinct 4-grams) is scored on the text before the first end-of-sequence; decode still
    # ignores it, so every point decodes output_len tokens
    score_before_eos: bool = False
    # whether its contexts join the asv grid (benchmarks/common.py): a new context changes every graph file
    in_asv_grid: bool = True
    # the draft_model arm's draft: a language model of the target's tokenizer (None: the arm is refused), and
    # what it is in words where a reader could mistake it (the target drafting for itself accepts everything)
    draft_lm: pathlib.Path | None = None
    draft_lm_note: str = ""
    # vLLM `dtype` of both models (EngineArgs); None: vLLM's "auto" (the checkpoint's own, bf16 here)
    dtype: str | None = None

    def draft_of(self, name: str) -> pathlib.Path | None:
        """The draft checkpoint the arm NAME runs with (its registry entry's `draft_field`), None without one."""
        a = ARMS[name]
        return getattr(self, a.draft_field) if a.needs_draft else None

    def arm_note(self, name: str) -> str:
        """What the arm NAME's draft is here, where a reader could mistake it (the draft_model arm's note)."""
        a = ARMS.get(name)
        return self.draft_lm_note if a is not None and a.needs_draft and a.draft_field == "draft_lm" else ""

    def refusals(self) -> dict[str, str]:
        """Arms this profile refuses, each with why: its own list, and every arm whose draft it names none of."""
        lacking = {
            a.name: f"it names no {'draft language model (draft_lm)' if a.draft_field == 'draft_lm' else 'draft'}"
            for a in ARMS.values()
            if a.needs_draft and getattr(self, a.draft_field) is None
        }
        return {**lacking, **dict(self.refused_arms)}

    def check_arms(self, names: tuple[str, ...] | list[str]) -> None:
        """One-line EagleFixError for an arm this profile refuses (its reason), naming the arms it runs."""
        refused = self.refusals()
        bad = [n for n in names if n in refused]
        if bad:
            runs = ",".join(n for n in ARMS if n in ENGINE_ARMS and n not in refused)
            raise EagleFixError(
                f"--arms {bad[0]}: profile {self.name!r} refuses it: {refused[bad[0]]}; use --arms {runs}"
            )

    def prepare(self) -> None:
        """Convert the target on first use (a missing package is one line naming the fix)."""
        if self.converts_target and self.target is not None:
            smollm.ensure(self.target, say=lambda _line: None)

    def eos_token_ids(self) -> tuple[int, ...]:
        """The target's end-of-sequence ids (config.json's eos_token_id, an int or a list)."""
        eos = read_config(self.target, "target").get("eos_token_id") if self.target is not None else None
        return tuple(int(e) for e in (eos if isinstance(eos, list) else [] if eos is None else [eos]))

    def speculative_config(self) -> dict:
        """The `speculative_config` dict for `vllm.LLM`."""
        if self.draft is None:
            raise EagleFixError(f"profile {self.name!r} has no draft: pass --draft DIR")
        return speculative_config(self.draft, self.num_speculative_tokens, self.synthetic_acceptance_length)

    def hf_overrides_dict(self) -> dict[str, Any] | None:
        """The `hf_overrides` dict for `vllm.LLM` (None when the profile overrides nothing)."""
        return dict(self.hf_overrides) or None

    def target_config(self) -> dict[str, Any]:
        """The target's config.json as the engine sees it: the profile's overrides applied (a reduced
        depth's work and bytes are counted with the reduced layer count)."""
        if self.target is None:
            raise EagleFixError(f"profile {self.name!r} has no target: pass --target DIR")
        return {**read_config(self.target, "target"), **dict(self.hf_overrides), **self.dtype_override()}

    def dtype_override(self) -> dict[str, str]:
        """The config key the engine's dtype setting stands for (the roofline counts bytes with it)."""
        return {"torch_dtype": self.dtype} if self.dtype else {}

    def check_runs_here(self) -> None:
        """One-line EagleFixError when this machine or the installed vLLM refuses what this profile asks
        for, before any engine starts: a CUDA profile without a GPU, the synthetic rejection sampler on
        vLLM's CPU sampling kernels, a reduced depth without distinct auxiliary layers."""
        layers = dict(self.hf_overrides).get("num_hidden_layers")
        if layers is not None and self.draft is not None:
            dcfg = read_config(self.draft, "draft")
            ids = (
                (dcfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
                or dcfg.get("eagle_aux_hidden_state_layer_ids")
                or (2, layers // 2, layers - 3)
            )
            if len(set(ids)) != len(ids) or not all(0 <= i < layers for i in ids):
                raise EagleFixError(
                    f"profile {self.name!r}: a {layers}-layer target has no distinct auxiliary "
                    f"layers {tuple(ids)} for the EAGLE3 draft; choose num_hidden_layers >= 7"
                )
        why = synthetic_sampler_refusal() if self.synthetic_acceptance_length is not None else None
        if why:  # the more specific refusal first: it names the CPU profile that runs the nearest thing
            twin = (
                "cpu-tp2 (tensor parallel over two CPU workers, the tiny pair)"
                if self.tensor_parallel_size > 1
                else "cpu-8b (the same configs, dummy weights, the standard sampler)"
            )
            raise EagleFixError(
                f"profile {self.name!r} uses vLLM's synthetic rejection sampler "
                f"(rejection_sample_method='synthetic'), which {why}; on this machine run --profile {twin}"
            )
        if self.device == "cuda" and not cuda_available():
            raise EagleFixError(
                f"profile {self.name!r} runs on CUDA and torch sees no GPU here; on this "
                f"machine use --profile cpu or cpu-quick (on a GPU box: scripts/setup.sh --gpu)"
            )


def speculative_config(
    draft: str | pathlib.Path | None,
    num_speculative_tokens: int,
    synthetic_acceptance_length: float | None = None,
    *,
    method: str | None = None,
    prompt_lookup: tuple[int, int] | None = None,
) -> dict:
    """The `speculative_config` dict for `vllm.LLM`: one place for profiles and engine specs. `method`: vLLM's
    (None: EAGLE3's); a method without a draft checkpoint (n-gram) passes no `model`; `prompt_lookup`: the
    n-gram proposer's (min, max) windows."""
    cfg: dict[str, Any] = {"method": method or EAGLE3.method}
    if draft is not None:
        cfg["model"] = str(draft)
    cfg["num_speculative_tokens"] = num_speculative_tokens
    if prompt_lookup is not None:
        cfg["prompt_lookup_min"], cfg["prompt_lookup_max"] = prompt_lookup
    if synthetic_acceptance_length is not None:
        # Random (dummy) weights accept nothing: vLLM's synthetic rejection sampler fakes a rate.
        cfg["rejection_sample_method"] = "synthetic"
        cfg["synthetic_acceptance_length"] = synthetic_acceptance_length
    return cfg


@functools.lru_cache(maxsize=1)
def synthetic_sampler_refusal() -> str | None:
    """Why the installed vLLM cannot run the synthetic rejection sampler here, or None (it can, or
    vLLM is not importable and the engine will say). Only vLLM's Triton rejection kernels implement
    it (CUDA/ROCm, or a CPU with Triton-CPU); on the CPU platform without Triton, vLLM swaps in C++
    kernels (vllm.utils.cpu_triton_utils) that assert `Synthetic acceptance not supported with CPU
    sampling` in the engine's worker at the first verified step."""
    try:  # lazy: only this question needs vLLM, and importing it takes seconds
        from vllm.platforms import current_platform
        from vllm.triton_utils import HAS_TRITON
    except Exception:  # noqa: BLE001 (no vLLM here: nothing to judge)
        return None
    if current_platform.is_cpu() and not HAS_TRITON:
        try:
            from importlib.metadata import version

            engine = f"vllm-cpu {version('vllm-cpu')}"
        except Exception:  # noqa: BLE001 -- no metadata of that name: the platform stands in
            engine = "vLLM's CPU platform"
        return (
            f"{engine} refuses: without Triton-CPU its CPU sampling kernels assert 'Synthetic acceptance "
            f"not supported with CPU sampling' (it runs on CUDA/ROCm)"
        )
    return None


# The original report's pair at its real shapes on the CPU engine: 8B bf16 dummy weights (15 GiB of
# weights; the host memory it takes is measured in docs/real-shapes.md), the standard rejection sampler (dummy weights make acceptance meaningless: the
# evidence is the drafter's counters and the compiled crash), contexts past the draft's 2048.
CPU_8B_CONTEXTS = (3072, 4096)
# A reduced depth: every width, both vocabularies, the RoPE kept; vLLM's default auxiliary layers
# of an 8-layer target are (2, 4, 5), all of which exist.
CPU_8B_REDUCED_LAYERS = 8


# The draft_model arm on CPU: no small language model of the tiny targets' tokenizers exists, so the target drafts
# for itself, which runs vLLM's draft-model path end to end and accepts every draft; labelled so wherever shown.
SELF_DRAFT = (
    "the target drafting for itself: accepts every draft by construction (the code path, not a method's figure)"
)


def _profiles() -> dict[str, Profile]:
    t, d = tiny_pair()
    rt, rd = real_shape_configs()
    me = {"draft_lm_note": SELF_DRAFT}
    return {
        "cpu-quick": Profile("cpu-quick", t, d, "auto", (8192,), None, "cpu", kv_cache_gib=1.0, draft_lm=t, **me),
        # 131072 tokens of the tiny pair's KV are ~0.6 GiB (target 4 KiB/token + draft 1 KiB).
        "cpu": Profile("cpu", t, d, "auto", FULL_SWEEP, None, "cpu", kv_cache_gib=2.0, draft_lm=t, **me),
        # The CPU twin of a tensor-parallel GPU profile: the shipped pair over two CPU workers (one core
        # each), so the TP paths (the plugin in every rank, per-rank counters, the fix A/B) run here. A
        # KV budget per rank is needed: without one each rank claims ~21 GiB and the kernel kills one.
        "cpu-tp2": Profile(
            "cpu-tp2",
            t,
            d,
            "auto",
            (4096, 8192),
            None,
            "cpu",
            output_len=128,
            kv_cache_gib=1.0,
            tensor_parallel_size=2,
            distributed_executor_backend="mp",
        ),
        # The shipped trained pair on CUDA with the standard sampler: real acceptance, so the fix A/B
        # shows the bug there (fix off, compiled: CUDA's device-side assert past the draft's 2048).
        "gpu-tiny": Profile("gpu-tiny", t, d, "auto", FULL_SWEEP, None, "cuda", gpu_memory_utilization=0.5),
        "gpu-dummy": Profile("gpu-dummy", rt, rd, "dummy", FULL_SWEEP, 2.5, "cuda", gpu_memory_utilization=0.9),
        "gpu": Profile("gpu", None, None, "auto", FULL_SWEEP, None, "cuda", gpu_memory_utilization=0.9),
        # Past one GPU: a 70B target at real shapes (dummy weights, 131 GiB in bf16) with its EAGLE3 draft,
        # tensor parallel over 4 and 8 GPUs; each device's share is checked before the engine starts.
        **{
            f"gpu-70b-tp{tp}": Profile(
                f"gpu-70b-tp{tp}",
                *real_shape_70b_configs(),
                "dummy",
                FULL_SWEEP,
                2.5,
                "cuda",
                gpu_memory_utilization=0.9,
                tensor_parallel_size=tp,
                distributed_executor_backend="mp",
            )
            for tp in (4, 8)
        },
        # KV of the full depth is 132 KiB/token (target 32 layers x 8 KV heads x 128 x bf16 x K,V + the
        # draft's one layer): 1 GiB holds ~7900 tokens, one 4096-token sequence with room to spare.
        "cpu-8b": Profile("cpu-8b", rt, rd, "dummy", CPU_8B_CONTEXTS, None, "cpu", output_len=32, kv_cache_gib=1.0),
        "cpu-8b-l8": Profile(
            "cpu-8b-l8",
            rt,
            rd,
            "dummy",
            CPU_8B_CONTEXTS,
            None,
            "cpu",
            output_len=32,
            kv_cache_gib=1.0,
            hf_overrides=(("num_hidden_layers", CPU_8B_REDUCED_LAYERS),),
        ),
        # The realistic regime: the chat pair on held-out ShareGPT chat (acceptance below its ceiling)
        "cpu-chat": Profile(
            "cpu-chat",
            *chat_pair(),
            "auto",
            FULL_SWEEP,
            None,
            "cpu",
            kv_cache_gib=2.0,
            workload="chat",
            draft_lm=chat_pair()[0],
            **me,
        ),
        "gpu-chat": Profile(
            "gpu-chat", *chat_pair(), "auto", FULL_SWEEP, None, "cuda", gpu_memory_utilization=0.5, workload="chat"
        ),
        # The real target (issue 55): SmolLM2-135M-Instruct converted on first use, on held-out ShareGPT chat in
        # its own chat template, within its 8192 trained positions (16K/32K would need a RoPE scaling: not here).
        # EAGLE3 runs once its draft is trained (real_refusals); until then baseline and n-gram. KV: 23 KiB/token
        # (30 x 3 x 64 x K,V x bf16).
        "cpu-real": Profile(
            "cpu-real",
            REAL_TARGET,
            REAL_DRAFT if not real_refusals() else None,
            "auto",
            (2048, 4096, 8192),
            None,
            "cpu",
            output_len=256,
            kv_cache_gib=1.0,
            workload="chat-real",
            refused_arms=real_refusals(),
            converts_target=True,
            score_before_eos=True,
            in_asv_grid=False,
            # fp32: on an AVX2-only CPU vllm-cpu's oneDNN builds no bf16 matmul and its bf16 linear falls to
            # torch (eagle_fix.machine.limits; one core here: 1.3 GFLOP/s bf16 against 70 fp32), so bf16 made
            # this profile's every prefill ~5x slower. The weights are bf16 values (dequantized 4-bit): exact in fp32.
            dtype="float32",
        ),
        # gpu-dummy's quick grid (as cpu-quick is to cpu): scripts/bench.sh's default on CUDA, sized for a first
        # GPU visit (eagle_fix.releases.gpu_estimate: about 9 min on one H100, unverified until a GPU runs it)
        "gpu-quick": Profile(
            "gpu-quick", rt, rd, "dummy", (8192, 32768), 2.5, "cuda", output_len=256, gpu_memory_utilization=0.9
        ),
    }


PROFILES: dict[str, Profile] = _profiles()


def get_profile(name: str, *, target=None, draft=None) -> Profile:
    """The named profile, with user-named target/draft folders swapped in (`gpu` needs both)."""
    if name not in PROFILES:
        raise EagleFixError(f"unknown profile {name!r}: choose one of {', '.join(PROFILES)}")
    prof = PROFILES[name]
    if name == "gpu" and (target is None or draft is None):
        raise EagleFixError(
            "profile 'gpu' runs your own checkpoints: pass both --target DIR and --draft DIR "
            "(local folders; nothing is downloaded)"
        )
    changes = {}
    if target is not None:
        changes["target"] = pathlib.Path(target)
        changes["converts_target"] = False  # the user's folder is read as it is
    if draft is not None:
        changes["draft"] = pathlib.Path(draft)
        # a refusal for want of the profile's own draft does not hold for the user's
        changes["refused_arms"] = tuple(r for r in prof.refused_arms if ARMS[r[0]].draft_field != "draft")
    return dataclasses.replace(prof, **changes) if changes else prof


# The profile a command runs when none is named, one per purpose: the sweep, the asv suite and its dashboard
# take the machine's (default_profile); the release matrix and `eagle-fix ab` the quick one (an A/B is many
# rounds of one point); `eagle-fix map` its quick served grid.
DEFAULT_PROFILES = {"matrix": "cpu-quick", "ab": "cpu-quick", "map": "cpu-map-quick"}
PURPOSES = ("run", "dashboard", *DEFAULT_PROFILES)


def cuda_available() -> bool:
    """Whether torch sees a GPU here (False without torch)."""
    try:
        import torch  # lazy: importing the profiles (eagle-fix --help, doctor) must not load torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def default_profile(purpose: str = "run", *, models_named: bool = False) -> str:
    """The default profile of `purpose`. For a run and its dashboard: with CUDA, the real-shape dummy run (or
    `gpu` for named checkpoints); else `cpu`."""
    if purpose not in PURPOSES:
        raise ValueError(f"no default profile for {purpose!r}: one of {', '.join(PURPOSES)}")
    if purpose in DEFAULT_PROFILES:
        return DEFAULT_PROFILES[purpose]
    if cuda_available():
        return "gpu" if models_named else "gpu-dummy"
    return "cpu"


# ---------------------------------------------------------------- served-mode grids (eagle-fix map)


@dataclasses.dataclass(frozen=True)
class MapProfile:
    """A grid of `eagle-fix map`: the servers run a sweep profile's pair and engine knobs (`profile`),
    loaded by vLLM's client at each context x load, EAGLE3 and no speculation in paired rounds."""

    name: str
    profile: str  # the sweep profile (PROFILES) whose pair, device and engine knobs the servers use
    contexts: tuple[int, ...]
    concurrencies: tuple[int, ...]  # vLLM bench's --max-concurrency (requests sent all at once)
    request_rates: tuple[float, ...] = ()  # vLLM bench's --request-rate (Poisson arrivals, no cap)
    modes: tuple[str, ...] = ("eager",)
    fixes: tuple[str, ...] = ("on",)
    output_len: int = 64
    rounds: int = 2  # paired rounds per cell and launch: an even number balances ABBA exactly
    # server launches per cell: the launch is the unit of the map's intervals (a t interval over the
    # launches' mean log ratios, eagle_fix.served.summary), as it is of the gate's tests
    launches: int = 4
    prompts_per_slot: int = 2  # requests per cell = this x the concurrency (each slot refilled once)
    prefix_caching: bool = False  # distinct prompts share no prefix; off, so nothing is served from cache


MAP_PROFILES: dict[str, MapProfile] = {
    # The shipped tiny pair, eager, fix on: 2 contexts x (concurrency 1, 2, 4 and 1 request/s) x 2 arms
    # x 4 launches x 2 rounds, 128 tokens out (docs/serving.md states what it costs on a 2-core machine).
    "cpu-map-quick": MapProfile(
        "cpu-map-quick", "cpu-quick", (2048, 8192), (1, 2, 4), request_rates=(1.0,), output_len=128
    ),
    # The same grid in the realistic regime: the chat pair on held-out ShareGPT chat (docs/chat-pair.md).
    "cpu-map-chat": MapProfile(
        "cpu-map-chat", "cpu-chat", (2048, 8192), (1, 2, 4), request_rates=(1.0,), output_len=128
    ),
}
