#!/usr/bin/env bash
# bigc compile --lr-schedule against PyTorch's own schedulers (torch.optim.lr_scheduler): the rate of
# every step that `bigc run --log` records equals the rate PyTorch's scheduler gives that step, to
# float rounding (one fp32 ulp; bigc computes in double and rounds once for the fp32 update):
#   cosine:   SequentialLR(LinearLR warmup, CosineAnnealingLR(T_max = N - W, eta_min)), then min_lr
#   linear:   SequentialLR(LinearLR warmup, LinearLR(1 -> min/lr over N - W)), then min_lr
#   wsd:      SequentialLR(LinearLR warmup, ConstantLR(1), LinearLR(1 -> min/lr over D)), then min_lr
#   constant: SequentialLR(LinearLR warmup, ConstantLR(1))
# (LinearLR warmup: start_factor 1/W over W - 1 steps, i.e. lr (i + 1) / W.) A run resumed from a
# checkpoint continues the schedule bit for bit (rates and losses of the straight run), and
# `bigc inspect` states the schedule. Bad schedules are one error each.
set -euo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/python_env.shlib" # PY (torch 2.15), or exit 77
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
"$BIN/bigc" gen gpt --preset tiny -o "$d/m.mlir" >/dev/null
check() { # NAME STEPS PYTORCH-SCHEDULE -- COMPILE FLAGS
  local name=$1 steps=$2 sched=$3
  shift 4
  "$BIN/bigc" compile "$d/m.mlir" -o "$d/$name.bigc" --quiet "$@"
  "$BIN/bigc" run "$d/$name.bigc" --synthetic --steps "$steps" --log "$d/$name.jsonl" --quiet
  "$PY" - "$d/$name.jsonl" "$sched" "$@" <<'PY'
import json, sys
import numpy as np
import torch
from torch.optim.lr_scheduler import ConstantLR, CosineAnnealingLR, LinearLR, SequentialLR
log, sched, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
opt = dict(zip(flags[::2], flags[1::2]))
lr, W = float(opt["--lr"]), int(opt.get("--warmup-steps", 0))
N, mn = int(opt.get("--decay-steps", 0)), float(opt.get("--min-lr", 0))
D = int(opt.get("--wsd-decay-steps", 0))
p = torch.nn.Parameter(torch.zeros(1))
o = torch.optim.SGD([p], lr=lr)
warm = LinearLR(o, start_factor=1.0 / W, end_factor=1.0, total_iters=W - 1)
if sched == "cosine":
    s = SequentialLR(o, [warm, CosineAnnealingLR(o, T_max=N - W, eta_min=mn)], milestones=[W])
elif sched == "linear":
    s = SequentialLR(o, [warm, LinearLR(o, start_factor=1.0, end_factor=mn / lr, total_iters=N - W)], milestones=[W])
elif sched == "wsd":
    s = SequentialLR(o, [warm, ConstantLR(o, factor=1.0, total_iters=0),
                         LinearLR(o, start_factor=1.0, end_factor=mn / lr, total_iters=D)], milestones=[W, N - D])
else:
    s = SequentialLR(o, [warm, ConstantLR(o, factor=1.0, total_iters=0)], milestones=[W])
rows = [json.loads(l) for l in open(log)]
worst = 0.0
for i, r in enumerate(rows):
    ref = o.param_groups[0]["lr"]
    if sched != "constant" and i >= N:
        ref = mn  # past the decay (PyTorch's cosine would rise again; nanoGPT's get_lr holds min_lr)
    ulp = float(np.spacing(np.float32(ref)))
    err = abs(r["lr"] - float(np.float32(ref)))
    worst = max(worst, err / ulp)
    if err > ulp:
        sys.exit(f"FAIL {sched}: step {i} (log step {r['step']}): bigc's lr {r['lr']!r}, PyTorch's {ref!r}")
    o.step()
    s.step()
print(f"ok   {sched}: {len(rows)} steps, every rate within {worst:.2f} fp32 ulp of PyTorch's scheduler "
      f"(first {rows[0]['lr']:.3g}, step {W} {rows[W]['lr']:.3g}, last {rows[-1]['lr']:.3g})")
PY
}
check cosine 30 cosine -- --lr 6e-4 --lr-schedule cosine --warmup-steps 5 --decay-steps 25 --min-lr 6e-5
check linear 24 linear -- --lr 1e-3 --lr-schedule linear --warmup-steps 4 --decay-steps 20 --min-lr 0
check wsd 30 wsd -- --lr 3e-4 --lr-schedule wsd --warmup-steps 3 --decay-steps 26 --wsd-decay-steps 8 --min-lr 3e-5
check constant 12 constant -- --lr 2e-4 --lr-schedule constant --warmup-steps 6
"$BIN/bigc" inspect "$d/cosine.bigc" | grep -qF "learning rate: cosine (lr 0.0006, warmup 5 steps, decay to 6e-05 by step 25, then 6e-05)" ||
  { echo "FAIL: bigc inspect does not state the schedule"; "$BIN/bigc" inspect "$d/cosine.bigc" | head -20; exit 1; }
# Resumed: the schedule continues from the step counter, bit for bit.
"$BIN/bigc" run "$d/cosine.bigc" --synthetic --steps 12 --checkpoint-dir "$d/ck" --log "$d/a.jsonl" --quiet
"$BIN/bigc" run "$d/cosine.bigc" --synthetic --steps 30 --checkpoint-dir "$d/ck" --resume --log "$d/a.jsonl" --quiet
cmp <(cut -d, -f1-3 "$d/cosine.jsonl") <(cut -d, -f1-3 "$d/a.jsonl") ||
  { echo "FAIL: the resumed run's steps, losses and rates differ from the straight run's"; exit 1; }
echo "ok   resumed at step 12: steps, losses and rates of all 30 steps equal the straight run's"
# Bad schedules: one error each, nothing written.
bad() { # PATTERN -- FLAGS
  local pattern=$1
  shift 2
  if "$BIN/bigc" compile "$d/m.mlir" -o "$d/bad.bigc" "$@" 2>"$d/err"; then echo "FAIL: accepted $*"; exit 1; fi
  grep -qF -- "$pattern" "$d/err" || { echo "FAIL: $*: $(cat "$d/err")"; exit 1; }
  [ ! -e "$d/bad.bigc" ] || { echo "FAIL: $* wrote a program"; exit 1; }
  echo "ok   refused: $(cat "$d/err")"
}
bad "--warmup-steps 100 is not below --decay-steps 50" -- --lr-schedule cosine --warmup-steps 100 --decay-steps 50
bad "--lr-schedule cosine needs --decay-steps N" -- --lr-schedule cosine
bad "option --decay-steps shapes a decaying rate; add --lr-schedule" -- --decay-steps 10
bad "--min-lr 0.001 exceeds --lr 0.0003" -- --lr-schedule linear --decay-steps 10 --min-lr 1e-3
bad "--lr-schedule wsd needs --wsd-decay-steps N" -- --lr-schedule wsd --decay-steps 10
bad "--wsd-decay-steps 20 is longer than the 8 steps" -- --lr-schedule wsd --warmup-steps 2 --decay-steps 10 --wsd-decay-steps 20
bad "option --lr-schedule: unknown value 'exp'" -- --lr-schedule exp
