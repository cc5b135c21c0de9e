"""PyTorch reference for imported models (run with the project's .venv: torch, transformers).

Builds the same module `bigc import` imported (a Hugging Face config, or FILE.py:FUNCTION),
starts it from the initial weights bigc started from (a module's: checking that the importer wrote
the module's own; a config's: those bigc run drew, by the rules test_importer.py's HfInits checks
against transformers'), feeds the same batches as `bigc run --data` (llm.c order from the same token
file), trains with AdamW as bigc does (decay on parameters of rank >= 2 only) and compares:
  * the loss of every step                          (bigc run --log)          <= --loss-tol
  * every parameter's gradient of the first step    (bigc run --dump-grads)   <= --grad-tol
  * every parameter after the last step              (bigc run --save-weights) <= --weight-tol
Relative error = |a - b| / |b| for losses, ||bigc - torch|| / ||torch|| per tensor otherwise (fp32).

Where PyTorch's own fp32 result is further from exact arithmetic (the same training in float64)
than the tolerance, the tolerance is 4 times that distance: AdamW normalises every gradient
element, so elements whose gradient is tiny and cancelling (a key projection's bias: without
rotary embeddings its exact gradient is zero, as softmax ignores adding the same q.b_k to every
score of a row; with them, the slow frequencies' elements nearly cancel) take steps of about lr
driven by rounding noise. A tensor whose gradient is zero in exact arithmetic must be noise in
bigc (1e-5 of the largest gradient).
"""
import argparse
import copy
import importlib.util
import inspect
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        a, b = info["data_offsets"]
        arr = np.frombuffer(data[base + a:base + b], dtype="<f4").reshape(info["shape"])
        out[name] = torch.from_numpy(arr.astype(np.float32))
    return out


def read_tokens(path):
    with open(path, "rb") as f:
        data = f.read()
    header = np.frombuffer(data[:1024], dtype="<i4")
    if len(data) >= 1024 and header[0] == 20240520:
        n = int(header[2])
        return np.frombuffer(data[1024:1024 + 2 * n], dtype="<u2").astype(np.int64)
    return np.frombuffer(data, dtype="<u2").astype(np.int64)


def batches(tokens, B, T):
    p = 0
    while True:
        if p + B * T + 1 > len(tokens):
            p = 0
        chunk = tokens[p:p + B * T + 1]
        yield (torch.from_numpy(chunk[:-1].reshape(B, T).copy()),
               torch.from_numpy(chunk[1:].reshape(B, T).copy()))
        p += B * T


def build_hf(config, seed):
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM
    transformers.logging.set_verbosity_error()
    cfg = AutoConfig.from_pretrained(config)
    for k, v in list(vars(cfg).items()):
        if ("dropout" in k or "pdrop" in k) and isinstance(v, float):
            setattr(cfg, k, 0.0)
    torch.manual_seed(seed)
    # Eager attention: an implementation of the masks and grouped heads other than the SDPA
    # path the importer captured.
    # Mixtures of experts: the experts' eager loop (tokens gathered per expert), an implementation
    # other than bigc.moe's, and one that runs in float64 (grouped_mm does not).
    moe = getattr(cfg, "num_local_experts", None) or getattr(cfg, "num_experts", None)
    extra = {"experts_implementation": "eager"} if moe else {}
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32, **extra)
    model.eval()

    def loss_fn(m, x, y):
        logits = m(input_ids=x, use_cache=False).logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    return model, loss_fn


def build_torch(spec):
    path, fname = spec.rsplit(":", 1)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    sys.dont_write_bytecode = True
    ms = importlib.util.spec_from_file_location("_ref_user_module", path)
    mod = importlib.util.module_from_spec(ms)
    ms.loader.exec_module(mod)
    model, _ = getattr(mod, fname)()
    n = len([p for p in inspect.signature(model.forward).parameters.values()
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])

    def loss_fn(m, x, y):
        out = m(x, y) if n >= 2 else m(x)
        if isinstance(out, torch.Tensor) and out.dim() == 0:
            return out
        if isinstance(out, (tuple, list)):
            for o in out:
                if isinstance(o, torch.Tensor) and o.dim() == 0:
                    return o
            out = out[0]
        if getattr(out, "loss", None) is not None:
            return out.loss
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    return model, loss_fn


def rel(a, b):
    return (a - b).norm().item() / max(b.norm().item(), 1e-30)


def main():
    ap = argparse.ArgumentParser()
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--hf", metavar="CONFIG.json")
    src.add_argument("--torch", metavar="FILE.py:FUNCTION")
    ap.add_argument("--seed", type=int, default=0, help="the importer's --seed (hf)")
    ap.add_argument("--init", required=True, help="the importer's weights (model.safetensors)")
    ap.add_argument("--grads", required=True, help="bigc's gradients of step 1")
    ap.add_argument("--final", required=True, help="bigc's weights after --steps steps")
    ap.add_argument("--log", required=True, help="bigc's JSONL log of the same run")
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--loss-tol", type=float, default=1e-5)
    ap.add_argument("--grad-tol", type=float, default=1e-4)
    ap.add_argument("--weight-tol", type=float, default=1e-4)
    a = ap.parse_args()
    torch.set_num_threads(2)

    def build():
        return build_hf(a.hf, a.seed) if a.hf else build_torch(a.torch)
    model, loss_fn = build()
    init = read_safetensors(a.init)
    failures = []
    worst = {"loss": 0.0, "grad": 0.0, "weight": 0.0}

    def check(kind, what, err, tol):
        worst[kind] = max(worst[kind], err)
        if not err <= tol:
            failures.append(f"{what}: relative error {err:.3e} > {tol:g}")

    # The importer's weights: every parameter once (tied ones under one of their names), equal
    # to the module's own initialisation.
    names = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), (p, []))[1].append(n)
    bigc_grads = read_safetensors(a.grads)
    P = {}
    covered = set()
    for p, aliases in names.values():
        found = [n for n in aliases if n in init]
        covered.update(found)
        # Once (the importer's file), or under each of its names with one value (bigc run
        # --save-weights, as load_state_dict(strict=True) takes it).
        if not found or any(not torch.equal(init[f], init[found[0]]) for f in found[1:]) or \
                (len(found) > 1 and not a.hf):
            failures.append(f"the initial weights hold {found or 'none'} of {aliases}")
            continue
        n = next((f for f in found if f in bigc_grads), found[0])  # bigc's name of record
        if tuple(init[n].shape) != tuple(p.shape):
            failures.append(f"{n}: shape {list(init[n].shape)} in the importer's weights, {list(p.shape)} in the module")
            continue
        if not a.hf and not torch.equal(init[n], p.detach()):
            failures.append(f"{n}: the importer's initial weights are not the module's own")
        with torch.no_grad():
            p.copy_(init[n])
        P[n] = p
    buffers = {n: b for n, b in model.state_dict().items()
               if n not in {m for m, _ in model.named_parameters(remove_duplicate=False)}}
    for n in set(init) & set(buffers):  # a persistent buffer, as the module holds it
        if not torch.equal(init[n].to(buffers[n].dtype), buffers[n]):
            failures.append(f"the importer's copy of the buffer {n} differs from the module's")
    extra = set(init) - covered - set(buffers)
    if extra:
        failures.append(f"the importer's weights hold tensors the module lacks: {sorted(extra)}")

    bigc_losses = [json.loads(l)["loss"] for l in open(a.log) if l.strip()]
    bigc_final = read_safetensors(a.final)
    if len(bigc_losses) != a.steps:
        failures.append(f"log has {len(bigc_losses)} steps, expected {a.steps}")
    tokens = read_tokens(a.data)
    it = batches(tokens, a.batch, a.seq)

    # The same training in float64: how far PyTorch's own fp32 run is from exact arithmetic. A
    # second model from the same source (not a deep copy: a module may hold its layers in closures,
    # as minGPT's Block does), given the same initial weights.
    model64, _ = build()
    with torch.no_grad():
        for n, p in model64.named_parameters(remove_duplicate=False):
            if n in P:
                p.copy_(init[n])
    model64 = model64.double()
    P64 = dict(model64.named_parameters(remove_duplicate=False))
    P64 = {n: P64[n] for n in P}

    def adamw(params):
        decay = [p for p in params.values() if p.dim() >= 2]
        no_decay = [p for p in params.values() if p.dim() < 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                                  {"params": no_decay, "weight_decay": 0.0}],
                                 lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    opt, opt64 = adamw(P), adamw(P64)

    def compare(kind, what, got, want, exact, tol):
        """bigc vs PyTorch fp32, within tol or 4x PyTorch's own fp32 error (vs float64)."""
        own = rel(want.double(), exact)
        limit = max(tol, 4 * own)
        err = rel(got, want)
        note = f" (PyTorch's own fp32 error {own:.1e}: tolerance {limit:.1e})" if limit > tol else ""
        if note:
            print(f"  {what}: {err:.2e}{note}")
        check(kind, what + note, err, limit)

    for step in range(a.steps):
        x, y = next(it)
        for o in (opt, opt64):
            o.zero_grad()
        loss = loss_fn(model, x, y)
        loss.backward()
        loss_fn(model64, x, y).backward()
        l_ref = loss.item()
        if step < len(bigc_losses):
            check("loss", f"loss of step {step + 1} (bigc {bigc_losses[step]:.7f}, torch {l_ref:.7f})",
                  abs(bigc_losses[step] - l_ref) / abs(l_ref), a.loss_tol)
            print(f"step {step + 1}: bigc loss {bigc_losses[step]:.7f}  torch loss {l_ref:.7f}  "
                  f"relative difference {abs(bigc_losses[step] - l_ref) / abs(l_ref):.2e}")
        if step == 0:
            if set(bigc_grads) != set(P):
                failures.append(f"gradient names differ: {sorted(set(P) ^ set(bigc_grads))}")
            scale = max(p.grad.norm().item() for p in P64.values() if p.grad is not None)
            for n, p in P.items():
                if n not in bigc_grads or p.grad is None:
                    continue
                exact = P64[n].grad
                if exact.norm().item() <= 1e-9 * scale:  # zero in exact arithmetic: noise in both
                    level = bigc_grads[n].norm().item() / scale
                    print(f"  gradient of {n}: zero in exact arithmetic; bigc's is {level:.1e} of "
                          "the largest gradient")
                    if not level <= 1e-5:
                        failures.append(f"gradient of {n}: zero in exact arithmetic, bigc's is "
                                        f"{level:.2e} of the largest gradient")
                    continue
                compare("grad", f"gradient of {n}", bigc_grads[n], p.grad, exact, a.grad_tol)
        opt.step()
        opt64.step()
    for n, p in P.items():
        if n not in bigc_final:
            failures.append(f"{n} missing from bigc's final weights")
            continue
        compare("weight", f"{n} after {a.steps} steps", bigc_final[n], p.detach(), P64[n].detach(),
                a.weight_tol)
    # Fine-tuning round trip: PyTorch's load_state_dict(strict=True) takes bigc's file as it is
    # (--save-weights writes every name of the state_dict, a tied parameter under each of its
    # names); every parameter then equals bigc's.
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    tied = {n for _, aliases in names.values() for n in aliases if n not in P}
    try:
        model.load_state_dict(bigc_final, strict=True)
    except RuntimeError as e:
        failures.append(f"load_state_dict(bigc's weights, strict=True): {str(e).splitlines()[0]}")
    for n, p in P.items():
        if n in bigc_final and not torch.equal(p.detach(), bigc_final[n].to(p.dtype)):
            failures.append(f"load_state_dict(bigc's weights): {n} differs from the file")
    # The module's persistent buffers (minGPT's mask) come back as they were.
    params = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    nbuf = 0
    for n, b in model.state_dict().items():
        if n in params or not b.is_floating_point():
            continue
        nbuf += 1
        if n not in bigc_final or not torch.equal(bigc_final[n].to(b.dtype), b):
            failures.append(f"bigc's saved weights: the buffer {n} is {'missing' if n not in bigc_final else 'changed'}")
    print(f"load_state_dict(strict=True) took bigc's {len(bigc_final)} tensors (tied names among them: "
          f"{sorted(tied) or 'none'}; persistent buffers: {nbuf})")
    print(f"checked {len(P)} parameters, {a.steps} steps: worst relative differences: loss "
          f"{worst['loss']:.2e} (tolerance {a.loss_tol:g}), step-1 gradient {worst['grad']:.2e} "
          f"({a.grad_tol:g}), final weights {worst['weight']:.2e} ({a.weight_tol:g}; or 4x "
          "PyTorch's own fp32 error where that is larger, listed above)")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("PASS: bigc matches PyTorch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
