#!/usr/bin/env bash
# Time to the first step and its parts, and the GB/s of loading weights and writing checkpoints
# against dd's for the same disk in the same run (docs/performance.md, "Start-up").
#
#   bench/startup/run.sh [BUILD_DIR [WORK_DIR]]     (defaults: build, a new directory under /tmp;
#                                                 PRESETS="gpt2-medium" for one preset)
#
# For gpt2-medium and 1.3b (batch 1, seq 128, --precision bf16), without and with --offload cpu:
#   init   bigc run --steps 1: program load + verify, engine (initial values, zero buffers, compute
#          copies), first step (from the log's "startup" object), and the wall time of the run;
#   load   the same with --load-weights of the model's weights (written by --steps 0
#          --save-weights, then dropped from the page cache): the load's GB/s against dd's read
#          of that same file (O_DIRECT, dropped from the page cache first) and of the 2 GiB file,
#          and the engine's start without the weights' initial values ("engine w/ load");
#   ckpt   (where the snapshot fits in memory) --steps 4 --checkpoint-every 2: the checkpoint of
#          step 2 written while steps 3-4 run, that of step 4 at the end: GB/s against dd's write,
#          and the wall time of 1 step + checkpoint against 1 step.
# dd: 2 GiB written and read back with O_DIRECT in the work directory; and each weights file read
# back cold with O_DIRECT. On a virtual disk the two reads differ: a file read right after it was
# written can come from the host's cache (2.2 GB/s against 1.2-1.4 GB/s for the weights files,
# written minutes earlier, on the machine of docs/performance.md's 2026-11-26 table). The load is
# compared with both; the same file's figure is the disk the load actually had.
set -euo pipefail
BUILD=${1:-build}
BIN=$(cd "$BUILD/bin" && pwd)
W=${2:-$(mktemp -d /tmp/bigc-startup-bench.XXXXXX)}
mkdir -p "$W"
PY=${PYTHON:-python3}
evict() { # drop files from the page cache (a cold read, as after a reboot or on another node)
  $PY -c "
import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)" "$@"
}
wall() { # seconds a command takes; its stderr to $OUT
  local t0 t1
  t0=$(date +%s.%N)
  "$@" > /dev/null 2> "$OUT" || { cat "$OUT" >&2; return 1; }
  t1=$(date +%s.%N)
  $PY -c "print(round($t1 - $t0, 3))"
}

echo "== dd (O_DIRECT, 2 GiB, 64 MiB blocks) in $W"
dd if=/dev/zero of="$W/dd.bin" bs=64M count=32 oflag=direct 2> "$W/dd.write"
evict "$W/dd.bin"
dd if="$W/dd.bin" of=/dev/null bs=64M iflag=direct 2> "$W/dd.read"
rm -f "$W/dd.bin"
tail -1 "$W/dd.write"
tail -1 "$W/dd.read"

results="$W/results.jsonl"
: > "$results"
for preset in ${PRESETS:-gpt2-medium 1.3b}; do
  "$BIN/bigc" gen gpt --preset $preset --batch 1 --seq 128 -o "$W/$preset.mlir" > /dev/null
  for offload in none cpu; do
    name=$preset-$offload
    opts=(--precision bf16)
    [ $offload = cpu ] && opts+=(--offload cpu)
    "$BIN/bigc" compile "$W/$preset.mlir" "${opts[@]}" -o "$W/$name.bigc" --quiet
    echo "== $name"
    OUT="$W/$name.init.err"
    init_wall=$(wall "$BIN/bigc" run "$W/$name.bigc" --steps 1 --synthetic --log "$W/$name.init.jsonl")
    grep "ready in" "$OUT" || true
    if [ ! -f "$W/$preset.safetensors" ]; then
      "$BIN/bigc" run "$W/$name.bigc" --steps 0 --synthetic --save-weights "$W/$preset.safetensors" --quiet
      evict "$W/$preset.safetensors"
      dd if="$W/$preset.safetensors" of=/dev/null bs=64M iflag=direct 2> "$W/$preset.ddread"
      echo "dd read of the weights file (O_DIRECT, cold): $(tail -1 "$W/$preset.ddread")"
    fi
    evict "$W/$preset.safetensors"
    OUT="$W/$name.load.err"
    load_wall=$(wall "$BIN/bigc" run "$W/$name.bigc" --steps 1 --synthetic --load-weights "$W/$preset.safetensors" \
      --log "$W/$name.load.jsonl")
    grep "ready in" "$OUT" || true
    ck_wall=""; one_wall=""; ck_note=""
    rm -rf "$W/$name.ck" "$W/$name.ck1"
    OUT="$W/$name.ck.err"
    if "$BIN/bigc" run "$W/$name.bigc" --steps 4 --synthetic --checkpoint-dir "$W/$name.ck" --checkpoint-every 2 \
      --log "$W/$name.ck.jsonl" > /dev/null 2> "$OUT"; then
      grep "checkpoint" "$OUT" || true
      OUT="$W/$name.one.err"
      one_wall=$(wall "$BIN/bigc" run "$W/$name.bigc" --steps 1 --synthetic)
      OUT="$W/$name.ck1.err"
      ck_wall=$(wall "$BIN/bigc" run "$W/$name.bigc" --steps 1 --synthetic --checkpoint-dir "$W/$name.ck1")
    else
      ck_note=$(grep -o "checkpoints are written in the background.*" "$OUT" | head -1)
      echo "checkpoint refused: $ck_note"
    fi
    $PY - "$W" "$name" "$preset" "$init_wall" "$load_wall" "$one_wall" "$ck_wall" "$ck_note" >> "$results" <<'PY'
import json, os, sys
W, name, preset, init_wall, load_wall, one_wall, ck_wall, ck_note = sys.argv[1:9]
first = lambda f: json.loads(open(f).readline())
i, l = first(f"{W}/{name}.init.jsonl"), first(f"{W}/{name}.load.jsonl")
wbytes = os.path.getsize(f"{W}/{preset}.safetensors")
r = {"config": name, "init_wall_s": float(init_wall), "load_wall_s": float(load_wall),
     "startup": i["startup"], "load_startup": l["startup"], "loss_init": i["loss"], "loss_load": l["loss"],
     "weights_file_bytes": wbytes, "load_gbps": wbytes / l["startup"]["load_weights_s"] / 1e9,
     "dd_file_read": open(f"{W}/{preset}.ddread").read().strip().splitlines()[-1]}
ck = []
for step in ("00000002", "00000004"):
    m = f"{W}/{name}.ck/step-{step}/manifest.json"
    if os.path.exists(m):
        j = json.load(open(m)); t = j["timing"]; b = sum(f["bytes"] for f in j["files"].values())
        ck.append({"step": j["step"], "bytes": b, "seconds": t["write_ended_s"] - t["write_began_s"],
                   "gbps": b / (t["write_ended_s"] - t["write_began_s"]) / 1e9})
if ck:
    rows = [json.loads(x) for x in open(f"{W}/{name}.ck.jsonl")]
    t = json.load(open(f"{W}/{name}.ck/step-00000002/manifest.json"))["timing"]
    ck[0]["steps_during"] = [x["step"] for x in rows if t["write_began_s"] < x["elapsed_s"] < t["write_ended_s"]]
    r["checkpoints"] = ck
    r["one_step_wall_s"], r["one_step_checkpoint_wall_s"] = float(one_wall), float(ck_wall)
else:
    r["checkpoint_refused"] = ck_note
print(json.dumps(r))
PY
    # The checkpoints' pages would crowd the next configuration's arenas out of memory.
    rm -rf "$W/$name.ck" "$W/$name.ck1"
  done
  evict "$W/$preset.safetensors"
done

$PY - "$W" <<'PY'
import json, re, sys
W = sys.argv[1]
def dd(f):
    m = re.search(r"([0-9.]+) (GB|MB)/s", open(f).read().strip().splitlines()[-1])
    return float(m.group(1)) * (1000 if m.group(2) == "GB" else 1) / 1000
wr, rd = dd(f"{W}/dd.write"), dd(f"{W}/dd.read")
print(f"\ndd O_DIRECT: write {wr:.3f} GB/s, read {rd:.3f} GB/s (2 GiB just written); the weights files read cold:")
ddfile = {}
for line in open(f"{W}/results.jsonl"):
    r = json.loads(line); p = r["config"].rsplit("-", 1)[0]
    if p not in ddfile:
        m = re.search(r"([0-9.]+) (GB|MB)/s", r["dd_file_read"])
        ddfile[p] = float(m.group(1)) * (1000 if m.group(2) == "GB" else 1) / 1000
        print(f"  {p}: {ddfile[p]:.3f} GB/s")
print(f"{'config':18} {'to 1st step':>11} {'program':>8} {'engine':>7} {'values GB/s':>11} {'1st step':>9} "
      f"{'load s':>7} {'load GB/s':>9} {'vs dd':>6} {'vs file':>7} {'engine w/ load':>14} {'ckpt GB/s (bg / end)':>21} {'vs dd':>11} {'1 step / +ckpt':>15} {'loss':>9}")
for line in open(f"{W}/results.jsonl"):
    r = json.loads(line); s = r["startup"]
    vals = s["init_values_bytes"] / s["init_values_s"] / 1e9
    ck = r.get("checkpoints", [])
    cks = " / ".join(f"{c['gbps']:.2f}" for c in ck) if ck else "refused"
    ckd = " / ".join(f"{c['gbps'] / wr:.0%}" for c in ck) if ck else ""
    one = f"{r['one_step_wall_s']:.1f} / {r['one_step_checkpoint_wall_s']:.1f}" if ck else ""
    print(f"{r['config']:18} {r['init_wall_s']:10.1f}s {s['program_s']:7.2f}s {s['engine_init_s']:6.2f}s {vals:11.2f} "
          f"{s['first_step_s']:8.2f}s {r['load_startup']['load_weights_s']:6.2f}s {r['load_gbps']:9.2f} "
          f"{r['load_gbps'] / rd:6.0%} {r['load_gbps'] / ddfile[r['config'].rsplit('-', 1)[0]]:7.0%} {r['load_startup']['engine_init_s']:13.2f}s {cks:>21} {ckd:>11} {one:>15} {r['loss_init']:9.4f}")
    if r["loss_init"] != r["loss_load"]:
        print(f"  (loss after --load-weights {r['loss_load']})")
    for c in ck[:1]:
        print(f"  steps ended while the checkpoint of step 2 was written: {c.get('steps_during')}")
PY
echo "results: $W/results.jsonl"
