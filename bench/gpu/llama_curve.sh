#!/usr/bin/env bash
# The loss curve of issue 45: Llama-3.2-1B trained STEPS steps (300) in bf16 on one GPU by bigc and by
# PyTorch (torch_llama.py: Hugging Face's LlamaForCausalLM, or the same model written out where
# transformers is missing) from the same initial weights (PyTorch's, seed 0, loaded by `bigc run
# --load-weights`) on the same tokens in the same order (an llm.c token file of a random Markov chain
# over the vocabulary, made here: 4 likely successors per token, so that the loss falls), AdamW as
# bigc's defaults. PyTorch runs twice, alike: the two runs differ only by the GPU's nondeterminism,
# the yardstick for bigc's difference. Writes OUT/llama_curve.svg (the curves, and bigc's and the
# second PyTorch run's differences from the first) and OUT/llama_curve.json (the differences).
#
#   bash scripts/gpu-programs.sh build/bin PROGRAMS llama-bench     # where the compiler is
#   bash bench/gpu/llama_curve.sh BIN PROGRAMS [OUT]                 # on the GPU machine
# Environment: STEPS (300), PROGRAM (llama3.2-1b-bf16-fuse), LLAMA_BATCH (4) and SEQ (2048), the
# program's; CONFIG (configs/llama3.2-1b.json) and BACKEND (cuda), for a check of the script on a
# small model without a GPU.
set -euo pipefail
BIN=$1
P=$2
OUT=${3:-$(mktemp -d)}
HERE=$(cd "$(dirname "$0")" && pwd)
STEPS=${STEPS:-300}
PROG=${PROGRAM:-llama3.2-1b-bf16-fuse}
B=${LLAMA_BATCH:-4}
PY=${PYTHON:-python3}
T=${SEQ:-2048}
CFG=${CONFIG:-$HERE/configs/llama3.2-1b.json}
mkdir -p "$OUT"
"$PY" - "$OUT/tokens.bin" "$((STEPS * B * T + 1))" "$CFG" <<'PY'
import json, sys
import numpy as np
path, n, cfg = sys.argv[1], int(sys.argv[2]), json.load(open(sys.argv[3]))
V = cfg["vocab_size"]
rng = np.random.default_rng(7)
succ = rng.integers(0, V, size=(V, 4), dtype=np.int64)
pick = rng.integers(0, 4, size=n)
toks = np.empty(n, dtype=np.uint32)
t = 0
for i in range(n):  # (a few seconds for 2.5 M tokens)
    toks[i] = t
    t = succ[t, pick[i]]
head = np.zeros(256, dtype="<i4")
head[:4] = (20240801, 7, n, V)  # llm.c's 32-bit token file
with open(path, "wb") as f:
    f.write(head.tobytes())
    f.write(toks.astype("<u4").tobytes())
PY
for run in a b; do
  echo "== pytorch run $run ($STEPS steps)" >&2
  "$PY" "$HERE/torch_llama.py" --config "$CFG" --batch "$B" --seq "$T" --steps "$STEPS" --warmup 0 --seed 0 \
    --device "$([ "${BACKEND:-cuda}" = cuda ] && echo cuda || echo cpu)" \
    --data "$OUT/tokens.bin" --log "$OUT/torch_$run.jsonl" --save-init "$OUT/init_$run.safetensors" \
    > "$OUT/torch_$run.out" 2> "$OUT/torch_$run.err" || { tail -20 "$OUT/torch_$run.err"; exit 1; }
done
cmp -s "$OUT/init_a.safetensors" "$OUT/init_b.safetensors" || { echo "FAIL: the two PyTorch runs began apart"; exit 1; }
echo "== bigc $PROG ($STEPS steps)" >&2
"$BIN/bigc-run" "$P/$PROG.bigc" --backend "${BACKEND:-cuda}" --load-weights "$OUT/init_a.safetensors" --data "$OUT/tokens.bin" \
  --steps "$STEPS" --log "$OUT/bigc.jsonl" > "$OUT/bigc.out" 2>&1 || { tail -20 "$OUT/bigc.out"; exit 1; }
"$PY" - "$OUT" <<'PY'
import json, sys
d = sys.argv[1]
load = lambda n: [json.loads(l)["loss"] for l in open(f"{d}/{n}.jsonl") if l.strip()]
a, b, g = load("torch_a"), load("torch_b"), load("bigc")
n = min(len(a), len(b), len(g))
a, b, g = a[:n], b[:n], g[:n]
def smooth(x, w=10):  # trailing mean of w steps: the curves, not one batch's noise
    return [sum(x[max(0, i - w + 1):i + 1]) / (i - max(0, i - w + 1) + 1) for i in range(len(x))]
dg = [abs(x - y) for x, y in zip(smooth(g), smooth(a))]
db = [abs(x - y) for x, y in zip(smooth(b), smooth(a))]
res = {"steps": n, "first_loss": [a[0], g[0]], "final_loss": {"pytorch": a[-1], "pytorch_again": b[-1], "bigc": g[-1]},
       "max_abs_diff_smoothed": {"bigc_vs_pytorch": max(dg), "pytorch_vs_pytorch": max(db)},
       "mean_abs_diff": {"bigc_vs_pytorch": sum(abs(x - y) for x, y in zip(g, a)) / n,
                         "pytorch_vs_pytorch": sum(abs(x - y) for x, y in zip(b, a)) / n}}
json.dump(res, open(f"{d}/llama_curve.json", "w"), indent=1)
print(json.dumps(res))
# The picture: losses above, differences below.
W, H, M = 900, 560, 60
lo, hi = min(a + g + b), max(a + g + b)
dmax = max(dg + db + [1e-9])
X = lambda i: M + (W - 2 * M) * i / max(1, n - 1)
Y = lambda v: M + (300 - M) * (hi - v) / max(1e-9, hi - lo)
Yd = lambda v: 340 + 160 * (1 - v / dmax)
line = lambda ys, f, c, w=1.2: ('<polyline fill="none" stroke="%s" stroke-width="%s" points="%s"/>'
                                % (c, w, " ".join(f"{X(i):.1f},{f(v):.1f}" for i, v in enumerate(ys))))
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{M}" y="30" font-size="15">Llama-3.2-1B, bf16, one GPU: the training loss over {n} steps</text>',
       line(a, Y, "#1f77b4"), line(b, Y, "#aec7e8", 0.8), line(g, Y, "#d62728"),
       f'<text x="{W - M - 250}" y="{M + 15}" fill="#1f77b4">PyTorch (final {a[-1]:.4f})</text>',
       f'<text x="{W - M - 250}" y="{M + 30}" fill="#7f9fbf">PyTorch again (final {b[-1]:.4f})</text>',
       f'<text x="{W - M - 250}" y="{M + 45}" fill="#d62728">bigc (final {g[-1]:.4f})</text>',
       f'<text x="{M}" y="{M - 5}">{hi:.2f}</text><text x="{M}" y="{Y(lo) + 14:.0f}">{lo:.2f}</text>',
       line(dg, Yd, "#d62728"), line(db, Yd, "#1f77b4"),
       f'<text x="{M}" y="335">|difference from the first PyTorch run| (10-step means; top {dmax:.2g}): '
       f'bigc (red) at most {max(dg):.3g}, PyTorch again (blue) at most {max(db):.3g}</text>',
       f'<line x1="{M}" y1="500" x2="{W - M}" y2="500" stroke="#888"/>',
       f'<text x="{W - M - 40}" y="520">step {n}</text></svg>']
open(f"{d}/llama_curve.svg", "w").write("\n".join(svg))
print(f"{d}/llama_curve.svg")
PY
