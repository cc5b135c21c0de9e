"""A nanoGPT-style GPT for `bigc import torch` (test/e2e/import_nanogpt.sh).

Written in the manner of Karpathy's nanoGPT model.py: a packed c_attn split into q, k, v,
F.scaled_dot_product_attention(is_causal=True), nn.GELU() (the exact form), LayerNorm, learned
positions (the first T of block_size), an LM head tied to the token embedding, the init of GPT-2
(std 0.02, residual projections 0.02/sqrt(2L)), and forward(idx, targets) -> (logits, loss).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, BLOCK, LAYERS, HEADS, EMBD = 256, 64, 2, 4, 64
B, T = 4, 32


class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        Bx, Tx, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(Bx, Tx, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(Bx, Tx, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(Bx, Tx, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(Bx, Tx, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = LayerNorm(n_embd, bias=True)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = LayerNorm(n_embd, bias=True)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(VOCAB, EMBD),
            wpe=nn.Embedding(BLOCK, EMBD),
            drop=nn.Dropout(0.0),
            h=nn.ModuleList([Block(EMBD, HEADS) for _ in range(LAYERS)]),
            ln_f=LayerNorm(EMBD, bias=True),
        ))
        self.lm_head = nn.Linear(EMBD, VOCAB, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * LAYERS))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def trunk(self, idx):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        return self.transformer.ln_f(x)

    def forward(self, idx, targets=None):
        logits = self.lm_head(self.trunk(idx))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


class ChunkedLoss(GPT):
    """The same GPT with its loss as PyTorch 2.15's F.linear_cross_entropy in batch chunks (the
    chunked op computes the gradients in its forward; the importer maps it to the head's matmul and
    the cross-entropy)."""

    def forward(self, idx, targets=None):
        x = self.trunk(idx)
        return F.linear_cross_entropy(x.view(-1, EMBD), self.lm_head.weight, targets.view(-1),
                                      options=nn.LinearCrossEntropyOptions(batch_chunk_size=32))


class LogitsOnly(nn.Module):
    """The same GPT called as module(tokens) -> logits: the importer adds the loss."""

    def __init__(self):
        super().__init__()
        self.gpt = GPT()

    def forward(self, idx):
        return self.gpt(idx)[0]


def batch():
    g = torch.Generator().manual_seed(1)
    return (torch.randint(0, VOCAB, (B, T), generator=g), torch.randint(0, VOCAB, (B, T), generator=g))


def make():
    torch.manual_seed(1234)
    return GPT(), batch()


def make_chunked():
    torch.manual_seed(1234)
    return ChunkedLoss(), batch()


def make_logits():
    torch.manual_seed(4321)
    return LogitsOnly(), batch()
