"""The real target's draft training (issue 55 item 2): pieces that resume give the run one piece gives, the
checkpoint refuses other settings in one line, and the training conversations stay apart from the held-out ones."""

from __future__ import annotations

import argparse
import itertools
import json

import pytest

from eagle_fix.core import sharegpt
from eagle_fix.core.errors import EagleFixError
from eagle_fix.pairs import profiles, real_draft, training, training_record

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
load_file = pytest.importorskip("safetensors.torch").load_file


@pytest.fixture(scope="module")
def tiny_target():
    """The shipped tiny target in float32: a real Llama with a 4-layer stack, seconds a step at 64 tokens."""
    return transformers.LlamaForCausalLM.from_pretrained(training.DEFAULT_OUT / "target", dtype=torch.float32).eval()


def _train(target, steps_total, *, init=None, resume=None, on_step=None, held_out=None):
    torch.manual_seed(0)
    return training.train_draft(
        target, steps_total, seed=3, seq_len=64, batch=2, soft=True, draft_vocab=128, init=init, resume=resume,
        on_step=on_step, aux_layers=[1, 3], intermediate=96, held_out=held_out,
    )  # fmt: skip


def test_two_pieces_give_the_one_piece_run(tiny_target):
    """Stopped by on_step after 1 of 2 steps, checkpointed and resumed, the draft ends where 2 steps in one go
    end (same batches, same schedule, the optimizer's moments carried over); the resumed piece's held-out
    windows are scored and leave the weights alone (or the two ends would differ)."""
    whole, d2t_whole, _ = _train(tiny_target, 2)
    saved = {}

    def stop_at_one(done, draft, opt, ema):
        saved.update(step=done, draft={k: v.clone() for k, v in draft.state_dict().items()}, opt=opt.state_dict(),
                     ema=ema)  # fmt: skip
        return True

    _, d2t, stats = _train(tiny_target, 2, on_step=stop_at_one)
    assert saved["step"] == 1 and stats["held_out"] is None
    again = training.Eagle3Draft.build(
        tiny_target.config.hidden_size, 4, 4, 64, 96, int(d2t.numel()), 2, tiny_target.config.rms_norm_eps
    )
    again.load_state_dict(saved["draft"])
    held = [torch.randint(0, tiny_target.config.vocab_size, (1, 64), generator=torch.Generator().manual_seed(1))]
    resumed, d2t_resumed, stats = _train(
        tiny_target, 2, init=(again, d2t), resume={k: saved[k] for k in ("step", "opt", "ema")}, held_out=held
    )
    assert torch.equal(d2t_resumed, d2t_whole)
    for name, value in whole.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[name], value, rtol=1e-4, atol=1e-5, msg=name)
    # the resumed piece trained: its end differs from where the first piece stopped
    assert not torch.equal(saved["draft"]["fc.weight"], resumed.state_dict()["fc.weight"])
    assert stats["held_out"]["loss"] > 0 and len(stats["held_out"]["acc"]) == training.TTT_STEPS
    assert all(0 <= a <= 1 for a in stats["held_out"]["acc"])


def test_the_draft_config_names_its_aux_layers_and_keeps_the_seeds_2048():
    cfg = training.draft_config(49152, 8192, {"hidden_size": 576, "num_attention_heads": 9,
                                              "num_key_value_heads": 3, "head_dim": 64, "rms_norm_eps": 1e-5},
                                aux_layers=real_draft.AUX_LAYERS, intermediate=real_draft.INTERMEDIATE)  # fmt: skip
    assert cfg["max_position_embeddings"] == 2048
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 15, 27]
    assert (cfg["intermediate_size"], cfg["draft_vocab_size"], cfg["num_key_value_heads"]) == (1536, 8192, 3)
    assert "rope_theta" not in cfg  # as the seed's checkpoint: vLLM's default, the one the draft trains with


def _args(tmp_path, **kw):
    ns = argparse.Namespace(out=tmp_path / "out", work=tmp_path / "work", seed=0, steps=real_draft.STEPS,
                            budget_min=1.0, threads=1, export=None)  # fmt: skip
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


def test_a_checkpoint_of_other_settings_is_refused_in_one_line(tmp_path):
    args = _args(tmp_path)
    args.work.mkdir()
    other = {**real_draft.settings(args), "steps": 10}
    torch.save({"settings": other, "step": 3}, args.work / real_draft.CHECKPOINT)
    with pytest.raises(EagleFixError) as err:
        real_draft.cli_main(args)
    msg = str(err.value)
    assert "\n" not in msg and f"steps 10 there, {real_draft.STEPS} here" in msg and err.value.exit_code == 2
    assert not args.out.exists()


@pytest.mark.parametrize("bad", [{"steps": 0}, {"threads": 0}, {"budget_min": 0.0}])
def test_bad_numbers_are_refused_before_anything_runs(tmp_path, bad):
    with pytest.raises(EagleFixError) as err:
        real_draft.cli_main(_args(tmp_path, **bad))
    assert err.value.exit_code == 2 and "\n" not in str(err.value)
    assert not (tmp_path / "work").exists()


def test_training_conversations_stay_apart_from_the_held_out_ones():
    train, held = sharegpt.messages("train"), sharegpt.held_out_messages()
    assert len(train) == sharegpt.TRAINED_ON and len(held) > 100
    key = lambda conv: tuple((m["role"], m["content"]) for m in conv)
    assert not {key(c) for c in train} & {key(c) for c in held}
    assert all(m["role"] in ("user", "assistant") for c in train[:200] for m in c)


def test_export_writes_the_checkpoints_draft_as_vllm_reads_it(tmp_path, tiny_target):
    """write_draft (what --export and the last piece call): config.json with the seed's 2048 and the aux layers,
    bf16 weights with d2t; the refusal before any step is one line."""
    cfg = tiny_target.config
    draft = training.Eagle3Draft.build(cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                                       cfg.head_dim, real_draft.INTERMEDIATE, real_draft.DRAFT_VOCAB,
                                       len(real_draft.AUX_LAYERS), cfg.rms_norm_eps)  # fmt: skip
    state = {"draft": draft.state_dict(), "d2t": torch.arange(real_draft.DRAFT_VOCAB) * 0}
    real_draft.write_draft(state, cfg, tmp_path / "draft")
    written = json.loads((tmp_path / "draft" / "config.json").read_text())
    assert written["max_position_embeddings"] == 2048 and written["rms_norm_eps"] == 1e-05
    assert written["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == list(real_draft.AUX_LAYERS)
    tensors = load_file(str(tmp_path / "draft" / "model.safetensors"))
    assert tensors["d2t"].dtype == torch.int64 and tensors["lm_head.weight"].dtype == torch.bfloat16
    assert tensors["lm_head.weight"].shape == (real_draft.DRAFT_VOCAB, cfg.hidden_size)
    args = _args(tmp_path, export=tmp_path / "x")
    with pytest.raises(EagleFixError) as err:
        real_draft.cli_main(args)
    assert "no trained step yet" in str(err.value) and err.value.exit_code == 2 and not (tmp_path / "x").exists()


def test_the_committed_draft_matches_its_record_and_cpu_real_runs_it():
    """eagle_fix/data/real: the files its training.json names, the seed's 2048 positions, every step in pieces of
    at most 90 minutes that join end to end, a held-out accuracy well above chance (1/8192), and cpu-real's
    EAGLE3 arm on it."""
    folder = real_draft.DEFAULT_OUT
    rec = json.loads((folder / training.RECORD_NAME).read_text())
    assert {"draft/config.json", "draft/model.safetensors"} <= set(rec["sha256"])
    for rel, sha in rec["sha256"].items():
        assert training_record.sha256_file(folder / rel) == sha, rel
    cfg = json.loads((folder / "draft" / "config.json").read_text())
    assert cfg["max_position_embeddings"] == 2048 and cfg["draft_vocab_size"] == real_draft.DRAFT_VOCAB
    steps = rec["settings"]["steps"]
    assert steps == real_draft.STEPS and len(rec["loss_curve"]) > 0
    pieces = rec["pieces"]
    assert pieces[0]["from_step"] == 0 and pieces[-1]["to_step"] == steps
    assert all(a["to_step"] == b["from_step"] for a, b in itertools.pairwise(pieces))
    assert all(p["wall_s"] <= 90 * 60 for p in pieces)
    acc = rec["held_out"]["acc"]
    assert len(acc) == training.TTT_STEPS and acc[0] > 0.2
    assert profiles.real_refusals() == () and profiles.PROFILES["cpu-real"].draft == profiles.REAL_DRAFT
