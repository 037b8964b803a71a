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
