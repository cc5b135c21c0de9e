"""What the end-to-end tests read back from `bigc run`: the per-step log, the weights file, and a
list of named checks that fails the test at the end (imported by ranks.sh, tp.sh and mpirun.sh)."""
import json
import struct

import numpy as np


def losses(path):
    """The losses of a --log file (one JSON object per step), and its rows."""
    rows = [json.loads(l) for l in open(path) if l.strip()]
    return np.array([r["loss"] for r in rows]), rows


def tensors(path):
    """name -> (shape, raw bytes) of a safetensors file, any dtype."""
    raw = open(path, "rb").read()
    (hl,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + hl])
    return {k: (v["shape"], raw[8 + hl + v["data_offsets"][0]:8 + hl + v["data_offsets"][1]])
            for k, v in head.items() if k != "__metadata__"}


def weights(path):
    """name -> (shape, f32 values) of a --save-weights safetensors file."""
    return {k: (shape, np.frombuffer(b, dtype=np.float32)) for k, (shape, b) in tensors(path).items()}


class Checks:
    """check(name, cond, msg) prints ok/FAIL; ok is False once any failed."""

    def __init__(self):
        self.ok = True

    def __call__(self, name, cond, msg):
        print(("ok   " if cond else "FAIL ") + name + ": " + msg)
        self.ok &= bool(cond)


def compare(check, d, n, ref, tol, utol, w0, what="8 ranks vs one rank"):
    """Run `n` against the reference run `ref` (files d/NAME.jsonl and d/NAME.safetensors):
    the losses to `tol` relative (max over the steps), the final weights (same names and shapes)
    to `utol` of the update, ||w_n - w_ref|| / ||w_ref - w0|| over every weight (Adam moves a weight
    by up to lr when a rounding difference hits a gradient near zero, so an element-wise bound
    would be one lr wide), and with fp16 loss scaling the same steps skipped. Returns the measured
    (loss, update) differences."""
    a, ra = losses(f"{d}/{ref}.jsonl")
    b, rb = losses(f"{d}/{n}.jsonl")
    check(f"{n} steps", len(b) == len(a), f"{len(b)} steps logged, as {ref}")
    if len(b) != len(a):
        return 1.0, 1.0
    r = float(np.max(np.abs(a - b) / np.abs(a)))
    check(f"{n} losses", r <= tol, f"{what} ({ref}): max relative difference {r:.3g} (<= {tol:g})")
    wa, wb = weights(f"{d}/{ref}.safetensors"), weights(f"{d}/{n}.safetensors")
    same = set(wa) == set(wb) and all(wa[k][0] == wb[k][0] for k in wa)
    check(f"{n} weights", same, f"{len(wb)} whole tensors gathered from the chunks and shards, names and shapes "
          f"as {ref}'s")
    if not same:
        return r, 1.0
    moved = np.sqrt(sum(float(np.sum((wa[k][1].astype(np.float64) - w0[k][1]) ** 2)) for k in wa))
    diff = np.sqrt(sum(float(np.sum((wa[k][1].astype(np.float64) - wb[k][1]) ** 2)) for k in wa))
    u = 0.0 if diff == 0 else (diff / moved if moved > 0 else float("inf"))
    if moved == 0:  # every step skipped: both hold the initial weights
        check(f"{n} weights", diff == 0, f"unchanged, as {ref}'s ({diff:.3g})")
    else:
        check(f"{n} weights", u <= utol, f"||w - w_{ref}|| / ||w_{ref} - w_init|| = {u:.3g} (<= {utol:g})")
    if "loss_scale" in ra[0]:
        check(f"{n} skipped steps", [x["skipped"] for x in ra] == [x["skipped"] for x in rb],
              f"the steps skipped on fp16 overflow are {ref}'s ({sum(x['skipped'] for x in rb)} of {len(rb)})")
    return r, u
