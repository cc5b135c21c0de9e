#!/usr/bin/env bash
# Capacity search: the largest GPT whose plan fits
#   one V100 16 GB with 330 GB of host memory (HARDWARE=v100-16g-x1, CONFIGS="a b"):
#     (a) baseline: fp32, everything on the device, no recomputation
#     (b) --precision fp16 --offload cpu --recompute auto
#     targets: b >= 13B parameters and >= 15x a;
#   eight V100 16 GB sharing 330 GB of host memory (HARDWARE=v100-16g-x8, CONFIGS="a8 b8"):
#     (a8) --zero 0: data parallel, fp32, everything on each device (the seeds' baseline)
#     (b8) --zero 3 --offload cpu --recompute auto --precision fp16
#     targets: b8 >= 15B parameters (the seeds' result) and >= 20x a8;
#   with the seeds' NVMe drive (one 3.2 TB, the profiles' nvme_bytes; CONFIGS="n" on v100-16g-x1, "n8"
#   on v100-16g-x8):
#     (n)  --precision fp16 --offload nvme --recompute auto: masters and AdamW states on the drive,
#          the fp16 weights on the host between uses when the device cannot hold them, on the
#          drive too when the host cannot either (--offload-params auto)
#     (n8) 8 ranks --zero 3 --offload nvme --recompute auto --precision fp16 (likewise the weights'
#          shards)
#     goal: >= 100B parameters on the seeds' machine;
# found by compiling (the exit status of `bigc compile --quiet`: 0 fits, 1 does not fit, 2 internal
# error). With several ranks the host memory is the machine's, shared by its ranks: every rank's
# host arena counts (bigc compile's capacity check).
#
# The search: every preset (`bigc gen gpt --preset P --batch 1 --seq SEQ`), then for each hidden
# size of the GPT-3 shapes (with its number of heads) the most layers that fit: doubling, then
# bisection on the layer count (fitting is monotone in it). Parameters from the GPT-2 formula
# V*C + T*C + L*(12C^2 + 13C) + 2C (checked against `bigc inspect --json` for the winners).
#
# Usage: bench/capacity/run.sh [build/bin]
# Environment: SEQ (1024), HARDWARE (v100-16g-x1), HOST_MEM (330000000000 = 330 GB: the profile
# v100-16g-x1 has the 61 GiB of an AWS p3.2xlarge; the comparison of the issue is with the seed
# team's 330 GB), HIDDENS_A / HIDDENS_B (hidden sizes to search, "C:H C:H ..."), VERBOSE=1 (every
# probe), CONFIGS ("a b", or one of them).
set -euo pipefail
BIN=${1:-build/bin}
export BIGC="$BIN/bigc"
[ -x "$BIGC" ] || { echo "bench/capacity/run.sh: $BIGC not found (build first, or pass the bin dir)" >&2; exit 1; }
export SEQ=${SEQ:-1024} HARDWARE=${HARDWARE:-v100-16g-x1} HOST_MEM=${HOST_MEM:-330000000000}
export HIDDENS_A=${HIDDENS_A:-"768:12 1024:16 1536:16 2048:16 2560:32 4096:32 5120:40"}
export HIDDENS_B=${HIDDENS_B:-"5120:40 6144:48 7168:56"}
export HIDDENS_N=${HIDDENS_N:-"8192:64 12288:96"}
export CONFIGS=${CONFIGS:-"a b"} VERBOSE=${VERBOSE:-0}
# Only the exit status matters here: no option sets tried for the not-fit table.
export BIGC_FIT_CANDIDATES=0
exec /usr/bin/python3 - <<'PY'
import json, os, subprocess, sys, tempfile, time

BIGC = os.environ["BIGC"]
SEQ = int(os.environ["SEQ"])
HW = os.environ["HARDWARE"]
HOST = os.environ["HOST_MEM"]
VERBOSE = os.environ["VERBOSE"] == "1"
V = 50257
PRESETS = ["gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "1.3b", "2.7b", "6.7b", "13b", "15b", "20b",
           "30b", "65b", "175b"]
CONFIGS = {
    "a": ("baseline: fp32, all on the device, no recomputation", []),
    "b": ("--precision fp16 --offload cpu --recompute auto", ["--precision", "fp16", "--offload", "cpu",
                                                               "--recompute", "auto"]),
    # Diagnostic (CONFIGS="b3"): (b) with the weights kept on the host between uses (ZeRO-3-Offload).
    "b3": ("--precision fp16 --offload cpu --recompute auto --offload-params host",
           ["--precision", "fp16", "--offload", "cpu", "--recompute", "auto", "--offload-params", "host"]),
    "a8": ("8 ranks --zero 0 (data parallel): fp32, all on each device", ["--ranks", "8", "--zero", "0"]),
    "n": ("--precision fp16 --offload nvme --recompute auto", ["--precision", "fp16", "--offload", "nvme",
                                                              "--nvme-path", "nvme", "--recompute", "auto"]),
    "n8": ("8 ranks --zero 3 --offload nvme --recompute auto --precision fp16",
           ["--ranks", "8", "--zero", "3", "--offload", "nvme", "--nvme-path", "nvme", "--recompute", "auto",
            "--precision", "fp16"]),
    "b8": ("8 ranks --zero 3 --offload cpu --recompute auto --precision fp16",
           ["--ranks", "8", "--zero", "3", "--offload", "cpu", "--recompute", "auto", "--precision", "fp16"]),
}
HIDDENS = {k: [tuple(int(x) for x in s.split(":")) for s in os.environ["HIDDENS_" + k.upper()].split()]
           for k in "abn"}
HIDDENS["n8"] = HIDDENS["n"]
HIDDENS["b3"] = HIDDENS["b"]
HIDDENS["a8"] = HIDDENS["a"]
HIDDENS["b8"] = HIDDENS["b"]
tmp = tempfile.mkdtemp(prefix="bigc-capacity-")
probes = 0
t_start = time.time()


def size_bytes(text):
    """A --host-mem value: bytes, or a size with K M G T (powers of 1024)."""
    t = text.strip().upper().rstrip("B")
    mult = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}.get(t[-1:], 1)
    return float(t[:-1] if mult > 1 else t) * mult


DEVICE_BYTES = 16 * 2**30  # v100-16g-x1; only used to bracket the search


def params(L, C, T=SEQ):
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C


def compile_fits(gen_args, flags, keep=None):
    """Generates and compiles one model; True when the plan fits (exit 0), False when it does not (1)."""
    global probes
    probes += 1
    mlir = os.path.join(tmp, "m.mlir")
    out = keep or os.path.join(tmp, "m.bigc")
    subprocess.run([BIGC, "gen", "gpt"] + gen_args + ["--batch", "1", "--seq", str(SEQ), "-o", mlir], check=True)
    t0 = time.time()
    r = subprocess.run([BIGC, "compile", mlir, "-o", out, "--hardware", HW, "--host-mem", HOST, "--quiet"] + flags,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    dt = time.time() - t0
    if r.returncode not in (0, 1):
        sys.exit("internal error (exit %d) compiling %s %s:\n%s" % (r.returncode, " ".join(gen_args), " ".join(flags), r.stderr))
    if VERBOSE:
        why = "" if r.returncode == 0 else "  (" + (r.stderr.strip().splitlines() or [""])[0][:150] + ")"
        print("    probe %-40s %s %.1f s%s" % (" ".join(gen_args), "fits" if r.returncode == 0 else "no  ", dt, why),
              flush=True)
    return r.returncode == 0


def inspect(path):
    return json.loads(subprocess.run([BIGC, "inspect", path, "--json"], check=True, stdout=subprocess.PIPE).stdout)


def search(key):
    title, flags = CONFIGS[key]
    print("(%s) %s" % (key, title), flush=True)
    best = None  # (params, description, gen_args)
    # Presets, smallest first; stop after two in a row do not fit.
    misses, preset = 0, None
    for p in PRESETS:
        if compile_fits(["--preset", p], flags):
            preset, misses = p, 0
        else:
            misses += 1
            if misses == 2:
                break
    if preset:
        # Parameters of the preset with this batch and sequence: from the compiled program.
        keep = os.path.join(tmp, "preset-%s.bigc" % key)
        compile_fits(["--preset", preset], flags, keep)
        n = inspect(keep)["parameters"]
        best = (n, "preset %s" % preset, ["--preset", preset])
        print("  largest preset that fits: %s (%s parameters)" % (preset, format(n, ",")), flush=True)
    else:
        print("  no preset fits", flush=True)
    # Layers per hidden size.
    for C, H in HIDDENS[key]:
        g = lambda L: ["--layers", str(L), "--hidden", str(C), "--heads", str(H), "--vocab", str(V)]
        if not compile_fits(g(1), flags):
            print("  hidden %5d: not even 1 layer fits" % C, flush=True)
            continue
        # First bracket: every parameter costs at least 12 bytes (fp32 weight or master and the two
        # AdamW moments) in the memory that holds them: the device for (a), the host otherwise.
        cap_bytes = DEVICE_BYTES if key in ("a", "a8") else size_bytes(HOST) * (6 if key == "n" else 1)
        est = max(2, int((cap_bytes / 12 - V * C - SEQ * C) / (12 * C * C + 13 * C)) + 1)
        lo, hi = 1, est
        while compile_fits(g(hi), flags):
            lo, hi = hi, hi * 2
            if hi > 4096:
                break
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if compile_fits(g(mid), flags):
                lo = mid
            else:
                hi = mid
        n = params(lo, C)
        print("  hidden %5d (%2d heads): %4d layers fit (%s parameters), %d do not" % (C, H, lo, format(n, ","), lo + 1),
              flush=True)
        if best is None or n > best[0]:
            best = (n, "%d layers x hidden %d (%d heads)" % (lo, C, H), g(lo))
    if best is None:
        return None
    keep = os.path.join(tmp, "best-%s.bigc" % key)
    assert compile_fits(best[2], flags, keep)
    j = inspect(keep)
    assert j["parameters"] == best[0] or best[1].startswith("preset"), (j["parameters"], best)
    print("  => largest: %s, %s parameters" % (best[1], format(j["parameters"], ",")), flush=True)
    return best, j


print("bigc capacity search on %s with --host-mem %s, batch 1 x seq %d (%s)" % (HW, HOST, SEQ, time.strftime("%Y-%m-%d")))
res = {}
for k in os.environ["CONFIGS"].split():
    res[k] = search(k)
print()
for k, r in res.items():
    if r is None:
        print("(%s) nothing fits" % k)
        continue
    (n, desc, _), j = r
    sp = j["spaces"]
    dev = sp["device"]["arena_bytes"]
    host = sp.get("host", {}).get("arena_bytes", 0)
    nvme = sp.get("nvme", {}).get("arena_bytes", 0)
    ranks = j.get("ranks", 1)
    print("(%s) %-50s %s: %.2fB parameters; device arena %.2f GiB per rank, host arena %.2f GiB for %d rank(s) "
          "(%.1f bytes/parameter)%s" % (k, CONFIGS[k][0], desc, n / 1e9, dev / 2**30, host * ranks / 2**30, ranks,
                                      host * ranks / n,
                                      "; nvme %.0f GiB (%.1f bytes/parameter)" % (nvme * ranks / 2**30, nvme * ranks / n)
                                      if nvme else ""))
for k in ("n", "n8"):
    if res.get(k):
        n = res[k][0][0]
        print("(%s) >= 100B parameters: %s (%.2fB)" % (k, "met" if n >= 100e9 else "NOT met", n / 1e9))
for ka, kb, ratio_t, params_t in [("a", "b", 15, 13e9), ("a8", "b8", 20, 15e9)]:
  if res.get(ka) and res.get(kb):
    a, b = res[ka][0][0], res[kb][0][0]
    ranks = res[kb][1].get("ranks", 1)
    print("ratio %s/%s: %.1fx (target >= %dx: %s); %s >= %.0fB: %s" % (
        kb, ka, b / a, ratio_t, "met" if b / a >= ratio_t else "NOT met", kb, params_t / 1e9,
        "met" if b >= params_t else "NOT met (%.2fB)" % (b / 1e9)))
    host = res[kb][1]["spaces"].get("host", {}).get("arena_bytes", 0) * ranks
    print("host bytes per parameter of (%s): %.1f (mixed-precision Adam: 16 = fp32 master 4 + Adam m 4 + v 4 + "
          "fp16 weight 2 + fp16 gradient 2)" % (kb, host / b))
print("%d compiles in %.0f s" % (probes, time.time() - t_start))
PY
