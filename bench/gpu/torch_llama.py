#!/usr/bin/env python3
"""The peer of bench/gpu/llama.sh: Hugging Face's LlamaForCausalLM built from a config (the same
config `bigc import hf` imported: bench/gpu/configs/), trained the way its users train it in bf16:
fp32 parameters (the master weights), torch.autocast(bfloat16) for the forward and backward,
attn_implementation="sdpa" (FlashAttention / cuDNN through F.scaled_dot_product_attention), fused
torch.optim.AdamW (lr 3e-4, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on parameters of rank >= 2
only: bigc's defaults), optionally under torch.compile. The loss is bigc's: the mean cross-entropy of
the logits against separate targets (no shift), in fp32. Random tokens (the speed does not depend on
them). Prints one JSON line: tokens/s (median of the timed steps), peak memory
(torch.cuda.max_memory_allocated), MFU (6 N + 12 L C T FLOPs a token, as bench/gpu/llama.sh counts
bigc's).

  python3 torch_llama.py --config configs/llama3.2-1b.json --batch 4 --seq 2048 --mode eager|compile
  (--device cpu --steps 2 --warmup 1: a check of the script on a machine without a GPU)
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM


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
    ap.add_argument("--peak-flops", type=float, default=989e12, help="dense bf16 peak of the GPU (H100/H200 SXM)")
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = a.device
    cuda = dev == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    cfg = json.load(open(a.config))
    cfg["torch_dtype"] = "float32"  # fp32 masters; autocast computes in bf16
    config = LlamaConfig.from_dict(cfg)
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config).to(dev)
    model.train()
    V, L, C = config.vocab_size, config.num_hidden_layers, config.hidden_size
    nparams = sum(p.numel() for p in model.parameters())  # (a tied head counted once)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=cuda)

    def forward(x, y):
        logits = model(input_ids=x).logits
        return F.cross_entropy(logits.float().view(-1, V), y.view(-1))

    fwd = torch.compile(forward) if a.mode == "compile" else forward
    g = torch.Generator(device=dev)
    g.manual_seed(1)

    def step():
        x = torch.randint(0, V, (a.batch, a.seq), device=dev, generator=g)
        y = torch.randint(0, V, (a.batch, a.seq), device=dev, generator=g)
        with torch.autocast(device_type=dev, dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    t0 = time.time()
    for _ in range(a.warmup):
        step()
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
    used = 0
    if cuda:  # the GPU memory in use (the CUDA context, the caching allocator's reserve)
        free, total = torch.cuda.mem_get_info()
        used = total - free
    tokens = a.batch * a.seq
    dt = statistics.median(times)
    flops_per_token = 6 * nparams + 12 * L * C * a.seq
    name = a.name or a.config.rsplit("/", 1)[-1].removesuffix(".json")
    print(json.dumps({"impl": f"pytorch {a.mode}", "torch": torch.__version__, "preset": name, "batch": a.batch,
                      "seq": a.seq, "params": nparams, "step_ms": dt * 1e3, "tokens_per_s": tokens / dt,
                      "mfu": flops_per_token * tokens / dt / a.peak_flops,
                      "peak_bytes": torch.cuda.max_memory_allocated() if cuda else 0, "device_used_bytes": used,
                      "warmup_s": warm_s, "final_loss": loss.item(),
                      "gpu": torch.cuda.get_device_name() if cuda else "cpu"}))


if __name__ == "__main__":
    main()
