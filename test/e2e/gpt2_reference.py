#!/usr/bin/python3
"""Independent PyTorch reference for bigc's GPT-2 (Debian's python3-torch).

Loads the initial weights bigc saved (safetensors, Hugging Face GPT-2 names), feeds the same batches
(llm.c order from the same token file), and compares with what bigc computed:
  * the loss and every parameter's gradient of the first step (bigc run --dump-grads),
  * the losses of N steps of AdamW and every parameter after them (bigc run --save-weights).
Relative error = ||bigc - torch|| / ||torch|| per tensor (fp32); all must be <= --tol.
"""
import argparse
import json
import math
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        a, b = info["data_offsets"]
        arr = np.frombuffer(data[base + a:base + b], dtype="<f4").reshape(info["shape"])
        out[name] = torch.from_numpy(arr.astype(np.float32))
    return out


def read_tokens(path):
    with open(path, "rb") as f:
        data = f.read()
    header = np.frombuffer(data[:1024], dtype="<i4")
    if len(data) >= 1024 and header[0] == 20240520:
        n = int(header[2])
        return np.frombuffer(data[1024:1024 + 2 * n], dtype="<u2").astype(np.int64)
    return np.frombuffer(data, dtype="<u2").astype(np.int64)


def batches(tokens, B, T):
    p = 0
    while True:
        if p + B * T + 1 > len(tokens):
            p = 0
        chunk = tokens[p:p + B * T + 1]
        x = torch.from_numpy(chunk[:-1].reshape(B, T).copy())
        y = torch.from_numpy(chunk[1:].reshape(B, T).copy())
        yield x, y
        p += B * T


def gpt2_loss(P, x, y, L, H):
    B, T = x.shape
    C = P["wte.weight"].shape[1]
    h = P["wte.weight"][x] + P["wpe.weight"][:T]
    for i in range(L):
        p = lambda s: P[f"h.{i}.{s}"]
        a = F.layer_norm(h, (C,), p("ln_1.weight"), p("ln_1.bias"), eps=1e-5)
        qkv = a @ p("attn.c_attn.weight") + p("attn.c_attn.bias")
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, H, C // H).transpose(1, 2)
        k = k.view(B, T, H, C // H).transpose(1, 2)
        v = v.view(B, T, H, C // H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        o = (att @ v).transpose(1, 2).reshape(B, T, C)
        h = h + (o @ p("attn.c_proj.weight") + p("attn.c_proj.bias"))
        a = F.layer_norm(h, (C,), p("ln_2.weight"), p("ln_2.bias"), eps=1e-5)
        m = F.gelu(a @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"), approximate="tanh")
        h = h + (m @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias"))
    h = F.layer_norm(h, (C,), P["ln_f.weight"], P["ln_f.bias"], eps=1e-5)
    logits = h @ P["wte.weight"].t()
    return F.cross_entropy(logits.reshape(B * T, -1), y.reshape(B * T))


def rel(a, b):
    return (a - b).norm().item() / max(b.norm().item(), 1e-30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", required=True)
    ap.add_argument("--grads", required=True, help="bigc's gradients of step 1")
    ap.add_argument("--final", required=True, help="bigc's weights after --steps steps")
    ap.add_argument("--log", required=True, help="bigc's JSONL log of the same run")
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)

    P = {k: v.clone().requires_grad_(True) for k, v in read_safetensors(a.init).items()}
    tokens = read_tokens(a.data)
    it = batches(tokens, a.batch, a.seq)
    bigc_losses = [json.loads(l)["loss"] for l in open(a.log) if l.strip()]
    bigc_grads = read_safetensors(a.grads)
    bigc_final = read_safetensors(a.final)
    failures = []
    worst = 0.0

    def check(what, err):
        nonlocal worst
        worst = max(worst, err)
        if not err <= a.tol:
            failures.append(f"{what}: relative error {err:.3e} > {a.tol:g}")

    decay = [p for n, p in P.items() if p.dim() >= 2]
    no_decay = [p for n, p in P.items() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    assert len(bigc_losses) == a.steps, f"log has {len(bigc_losses)} steps, expected {a.steps}"
    for step in range(a.steps):
        x, y = next(it)
        opt.zero_grad()
        loss = gpt2_loss(P, x, y, a.layers, a.heads)
        loss.backward()
        l_ref = loss.item()
        check(f"loss of step {step + 1} (bigc {bigc_losses[step]:.6f}, torch {l_ref:.6f})",
              abs(bigc_losses[step] - l_ref) / abs(l_ref))
        print(f"step {step + 1}: bigc loss {bigc_losses[step]:.6f}  torch loss {l_ref:.6f}")
        if step == 0:
            if set(bigc_grads) != set(P):
                failures.append(f"gradient names differ: {sorted(set(P) ^ set(bigc_grads))}")
            for n, p in P.items():
                if n in bigc_grads:
                    check(f"gradient of {n}", rel(bigc_grads[n], p.grad))
        if step == 0:
            G1 = {k: v.grad.detach().clone() for k, v in P.items()}
        opt.step()
    noise_floor = []
    for n, p in P.items():
        got, want = bigc_final[n], p.detach()
        # Elements whose step-1 gradient is rounding noise (below 1e-4 of the tensor's rms gradient:
        # the two implementations' sums differ there by a large fraction of the value) are moved by
        # AdamW by up to +-lr however small the gradient (it divides by its root mean square): they
        # are compared below, as counted, not by the norm of the difference. Measured on an AVX-512
        # machine: one element of h.0.mlp.c_fc.weight, gradient 1.43e-8 (bigc) against 1.51e-8 (torch)
        # with an rms of 4.0e-3, ended 1.36e-5 apart (the next 1.3e-7), 5.3e-6 of the tensor's norm.
        g1 = G1[n].flatten()
        noise = g1.abs() < 1e-4 * g1.pow(2).mean().sqrt()
        if noise.any() and not n.endswith("attn.c_attn.bias"):
            noise_floor.append((n, int(noise.sum()), g1.numel()))
            keep = ~noise
            got, want = got.flatten()[keep], want.flatten()[keep]
        if n.endswith("attn.c_attn.bias"):
            # The key bias columns [C, 2C) have an exactly zero gradient (softmax is invariant to
            # adding the same q.b_k to every score of a row); both implementations compute rounding
            # noise there, which Adam normalises into +-lr steps. Check that the gradient there is
            # noise in bigc too, and compare the query and value columns.
            C = want.shape[0] // 3
            g = bigc_grads[n]
            check(f"{n}: key-bias gradient is not ~0", (g[C:2 * C].norm() / g.norm()).item() * 1e-2)
            got = torch.cat([got[:C], got[2 * C:]])
            want = torch.cat([want[:C], want[2 * C:]])
        check(f"{n} after {a.steps} steps", rel(got, want))
    for n, k, total in noise_floor:  # a few such elements (at most 1%), not a tensor's worth
        print(f"{n}: {k} of {total} elements with a step-1 gradient at rounding-noise level, compared by count")
        if k > total // 100:
            failures.append(f"{n}: {k} of {total} elements have a step-1 gradient below 1e-4 of its rms")
    print(f"checked {len(P)} parameters, {a.steps} steps; worst relative error {worst:.3e}")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("PASS: bigc matches PyTorch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
