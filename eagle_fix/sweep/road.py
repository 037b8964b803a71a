"""One road from a profile to an engine: the EngineSpec of an arm, mode and fix arm (the pair, the
compilation and CUDA-graph modes, the KV budget, the seed), the prompt length that makes a sequence end at
its context, and the command that measures a point. `eagle-fix run`, `eagle-fix ab` and `eagle-fix map` all
build their engines here, so they cannot drift apart."""

from __future__ import annotations

from pathlib import Path

from eagle_fix.core.arms import arm as arm_of
from eagle_fix.core.errors import EagleFixError
from eagle_fix.engine.protocol import PointCommand
from eagle_fix.engine.spec import COMPILATION_MODES, CUDAGRAPH_MODES, EngineSpec
from eagle_fix.fix.checkpoint import read_config
from eagle_fix.machine.pinning import rank_cpu_lists
from eagle_fix.machine.roofline import kv_budget_bytes, model_shape
from eagle_fix.pairs.profiles import Profile


def prompt_len(context_len: int, *, output_len: int, num_speculative_tokens: int) -> int:
    """The prompt that makes the sequence end at `context_len`: the engine's length is the context,
    and drafting past the prompt needs room for the output and the k draft positions."""
    return context_len - output_len - num_speculative_tokens - 1


def compile_settings(
    profile: Profile, compilation_mode: str | None = None, cudagraph_mode: str | None = None
) -> tuple[str | None, str | None]:
    """(compilation mode, CUDA-graph mode) a compiled engine asks vLLM for: the run's, else the profile's;
    None leaves vLLM's default."""
    comp = compilation_mode or profile.compilation_mode
    graphs = cudagraph_mode or profile.cudagraph_mode
    return (comp.upper() if comp else None), (graphs.upper() if graphs else None)


def unknown_compile_setting(compilation_mode: str | None, cudagraph_mode: str | None) -> str | None:
    """The flag and value vLLM has no name for, in words, or None."""
    for flag, value, allowed in (
        ("--compilation-mode", compilation_mode, COMPILATION_MODES),
        ("--cudagraph-mode", cudagraph_mode, CUDAGRAPH_MODES),
    ):
        if value is not None and str(value).upper() not in allowed:
            return f"{flag} {value}: unknown; choose from {','.join(allowed)}"
    return None


def kv_budget(profile: Profile, *, arm: str, max_model_len: int, max_num_seqs: int) -> int:
    """A CUDA engine's KV budget per device (vLLM's `kv_cache_memory_bytes` is per GPU): the profile's, else
    what the longest sequences need (target and, on the EAGLE3 arm, draft layers) for `max_num_seqs` of them
    (eagle_fix.machine.roofline.kv_budget_bytes), shared by the tensor-parallel ranks (each holds its KV heads)."""
    if profile.kv_cache_memory_bytes:
        return int(profile.kv_cache_memory_bytes)
    a = arm_of(arm)
    draft = read_config(profile.draft_of(a.name), "draft") if a.needs_draft else None
    total = kv_budget_bytes(profile.target_config(), draft, max_model_len=max_model_len, max_num_seqs=max_num_seqs)
    return -(-total // profile.tensor_parallel_size)


def weights_per_device(profile: Profile, *, eagle3: bool = True) -> int:
    """Bytes of the profile's weights on each GPU of one engine: the target's and, on the EAGLE3 arm, the
    draft's, from their configs, sharded over the tensor-parallel ranks."""
    weights = model_shape(profile.target_config())["weight_bytes"]
    if eagle3:
        weights += model_shape(read_config(profile.draft, "draft"))["weight_bytes"]
    return -(-weights // profile.tensor_parallel_size)


def need_bytes_per_device(profile: Profile) -> int | None:
    """GPU memory each device of one engine of the profile takes at its longest context on the EAGLE3 arm:
    its share of both models' weights (tensor parallel shards them) and its KV budget; activations and
    CUDA graphs come on top, so this is a floor. None for a profile without its models (`gpu`: the user's)."""
    if profile.target is None or profile.draft is None:
        return None
    kv = kv_budget(profile, arm="eagle3", max_model_len=max(profile.contexts), max_num_seqs=profile.batch_size)
    return int(weights_per_device(profile) + kv)


def check_devices(profile: Profile) -> None:
    """A CUDA profile's devices before its engine starts, one line when they cannot hold it: as many GPUs as
    its tensor-parallel size, each with room for its share (need_bytes_per_device) within the profile's
    gpu_memory_utilization. (scripts/gpu_preflight.py asks the same of nvidia-smi before anything is installed.)"""
    import torch  # lazy: CUDA profiles only, after check_runs_here found a GPU

    tp, count = profile.tensor_parallel_size, torch.cuda.device_count()
    if count < tp:
        raise EagleFixError(
            f"profile {profile.name!r} runs tensor parallel over {tp} GPUs and torch sees {count}: run it on a "
            f"box with {tp} (CUDA_VISIBLE_DEVICES must list them), or choose a profile with fewer"
        )
    need, share = need_bytes_per_device(profile), profile.gpu_memory_utilization or 0.9
    for i in range(tp) if need else ():
        total = torch.cuda.get_device_properties(i).total_memory
        if need > share * total:
            raise EagleFixError(
                f"profile {profile.name!r} needs at least {need / 2**30:.1f} GiB on each of its {tp} GPUs (its share "
                f"of both models' weights and of the KV of its longest context) but GPU {i} gives vLLM "
                f"{share * total / 2**30:.1f} GiB (gpu_memory_utilization {share:g}): use larger GPUs or more of them"
            )


def engine_spec(
    profile: Profile,
    *,
    arm: str,
    mode: str,
    fix: str | None,
    max_model_len: int,
    num_speculative_tokens: int | None = None,
    max_num_seqs: int = 1,
    seed: int = 0,
    compilation_mode: str | None = None,
    cudagraph_mode: str | None = None,
) -> EngineSpec:
    """The engine of one arm of a profile. What this machine or engine refuses of the profile (a CUDA
    profile without a GPU, the synthetic sampler on CPU) is one line here, before any engine starts."""
    profile.check_runs_here()
    if profile.device == "cuda" and profile.tensor_parallel_size > 1:  # one GPU: check_runs_here found it
        check_devices(profile)
    a = arm_of(arm)
    max_num_seqs = max(max_num_seqs, 1)
    comp, graphs = compile_settings(profile, compilation_mode, cudagraph_mode)
    return EngineSpec(
        target=str(Path(profile.target).resolve()),  # the engine runs in its log's folder
        draft=str(Path(profile.draft_of(a.name)).resolve()) if a.needs_draft else None,
        mode=mode,
        fix=fix if a.takes_fix else None,
        max_model_len=max_model_len,
        num_speculative_tokens=num_speculative_tokens or profile.num_speculative_tokens,
        load_format=profile.load_format,
        # the synthetic sampler stands in for a random-weight draft's acceptance; a method without a draft
        # (n-gram) proposes from the sequence itself, measured as it is
        synthetic_acceptance_length=profile.synthetic_acceptance_length if a.needs_draft else None,
        max_num_batched_tokens=profile.max_num_batched_tokens,
        kv_cache_gib=profile.kv_cache_gib if profile.device == "cpu" else None,
        max_num_seqs=max_num_seqs,
        gpu_memory_utilization=profile.gpu_memory_utilization,
        seed=seed,
        hf_overrides=profile.hf_overrides_dict(),
        compilation_mode=comp,
        cudagraph_mode=graphs,
        kv_cache_memory_bytes=kv_budget(profile, arm=arm, max_model_len=max_model_len, max_num_seqs=max_num_seqs)
        if profile.device == "cuda"
        else None,
        tensor_parallel_size=profile.tensor_parallel_size,
        distributed_executor_backend=profile.distributed_executor_backend,
        cpu_threads_bind=rank_cpu_lists(profile.tensor_parallel_size)
        if profile.device == "cpu" and profile.tensor_parallel_size > 1
        else None,
        workload=profile.workload,
        arm=a.name,
        prompt_lookup_min=profile.ngram_lookup_min if a.prompt_lookup else None,
        prompt_lookup_max=profile.ngram_lookup_max if a.prompt_lookup else None,
        dtype=profile.dtype,
    )


def point_command(
    context_len: int,
    *,
    output_len: int,
    num_speculative_tokens: int,
    batch_size: int,
    seed: int,
    repeats: int,
    ttft_repeats: int,
    temperature: float = 0.0,
) -> PointCommand:
    """What the engine child is asked to measure at one context."""
    return PointCommand(
        prompt_len=prompt_len(context_len, output_len=output_len, num_speculative_tokens=num_speculative_tokens),
        batch_size=batch_size,
        output_len=output_len,
        seed=seed,
        repeats=repeats,
        ttft_repeats=ttft_repeats,
        temperature=temperature,
    )
