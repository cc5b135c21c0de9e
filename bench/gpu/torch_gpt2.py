#!/usr/bin/env python3
"""The peer of bench/gpu/run.sh: the same GPT-2 as `bigc gen gpt` (pre-LayerNorm, eps 1e-5, learned
positions, causal attention, GELU tanh MLP 4C, biases everywhere, LM head tied to the token
embedding, mean cross-entropy), trained with PyTorch the way its users train it in bf16: fp32
parameters (the master weights), torch.autocast(bfloat16) for the forward and backward, fused
torch.optim.AdamW (lr 3e-4, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on parameters of rank >= 2
only, bigc's defaults), F.scaled_dot_product_attention (FlashAttention) for attention. Random
tokens (the speed does not depend on them). Prints one JSON line: tokens/s (median of the timed
steps), peak memory (torch.cuda.max_memory_allocated), MFU.

  python3 torch_gpt2.py --preset gpt2 --batch 16 --seq 1024 --mode eager|compile --steps 20 --warmup 5
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {"gpt2": (12, 768, 12), "gpt2-medium": (24, 1024, 16), "gpt2-large": (36, 1280, 20)}


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, H, V, T):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied LM head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))  # fp32 under autocast


def make_step(model, mode, vocab, batch, seq, device, autocast=None, fused=None):
    """One training step of `model` as bigc trains it (AdamW lr 3e-4, betas 0.9/0.95, eps 1e-8, weight
    decay 0.1 on parameters of rank >= 2 only) on random tokens; `mode` "compile": torch.compile;
    `autocast`: the dtype of torch.autocast (None: none). Shared with bench/cpu/torch_gpt.py."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=fused)
    step_model = torch.compile(model) if mode == "compile" else model
    g = torch.Generator(device=device)
    g.manual_seed(1)

    def step():
        x = torch.randint(0, vocab, (batch, seq), device=device, generator=g)
        y = torch.randint(0, vocab, (batch, seq), device=device, generator=g)
        with torch.autocast(device_type=device, dtype=autocast, enabled=autocast is not None):
            loss = step_model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="gpt2", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--mode", default="eager", choices=["eager", "compile"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--peak-flops", type=float, default=989e12, help="dense bf16 peak of the GPU (H100/H200 SXM)")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    L, C, H = PRESETS[a.preset]
    dev = "cuda"
    model = GPT(L, C, H, a.vocab, a.seq).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    step = make_step(model, a.mode, a.vocab, a.batch, a.seq, dev, autocast=torch.bfloat16, fused=True)

    t0 = time.time()
    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    warm_s = time.time() - t0
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    # The GPU memory in use (the CUDA context, the caching allocator's reserve), as bigc reports it.
    free, total = torch.cuda.mem_get_info()
    used = total - free
    tokens = a.batch * a.seq
    dt = statistics.median(times)
    flops_per_token = 6 * nparams + 12 * L * C * a.seq  # nanoGPT's estimate (attention included)
    print(json.dumps({"impl": f"pytorch {a.mode}", "torch": torch.__version__, "preset": a.preset, "batch": a.batch,
                      "seq": a.seq, "params": nparams, "step_ms": dt * 1e3, "tokens_per_s": tokens / dt,
                      "mfu": flops_per_token * tokens / dt / a.peak_flops,
                      "peak_bytes": torch.cuda.max_memory_allocated(), "device_used_bytes": used,
                      "warmup_s": warm_s,
                      "final_loss": float(loss), "gpu": torch.cuda.get_device_name()}))


if __name__ == "__main__":
    main()
