"""Weights: reading a checkpoint into a module (``--weights``), choosing each parameter's
``init`` for the MLIR, and writing the initial weights (safetensors, fp32) beside the model.
"""

import json
import os
import re

import torch

from .errors import UserError


def _shape(t):
    return "[" + ", ".join(str(int(d)) for d in t.shape) + "]"


def read_checkpoint(path):
    """name -> tensor of a .safetensors file or a sharded checkpoint's index
    (model.safetensors.index.json)."""
    from safetensors import safe_open

    if not os.path.exists(path):
        raise UserError(f"{path}: no such file")
    files = {}
    if path.endswith(".json"):
        try:
            with open(path) as f:
                index = json.load(f)
            wmap = index["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UserError(f"{path}: not a safetensors index (a JSON object with a weight_map): {e}")
        d = os.path.dirname(os.path.abspath(path))
        for name, shard in wmap.items():
            files.setdefault(os.path.join(d, shard), []).append(name)
    else:
        files[path] = None
    out = {}
    for f, names in files.items():
        if not os.path.exists(f):
            raise UserError(f"{path}: the shard {f} is missing")
        try:
            with safe_open(f, framework="pt") as st:
                for k in (names if names is not None else st.keys()):
                    out[k] = st.get_tensor(k)
        except UserError:
            raise
        except Exception as e:  # a truncated or foreign file
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f"{f}: not a readable safetensors file ({msg})")
    return out


def load_into(model, tensors, path):
    """Copies a checkpoint into the model's parameters. Names and shapes must match (a tied
    parameter may come under any of its names; the checkpoint may lack or carry the base model's
    prefix, as Hugging Face's own GPT-2 checkpoint does). The first mismatch is an error."""
    params = list(model.named_parameters(remove_duplicate=False))
    names = {n for n, _ in params}
    prefix = getattr(model, "base_model_prefix", "") or ""
    renamed = {}
    for k, t in tensors.items():
        if k in names:
            renamed[k] = t
        elif prefix and f"{prefix}.{k}" in names:
            renamed[f"{prefix}.{k}"] = t
        elif prefix and k.startswith(prefix + ".") and k[len(prefix) + 1:] in names:
            renamed[k[len(prefix) + 1:]] = t
        else:
            renamed[k] = t
    ignore = [re.compile(p) for p in (getattr(model, "_keys_to_ignore_on_load_unexpected", None) or [])]
    buffers = {n for n, _ in model.named_buffers()}
    for k, t in renamed.items():
        if k in names:
            continue
        if k in buffers or (prefix and f"{prefix}.{k}" in buffers) or any(p.search(k) for p in ignore):
            continue
        raise UserError(f"{path}: holds '{k}' {_shape(t)}, which is not a parameter of the model")
    by_tensor = {}
    for n, p in params:
        by_tensor.setdefault(id(p), (p, []))[1].append(n)
    for p, group in by_tensor.values():
        src = next((renamed[n] for n in group if n in renamed), None)
        if src is None:
            raise UserError(f"{path}: lacks the model's parameter '{group[0]}' {_shape(p)}")
        if tuple(src.shape) != tuple(p.shape):
            name = next(n for n in group if n in renamed)
            raise UserError(f"{path}: '{name}' has shape {_shape(src)}, the model's is {_shape(p)}")
        if not (src.is_floating_point()):
            raise UserError(f"{path}: '{group[0]}' is stored as {src.dtype}, not floating point")
        with torch.no_grad():
            p.copy_(src.to(torch.float32))


def init_of(t):
    """The `init` of a bigc.param that mimics this tensor (used only without the weights file)."""
    t = t.detach().to(torch.float32).flatten()
    if t.numel() == 0:
        return {"init": "zeros"}
    if bool(torch.all(t == 0)):
        return {"init": "zeros"}
    if bool(torch.all(t == 1)):
        return {"init": "ones"}
    if bool(torch.all(t == t[0])):
        return {"init": "fill", "value": float(t[0])}
    std = float(t.std()) if t.numel() > 1 else abs(float(t[0]))
    return {"init": "normal", "std": float(f"{std:.4g}")}


def safetensors_bytes(params):
    """The safetensors file of (name, tensor) pairs, fp32, as bytes."""
    from safetensors.torch import save

    d = {}
    for name, t in params:
        d[name] = t.detach().to(torch.float32).contiguous().clone()
    return save(d)
