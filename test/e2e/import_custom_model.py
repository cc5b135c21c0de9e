"""A LLaMA-like model written by hand, the way user code often is, for `bigc import torch`
(test/e2e/import_custom.sh): an RMSNorm written out (weight first, and weight last), nn.RMSNorm,
rotary tables as buffers sliced to the sequence (no inv_freq: the frequencies come from the
tables), F.scaled_dot_product_attention with enable_gqa=True and with repeat_interleave of the
key/value heads, F.silu(gate) * up, nn.LayerNorm(bias=False), a head as `x @ W` with W [C, V],
and forward(tokens) -> logits (the importer adds the loss)."""
import math, torch, torch.nn as nn, torch.nn.functional as F
V, C, H, KV, L, B, T, BLOCK = 256, 64, 4, 2, 2, 4, 32, 64
D = C // H

class RMS(nn.Module):
    def __init__(s, n, eps=1e-5, weight_last=False):
        super().__init__(); s.w = nn.Parameter(torch.ones(n)); s.eps = eps; s.wl = weight_last
    def forward(s, x):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + s.eps)
        return y * s.w if s.wl else s.w * y

def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)

class Attn(nn.Module):
    def __init__(s, mode):
        super().__init__()
        s.q = nn.Linear(C, H * D, bias=False); s.k = nn.Linear(C, KV * D, bias=False); s.v = nn.Linear(C, KV * D, bias=False)
        s.o = nn.Linear(H * D, C, bias=False); s.mode = mode
    def forward(s, x, cos, sin):
        b, t, _ = x.shape
        q = s.q(x).view(b, t, H, D).transpose(1, 2)
        k = s.k(x).view(b, t, KV, D).transpose(1, 2)
        v = s.v(x).view(b, t, KV, D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = (k * cos) + (rotate_half(k) * sin)
        if s.mode == "gqa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            k = k.repeat_interleave(H // KV, dim=1); v = v.repeat_interleave(H // KV, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return s.o(y.transpose(1, 2).reshape(b, t, H * D))

class Block(nn.Module):
    def __init__(s, mode, wl):
        super().__init__()
        s.n1 = RMS(C, weight_last=wl); s.n2 = nn.RMSNorm(C, eps=1e-6); s.a = Attn(mode)
        s.g = nn.Linear(C, 2 * C, bias=False); s.u = nn.Linear(C, 2 * C, bias=False); s.d = nn.Linear(2 * C, C, bias=False)
    def forward(s, x, cos, sin):
        x = x + s.a(s.n1(x), cos, sin)
        h = s.n2(x)
        return x + s.d(F.silu(s.g(h)) * s.u(h))

class Net(nn.Module):
    def __init__(s, mode="gqa", wl=False):
        super().__init__()
        s.emb = nn.Embedding(V, C); s.blocks = nn.ModuleList([Block(mode, wl) for _ in range(L)])
        s.norm = nn.LayerNorm(C, bias=False)
        s.W = nn.Parameter(torch.randn(C, V) * 0.02)
        inv = 1.0 / (10000 ** (torch.arange(0, D, 2).float() / D))
        a = torch.outer(torch.arange(BLOCK).float(), inv)
        emb = torch.cat([a, a], -1)
        s.register_buffer("cos", emb.cos(), persistent=False); s.register_buffer("sin", emb.sin(), persistent=False)
    def forward(s, idx):
        t = idx.shape[1]
        x = s.emb(idx)
        cos, sin = s.cos[:t], s.sin[:t]
        for blk in s.blocks:
            x = blk(x, cos, sin)
        return (s.norm(x) @ s.W).float()

def batch():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)

def gqa():
    torch.manual_seed(0); return Net("gqa"), batch()
def rep():
    torch.manual_seed(1); return Net("rep", wl=True), batch()
