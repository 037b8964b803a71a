"""The override as vLLM's own config classes apply it (real vLLM, no engine, no weights)."""

from __future__ import annotations

import json

from conftest import last_json, run_py

BUILD = """
import json
from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig
target, draft, method, n = {args}
tgt = ModelConfig(model=target, max_model_len=int(n), skip_tokenizer_init=True)
sc = SpeculativeConfig(method=method, model=draft, num_speculative_tokens=3, target_model_config=tgt,
                       target_parallel_config=ParallelConfig())
d = sc.draft_model_config
print(json.dumps({{"mpe": d.hf_config.max_position_embeddings, "mml": d.max_model_len}}))
"""


def build(target, draft, method, n, mode="off"):
    code = BUILD.format(args=repr((str(target), str(draft), method, str(n))))
    out = run_py(code, mode=mode)
    assert out.returncode == 0, out.stderr[-3000:]
    return last_json(out.stdout)


def test_eagle3_draft_inherits_the_targets_length(shared_pair):
    # The engine's own override (plugin not loaded in this process: no load_general_plugins call).
    target, draft = shared_pair
    got = build(target, draft, "eagle3", 8192)
    assert got["mpe"] == 8192
    # ... while the draft's max_model_len stays at the checkpoint's: the gap the plugin closes.
    assert got["mml"] == 2048


def test_independent_draft_model_keeps_its_own_length(shared_pair, tmp_path):
    target, _ = shared_pair
    cfg = json.loads((target / "config.json").read_text())
    cfg.update(max_position_embeddings=2048, num_hidden_layers=2)
    cfg.pop("rope_scaling", None)
    draft = tmp_path / "small-llama"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps(cfg))
    got = build(target, draft, "draft_model", 8192)
    assert got["mpe"] == 2048


TP_BUILD = """
import json
from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig
from eagle_fix.pairs.profiles import get_profile
prof = get_profile({name!r})
tgt = ModelConfig(model=str(prof.target), max_model_len=131072, skip_tokenizer_init=True)
par = ParallelConfig(tensor_parallel_size=prof.tensor_parallel_size,
                     distributed_executor_backend=prof.distributed_executor_backend)
sc = SpeculativeConfig(**prof.speculative_config(), target_model_config=tgt, target_parallel_config=par)
d = sc.draft_model_config
tgt.verify_with_parallel_config(par)
print(json.dumps({{"tp": par.tensor_parallel_size, "draft_tp": sc.draft_parallel_config.tensor_parallel_size,
                  "heads": tgt.get_num_kv_heads(par), "mpe": d.hf_config.max_position_embeddings,
                  "layers": tgt.get_num_layers(par), "method": sc.method}}))
"""


def test_the_70b_tensor_parallel_profiles_pass_vllms_config_classes():
    """gpu-70b-tp4/tp8 as vLLM's own config classes take them (the CUDA build's config tests run this without a
    GPU): the 64 heads and 8 KV heads split over the ranks, the draft sharded like the target, and the draft's
    positions raised to the target's by the engine (its own fix)."""
    for name, tp in (("gpu-70b-tp4", 4), ("gpu-70b-tp8", 8)):
        out = run_py(TP_BUILD.format(name=name), mode="off")
        assert out.returncode == 0, out.stderr[-3000:]
        got = last_json(out.stdout)
        assert got["tp"] == got["draft_tp"] == tp
        assert got["heads"] == 8 // tp and got["layers"] == 80
        assert got["mpe"] == 131072 and got["method"] == "eagle3"
