"""Micro-benchmarks of what the fix costs on the real vLLM CPU ops: a 64x larger draft rotary cache, and the plugin's register().

Quick test by default (pyproject has --benchmark-disable); measure with
    pytest tests/fix/test_bench_rotary.py --benchmark-enable --benchmark-json results/pytest-benchmark/cpu.json
"""

import pytest

from conftest import run_py

torch = pytest.importorskip("torch", reason="torch (the cpu extra) is not installed")
pytest.importorskip("vllm", reason="vLLM (the cpu extra) is not installed")

# yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's draft layer: head 128, 32 query / 8 KV heads, theta 5e5.
HEAD, Q_HEADS, KV_HEADS = 128, 32, 8
ROPE = {"rope_type": "default", "rope_theta": 500000.0}
DRAFT_MAX_POSITION = 2048  # the checkpoint's max_position_embeddings
FIXED_MAX_POSITION = 131072  # what the fix sizes the cache to: the target's max_model_len


@pytest.fixture(scope="module")
def vllm_config():
    # vLLM's CustomOps read the current config when built; tests that build one set it (as vLLM's own do).
    from vllm.config import VllmConfig, set_current_vllm_config

    with set_current_vllm_config(VllmConfig()):
        yield


def make_rope(max_position: int):
    from vllm.model_executor.layers.rotary_embedding import get_rope

    return get_rope(HEAD, max_position, True, dict(ROPE), torch.float32)


@pytest.mark.parametrize("num_tokens", [4, 256], ids=["decode-1+k", "prefill-256"])
@pytest.mark.parametrize("max_position", [DRAFT_MAX_POSITION, FIXED_MAX_POSITION])
def test_rotary_forward(benchmark, vllm_config, max_position, num_tokens):
    """Same positions (inside 2048, valid for both) against both cache sizes: the fix's time cost."""
    rope = make_rope(max_position)
    gen = torch.Generator().manual_seed(0)
    positions = torch.arange(DRAFT_MAX_POSITION - num_tokens, DRAFT_MAX_POSITION)
    query = torch.randn(num_tokens, Q_HEADS * HEAD, generator=gen)
    key = torch.randn(num_tokens, KV_HEADS * HEAD, generator=gen)
    cache = rope.cos_sin_cache
    benchmark.extra_info.update(
        max_position=max_position,
        num_tokens=num_tokens,
        cos_sin_cache_shape=list(cache.shape),
        cos_sin_cache_bytes=cache.numel() * cache.element_size(),
    )
    q, k = benchmark(rope, positions, query, key)
    assert q.shape == query.shape and k.shape == key.shape
    assert cache.shape[0] == max_position


def test_rotary_forward_past_draft_length(benchmark, vllm_config):
    """Positions near 128K, which only the resized cache covers (the draft's positions at long context)."""
    rope = make_rope(FIXED_MAX_POSITION)
    positions = torch.arange(FIXED_MAX_POSITION - 4, FIXED_MAX_POSITION)
    query, key = torch.randn(4, Q_HEADS * HEAD), torch.randn(4, KV_HEADS * HEAD)
    benchmark.extra_info.update(max_position=FIXED_MAX_POSITION, num_tokens=4, first_position=int(positions[0]))
    q, _ = benchmark(rope, positions, query, key)
    assert torch.isfinite(q).all()


@pytest.fixture
def plugin():
    try:
        from eagle_fix.fix import plugin
    except ImportError as exc:
        pytest.skip(f"eagle_fix.fix.plugin is not there yet ({exc})")
    return plugin


def test_plugin_register_first_call(benchmark, plugin):
    """What each vLLM process (front end, engine core, each worker) pays once. Where an earlier test of this
    process registered it already (an xdist worker runs many modules), the first call is made and timed in
    a fresh interpreter instead, its seconds kept in the benchmark's extra_info."""
    if plugin.registered_mode() is None:
        benchmark.pedantic(plugin.register, rounds=1, iterations=1)
        assert plugin.registered_mode() is not None
        return
    code = (
        "import time\nfrom eagle_fix.fix import plugin\nassert plugin.registered_mode() is None\n"
        "t = time.perf_counter()\nplugin.register()\nprint(plugin.registered_mode(), time.perf_counter() - t)"
    )
    out = run_py(code)
    assert out.returncode == 0, out.stderr[-2000:]
    mode, seconds = out.stdout.split()[-2:]
    assert mode in plugin.PLUGIN_MODES, out.stdout
    benchmark.extra_info.update(first_call_in_a_fresh_process_s=float(seconds))


def test_plugin_register_again(benchmark, plugin):
    """vLLM may call general plugins more than once per process: the re-entrant path must be free."""
    plugin.register()
    mode = plugin.registered_mode()
    benchmark(plugin.register)
    assert plugin.registered_mode() == mode
