#!/usr/bin/env bash
# Every option of the training pipeline, both ways: each option of the table (bindTrainOptions,
# include/bigc/Passes/TrainOptions.h) is set to a value other than its default in at least one of
# the option sets below; for each set, the IR `bigc compile --emit-mlir` ends with (each pipeline
# stage's) equals, byte for byte, the IR of the bigc-opt command its `// reproduce:` line names
# (the options bigc compile parsed, and the driver's own choices, through the registered
# --bigc-train-pipeline). The list of options is read from bigc-opt --help, so an option added to
# the table and left out here fails the test.
set -uo pipefail
BIN=$1
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
"$BIN/bigc" gen llama --preset tiny --layers 4 -o "$d/m.mlir" >/dev/null
cat >"$d/sets.txt" <<'EOF'
--ranks 2 --zero 3 --prefetch 2 --bucket-mb 1 --tile-linear 4K
--ranks 4 --tp 2 --sequence-parallel --zero 1
--pad-vocab 64 --fuse-loss --loss-chunk 40 --fuse
--precision fp16 --loss-scale 1024 --loss-scale-window 100
--precision bf16 --micro-batches 2 --recompute selective
--recompute auto --memory-budget 5M
--ranks 2 --pp 2 --pp-schedule interleaved --virtual-stages 2 --micro-batches 2
--ranks 2 --pp 2 --pp-split 1 --pp-schedule zero-bubble --micro-batches 2
--offload cpu --offload-params host --ranks 2 --zero 3
--offload nvme --nvme-path NVME --nvme-chunk 4096
--precision fp16 --offload nvme --nvme-path NVME --offload-grads-limit 64K
--lr 1e-3 --beta1 0.8 --beta2 0.9 --eps 1e-6 --weight-decay 0.01 --grad-clip 1.0 --optimizer-states bf16
--ranks 2 --cp 2 --cp-kind a2a --offload-activations
EOF
/usr/bin/python3 - "$BIN" "$d" <<'PY'
import re, subprocess, sys
BIN, d = sys.argv[1], sys.argv[2]
helptext = subprocess.run([f"{BIN}/bigc-opt", "--help"], capture_output=True, text=True).stdout
block = helptext[helptext.index("--bigc-train-pipeline"):].split("\n")
names = []
for line in block[1:]:
    m = re.match(r"^\s{8}--([a-z0-9-]+)", line)
    if m:
        names.append(m.group(1))
    elif re.match(r"^\s{6}--", line):  # the next pipeline or pass
        break
ok = True
covered = set()
for i, line in enumerate(open(f"{d}/sets.txt").read().split("\n")):
    if not line.strip():
        continue
    flags = line.replace("NVME", d).split()
    out = subprocess.run([f"{BIN}/bigc", "compile", f"{d}/m.mlir", "-o", f"{d}/p{i}.bigc", "--quiet",
                          "--emit-mlir", f"{d}/p{i}.mlir"] + flags, capture_output=True, text=True)
    if out.returncode != 0:
        print(f"FAIL bigc compile {line}: {out.stderr.strip()}")
        ok = False
        continue
    text = open(f"{d}/p{i}.mlir").read()
    # One stage's IR after each `// reproduce:` line (pipelines: one per stage).
    parts = re.split(r"^// reproduce: (.*)\n", text, flags=re.M)
    stages = [(parts[k], re.sub(r"^// pipeline stage \d+ of \d+\n", "", parts[k + 1], flags=re.M))
              for k in range(1, len(parts), 2)]
    for cmd, ir in stages:
        opts = re.search(r'--bigc-train-pipeline="([^"]*)"', cmd).group(1)
        for kv in opts.split():
            covered.add(kv.split("=")[0])
        res = subprocess.run([f"{BIN}/bigc-opt", f"{d}/m.mlir", f"--bigc-train-pipeline={opts}"],
                             capture_output=True, text=True)
        if res.returncode != 0 or res.stdout.strip() != ir.strip():
            print(f"FAIL {line}: `{cmd}` gives other IR than bigc compile ({res.stderr.strip()[:200]})")
            ok = False
        else:
            print(f"ok   {line}: {cmd.split('=', 1)[1]}")
missing = [n for n in names if n not in covered]
print(f"{'ok  ' if not missing else 'FAIL'} {len(names)} pipeline options, {len(covered)} set by the option sets"
      + (f"; never set: {missing}" if missing else ""))
sys.exit(0 if ok and not missing and names else 1)
PY
