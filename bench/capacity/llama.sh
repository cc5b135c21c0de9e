#!/usr/bin/env bash
# Capacity of the LLaMA family on the hardware profiles (bigc gen llama presets, the graph
# `bigc import hf` writes for LlamaForCausalLM): does a preset fit, with which options, and the
# largest Llama-shaped model per profile. A plan fits when `bigc compile --quiet` exits 0 (every
# space within the profile's memory less its reserve); the figures come from `bigc inspect --json`.
#
#   1. Llama-3-8B on one 80 GB GPU (h100-80g-x8 with --ranks 1), bf16: as is, with --recompute
#      auto, with --offload cpu (+ recompute auto).
#   2. Llama-3-70B on 8 x 80 GB (h100-80g-x8, a100-80g-x8), bf16: ZeRO-3, + recompute auto,
#      + offload cpu; tensor parallel 8 with ZeRO-1 over nothing (tp 8 x dp 1).
#   3. Llama-3-405B on 8 x H100 with ZeRO-3 + offload + recompute auto (host memory decides).
#   4. The largest Llama-shaped model per profile (Llama-3-70B's width: hidden 8192, 64 heads, 8 kv
#      heads, ffn 28672, vocabulary 128256), the most layers that fit with the strongest options
#      (16-bit, ZeRO-3 over the profile's devices, CPU offload, recompute auto): bisection.
# Sequence length SEQ (default 4096) x batch 1 per rank.
#
# Usage: bench/capacity/llama.sh [build/bin]      (prints markdown tables; about 10 minutes)
set -euo pipefail
BIN=${1:-build/bin}
export BIGC="$BIN/bigc" SEQ=${SEQ:-4096}
[ -x "$BIGC" ] || { echo "bench/capacity/llama.sh: $BIGC not found (build first, or pass the bin dir)" >&2; exit 1; }
export BIGC_FIT_CANDIDATES=0
exec /usr/bin/python3 - <<'PY'
import json, os, subprocess, sys, tempfile, time

BIGC, SEQ = os.environ["BIGC"], int(os.environ["SEQ"])
tmp = tempfile.mkdtemp(prefix="bigc-llama-capacity-")
t0 = time.time()
compiles = 0


def gen(args, path):
    subprocess.run([BIGC, "gen", "llama"] + args + ["--seq", str(SEQ), "--batch", "1", "-o", path], check=True)


def plan(gen_args, flags):
    """(fits, inspect json or None, first line of the error)"""
    global compiles
    compiles += 1
    mlir, out = os.path.join(tmp, "m.mlir"), os.path.join(tmp, "m.bigc")
    gen(gen_args, mlir)
    r = subprocess.run([BIGC, "compile", mlir, "-o", out, "--quiet"] + flags, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode == 2:
        sys.exit("internal error compiling %s %s:\n%s" % (gen_args, flags, r.stderr))
    if r.returncode != 0:
        return False, None, (r.stderr.strip().splitlines() or [""])[0]
    j = json.loads(subprocess.run([BIGC, "inspect", out, "--json"], check=True, stdout=subprocess.PIPE).stdout)
    return True, j, ""


def gib(b):
    return "%.2f GiB" % (b / 2**30)


def row(what, gen_args, flags):
    ok, j, err = plan(gen_args, flags)
    if not ok:
        if " needs " in err:
            why = "needs " + err.split(" needs ", 1)[1].split(";")[0]
        elif "the minimum is " in err:  # --recompute auto: even recomputing everything is too much
            why = "recomputing everything still needs " + err.split("the minimum is ", 1)[1].split(" (")[0].split(";")[0]
        else:
            why = err.split(": ", 2)[-1][:120]
        print("| %s | `%s` | no: %s |  |  |" % (what, " ".join(flags), why), flush=True)
        return
    sp = j["spaces"]
    dev = sp["device"]["arena_bytes"]
    host = sp.get("host", {}).get("arena_bytes", 0) * j.get("ranks", 1)
    est = j.get("estimate", {}).get("step_seconds")
    print("| %s | `%s` | yes | %s of %s | %s |" % (
        what, " ".join(flags), gib(dev), gib(sp["device"]["capacity_bytes"]),
        (gib(host) + " host" if host else "—") + ("; step %.2f s (estimate)" % est if est else "")), flush=True)


print("Llama presets on the hardware profiles, batch 1 x seq %d per rank (%s)\n" % (SEQ, time.strftime("%Y-%m-%d")))
print("| model | options | fits | device arena per rank | host (all ranks); step |")
print("|---|---|---|---|---|")
one = ["--hardware", "h100-80g-x8", "--ranks", "1", "--precision", "bf16"]
row("Llama-3-8B, 1 x H100 80 GB", ["--preset", "llama3-8b"], one)
row("Llama-3-8B, 1 x H100 80 GB", ["--preset", "llama3-8b"], one + ["--recompute", "auto"])
row("Llama-3-8B, 1 x H100 80 GB", ["--preset", "llama3-8b"], one + ["--offload", "cpu"])
row("Llama-3-8B, 1 x H100 80 GB", ["--preset", "llama3-8b"], one + ["--offload", "cpu", "--recompute", "auto"])
for hw in ("h100-80g-x8", "a100-80g-x8"):
    eight = ["--hardware", hw, "--precision", "bf16"]
    row("Llama-3-70B, 8 x %s" % hw, ["--preset", "llama3-70b"], eight + ["--zero", "3"])
    row("Llama-3-70B, 8 x %s" % hw, ["--preset", "llama3-70b"], eight + ["--zero", "3", "--recompute", "auto"])
    row("Llama-3-70B, 8 x %s" % hw, ["--preset", "llama3-70b"], eight + ["--zero", "3", "--offload", "cpu", "--recompute", "auto"])
    row("Llama-3-70B, 8 x %s" % hw, ["--preset", "llama3-70b"], eight + ["--tp", "8", "--sequence-parallel", "--recompute", "auto"])
row("Llama-3-405B, 8 x H100", ["--preset", "llama3-405b"],
    ["--hardware", "h100-80g-x8", "--precision", "bf16", "--zero", "3", "--offload", "cpu", "--recompute", "auto"])
row("Mistral-7B, 1 x V100 16 GB", ["--preset", "mistral-7b"],
    ["--hardware", "v100-16g-x1", "--precision", "fp16", "--offload", "cpu", "--recompute", "auto"])
row("Qwen2-7B, 8 x V100 16 GB", ["--preset", "qwen2-7b"],
    ["--hardware", "v100-16g-x8", "--precision", "fp16", "--zero", "3", "--offload", "cpu", "--recompute", "auto"])

print("\nThe largest Llama-shaped model per profile (hidden 8192, 64 heads, 8 kv heads, ffn 28672, vocabulary 128256;"
      " 16-bit, ZeRO-3 over the devices, --offload cpu, --recompute auto):\n")
print("| profile | layers | parameters | device arena per rank | host arena (all ranks) | bytes of host per parameter |")
print("|---|---|---|---|---|---|")
width = ["--hidden", "8192", "--heads", "64", "--kv-heads", "8", "--ffn", "28672", "--vocab", "128256"]
for hw, prec in (("v100-16g-x1", "fp16"), ("v100-16g-x8", "fp16"), ("a100-80g-x8", "bf16"), ("h100-80g-x8", "bf16"),
                 ("h200-x1", "bf16")):
    flags = ["--hardware", hw, "--precision", prec, "--zero", "3", "--offload", "cpu", "--recompute", "auto"]
    g = lambda L: width + ["--layers", str(L)]
    if not plan(g(1), flags)[0]:
        print("| %s | not even 1 layer |  |  |  |  |" % hw, flush=True)
        continue
    lo, hi = 1, 2
    while plan(g(hi), flags)[0]:
        lo, hi = hi, hi * 2
        if hi > 2048:
            break
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if plan(g(mid), flags)[0]:
            lo = mid
        else:
            hi = mid
    ok, j, _ = plan(g(lo), flags)
    sp = j["spaces"]
    host = sp.get("host", {}).get("arena_bytes", 0) * j.get("ranks", 1)
    print("| %s (%s) | %d | %.1fB | %s | %s | %.1f |" % (hw, prec, lo, j["parameters"] / 1e9, gib(sp["device"]["arena_bytes"]),
                                               gib(host), host / j["parameters"]), flush=True)
print("\n%d compiles in %.0f s" % (compiles, time.time() - t0))
PY
