#!/usr/bin/env bash
# Pipeline stages in several processes (mpirun; the MPI communicator's send/recv between
# processes, the in-process mailbox inside one): a GPT of 4 blocks trained 6 steps as
#   pp 2 x dp 4 (ZeRO 1) by 2 processes (a stage each) and by 4 (half a stage each),
#   pp 4 x tp 2 (ZeRO 3) by 4 and by 8 processes (tensor groups across processes),
#   pp 4 zero-bubble by 2 processes (two stages each),
#   pp 4 x tp 2 in fp16 with loss scaling by 4 processes (the scale lives on one stage)
# gives the losses of the same program in one process (to 4e-7 relative, the bound of
# e2e.mpirun; measured 2026-11-25: 0, or 9.2e-8 by 8 processes, where MPI's reduction order
# differs; fp16 to 4.5e-4 with the same loss scales, measured 0) and, with --save-weights under
# mpirun, the same whole tensors (to 3e-5 of the update, e2e.mpirun's bound; measured 0 to 8.1e-6;
# process 0 writes, the stages of the others broadcast to it). A checkpoint
# written by 2 processes resumes in one and the other way round; a process layout that splits a
# stage unevenly is refused with its message; a stage that crashes stops every process with the
# stage named (non-zero exit, no hang).
set -euo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
PY=/usr/bin/python3
source "$HERE/mpirun.shlib" # mpirun present, MPIRUN
MPIRUN=(timeout 300 "${MPIRUN[@]}")
"$BIN/bigc" gen gpt --preset tiny --layers 4 --batch 2 -o "$d/m.mlir" > /dev/null
c() { local n=$1; shift; "$BIN/bigc" compile "$d/m.mlir" -o "$d/$n.bigc" --lr 3e-3 --quiet "$@"; }
one() { "$BIN/bigc" run "$d/$1.bigc" --synthetic --steps 6 --seed 7 --log "$d/$1.one.jsonl" --save-weights "$d/$1.one.safetensors" --quiet; }
mpi() { "${MPIRUN[@]}" -np "$2" "$BIN/bigc" run "$d/$1.bigc" --synthetic --steps 6 --seed 7 --log "$d/$1.mpi$2.jsonl" \
  --save-weights "$d/$1.mpi$2.safetensors" --quiet; }
c dp4 --ranks 8 --pp 2 --zero 1 --micro-batches 4
c tp2 --ranks 8 --pp 4 --tp 2 --zero 3 --micro-batches 4
c zb --ranks 4 --pp 4 --micro-batches 4 --pp-schedule zero-bubble
c fp16 --ranks 8 --pp 4 --tp 2 --micro-batches 4 --precision fp16 --loss-scale 1e6
"$BIN/bigc" run "$d/dp4.bigc" --steps 0 --save-weights "$d/init.safetensors" --quiet
for n in dp4 tp2 zb fp16; do one $n; done
mpi dp4 2; mpi dp4 4; mpi tp2 4; mpi tp2 8; mpi zb 2; mpi fp16 4

# Checkpoints: 3 steps by 2 processes, resumed in one to step 6, and the other way round.
"${MPIRUN[@]}" -np 2 "$BIN/bigc" run "$d/dp4.bigc" --synthetic --steps 3 --seed 7 --checkpoint-dir "$d/ckA" --quiet
"$BIN/bigc" run "$d/dp4.bigc" --synthetic --steps 6 --seed 7 --checkpoint-dir "$d/ckA" --resume --log "$d/resA.jsonl" --quiet
"$BIN/bigc" run "$d/dp4.bigc" --synthetic --steps 3 --seed 7 --checkpoint-dir "$d/ckB" --quiet
"${MPIRUN[@]}" -np 2 "$BIN/bigc" run "$d/dp4.bigc" --synthetic --steps 6 --seed 7 --checkpoint-dir "$d/ckB" --resume \
  --log "$d/resB.jsonl" --quiet

$PY - "$d" "$HERE" <<'PY'
import sys
import numpy as np
d = sys.argv[1]
sys.path.insert(0, sys.argv[2])
import runlog
check = runlog.Checks()
w0 = runlog.weights(f"{d}/init.safetensors")
for n, procs, tol in [("dp4", 2, 4e-7), ("dp4", 4, 4e-7), ("tp2", 4, 4e-7), ("tp2", 8, 4e-7), ("zb", 2, 4e-7),
                      ("fp16", 4, 4.5e-4)]:
    runlog.compare(check, d, f"{n}.mpi{procs}", f"{n}.one", tol, 3e-5, w0,
                   what=f"{procs} processes vs one process")
sa = [r["loss_scale"] for r in runlog.losses(f"{d}/fp16.one.jsonl")[1]]
sb = [r["loss_scale"] for r in runlog.losses(f"{d}/fp16.mpi4.jsonl")[1]]
check("fp16 loss scales", sa == sb and len(set(sa)) > 1, f"logged by process 0 (the holding stage's scale, summed over the processes): {sb}")
a = runlog.losses(f"{d}/dp4.one.jsonl")[0]
for r, what in [("resA", "2 processes -> one"), ("resB", "one -> 2 processes")]:
    b = runlog.losses(f"{d}/{r}.jsonl")[0]
    ok = len(b) == 3 and float(np.max(np.abs(a[3:] - b) / np.abs(a[3:]))) <= 4e-7
    check(f"resume {what}", ok, f"steps 4-6 after the resume: {list(np.round(b, 6))} vs {list(np.round(a[3:], 6))}")
sys.exit(0 if check.ok else 1)
PY

# 6 ranks as 3 stages of 2, by 2 processes of 3 ranks: a stage would straddle two processes.
"$BIN/bigc" compile "$d/m.mlir" -o "$d/bad.bigc" --ranks 6 --pp 3 --micro-batches 3 --quiet
set +e
out=$("${MPIRUN[@]}" -np 2 "$BIN/bigc" run "$d/bad.bigc" --synthetic --steps 1 --quiet 2>&1)
rc=$?
set -e
want="the 2 ranks of each pipeline stage and the 3 ranks of each process: one must divide the other"
if [[ $rc -eq 0 || "$out" != *"$want"*"start 3 processes (mpirun -np 3: a stage per process) or 6 (a rank per process)"* ]]; then
  echo "FAIL layout: exit $rc, output:"; echo "$out"; exit 1
fi
echo "ok   layout: refused with exit $rc: $want ..."

# A stage that crashes in step 2 (rank 5, stage 1, in process 1): every process stops, the message
# names the stage; no hang (the timeout bounds the wait).
set +e
out=$(BIGC_FAULT=rank=5,step=2,kind=crash "${MPIRUN[@]}" -x BIGC_FAULT -np 2 "$BIN/bigc" run "$d/dp4.bigc" --synthetic \
  --steps 4 --quiet --comm-timeout 20 2>&1)
rc=$?
set -e
if [[ $rc -eq 0 || $rc -eq 124 || "$out" != *"stage 1 (rank 5)"*"crashed in step 2"* ]]; then
  echo "FAIL crash: exit $rc, output:"; echo "$out"; exit 1
fi
echo "ok   crash: exit $rc, stage 1 (rank 5) named"
