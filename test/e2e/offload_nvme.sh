#!/usr/bin/env bash
# NVMe offload (--offload nvme --nvme-path DIR, ZeRO-Infinity's optimizer state on a drive) end to
# end on the CPU backend, a 4-block GPT 128 wide (vocabulary 2048), 6 steps:
#  1. the losses and final weights equal --offload cpu's and the plain run's bit for bit (fp32; the
#     update is the same CPU Adam on the same values, only where they rest differs; measured:
#     identical, 2026-11-25), and so do bf16, bf16 with bf16 AdamW moments, fp16 with loss-scale overflow, 2
#     micro-batches with clipping, 8 ranks with ZeRO 1 and 3, tensor parallelism 2 x dp 4 and 2 pipeline
#     stages (each against --offload cpu of the same options); with the weights there too
#     (--offload-params nvme, against --offload-params host): fp32 (also equal to the plain run),
#     fp16 with loss-scale overflow and 8 ranks with ZeRO 3; with the updates streamed in chunks
#     (--nvme-chunk): fp32, bf16 moments, the weights there with fp16 overflow, ZeRO 3 with chunks
#     of 2048 elements (each against the unchunked --offload cpu run of the same options), and
#     --dump-grads gives the same gradients under the weights' names;
#     With the gradients waiting on the drive (--offload-grads nvme): fp16 (whole and chunked
#     updates; the first updates' only, --offload-grads-limit), fp16 overflow with the weights there too, clipping with 2 micro-batches, ZeRO 3
#     in chunks and tp 2, each equal to the --offload cpu run of the same options bit for bit;
#  2. bigc inspect --json: the nvme space holds every master (4 B/param) and moment (8 B/param);
#     the host arena holds only the staging of the updates in flight (about two layers' state):
#     the same for 4 and 8 blocks 256 wide, where --offload cpu's grows by half or more, and under
#     0.4x of it at 8 blocks (measured 31.8 MB against 90.2 MB); in chunks of 16384 elements under
#     0.6x of that (measured 16.1 MB); the run's log counts the nvme bytes read and written per step (the state,
#     in and out, each step: within 10% of 12 B/param, the rest the 4096-byte rounding); with
#     --offload-params nvme the weights are there too, none on the host, and each step writes
#     them once (16 B/param) and reads them for every use (at least 20 B/param: forward and
#     backward), the bytes the program's nvme reads add up to; with --offload-grads nvme the
#     gradients (2 B/param in fp16) wait in the nvme space, the host arena is smaller by about as
#     much, and each step reads and writes 14 B/param;
#  3. every program obeys the stream discipline (check_streams.py --expect-nvme: only copies on the
#     nvme stream touch the nvme space, ordered against the host updates);
#  4. --load-weights into the nvme space trains as on the host; the scratch file never shows in the directory (it is removed as soon as it is open), also
#     after a SIGKILL mid-run; the last checkpoint before the kill resumes and continues bit for bit;
#  5. bad input, each one clear error (exit 1) before the first step and nothing written: a missing
#     directory, a file in its place, a read-only file system (the first read-only mount found, if
#     any), a file system without the room (a file size limit: the preallocation fails), a file
#     system without O_DIRECT (a preloaded shim, test/e2e/no_odirect_shim.c, makes open() with
#     O_DIRECT fail with EINVAL under the directory, as tmpfs did before Linux 6.6), --nvme-path for
#     a program without an nvme space.
set -euo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
PY=/usr/bin/python3
mkdir -p "$d/nv"
"$BIN/bigc" gen gpt --preset tiny --layers 4 --hidden 128 --heads 4 --vocab 2048 -o "$d/model.mlir" > /dev/null

compile() { # name, options...
  local name=$1; shift
  "$BIN/bigc" compile "$d/model.mlir" -o "$d/$name.bigc" --lr 3e-3 --quiet "$@"
}
run() { # name, options...
  local name=$1; shift
  "$BIN/bigc" run "$d/$name.bigc" --synthetic --steps 6 --seed 7 --log "$d/$name.jsonl" \
    --save-weights "$d/$name.safetensors" --quiet "$@"
}
# name : options (each compiled with --offload cpu as c<name> and --offload nvme as n<name>)
CONFIGS=("fp32:" "bf16:--precision bf16" "bs:--precision bf16 --optimizer-states bf16"
         "ov:--precision fp16 --loss-scale 1e30" "f16:--precision fp16" "mb:--micro-batches 2 --grad-clip 0.5"
         "z1:--ranks 8 --zero 1" "z3:--ranks 8 --zero 3"
         "tp:--ranks 8 --tp 2 --zero 1" "pp:--ranks 2 --pp 2 --micro-batches 2"
         # the weights too: --offload-params host (c) against nvme (n)
         "p32:@" "pov:@--precision fp16 --loss-scale 1e30" "pz3:@--ranks 8 --zero 3")
compile plain
run plain
for L in 4 8; do # (compiled only: the host arena against the depth)
  "$BIN/bigc" gen gpt --preset tiny --layers $L --hidden 256 --heads 4 --vocab 512 -o "$d/deep$L.mlir" > /dev/null
  "$BIN/bigc" compile "$d/deep$L.mlir" -o "$d/deep${L}n.bigc" --quiet --offload nvme --nvme-path "$d/nv"
  "$BIN/bigc" compile "$d/deep$L.mlir" -o "$d/deep${L}c.bigc" --quiet --offload cpu
done
"$BIN/bigc" compile "$d/deep8.mlir" -o "$d/deep8k.bigc" --quiet --offload nvme --nvme-path "$d/nv" --nvme-chunk 16384
for c in "${CONFIGS[@]}"; do
  n=${c%%:*}; o=${c#*:}; pc=(); pn=()
  if [ "${o:0:1}" = @ ]; then o=${o:1}; pc=(--offload-params host); pn=(--offload-params nvme); fi
  # shellcheck disable=SC2086
  compile c$n --offload cpu "${pc[@]}" $o
  # shellcheck disable=SC2086
  compile n$n --offload nvme --nvme-path "$d/nv" "${pn[@]}" $o
  run c$n; run n$n
  [ -z "$(ls -A "$d/nv")" ] || { echo "FAIL: $n left files in the nvme directory: $(ls -A "$d/nv")"; exit 1; }
  $PY "$HERE/check_streams.py" "$d/n$n.bigc" --expect-host --expect-nvme > /dev/null ||
    { $PY "$HERE/check_streams.py" "$d/n$n.bigc" --expect-host --expect-nvme; exit 1; }
done
# Chunked updates (--nvme-chunk N): name, the --offload cpu run to equal, options.
CHUNKED=("k32|cfp32|--nvme-chunk 65536" "kbs|cbs|--nvme-chunk 65536 --precision bf16 --optimizer-states bf16"
         "kov|cpov|--nvme-chunk 65536 --offload-params nvme --precision fp16 --loss-scale 1e30"
         "kz3|cpz3|--nvme-chunk 2048 --offload-params nvme --ranks 8 --zero 3"
         # the gradients waiting on the drive (--offload-grads nvme)
         "g16|cf16|--offload-grads nvme --precision fp16" "gk16|cf16|--offload-grads nvme --precision fp16 --nvme-chunk 2048"
         "glim|cf16|--offload-grads-limit 512K --precision fp16 --nvme-chunk 2048"
         "gov|cpov|--offload-grads nvme --offload-params nvme --precision fp16 --loss-scale 1e30"
         "gmb|cmb|--offload-grads nvme --micro-batches 2 --grad-clip 0.5"
         "gz3|cpz3|--offload-grads nvme --offload-params nvme --ranks 8 --zero 3 --nvme-chunk 2048"
         "gtp|ctp|--offload-grads nvme --ranks 8 --tp 2 --zero 1")
for c in "${CHUNKED[@]}"; do
  IFS='|' read -r n _ o <<< "$c"
  # shellcheck disable=SC2086
  compile n$n --offload nvme --nvme-path "$d/nv" $o
  run n$n
  $PY "$HERE/check_streams.py" "$d/n$n.bigc" --expect-host --expect-nvme > /dev/null ||
    { $PY "$HERE/check_streams.py" "$d/n$n.bigc" --expect-host --expect-nvme; exit 1; }
done
echo "ok   check_streams: $((${#CONFIGS[@]} + ${#CHUNKED[@]})) nvme programs obey the stream discipline"
# --dump-grads: the gradients of an nvme program (chunked or not) under the weights' names.
for n in cfp32 nfp32 nk32; do
  "$BIN/bigc" run "$d/$n.bigc" --synthetic --steps 2 --seed 7 --quiet --dump-grads "$d/$n.grads.safetensors"
done

$PY - "$BIN" "$d" "${CONFIGS[@]}" -- "${CHUNKED[@]}" <<'PY'
import json, struct, subprocess, sys
import numpy as np
b, d = sys.argv[1], sys.argv[2]
sep = sys.argv.index("--")
pairs = [(c.split(":")[0], "c" + c.split(":")[0], "n" + c.split(":")[0]) for c in sys.argv[3:sep]]
pairs += [(c.split("|")[0], c.split("|")[1], "n" + c.split("|")[0]) for c in sys.argv[sep + 1:]]
ok = True
def check(name, cond, msg):
    global ok
    print(("ok   " if cond else "FAIL ") + name + ": " + msg)
    ok &= bool(cond)
def rows(n):
    return [json.loads(l) for l in open(f"{d}/{n}.jsonl") if l.strip()]
def weights(n):
    raw = open(f"{d}/{n}.safetensors", "rb").read()
    (hl,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + hl])
    return {k: raw[8 + hl + v["data_offsets"][0]:8 + hl + v["data_offsets"][1]] for k, v in head.items()
            if k != "__metadata__"}
key = lambda r: (r["step"], r["loss"], r.get("loss_scale"), r.get("skipped"))
for n, cn, nn in pairs:
    a, c = rows(cn), rows(nn)
    check(f"{n} losses", len(a) == 6 and [key(r) for r in a] == [key(r) for r in c],
          f"--offload nvme equals --offload cpu ({cn}) bit for bit over {len(c)} steps (last loss {c[-1]['loss']:.6f})")
    wa, wb = weights(cn), weights(nn)
    same = set(wa) == set(wb) and all(wa[k] == wb[k] for k in wa)
    check(f"{n} weights", same, f"the {len(wb)} final weights equal --offload cpu's bit for bit")
g = {n: weights(n + ".grads") for n in ("cfp32", "nfp32", "nk32")}
check("--dump-grads", len(g["cfp32"]) > 0 and all(set(g[n]) == set(g["cfp32"]) and
                                                   all(g[n][k] == g["cfp32"][k] for k in g[n]) for n in g),
      f"the {len(g['cfp32'])} gradients of the nvme programs (whole and chunked updates) equal --offload cpu's")
plain = rows("plain")
check("fp32 vs plain", [key(r) for r in plain] == [key(r) for r in rows("nfp32")] == [key(r) for r in rows("np32")],
      "--offload nvme equals the run without offload bit for bit, also with the weights in the nvme space")
check("learns", plain[-1]["loss"] < plain[0]["loss"] - 0.05, f"loss {plain[0]['loss']:.4f} -> {plain[-1]['loss']:.4f}")

def inspect(n):
    return json.loads(subprocess.check_output([f"{b}/bigc", "inspect", f"{d}/{n}.bigc", "--json"]))
nv, cpu = inspect("nfp32"), inspect("cfp32")
P = nv["parameters"]
sp = nv["spaces"]
check("nvme space", "nvme" in sp and sp["nvme"]["by_role"].get("master", 0) >= 4 * P
      and sp["nvme"]["by_role"].get("optimizer", 0) >= 8 * P,
      f"masters {sp['nvme']['by_role'].get('master', 0) / P:.2f} B/param, moments "
      f"{sp['nvme']['by_role'].get('optimizer', 0) / P:.2f} B/param in the nvme space "
      f"(arena {sp['nvme']['arena_bytes']} bytes)")
check("no state on the host", sp["host"]["by_role"].get("master", 0) == 0
      and sp["host"]["by_role"].get("optimizer", 0) < 64,
      f"host: masters {sp['host']['by_role'].get('master', 0)} B, optimizer {sp['host']['by_role'].get('optimizer', 0)} B")
# The host holds the staging of the updates in flight (about two layers' state), whatever the depth:
# 4 and 8 blocks 256 wide plan the same host arena, where --offload cpu's grows with the state.
host = {n: inspect(n)["spaces"]["host"]["arena_bytes"] for n in ("deep4n", "deep8n", "deep4c", "deep8c", "deep8k")}
check("host arena", host["deep8n"] <= host["deep4n"] * 1.05 and host["deep8c"] >= host["deep4c"] * 1.5
      and host["deep8n"] * 2.5 < host["deep8c"],
      f"4 -> 8 blocks: {host['deep4n']} -> {host['deep8n']} bytes with --offload nvme, "
      f"{host['deep4c']} -> {host['deep8c']} with --offload cpu")
check("host arena, chunks", host["deep8k"] < 0.6 * host["deep8n"],
      f"8 blocks with updates in chunks of 16384 elements: {host['deep8k']} bytes, against {host['deep8n']} whole")
last = rows("nfp32")[-1]["nvme"]
per_step = (last["read_bytes"] / 6 / P, last["write_bytes"] / 6 / P)
check("nvme traffic", all(12 <= x <= 12 * 1.1 for x in per_step) and last["engine"] in ("io_uring", "pread/pwrite"),
      f"read {per_step[0]:.2f} and wrote {per_step[1]:.2f} B/param per step through {last['engine']}")
# --offload-grads nvme: the gradients wait on the drive, not the host (fp16: every update waits for
# the overflow check at the end of the backward); each step writes and reads them once more.
g16, f16 = inspect("ng16"), inspect("nf16")
gh, fh = g16["spaces"]["host"]["arena_bytes"], f16["spaces"]["host"]["arena_bytes"]
gn = g16["spaces"]["nvme"]["by_role"].get("grad", 0)
check("gradients on the drive", gn >= 2 * P and gh <= fh - 1.5 * P,
      f"nvme holds {gn / P:.2f} B/param of gradients; host arena {gh} bytes against {fh} with them on the host")
last = rows("ng16")[-1]["nvme"]
per_step = (last["read_bytes"] / 6 / P, last["write_bytes"] / 6 / P)
check("nvme traffic, gradients", all(14 <= x <= 14 * 1.1 for x in per_step),
      f"read {per_step[0]:.2f} and wrote {per_step[1]:.2f} B/param per step (the state's 12 and the 2 of the gradients)")
# --offload-params nvme: the weights in the nvme space too, written once a step, read for every use.
def program(n):
    raw = open(f"{d}/{n}.bigc", "rb").read()
    return json.loads(raw[raw.index(b"\n") + 1:])
pw = inspect("np32")
sp = pw["spaces"]
check("weights in nvme", sp["nvme"]["by_role"].get("param", 0) >= 4 * P and not sp["host"]["by_role"].get("param")
      and not sp["device"]["by_role"].get("param"),
      f"weights {sp['nvme']['by_role'].get('param', 0) / P:.2f} B/param in the nvme space, none on the host or device "
      f"(host arena {sp['host']['arena_bytes']} B against {inspect('cp32')['spaces']['host']['arena_bytes']} "
      "with --offload cpu --offload-params host)")
prog = program("np32")
space = {x["id"]: x["space"] for x in prog["buffers"]}
size = {x["id"]: x["bytes"] for x in prog["buffers"]}
planned = sum(size[i["in"][0]] for i in prog["instructions"] if i.get("stream") == "nvme" and space[i["in"][0]] == "nvme")
last = rows("np32")[-1]["nvme"]
per_step = (last["read_bytes"] / 6 / P, last["write_bytes"] / 6 / P)
check("nvme traffic, weights", 20 <= per_step[0] and 16 <= per_step[1] <= 16 * 1.1
      and planned <= last["read_bytes"] / 6 <= planned * 1.1,
      f"read {per_step[0]:.2f} and wrote {per_step[1]:.2f} B/param per step (the program's reads: "
      f"{planned / P:.2f} B/param before rounding)")
sys.exit(0 if ok else 1)
PY

# Weights loaded into the nvme space (--load-weights writes the masters there, the compute copies are
# cast from them) train as they do on the host.
for n in cfp32 nfp32 np32; do
  "$BIN/bigc" run "$d/$n.bigc" --synthetic --steps 3 --seed 3 --load-weights "$d/plain.safetensors" \
    --log "$d/$n.loaded.jsonl" --quiet
done
$PY - "$d" <<'PY'
import json, sys
d = sys.argv[1]
rows = lambda n: [json.loads(l)["loss"] for l in open(f"{d}/{n}.loaded.jsonl") if l.strip()]
ok = len(rows("cfp32")) == 3 and rows("cfp32") == rows("nfp32") == rows("np32")
print(("ok   " if ok else "FAIL ") + f"--load-weights into the nvme space: losses {rows('nfp32')} equal --offload cpu's "
      "(also with the weights there)")
sys.exit(0 if ok else 1)
PY

# 4. SIGKILL mid-run: no file left, and the last checkpoint resumes bit for bit.
"$BIN/bigc" run "$d/nfp32.bigc" --synthetic --steps 100000 --seed 7 --checkpoint-dir "$d/ck" --checkpoint-every 3 \
  --quiet &
pid=$!
for _ in $(seq 1 6000); do ls "$d/ck" 2>/dev/null | grep -q step-00000006 && break; sleep 0.05; done
kill -9 $pid || true
wait $pid 2>/dev/null || true
[ -z "$(ls -A "$d/nv")" ] || { echo "FAIL: a SIGKILL left files in the nvme directory"; exit 1; }
LAST=$(ls "$d/ck" | grep '^step-' | sort | tail -1 | sed 's/step-0*//')
[ -n "$LAST" ] && [ "$LAST" -ge 6 ] || { echo "FAIL: no checkpoint of step 6 or later before the kill"; ls -a "$d/ck"; exit 1; }
END=$((LAST + 4))
"$BIN/bigc" run "$d/nfp32.bigc" --synthetic --steps $END --seed 7 --log "$d/straight.jsonl" --quiet
"$BIN/bigc" run "$d/nfp32.bigc" --synthetic --steps $END --seed 7 --checkpoint-dir "$d/ck" --resume \
  --log "$d/resumed.jsonl" --quiet
$PY - "$d" "$LAST" "$END" <<'PY'
import json, sys
d, last, end = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = lambda f: [json.loads(l) for l in open(f"{d}/{f}") if l.strip()]
straight = {r["step"]: r["loss"] for r in rows("straight.jsonl")}
resumed = rows("resumed.jsonl")
ok = [r["step"] for r in resumed] == list(range(last + 1, end + 1)) and all(straight[r["step"]] == r["loss"] for r in resumed)
print(("ok   " if ok else "FAIL ") + f"SIGKILL mid-run after the checkpoint of step {last}: steps "
      f"{resumed[0]['step'] if resumed else '-'}..{end} resumed from it equal the straight run bit for bit, no file left")
sys.exit(0 if ok else 1)
PY

# 5. Bad input.
expect_error() { # what, expected text, command...
  local what=$1 text=$2; shift 2
  if "$@" > "$d/err.txt" 2>&1; then echo "FAIL: $what: exit 0"; exit 1; fi
  grep -q -- "$text" "$d/err.txt" || { echo "FAIL: $what: expected '$text' in:"; cat "$d/err.txt"; exit 1; }
  [ ! -e "$d/bad.jsonl" ] || { echo "FAIL: $what: a log was written"; exit 1; }
  echo "ok   $what: $(head -c 200 "$d/err.txt" | head -1)"
}
R=("$BIN/bigc" run "$d/nfp32.bigc" --synthetic --steps 1 --quiet --log "$d/bad.jsonl")
expect_error "missing directory" "No such file or directory" "${R[@]}" --nvme-path "$d/missing"
touch "$d/afile"
expect_error "a file, not a directory" "is not a directory" "${R[@]}" --nvme-path "$d/afile"
expect_error "no room" "cannot preallocate the nvme arena" bash -c 'trap "" XFSZ; ulimit -f 64; exec "$@"' _ "${R[@]}"
cc -shared -fPIC -O1 -o "$d/no_odirect.so" "$HERE/no_odirect_shim.c" -ldl
expect_error "no O_DIRECT" "does not support O_DIRECT" env LD_PRELOAD="$d/no_odirect.so" BIGC_TEST_NO_ODIRECT="$d/nv" \
  "${R[@]}" --nvme-path "$d/nv"
expect_error "no nvme space" "keeps nothing in the nvme space" "$BIN/bigc" run "$d/plain.bigc" --synthetic --steps 1 \
  --quiet --log "$d/bad.jsonl" --nvme-path "$d/nv"
RO=$(awk '$4 ~ /(^|,)ro(,|$)/ {print $2}' /proc/mounts | while read -r m; do [ -d "$m" ] && echo "$m" && break; done)
if [ -n "$RO" ]; then
  expect_error "read-only file system" "read-only file system" "${R[@]}" --nvme-path "$RO"
else
  echo "note: no read-only mount on this machine; the read-only refusal is not exercised here"
fi
[ -z "$(ls -A "$d/nv")" ] || { echo "FAIL: files left in the nvme directory"; exit 1; }
echo "offload_nvme: all checks passed"
