"""A LLaMA-like model written by hand, the way user code often is, for `bigc import torch`
(test/e2e/import_custom.sh): an RMSNorm written out (weight first, and weight last), nn.RMSNorm,
rotary tables as buffers sliced to the sequence (no inv_freq: the frequencies come from the
tables), F.scaled_dot_product_attention with enable_gqa=True and with repeat_interleave of the
key/value heads, F.silu(gate) * up (and, in `geglu`, Gemma's F.gelu(gate, approximate="tanh") * up),
nn.LayerNorm(bias=False), a head as `x @ W` with W [C, V], and forward(tokens) -> logits (the
importer adds the loss)."""
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
    def __init__(s, mode, wl, act="swiglu"):
        super().__init__(); s.act = act
        s.n1 = RMS(C, weight_last=wl); s.n2 = nn.RMSNorm(C, eps=1e-6); s.a = Attn(mode)
        s.g = nn.Linear(C, 2 * C, bias=False); s.u = nn.Linear(C, 2 * C, bias=False); s.d = nn.Linear(2 * C, C, bias=False)
    def forward(s, x, cos, sin):
        x = x + s.a(s.n1(x), cos, sin)
        h = s.n2(x)
        if s.act == "geglu":
            return x + s.d(F.gelu(s.g(h), approximate="tanh") * s.u(h))
        return x + s.d(F.silu(s.g(h)) * s.u(h))

class Net(nn.Module):
    def __init__(s, mode="gqa", wl=False, act="swiglu"):
        super().__init__()
        s.emb = nn.Embedding(V, C); s.blocks = nn.ModuleList([Block(mode, wl, act) for _ in range(L)])
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
def geglu():
    torch.manual_seed(2); return Net("gqa", act="geglu"), batch()


# Attention written out, as minGPT and nanoGPT (without flash) and llama2.c / Meta's llama (their
# non-flash path) write it: q @ k^T times 1/sqrt(D) with a causal mask (masked_fill of a lower
# triangle's zeros with -inf, or an added upper triangle of -inf), softmax (through float and back
# in the second form), @ v; GPT-2's packed c_attn and LayerNorm. minGPT's mask is a persistent buffer,
# as in minGPT (its state_dict holds it: bigc import writes it with the weights and bigc run
# --save-weights carries it, so that load_state_dict(strict=True) takes the file); the additive one
# is not.
class WrittenAttn(nn.Module):
    def __init__(s, additive):
        super().__init__()
        s.c_attn = nn.Linear(C, 3 * C); s.c_proj = nn.Linear(C, C); s.additive = additive
        s.register_buffer("bias", torch.tril(torch.ones(BLOCK, BLOCK)).view(1, 1, BLOCK, BLOCK))
        s.register_buffer("mask", torch.triu(torch.full((1, 1, BLOCK, BLOCK), float("-inf")), diagonal=1),
                          persistent=False)
    def forward(s, x):
        b, t, c = x.size()
        q, k, v = s.c_attn(x).split(C, dim=2)
        k = k.view(b, t, H, c // H).transpose(1, 2); q = q.view(b, t, H, c // H).transpose(1, 2)
        v = v.view(b, t, H, c // H).transpose(1, 2)
        if s.additive:
            att = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(c // H)
            att = att + s.mask[:, :, :t, :t]
            att = F.softmax(att.float(), dim=-1).type_as(q)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(s.bias[:, :, :t, :t] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return s.c_proj(y)

class WrittenNet(nn.Module):
    def __init__(s, additive):
        super().__init__()
        s.emb = nn.Embedding(V, C); s.ln = nn.ModuleList([nn.LayerNorm(C) for _ in range(L)])
        s.a = nn.ModuleList([WrittenAttn(additive) for _ in range(L)]); s.head = nn.Linear(C, V)
    def forward(s, idx):
        x = s.emb(idx)
        for ln, a in zip(s.ln, s.a):
            x = x + a(ln(x))
        return s.head(x)

def masked():
    torch.manual_seed(3); return WrittenNet(False), batch()
def additive():
    torch.manual_seed(4); return WrittenNet(True), batch()


# llama2.c's manner (its model.py): rotary embeddings on interleaved pairs (each head's adjacent
# elements unbound as real and imaginary parts, rotated by cos/sin tables computed in float32,
# stacked back and flattened), RMSNorm through float and back, F.silu(w1(x)) * w3(x), a tied head,
# forward(tokens, targets) returning the logits and keeping the loss in self.last_loss.
def rotary_interleaved(x, cos, sin):
    xr, xi = x.float().reshape(x.shape[:-1] + (-1, 2)).unbind(-1)
    cos, sin = cos.view(1, cos.shape[0], 1, cos.shape[1]), sin.view(1, sin.shape[0], 1, sin.shape[1])
    out = torch.stack([xr * cos - xi * sin, xr * sin + xi * cos], dim=-1).flatten(3)
    return out.type_as(x)

class L2cBlock(nn.Module):
    def __init__(s):
        super().__init__()
        s.wq, s.wk, s.wv, s.wo = (nn.Linear(C, C, bias=False) for _ in range(4))
        s.w1 = nn.Linear(C, 2 * C, bias=False); s.w2 = nn.Linear(2 * C, C, bias=False); s.w3 = nn.Linear(C, 2 * C, bias=False)
        s.n1 = RMS(C); s.n2 = RMS(C)
    def forward(s, x, cos, sin):
        b, t, _ = x.shape
        h = s.n1(x)
        q, k, v = (m(h).view(b, t, H, D) for m in (s.wq, s.wk, s.wv))
        q, k = rotary_interleaved(q, cos, sin), rotary_interleaved(k, cos, sin)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + s.wo(y.transpose(1, 2).contiguous().view(b, t, C))
        h = s.n2(x)
        return x + s.w2(F.silu(s.w1(h)) * s.w3(h))

class L2cNet(nn.Module):
    def __init__(s):
        super().__init__()
        s.tok = nn.Embedding(V, C); s.layers = nn.ModuleList([L2cBlock() for _ in range(L)]); s.norm = RMS(C)
        s.out = nn.Linear(C, V, bias=False); s.tok.weight = s.out.weight
        f = 1.0 / (10000.0 ** (torch.arange(0, D, 2)[: D // 2].float() / D))
        a = torch.outer(torch.arange(BLOCK), f).float()
        s.register_buffer("fcos", torch.cos(a), persistent=False); s.register_buffer("fsin", torch.sin(a), persistent=False)
        s.last_loss = None
    def forward(s, tokens, targets=None):
        t = tokens.shape[1]
        x = s.tok(tokens)
        for l in s.layers:
            x = l(x, s.fcos[:t], s.fsin[:t])
        logits = s.out(s.norm(x))
        if targets is not None:
            s.last_loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits

def llama2c():
    torch.manual_seed(5); return L2cNet(), batch()


# Meta's reference llama/model.py's manner (its file needs fairscale and a GPU; with fairscale
# installed it imports unmodified through examples/meta_llama.py, measured by hand): rotary
# embeddings as complex numbers (torch.polar's freqs_cis, view_as_complex of the pairs, a complex
# product, view_as_real, flatten(3)), a KV cache written by the step and read back
# (cache_k[:B, 0:T] = xk; keys = cache_k[:B, :T]), repeat_kv by expand in [B,T,Hk,D], the causal
# mask built by triu of a full -inf matrix and hstack, softmax through float, the forward under
# @torch.inference_mode() and called through its __wrapped__ (training needs autograd), the caches
# detached at each step (they outlive it).
def precompute_freqs_cis(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    freqs = torch.outer(torch.arange(end, device=freqs.device), freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)

def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    shape = [d if i == 1 or i == xq_.ndim - 1 else 1 for i, d in enumerate(xq_.shape)]
    freqs_cis = freqs_cis.view(*shape)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)

def meta_repeat_kv(x, n_rep):
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return x[:, :, :, None, :].expand(bs, slen, n_kv_heads, n_rep, head_dim).reshape(bs, slen, n_kv_heads * n_rep, head_dim)

class MetaAttention(nn.Module):
    def __init__(s):
        super().__init__()
        s.wq = nn.Linear(C, H * D, bias=False); s.wk = nn.Linear(C, KV * D, bias=False)
        s.wv = nn.Linear(C, KV * D, bias=False); s.wo = nn.Linear(H * D, C, bias=False)
        s.cache_k = torch.zeros((B, BLOCK, KV, D)); s.cache_v = torch.zeros((B, BLOCK, KV, D))
    def forward(s, x, start_pos, freqs_cis, mask):
        bsz, seqlen, _ = x.shape
        xq, xk, xv = s.wq(x), s.wk(x), s.wv(x)
        xq = xq.view(bsz, seqlen, H, D); xk = xk.view(bsz, seqlen, KV, D); xv = xv.view(bsz, seqlen, KV, D)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
        s.cache_k = s.cache_k.to(xq); s.cache_v = s.cache_v.to(xq)
        s.cache_k[:bsz, start_pos : start_pos + seqlen] = xk
        s.cache_v[:bsz, start_pos : start_pos + seqlen] = xv
        keys = s.cache_k[:bsz, : start_pos + seqlen]; values = s.cache_v[:bsz, : start_pos + seqlen]
        keys = meta_repeat_kv(keys, H // KV); values = meta_repeat_kv(values, H // KV)
        xq = xq.transpose(1, 2); keys = keys.transpose(1, 2); values = values.transpose(1, 2)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(D)
        if mask is not None:
            scores = scores + mask
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, values)
        return s.wo(output.transpose(1, 2).contiguous().view(bsz, seqlen, -1))

class MetaBlock(nn.Module):
    def __init__(s):
        super().__init__()
        s.attention = MetaAttention(); s.attention_norm = RMS(C, eps=1e-6); s.ffn_norm = RMS(C, eps=1e-6)
        s.w1 = nn.Linear(C, 2 * C, bias=False); s.w2 = nn.Linear(2 * C, C, bias=False); s.w3 = nn.Linear(C, 2 * C, bias=False)
    def forward(s, x, start_pos, freqs_cis, mask):
        h = x + s.attention(s.attention_norm(x), start_pos, freqs_cis, mask)
        f = s.ffn_norm(h)
        return h + s.w2(F.silu(s.w1(f)) * s.w3(f))

class MetaTransformer(nn.Module):
    def __init__(s):
        super().__init__()
        s.tok_embeddings = nn.Embedding(V, C); s.layers = nn.ModuleList([MetaBlock() for _ in range(L)])
        s.norm = RMS(C, eps=1e-6); s.output = nn.Linear(C, V, bias=False)
        s.freqs_cis = precompute_freqs_cis(D, BLOCK * 2)
    @torch.inference_mode()
    def forward(s, tokens, start_pos):
        _bsz, seqlen = tokens.shape
        h = s.tok_embeddings(tokens)
        s.freqs_cis = s.freqs_cis.to(h.device)
        freqs_cis = s.freqs_cis[start_pos : start_pos + seqlen]
        mask = None
        if seqlen > 1:
            mask = torch.full((seqlen, seqlen), float("-inf"), device=tokens.device)
            mask = torch.triu(mask, diagonal=1)
            mask = torch.hstack([torch.zeros((seqlen, start_pos), device=tokens.device), mask]).type_as(h)
        for layer in s.layers:
            h = layer(h, start_pos, freqs_cis, mask)
        h = s.norm(h)
        return s.output(h).float()

class MetaTrain(nn.Module):  # the wrapper (examples/meta_llama.py's Train)
    def __init__(s, m):
        super().__init__(); s.m = m
    def forward(s, tokens):
        for layer in s.m.layers:
            layer.attention.cache_k = layer.attention.cache_k.detach()
            layer.attention.cache_v = layer.attention.cache_v.detach()
        return MetaTransformer.forward.__wrapped__(s.m, tokens, 0)

def meta():
    torch.manual_seed(6); return MetaTrain(MetaTransformer()), batch()
