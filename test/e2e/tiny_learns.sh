#!/usr/bin/env bash
# The tiny GPT learns the synthetic data: the mean loss of the last 10 of 100 steps is clearly
# below the first step's (which starts near ln(256) = 5.55). And the BLAS kernels the run used (the
# log's startup.blas_kernels): on a CPU with AVX-512 or AVX2 never OpenBLAS's Prescott fallback
# unless OPENBLAS_CORETYPE asks for it (bigc run restarts itself with the CPU's kernels named).
set -euo pipefail
BIN=$1
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
"$BIN/bigc" gen gpt --preset tiny -o "$d/model.mlir"
"$BIN/bigc" compile "$d/model.mlir" -o "$d/model.bigc" --lr 3e-3 --quiet
"$BIN/bigc" run "$d/model.bigc" --synthetic --steps 100 --log "$d/log.jsonl" --quiet
OPENBLAS_CORETYPE=Prescott "$BIN/bigc" run "$d/model.bigc" --synthetic --steps 1 --log "$d/asked.jsonl" --quiet
/usr/bin/python3 - "$d/log.jsonl" "$d/asked.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert len(rows) == 100, f"expected 100 log lines, got {len(rows)}"
for r in rows:
    for k in ("step", "loss", "tokens_per_s", "elapsed_s", "peak_bytes"):
        assert k in r, f"log line lacks {k}: {r}"
first = rows[0]["loss"]
last = sum(r["loss"] for r in rows[-10:]) / 10
print(f"first loss {first:.4f}, mean of last 10 {last:.4f}, ln(256) = {math.log(256):.4f}")
assert abs(first - math.log(256)) < 0.3, "first loss should be near ln(256)"
assert last < first - 1.5, "the loss did not fall clearly"
blas = rows[0]["startup"].get("blas_kernels")
asked = json.loads(open(sys.argv[2]).readline())["startup"].get("blas_kernels")
flags = open("/proc/cpuinfo").read()
modern = " avx512f " in flags or " avx2 " in flags
print(f"BLAS kernels: {blas} (OPENBLAS_CORETYPE=Prescott asked: {asked}); AVX-512 or AVX2: {modern}")
if blas is not None and modern and "OPENBLAS_CORETYPE" not in __import__("os").environ:
    assert blas != "Prescott", "OpenBLAS's Prescott kernels on a CPU with AVX2/AVX-512"
    assert asked == "Prescott", "OPENBLAS_CORETYPE given by the user was not honoured"
print("PASS")
PY
