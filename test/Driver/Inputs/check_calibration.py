"""Checks a profile written by `bigc calibrate` (test/Driver/calibrate.test): the measured fields
are there and plausible, and its sgemm rate is within 4x of numpy's float32 matmul of the same
shapes, measured here (an independent BLAS build on the same machine)."""
import json, sys, time
import numpy as np

p = json.load(open(sys.argv[1]))
need = ["device_flops", "host_flops", "h2d_bytes_per_s", "d2h_bytes_per_s", "interconnect_bytes_per_s",
        "device_bytes_per_s", "collective_latency_s", "op_overhead_s", "threads", "op_flops", "sources"]
missing = [k for k in need if k not in p]
assert not missing, f"missing fields {missing}"
assert 1e8 < p["device_flops"] < 1e14, p["device_flops"]
assert 1e8 < p["device_bytes_per_s"] < 1e13, p["device_bytes_per_s"]
assert 0 < p["collective_latency_s"] < 0.1 and 0 < p["op_overhead_s"] < 0.01, p
assert len(p["sources"]) == 8, p["sources"]
kinds = {"attention", "attention_grad", "gelu", "gelu_grad", "cross_entropy", "cross_entropy_grad", "layernorm",
         "layernorm_grad"}
assert set(p["op_flops"]) == kinds and all(1e6 < f < 1e14 for f in p["op_flops"].values()), p["op_flops"]
shapes = [(1024, 768, 256), (1024, 1024, 256), (1024, 256, 1024), (1024, 256, 1024), (256, 1024, 1024),
          (1024, 2048, 256)]
flops = seconds = 0.0
for m, n, k in shapes:
    a = np.full((m, k), 0.01, np.float32)
    b = np.full((k, n), 0.02, np.float32)
    a @ b
    t = []
    for _ in range(5):
        t0 = time.perf_counter()
        a @ b
        t.append(time.perf_counter() - t0)
    seconds += sorted(t)[2]
    flops += 2.0 * m * n * k
ref = flops / seconds
ratio = p["device_flops"] / ref
print(f"calibrated sgemm {p['device_flops'] / 1e9:.1f} GFLOP/s, numpy {ref / 1e9:.1f} GFLOP/s, ratio {ratio:.2f}")
# Two speeds measured at different moments: on a machine whose cores are busy with other work they
# may differ by several times, so the bound only catches a rate off by orders of magnitude (a unit
# error), not a slow spell.
assert 0.02 < ratio < 50, f"bigc calibrate's sgemm rate is {ratio:.2f}x numpy's"
