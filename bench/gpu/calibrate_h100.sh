#!/usr/bin/env bash
# Writes hardware/h100-x1.json: bench/gpu/h100/base.json (one H100 80GB as the datasheet has it) with
# the rates of bench/gpu/calibrate.py from the `bigc run --backend cuda --profile` tables measured on
# the lent H100 (bench/gpu/h100/*.profile.log: gpt2 bf16 16 x 1024 with --pad-vocab 64, with --fuse
# too, and with --fuse-loss --loss-chunk 4096 --fuse) and the host's rate fitted to the measured
# offload step (host_flops 6e10: gpt2's 55.1 ms; gpt2-medium's, not in the fit, 138.2 ms against 139).
# test/e2e/costmodel_gpu.sh checks the profile against every measured step (bench/gpu/h100_steps.json).
#
#   bash bench/gpu/calibrate_h100.sh BIN      # BIN: the dir of bigc (with the compiler)
set -euo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
"$BIN/bigc" gen gpt --preset gpt2 --batch 16 --seq 1024 -o "$d/gpt2.mlir" > /dev/null
args=()
for v in "pad:--pad-vocab 64" "pad-fuseops:--pad-vocab 64 --fuse" \
  "pad-fuse-all-c4096:--pad-vocab 64 --fuse-loss --loss-chunk 4096 --fuse"; do
  name=${v%%:*}
  # shellcheck disable=SC2086
  "$BIN/bigc" compile "$d/gpt2.mlir" -o "$d/$name.bigc" --hardware "$HERE/h100/base.json" --precision bf16 --lr 3e-4 \
    ${v#*:} --quiet
  "$BIN/bigc" inspect "$d/$name.bigc" --json > "$d/$name.json"
  args+=(--run "$HERE/h100/gpt2-bf16-$name.profile.log" --plan "$d/$name.json")
done
python3 "$HERE/calibrate.py" "$HERE/h100/base.json" "$ROOT/hardware/h100-x1.json" --name h100-x1 \
  --description "1 x NVIDIA H100 SXM5 80 GB HBM3 (the lent GPU machine: 16 cores, 128 GiB host RAM, PCIe 5.0); rates calibrated from bigc's own kernels" \
  --host-flops 6e10 "${args[@]}" \
  --source "host_flops: fitted to the measured step of gpt2 bf16 16 x 1024 with --pad-vocab 64 --offload cpu on the lent machine (55.1 ms; the cost model gives 54.6); gpt2-medium's with the same options, not used in the fit, measured 138.2 ms, the cost model 139" \
  --source "calibrated 2026-11-26 on one H100 80GB HBM3, driver 580.159.04, CUDA 13.0 (bench/gpu/calibrate_h100.sh; bench/gpu/h100_steps.json holds the measured steps that test/e2e/costmodel_gpu.sh checks the profile against)"
