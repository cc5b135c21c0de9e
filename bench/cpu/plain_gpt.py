"""A hand-written GPT as users write them (bench/cpu/imported.sh): exact (erf) GELU through
nn.GELU(), no biases anywhere, a tied head, attention through F.scaled_dot_product_attention.
make() is what `bigc import torch plain_gpt.py:make` calls; the size comes from the environment
(PLAIN_GPT="layers:hidden:heads:vocab:batch:seq")."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln1 = nn.LayerNorm(C, bias=False)
        self.qkv = nn.Linear(C, 3 * C, bias=False)
        self.proj = nn.Linear(C, C, bias=False)
        self.ln2 = nn.LayerNorm(C, bias=False)
        self.fc = nn.Linear(C, 4 * C, bias=False)
        self.act = nn.GELU()
        self.out = nn.Linear(4 * C, C, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.out(self.act(self.fc(self.ln2(x))))


class PlainGPT(nn.Module):
    def __init__(self, L, C, H, V, T):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln = nn.LayerNorm(C, bias=False)
        self.head = nn.Linear(C, V, bias=False)
        self.head.weight = self.wte.weight
        for n, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def size():
    return [int(x) for x in os.environ.get("PLAIN_GPT", "4:256:4:8192:4:256").split(":")]


def make():
    L, C, H, V, B, T = size()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    return PlainGPT(L, C, H, V, T), (torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g))
