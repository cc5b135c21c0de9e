#!/usr/bin/env python3
"""The peer of bench/gpu/llama.sh and bench/gpu/llama_curve.sh: Hugging Face's LlamaForCausalLM built
from a config (the same config `bigc import hf` imported: bench/gpu/configs/), trained the way its
users train it in bf16: fp32 parameters (the master weights), torch.autocast(bfloat16) for the
forward and backward, attn_implementation="sdpa" (FlashAttention / cuDNN through
F.scaled_dot_product_attention), fused torch.optim.AdamW (lr 3e-4, betas 0.9/0.95, eps 1e-8, weight
decay 0.1 on parameters of rank >= 2 only: bigc's defaults), optionally under torch.compile. The loss
is bigc's: the mean cross-entropy of the logits against separate targets (no shift), in fp32.

Where transformers cannot be imported (a GPU machine with PyTorch alone), the same model written out
here (`OwnLlama`: Hugging Face's parameter names, RMSNorm, rotary embeddings with Llama 3's scaling,
grouped-query SDPA, SwiGLU, a tied or untied head; `--check-own` compares its logits with
transformers' where both are there) stands in, and the impl says so.

Speed (llama.sh): random tokens; one JSON line: tokens/s (median of the timed steps), peak memory
(torch.cuda.max_memory_allocated), MFU (6 N + 12 L C T FLOPs a token, as llama.sh counts bigc's).
  python3 torch_llama.py --config configs/llama3.2-1b.json --batch 4 --seq 2048 --mode eager|compile
Curve (llama_curve.sh): --save-init FILE writes the initial weights (safetensors, Hugging Face's
names: `bigc run --load-weights` reads them), --data FILE trains on an llm.c token file in bigc's
order (step s: tokens [s B T, (s + 1) B T] of the file, targets one ahead), --log FILE.jsonl one
line per step ({"step", "loss"}).
  (--device cpu --steps 2 --warmup 1: a check of the script on a machine without a GPU)
"""
import argparse
import json
import math
import statistics
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError:
    LlamaForCausalLM = None


def llama3_inv_freq(cfg, dim):
    """Hugging Face's inverse frequencies of the rotary embedding (Llama 3's scaling where the
    config has it)."""
    base = cfg.get("rope_theta", 10000.0)
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type")) != "llama3":
        return inv
    factor, lo, hi, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs[
        "original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / lo, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / hi) * ~(wavelen > old / lo)
    return torch.where(medium, smoothed, scaled)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Attention(nn.Module):
    def __init__(self, C, H, Hkv, D):
        super().__init__()
        self.H, self.Hkv, self.D = H, Hkv, D
        self.q_proj = nn.Linear(C, H * D, bias=False)
        self.k_proj = nn.Linear(C, Hkv * D, bias=False)
        self.v_proj = nn.Linear(C, Hkv * D, bias=False)
        self.o_proj = nn.Linear(H * D, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.H, self.D).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.Hkv, self.D).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.Hkv, self.D).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.Hkv != self.H)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.H * self.D))


class MLP(nn.Module):
    def __init__(self, C, Fd):
        super().__init__()
        self.gate_proj = nn.Linear(C, Fd, bias=False)
        self.up_proj = nn.Linear(C, Fd, bias=False)
        self.down_proj = nn.Linear(Fd, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg, D):
        super().__init__()
        C, eps = cfg["hidden_size"], cfg.get("rms_norm_eps", 1e-6)
        self.input_layernorm = RMSNorm(C, eps)
        self.self_attn = Attention(C, cfg["num_attention_heads"], cfg.get("num_key_value_heads",
                                                                           cfg["num_attention_heads"]), D)
        self.post_attention_layernorm = RMSNorm(C, eps)
        self.mlp = MLP(C, cfg["intermediate_size"])

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    def __init__(self, cfg, D):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(Layer(cfg, D) for _ in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(cfg["hidden_size"], cfg.get("rms_norm_eps", 1e-6))


class OwnLlama(nn.Module):
    """LlamaForCausalLM's computation and parameter names, in plain PyTorch."""

    def __init__(self, cfg):
        super().__init__()
        C, H = cfg["hidden_size"], cfg["num_attention_heads"]
        self.D = cfg.get("head_dim") or C // H
        self.model = Body(cfg, self.D)
        self.tied = cfg.get("tie_word_embeddings", False)
        if not self.tied:
            self.lm_head = nn.Linear(C, cfg["vocab_size"], bias=False)
        self.register_buffer("inv_freq", llama3_inv_freq(cfg, self.D), persistent=False)
        std = cfg.get("initializer_range", 0.02)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, std)

    def forward(self, input_ids):
        T = input_ids.shape[1]
        f = torch.outer(torch.arange(T, device=input_ids.device, dtype=torch.float32), self.inv_freq.float())
        emb = torch.cat((f, f), dim=-1)
        x = self.model.embed_tokens(input_ids)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        x = self.model.norm(x)
        return F.linear(x, self.model.embed_tokens.weight if self.tied else self.lm_head.weight)


def build(cfg, dev, own=False):
    """The model (Hugging Face's, else OwnLlama) and the forward giving the logits."""
    if LlamaForCausalLM is not None and not own:
        c = dict(cfg, torch_dtype="float32")  # fp32 masters; autocast computes in bf16
        config = LlamaConfig.from_dict(c)
        config._attn_implementation = "sdpa"
        model = LlamaForCausalLM(config).to(dev)
        return model, (lambda x: model(input_ids=x).logits), "pytorch (transformers LlamaForCausalLM, sdpa)"
    model = OwnLlama(cfg).to(dev)
    return model, model, "pytorch (own Llama: transformers is not installed)" if not own else "pytorch (own Llama)"


def save_safetensors(path, tensors):
    """name -> fp32 tensor, as a safetensors file (no dependency on the safetensors package)."""
    header, blobs, at = {}, [], 0
    for k, t in tensors.items():
        b = t.detach().float().contiguous().cpu().numpy().astype("<f4").tobytes()
        header[k] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h)
        for b in blobs:
            f.write(b)


def llmc_tokens(path):
    """The ids of an llm.c token file (16-bit, magic 20240520, or 32-bit, magic 20240801)."""
    head = np.fromfile(path, dtype="<i4", count=256)
    n = int(head[2])
    dt = {20240520: "<u2", 20240801: "<u4"}[int(head[0])]
    return np.fromfile(path, dtype=dt, offset=1024, count=n).astype(np.int64)


def check_own(cfg):
    """OwnLlama against transformers' LlamaForCausalLM: the same weights, the same logits (fp32)."""
    torch.manual_seed(0)
    hf, hf_fwd, _ = build(cfg, "cpu")
    own = OwnLlama(cfg)
    missing = set(own.state_dict()) ^ {k for k in hf.state_dict() if not (own.tied and k == "lm_head.weight")}
    assert not missing, f"parameter names differ: {sorted(missing)}"
    own.load_state_dict({k: v for k, v in hf.state_dict().items() if k in own.state_dict()})
    x = torch.randint(0, cfg["vocab_size"], (2, 40))
    with torch.no_grad():
        a, b = hf_fwd(x), own(x)
    d = float((a - b).abs().max() / a.abs().max())
    print(json.dumps({"check_own": "OwnLlama vs LlamaForCausalLM logits", "max_rel_diff": d}))
    assert d < 1e-5, d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--name", default=None, help="the model's name in the table (default: the config's file name)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--mode", default="eager", choices=["eager", "compile"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=0, help="initialisation seed")
    ap.add_argument("--own", action="store_true", help="OwnLlama even where transformers is there")
    ap.add_argument("--check-own", action="store_true", help="compare OwnLlama with transformers and exit")
    ap.add_argument("--save-init", default=None, help="write the initial weights (safetensors) here")
    ap.add_argument("--data", default=None, help="an llm.c token file to train on (else random tokens)")
    ap.add_argument("--log", default=None, help="one JSON line per step")
    ap.add_argument("--peak-flops", type=float, default=989e12, help="dense bf16 peak of the GPU (H100/H200 SXM)")
    a = ap.parse_args()
    cfg = json.load(open(a.config))
    if a.check_own:
        check_own(cfg)
        return
    torch.manual_seed(a.seed)
    dev = a.device
    cuda = dev == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    model, logits_of, impl = build(cfg, dev, a.own)
    model.train()
    if a.save_init:
        sd = model.state_dict()
        save_safetensors(a.save_init, {k: v for k, v in sd.items()
                                       if not (cfg.get("tie_word_embeddings") and k == "lm_head.weight")})
    V, L, C = cfg["vocab_size"], cfg["num_hidden_layers"], cfg["hidden_size"]
    nparams = sum(p.numel() for p in model.parameters())  # (a tied head counted once)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=cuda)

    def forward(x, y):
        return F.cross_entropy(logits_of(x).float().view(-1, V), y.view(-1))

    fwd = torch.compile(forward) if a.mode == "compile" else forward
    g = torch.Generator(device=dev)
    g.manual_seed(1)
    tokens = llmc_tokens(a.data) if a.data else None
    bt = a.batch * a.seq
    pos = [0]

    def batch():
        if tokens is None:
            return (torch.randint(0, V, (a.batch, a.seq), device=dev, generator=g),
                    torch.randint(0, V, (a.batch, a.seq), device=dev, generator=g))
        if pos[0] + bt + 1 > len(tokens):  # (bigc's order: back to the start)
            pos[0] = 0
        w = torch.from_numpy(tokens[pos[0]:pos[0] + bt + 1]).to(dev)
        pos[0] += bt
        return w[:-1].view(a.batch, a.seq), w[1:].view(a.batch, a.seq)

    def step():
        x, y = batch()
        with torch.autocast(device_type=dev, dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    log = open(a.log, "w") if a.log else None
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    t0 = time.time()
    n = 0
    for _ in range(a.warmup):
        loss = step()
        n += 1
        if log:
            log.write(json.dumps({"step": n, "loss": loss.item()}) + "\n")
    sync()
    warm_s = time.time() - t0
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(a.steps):
        sync()
        t = time.perf_counter()
        loss = step()
        sync()
        times.append(time.perf_counter() - t)
        n += 1
        if log:
            log.write(json.dumps({"step": n, "loss": loss.item()}) + "\n")
    if log:
        log.close()
    used = 0
    if cuda:  # the GPU memory in use (the CUDA context, the caching allocator's reserve)
        free, total = torch.cuda.mem_get_info()
        used = total - free
    dt = statistics.median(times) if times else float("nan")
    flops_per_token = 6 * nparams + 12 * L * C * a.seq
    name = a.name or a.config.rsplit("/", 1)[-1].removesuffix(".json")
    print(json.dumps({"impl": f"{impl} {a.mode}", "torch": torch.__version__, "preset": name, "batch": a.batch,
                      "seq": a.seq, "params": nparams, "step_ms": dt * 1e3, "tokens_per_s": bt / dt,
                      "mfu": flops_per_token * bt / dt / a.peak_flops,
                      "peak_bytes": torch.cuda.max_memory_allocated() if cuda else 0, "device_used_bytes": used,
                      "warmup_s": warm_s, "final_loss": loss.item(),
                      "gpu": torch.cuda.get_device_name() if cuda else "cpu"}))


if __name__ == "__main__":
    main()
