#!/usr/bin/env python3
"""The rows and the table of the GPU benchmarks (bench/gpu/run.sh: GPT-2; bench/gpu/llama.sh: LLaMA),
one implementation for both.

  bench_rows.py bigc LOG OUT --preset P --impl NAME --batch B --seq T --layers L --hidden C \\
      --warmup W --peak-flops F     one JSON row of a `bigc-run --backend cuda --log LOG` run (its
                                    stdout and stderr in OUT): tokens/s (median after the warmup),
                                    MFU (6 N + 12 L C T FLOPs a token), the memory it allocates
                                    (planned device arena + workspace) and the GPU memory in use
  bench_rows.py table RESULTS.jsonl the markdown table of the rows (bigc's and the PyTorch peers'),
                                    bigc's fastest against each peer, and --offload cpu's speed
                                    against the same program without it where both ran
"""
import argparse
import json
import re
import statistics
import sys


def bigc_row(a):
    rows = [json.loads(l) for l in open(a.log) if l.strip()][a.warmup:]
    text = open(a.out).read()
    params = int(re.search(r"cuda backend, (\d+) parameters", text).group(1))
    tps = statistics.median(r["tokens_per_s"] for r in rows)
    ws = re.search(r"workspace ([\d.]+) (MiB|GiB)", text)
    wsb = float(ws.group(1)) * (2**20 if ws.group(2) == "MiB" else 2**30) if ws else 0
    # What the program allocates: its planned device arena and the backend's workspace (PyTorch's
    # counterpart: max_memory_allocated). Apart: the GPU memory in use, measured (cudaMemGetInfo: the
    # CUDA context, the arena, the workspace; PyTorch's: mem_get_info after its steps).
    arena = rows[-1]["planned_bytes"]["device"]
    fpt = 6 * params + 12 * a.layers * a.hidden * a.seq
    return {"impl": a.impl, "preset": a.preset, "batch": a.batch, "seq": a.seq, "params": params,
            "step_ms": a.batch * a.seq / tps * 1e3, "tokens_per_s": tps, "mfu": fpt * tps / a.peak_flops,
            "peak_bytes": int(arena + wsb), "arena_bytes": arena, "workspace_bytes": int(wsb),
            "device_used_bytes": rows[-1]["peak_bytes"]["device"], "final_loss": rows[-1]["loss"]}


def table(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    out = ["| model | implementation | step (ms) | tokens/s | MFU | peak memory allocated | GPU memory in use | "
           "bigc faster by |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for preset in dict.fromkeys(r["preset"] for r in rows):
        rs = [r for r in rows if r["preset"] == preset]
        bigcs = [r for r in rs if r["impl"].startswith("bigc")]
        big = max(bigcs, key=lambda r: r["tokens_per_s"]) if bigcs else None  # the fastest bigc
        for r in rs:
            ratio = "" if r["impl"].startswith("bigc") or not big else f"{big['tokens_per_s'] / r['tokens_per_s']:.2f}x"
            out.append(f"| {preset} (B={r['batch']}, T={r['seq']}) | {r['impl']} | {r['step_ms']:.1f} | "
                       f"{r['tokens_per_s']:,.0f} | {100 * r['mfu']:.1f} % | {r['peak_bytes'] / 2**30:.2f} GiB | "
                       f"{r['device_used_bytes'] / 2**30:.2f} GiB | {ratio} |")
    # --offload cpu (the AdamW step on the host, overlapped) against the same program on the GPU alone.
    for preset in dict.fromkeys(r["preset"] for r in rows):
        by = {r["impl"]: r for r in rows if r["preset"] == preset}
        off, base = by.get("bigc --pad-vocab 64 --offload cpu"), by.get("bigc --pad-vocab 64")
        if off and base:
            out.append(f"{preset}: --offload cpu {off['tokens_per_s']:,.0f} tokens/s, "
                       f"{100 * off['tokens_per_s'] / base['tokens_per_s']:.0f}% of the same program without offload "
                       f"(the issue's goal: >= 70%); device {off['peak_bytes'] / 2**30:.2f} against "
                       f"{base['peak_bytes'] / 2**30:.2f} GiB")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bigc")
    b.add_argument("log")
    b.add_argument("out")
    for k in ("preset", "impl"):
        b.add_argument("--" + k, required=True)
    for k in ("batch", "seq", "layers", "hidden", "warmup"):
        b.add_argument("--" + k, type=int, required=True)
    b.add_argument("--peak-flops", type=float, required=True)
    t = sub.add_parser("table")
    t.add_argument("results")
    a = ap.parse_args()
    print(json.dumps(bigc_row(a)) if a.cmd == "bigc" else table(a.results))


if __name__ == "__main__":
    sys.exit(main())
