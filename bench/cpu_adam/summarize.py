#!/usr/bin/env python3
"""Table of bench/cpu_adam/run.sh's results (a JSON-lines file): step time per implementation
(median over rounds), speedups of bigc's cpuAdamW, memory bandwidth and the fraction of it the
Adam reaches. Markdown, so it can go into docs/performance.md as printed."""
import datetime
import json
import platform
import statistics
import subprocess
import sys


def cpu_model():
    try:
        out = subprocess.run(['lscpu'], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith('Model name:'):
                return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or 'unknown CPU'


def main(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    rounds = {}
    check = cxx = None
    cxx_dtypes = []
    for r in rows:
        if r.get('impl', '').startswith('check'):
            check = r
        elif 'round' in r and 'step_ms' in r:
            rounds.setdefault(r['key'], []).append(r)
        elif 'adam_GBps' in r:
            if r['grad'] == 'f32' and r['half'] == 'none':
                cxx = r
            else:
                cxx_dtypes.append(r)
    skipped = list({r['impl']: r for r in rows if 'skipped' in r}.values())

    med = {k: statistics.median(x['step_ms'] for x in v) for k, v in rounds.items()}
    # bigc's steps alternated with each implementation's in its process: paired figures
    pairedBigc = {k: statistics.median(x['bigc_step_ms'] for x in v) for k, v in rounds.items() if 'bigc_step_ms' in v[0]}
    paired = {k: statistics.median(x['bigc_speedup_paired'] for x in v) for k, v in rounds.items()
              if 'bigc_speedup_paired' in v[0]}
    pairedMin = {k: min(x['bigc_speedup_paired'] for x in v) for k, v in rounds.items() if 'bigc_speedup_paired' in v[0]}
    any_row = next(iter(rounds.values()))[0] if rounds else {}
    n = any_row.get('n', cxx['n'] if cxx else 0)
    threads = any_row.get('threads', cxx['threads'] if cxx else 0)
    print(f"CPU AdamW, {n/1e6:.0f}M fp32 parameters (one flat buffer), fp32 grads, {threads} threads, "
          f"median over {max((len(v) for v in rounds.values()), default=0)} rounds of the "
          f"median of the timed steps; in each process the implementation's steps alternate with "
          f"those of bigc's cpuAdamW on its own buffers, and the speedup is the median of the step pairs' ratios")
    print(f"machine: {cpu_model()}, {platform.machine()}; date: {datetime.date.today().isoformat()}; "
          f"torch {any_row.get('torch', '?')}\n")
    print("| implementation | step (ms) | params/s | GB/s at 28 B/param | bigc's step in the same process (ms) | "
          "bigc is faster by (median over rounds) | lowest round |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    order = ['bigc', 'deepspeed', 'deepspeed-asbuilt', 'torch', 'torch-foreach', 'torch-fused']
    for k in sorted(med, key=lambda k: order.index(k) if k in order else 99):
        name = rounds[k][0]['impl']
        t = med[k]
        pb = f"{pairedBigc[k]:.1f}" if k in pairedBigc else ''
        sp = f"{paired[k]:.2f}x" if k in paired else ''
        lo = f"{pairedMin[k]:.2f}x" if k in pairedMin else ''
        print(f"| {name} | {t:.1f} | {n / (t / 1e3):.3g} | {28 * n / (t / 1e3) / 1e9:.1f} | {pb} | {sp} | {lo} |")
    for s in skipped:
        print(f"| {s['impl']} | skipped: {s['skipped']} | | | | | |")
    print()
    if cxx:
        print(f"Memory bandwidth ({cxx['threads']} threads, {cxx['n']/1e6:.0f}M floats per array, "
              f"interleaved with the Adam steps of the C++ bench):\n")
        print("| loop | GB/s |")
        print("|---|---:|")
        print(f"| STREAM triad a = b + s*c (12 B/elem, STREAM's count) | {cxx['triad_GBps']:.1f} |")
        print(f"| same, counting the write-allocate read (16 B/elem) | {cxx['triad_with_write_allocate_GBps']:.1f} |")
        print(f"| a = a + s*b (12 B/elem) | {cxx['rmw_GBps']:.1f} |")
        print(f"| Adam's streams without its arithmetic: p,m,v += g (28 B/elem) | {cxx['adam_streams_GBps']:.1f} |")
        print(f"| **bigc cpuAdamW ({cxx['isa']}), 28 B/param** | **{cxx['adam_GBps']:.1f}** "
              f"({cxx['step_ms']:.1f} ms/step) |")
        print(f"\nbigc's Adam reaches {100 * cxx['fraction_of_best_bandwidth']:.0f}% of the best of these "
              f"bandwidths (in the same process, same rounds).\n")
    if cxx_dtypes:
        print("Mixed-precision offload case (16-bit grads in, 16-bit compute copy out, fp32 master/m/v):\n")
        print("| grad | half copy | step (ms) | params/s | bytes/param | GB/s |")
        print("|---|---|---:|---:|---:|---:|")
        for r in cxx_dtypes:
            print(f"| {r['grad']} | {r['half']} | {r['step_ms']:.1f} | {r['params_per_s']:.3g} | "
                  f"{r['bytes_per_param']:.0f} | {r['adam_GBps']:.1f} |")
        print()
    if check:
        print(f"Correctness: bigc vs torch.optim.AdamW, {check['steps']} steps on {check['n']} params: "
              f"max |dp| = {check['max_param_diff_in_ulp_plus_1e-6_lr']:.2f} x (ulp(p) + 1e-6 lr), "
              f"m rel {check['max_m_diff_rel']:.1e}, v rel {check['max_v_diff_rel']:.1e}: "
              f"{'ok' if check['ok'] else 'MISMATCH'}\n")
    torch_keys = [k for k in ('torch', 'torch-foreach', 'torch-fused') if k in paired]
    if torch_keys:
        s_ = min(paired[k] for k in torch_keys)
        print(f"target >= 5x torch.optim.AdamW (its fastest variant, paired): {s_:.2f}x -> "
              f"{'PASS' if s_ >= 5 else 'FAIL'}")
    if 'deepspeed' in paired:
        s_ = paired['deepspeed']
        print(f"target >= 1.0x DeepSpeedCPUAdam (-O3, paired): {s_:.2f}x (rounds from {pairedMin['deepspeed']:.2f}x) -> "
              f"{'PASS' if s_ >= 1.0 else 'FAIL'}")


if __name__ == '__main__':
    main(sys.argv[1])
