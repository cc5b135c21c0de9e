"""What the end-to-end tests read back from `bigc run`: the per-step log, the weights file, and a
list of named checks that fails the test at the end (imported by ranks.sh, tp.sh and mpirun.sh)."""
import json
import struct

import numpy as np


def losses(path):
    """The losses of a --log file (one JSON object per step), and its rows."""
    rows = [json.loads(l) for l in open(path) if l.strip()]
    return np.array([r["loss"] for r in rows]), rows


def weights(path):
    """name -> (shape, f32 values) of a --save-weights safetensors file."""
    raw = open(path, "rb").read()
    (hl,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + hl])
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        lo, hi = v["data_offsets"]
        out[k] = (v["shape"], np.frombuffer(raw[8 + hl + lo:8 + hl + hi], dtype=np.float32))
    return out


class Checks:
    """check(name, cond, msg) prints ok/FAIL; ok is False once any failed."""

    def __init__(self):
        self.ok = True

    def __call__(self, name, cond, msg):
        print(("ok   " if cond else "FAIL ") + name + ": " + msg)
        self.ok &= bool(cond)
