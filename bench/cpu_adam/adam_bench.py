#!/usr/bin/env python3
"""CPU AdamW implementations on one flat fp32 buffer of N parameters (ZeRO-Offload keeps its fp32
masters flat), fp32 grads, same thread count, steady state: `--warmup` untimed steps, then the
median of `--steps` timed steps. Each process times one implementation with its steps alternating with
those of bigc's cpuAdamW on its own copy of the buffers (so both see the same machine at the same
moment), and prints one JSON line with both times and their ratio (median over step pairs).

  --impl bigc                 bigc's cpuAdamW through ctypes (--lib path/to/libbigc_cpu_adam.so)
  --impl torch                torch.optim.AdamW, foreach=False (the per-tensor loop)
  --impl torch-foreach        torch.optim.AdamW, foreach=True
  --impl torch-fused          torch.optim.AdamW, fused=True (skipped where torch has no CPU fused)
  --impl deepspeed            DeepSpeedCPUAdam (adamw_mode), JIT-built with -O3 added
  --impl deepspeed-asbuilt    DeepSpeedCPUAdam as DeepSpeed 0.12's CPU-only JIT build compiles it
                              (its CPU-only path passes no -O flag: see docs/performance.md)
  --impl check                bigc vs torch.optim.AdamW numbers (10 steps, random grads)
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time

import torch


def timed(step, warmup, steps):
    for _ in range(warmup):
        step()
    ts = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def load_bigc(path, threads):
    lib = ctypes.CDLL(path)
    lib.bigc_cpu_adamw.restype = ctypes.c_int
    lib.bigc_cpu_adamw.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                   ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong,
                                   ctypes.c_float, ctypes.c_float, ctypes.c_float, ctypes.c_float,
                                   ctypes.c_float, ctypes.c_float, ctypes.c_longlong]
    lib.bigc_cpu_adam_isa.restype = ctypes.c_char_p
    lib.bigc_set_threads(threads)
    return lib


class BigcAdamW:
    """Same interface as a torch optimizer over one flat fp32 parameter."""

    def __init__(self, lib, p, lr, betas, eps, weight_decay):
        self.lib, self.p = lib, p
        self.m = torch.zeros_like(p)
        self.v = torch.zeros_like(p)
        self.lr, self.betas, self.eps, self.wd = lr, betas, eps, weight_decay
        self.t = 0

    def step(self):
        self.t += 1
        g = self.p.grad
        assert g.dtype == torch.float32 and g.is_contiguous() and self.p.is_contiguous()
        rc = self.lib.bigc_cpu_adamw(self.p.data_ptr(), g.data_ptr(), 0, self.m.data_ptr(), self.v.data_ptr(),
                                     None, 0, self.p.numel(), self.lr, self.betas[0], self.betas[1], self.eps,
                                     self.wd, 1.0, self.t)
        if rc != 0:
            raise RuntimeError("bigc_cpu_adamw failed")


def make_deepspeed(o3):
    # The CUDA toolkit on this machine does not go with a CPU-only torch: tell DeepSpeed's op
    # builder there is no CUDA, so it takes its CPU-only path (-D__DISABLE_CUDA__).
    import torch.utils.cpp_extension as ce
    ce.CUDA_HOME = None
    from deepspeed.ops.op_builder.builder import TorchCPUOpBuilder
    if o3:
        orig = TorchCPUOpBuilder.cxx_args
        TorchCPUOpBuilder.cxx_args = lambda self: ['-O3'] + orig(self)
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    return DeepSpeedCPUAdam


def make_opt(impl, p, args, lib=None):
    kw = dict(lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    if impl == 'bigc':
        return BigcAdamW(lib, p, **kw)
    if impl == 'torch':
        return torch.optim.AdamW([p], foreach=False, **kw)
    if impl == 'torch-foreach':
        return torch.optim.AdamW([p], foreach=True, **kw)
    if impl == 'torch-fused':
        opt = torch.optim.AdamW([p], fused=True, **kw)  # TypeError where torch has no fused AdamW
        return opt
    if impl in ('deepspeed', 'deepspeed-asbuilt'):
        DeepSpeedCPUAdam = make_deepspeed(impl == 'deepspeed')
        return DeepSpeedCPUAdam([p], adamw_mode=True, **kw)
    raise SystemExit(f"unknown --impl {impl}")


def check(args):
    """bigc's cpuAdamW against torch.optim.AdamW (foreach=False) on the same random grads."""
    lib = load_bigc(args.lib, args.threads)
    n, steps = 1_000_003, 10
    gen = torch.Generator().manual_seed(0)
    p0 = torch.randn(n, generator=gen)
    pa = torch.nn.Parameter(p0.clone())
    pb = torch.nn.Parameter(p0.clone())
    kw = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    ta = torch.optim.AdamW([pa], foreach=False, **kw)
    tb = BigcAdamW(lib, pb, **kw)
    worst = 0.0
    for _ in range(steps):
        g = torch.randn(n, generator=gen) * 1e-2
        pa.grad = g.clone()
        pb.grad = g.clone()
        ta.step()
        tb.step()
        # differences in units of (one ulp of p + 1e-6 of a step's size): both round differently
        # (torch: separate multiply and add; bigc: fused multiply-add), the update is ~lr
        a = pa.data.abs()
        ulp = torch.nextafter(a, torch.full_like(a, float('inf'))) - a
        worst = max(worst, float(((pa.data - pb.data).abs() / (ulp + 1e-6 * kw['lr'])).max()))
    st = ta.state[pa]
    dm = float((st['exp_avg'] - tb.m).abs().max() / st['exp_avg'].abs().max())
    dv = float((st['exp_avg_sq'] - tb.v).abs().max() / st['exp_avg_sq'].abs().max())
    ok = worst <= 8 and dm < 1e-5 and dv < 1e-5
    print(json.dumps({"impl": "check bigc vs torch.optim.AdamW", "n": n, "steps": steps,
                      "max_param_diff_in_ulp_plus_1e-6_lr": worst, "max_m_diff_rel": dm, "max_v_diff_rel": dv,
                      "ok": ok}))
    return 0 if ok else 1


NAMES = {'torch': 'torch.optim.AdamW (foreach=False)',
         'torch-foreach': 'torch.optim.AdamW (foreach=True)',
         'torch-fused': 'torch.optim.AdamW (fused=True)',
         'deepspeed': 'DeepSpeedCPUAdam (-O3)',
         'deepspeed-asbuilt': 'DeepSpeedCPUAdam (as JIT-built, no -O)'}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--impl', required=True)
    ap.add_argument('--n', type=int, default=100_000_000)
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--steps', type=int, default=10)
    ap.add_argument('--warmup', type=int, default=3)
    ap.add_argument('--lib', default='')
    ap.add_argument('--no-pair', action='store_true',
                    help='time --impl alone (default: alternate its steps with bigc\'s, in this process)')
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.impl == 'check':
        return check(args)

    # The implementation under test and (unless --no-pair, or it is bigc itself) bigc on its own
    # copy of the buffers: steps alternate, so both see the same machine at the same time (this
    # machine is shared: other processes come and go), and the ratio of the two is what counts.
    lib = load_bigc(args.lib, args.threads) if args.lib else None
    keys = [args.impl] + ([] if args.no_pair or args.impl == 'bigc' else ['bigc'])
    opts, params = {}, {}
    for k in keys:
        p = torch.nn.Parameter(torch.empty(args.n).uniform_(-0.01, 0.01))
        p.grad = torch.empty(args.n).uniform_(-1e-3, 1e-3)
        try:
            opts[k] = make_opt(k, p, args, lib)
            opts[k].step()  # first step allocates the states (and JIT-builds DeepSpeed's op)
        except (TypeError, RuntimeError) as e:
            print(json.dumps({"impl": NAMES.get(k, k), "key": k, "skipped": f"{type(e).__name__}: {e}"}))
            return 0
        params[k] = p
    for _ in range(max(args.warmup - 1, 0)):
        for k in keys:
            opts[k].step()
    times = {k: [] for k in keys}
    for _ in range(args.steps):
        for k in keys:
            t0 = time.perf_counter()
            opts[k].step()
            times[k].append(time.perf_counter() - t0)
    t = {k: statistics.median(v) for k, v in times.items()}
    out = {"impl": NAMES.get(args.impl, f"bigc cpuAdamW ({lib.bigc_cpu_adam_isa().decode()})" if lib else args.impl),
           "key": args.impl, "n": args.n, "threads": args.threads, "torch": torch.__version__,
           "step_ms": t[args.impl] * 1e3, "params_per_s": args.n / t[args.impl],
           "GBps_at_28B": 28 * args.n / t[args.impl] / 1e9,
           "checksum": float(params[args.impl].data[::4099].sum())}
    if 'bigc' in t and args.impl != 'bigc':
        out["bigc_step_ms"] = t['bigc'] * 1e3
        # per step pair (adjacent in time), then the median: robust to load changes
        out["bigc_speedup_paired"] = statistics.median(a / b for a, b in zip(times[args.impl], times['bigc']))
    print(json.dumps(out))
    return 0


if __name__ == '__main__':
    sys.exit(main())
