#!/usr/bin/env bash
# NVMe offload (--offload nvme) on this machine's disk, against a raw sequential test of the same
# file system in the same run:
#  1. dd with O_DIRECT: 2 GiB written and read in 64 MiB blocks (one stream), and fio-like
#     parallel: none (dd is the reference the issue names);
#  2. the nvme space's achieved bandwidth: `bigc run` of a GPT (PRESET, default gpt2: 124 M
#     parameters, 1.5 GB of masters and AdamW moments in the nvme space) for STEPS steps, fp32; the
#     log's nvme counters (bytes and seconds inside the nvme stream's reads and writes, all through
#     io_uring with 16 requests of 1 MiB in flight) give GB/s, read and write, against dd's;
#  3. the step time against --offload cpu of the same model (the median of the steps after the
#     first), and the host arena of both plans (bigc inspect --json); also with the weights on the
#     drive (--offload-params nvme: each use reads them from there).
#  4. BIG=PRESET (e.g. 2.7b): a model whose state does not fit this machine's memory: compiled with
#     --precision bf16 and --offload cpu (`bigc run` refuses it: the arenas exceed the physical
#     memory) and --offload nvme (BIG_STEPS steps, default 2, run: its state on the disk).
# Results as a Markdown table on stdout (docs/performance.md records them).
#
# Usage: bench/nvme/run.sh [build/bin] [DIR]   DIR: where the nvme space and dd's file go (default: a
# new directory under the current one: the file system whose bandwidth matters). Environment:
# PRESET (gpt2), STEPS (4), THREADS (all cores), BIG (none), BIG_STEPS (2).
set -euo pipefail
BIN=${1:-build/bin}
BASE=${2:-.}
PRESET=${PRESET:-gpt2}
STEPS=${STEPS:-4}
[ -x "$BIN/bigc" ] || { echo "bench/nvme/run.sh: $BIN/bigc not found (build first, or pass the bin dir)" >&2; exit 1; }
W=$(mktemp -d "$BASE/bigc-nvme-bench.XXXXXX")
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/nv"
echo "== dd (O_DIRECT, 2 GiB, 64 MiB blocks) in $W" >&2
dd if=/dev/zero of="$W/dd.bin" bs=64M count=32 oflag=direct 2> "$W/dd.write"
sync
dd if="$W/dd.bin" of=/dev/null bs=64M iflag=direct 2> "$W/dd.read"
rm -f "$W/dd.bin"
echo "== $PRESET: compile (--offload cpu, --offload nvme, + --offload-params nvme)" >&2
"$BIN/bigc" gen gpt --preset "$PRESET" --batch 1 --seq 128 -o "$W/m.mlir" > /dev/null
"$BIN/bigc" compile "$W/m.mlir" -o "$W/cpu.bigc" --offload cpu --quiet
"$BIN/bigc" compile "$W/m.mlir" -o "$W/nvme.bigc" --offload nvme --nvme-path "$W/nv" --quiet
"$BIN/bigc" compile "$W/m.mlir" -o "$W/nvmep.bigc" --offload nvme --nvme-path "$W/nv" --offload-params nvme --quiet
THR=()
[ -n "${THREADS:-}" ] && THR=(--threads "$THREADS")
for n in cpu nvme nvmep; do
  echo "== $PRESET: $STEPS steps with $n" >&2
  "$BIN/bigc" run "$W/$n.bigc" --synthetic --steps "$STEPS" --log "$W/$n.jsonl" "${THR[@]}" >&2
  "$BIN/bigc" inspect "$W/$n.bigc" --json > "$W/$n.json"
done
/usr/bin/python3 - "$W" "$PRESET" "$STEPS" <<'PY'
import json, re, statistics, sys, time
W, preset, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
def dd(f):
    txt = open(f).read()
    m = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", txt)
    return int(m.group(1)) / float(m.group(2)) / 1e9
ddw, ddr = dd(f"{W}/dd.write"), dd(f"{W}/dd.read")
rows = {n: [json.loads(l) for l in open(f"{W}/{n}.jsonl") if l.strip()] for n in ("cpu", "nvme", "nvmep")}
plan = {n: json.load(open(f"{W}/{n}.json")) for n in ("cpu", "nvme", "nvmep")}
nv = rows["nvme"][-1]["nvme"]
rbw, wbw = nv["read_bytes"] / nv["read_s"] / 1e9, nv["write_bytes"] / nv["write_s"] / 1e9
step = {n: statistics.median([1.0 / r["tokens_per_s"] * 128 for r in rows[n][1:]]) for n in rows}
same = [a["loss"] for a in rows["cpu"]] == [b["loss"] for b in rows["nvme"]]
samep = [a["loss"] for a in rows["cpu"]] == [b["loss"] for b in rows["nvmep"]]
P = plan["nvme"]["parameters"]
host = {n: plan[n]["spaces"]["host"]["arena_bytes"] for n in plan}
print(f"bench/nvme ({time.strftime('%Y-%m-%d')}): {preset}, {P / 1e6:.1f} M parameters, batch 1 x 128, fp32, "
      f"{steps} steps; nvme space {plan['nvme']['spaces']['nvme']['arena_bytes'] / 2**30:.2f} GiB through {nv['engine']}")
print()
print("| | read | write |")
print("|---|---|---|")
print(f"| dd, O_DIRECT, 64 MiB blocks | {ddr:.3f} GB/s | {ddw:.3f} GB/s |")
print(f"| nvme space ({nv['read_bytes'] / 2**30:.1f} / {nv['write_bytes'] / 2**30:.1f} GiB moved) | "
      f"{rbw:.3f} GB/s ({100 * rbw / ddr:.0f}% of dd) | {wbw:.3f} GB/s ({100 * wbw / ddw:.0f}% of dd) |")
print()
print("| | step (median after the first) | host arena | losses |")
print("|---|---|---|---|")
print(f"| --offload cpu | {step['cpu']:.2f} s | {host['cpu'] / 2**30:.2f} GiB | |")
print(f"| --offload nvme | {step['nvme']:.2f} s ({step['nvme'] / step['cpu']:.2f}x) | {host['nvme'] / 2**30:.2f} GiB | "
      f"{'bit-identical' if same else 'DIFFER'} |")
np_ = rows["nvmep"][-1]["nvme"]
print(f"| --offload nvme --offload-params nvme | {step['nvmep']:.2f} s ({step['nvmep'] / step['cpu']:.2f}x) | "
      f"{host['nvmep'] / 2**30:.2f} GiB | {'bit-identical' if samep else 'DIFFER'}; per step "
      f"{np_['read_bytes'] / steps / P:.1f} B/param read, {np_['write_bytes'] / steps / P:.1f} written |")
PY
if [ -n "${BIG:-}" ]; then
  echo "== $BIG: --precision bf16, --offload cpu and --offload nvme" >&2
  "$BIN/bigc" gen gpt --preset "$BIG" --batch 1 --seq 128 -o "$W/big.mlir" > /dev/null
  "$BIN/bigc" compile "$W/big.mlir" -o "$W/bigcpu.bigc" --precision bf16 --offload cpu --quiet
  "$BIN/bigc" compile "$W/big.mlir" -o "$W/bignvme.bigc" --precision bf16 --offload nvme --nvme-path "$W/nv" --quiet
  if "$BIN/bigc" run "$W/bigcpu.bigc" --synthetic --steps 1 --quiet 2> "$W/bigcpu.err"; then
    echo "| $BIG, --offload cpu | runs (it fits this machine: pick a larger BIG) |"
  else
    echo
    echo "$BIG with --offload cpu: $(head -c 400 "$W/bigcpu.err")"
  fi
  /usr/bin/time -v "$BIN/bigc" run "$W/bignvme.bigc" --synthetic --steps "${BIG_STEPS:-2}" --log "$W/big.jsonl" \
    "${THR[@]}" 2> "$W/bignvme.err" >&2 || { cat "$W/bignvme.err" >&2; exit 1; }
  /usr/bin/python3 - "$W" "$BIG" <<'PY'
import json, re, sys
W, big = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(f"{W}/big.jsonl") if l.strip()]
err = open(f"{W}/bignvme.err").read()
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err).group(1)) * 1024
nv = rows[-1]["nvme"]
print(f"\n{big} with --offload nvme: {len(rows)} steps, losses {[round(r['loss'], 4) for r in rows]}, "
      f"{rows[-1]['elapsed_s']:.0f} s in all; peak resident {rss / 2**30:.1f} GiB; nvme read "
      f"{nv['read_bytes'] / 2**30:.1f} GiB ({nv['read_bytes'] / nv['read_s'] / 1e9:.2f} GB/s), wrote "
      f"{nv['write_bytes'] / 2**30:.1f} GiB ({nv['write_bytes'] / nv['write_s'] / 1e9:.2f} GB/s)")
PY
  "$BIN/bigc" inspect "$W/bignvme.bigc" --json | /usr/bin/python3 -c "
import json, sys
j = json.load(sys.stdin); sp = j['spaces']
print('plan: %.2f B parameters; device %.2f GiB, host %.2f GiB, nvme %.2f GiB' % (j['parameters'] / 1e9,
      sp['device']['arena_bytes'] / 2**30, sp['host']['arena_bytes'] / 2**30, sp['nvme']['arena_bytes'] / 2**30))"
fi
