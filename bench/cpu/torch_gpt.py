#!/usr/bin/env python3
"""The peer of bench/cpu/run.sh: the same GPT-2 as `bigc gen gpt` (pre-LayerNorm, eps 1e-5, learned
positions, causal attention, GELU tanh MLP 4C, biases everywhere, LM head tied to the token
embedding, mean cross-entropy), trained in fp32 on the CPU the way PyTorch's users train it there:
nn.Linear / nn.LayerNorm, F.scaled_dot_product_attention, torch.optim.AdamW (its default foreach
implementation; lr 3e-4, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on parameters of rank >= 2
only, bigc's defaults), torch.set_num_threads(--threads). Random tokens (the speed does not depend
on them). Prints one JSON line: step time (median of the timed steps), tokens/s.

  python3 torch_gpt.py --layers 4 --hidden 256 --heads 4 --vocab 8192 --batch 4 --seq 256 \
      --threads 2 --mode eager|compile --steps 20 --warmup 5
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
from torch_gpt2 import GPT, make_step  # noqa: E402  (the same module and step as the GPU peer)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mode", default="eager", choices=["eager", "compile"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = GPT(a.layers, a.hidden, a.heads, a.vocab, a.seq)
    nparams = sum(p.numel() for p in model.parameters())
    step = make_step(model, a.mode, a.vocab, a.batch, a.seq, "cpu")

    t0 = time.time()
    for _ in range(a.warmup):
        step()
    warm_s = time.time() - t0
    times = []
    for _ in range(a.steps):
        t = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t)
    dt = statistics.median(times)
    print(json.dumps({"impl": f"pytorch {a.mode}", "torch": torch.__version__, "threads": a.threads,
                      "layers": a.layers, "hidden": a.hidden, "heads": a.heads, "vocab": a.vocab,
                      "batch": a.batch, "seq": a.seq, "params": nparams, "step_ms": dt * 1e3,
                      "tokens_per_s": a.batch * a.seq / dt, "warmup_s": warm_s, "final_loss": float(loss.detach())}))


if __name__ == "__main__":
    main()
