"""Weights: reading a checkpoint into a module (``--weights``), choosing each parameter's
``init`` for the MLIR, and writing the initial weights (safetensors, fp32) beside the model.
"""

import json
import os
import re
import struct

import torch

from .errors import UserError


def _shape(t):
    return "[" + ", ".join(str(int(d)) for d in t.shape) + "]"


class Checkpoint:
    """The tensors of a .safetensors file or of a sharded checkpoint's index
    (model.safetensors.index.json), read one at a time (a large checkpoint is never whole in
    memory)."""

    def __init__(self, path):
        from safetensors import safe_open

        if not os.path.exists(path):
            raise UserError(f"{path}: no such file")
        files = {}
        if path.endswith(".json"):
            try:
                with open(path) as f:
                    index = json.load(f)
                wmap = index["weight_map"]
                if not isinstance(wmap, dict):
                    raise TypeError("weight_map is not an object")
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise UserError(f"{path}: not a safetensors index (a JSON object with a "
                                f"weight_map): {e}")
            d = os.path.dirname(os.path.abspath(path))
            for name, shard in wmap.items():
                files.setdefault(os.path.join(d, shard), set()).add(name)
        else:
            files[path] = None
        self.where = {}
        self.handles = []
        self.paths = {}  # id(handle) -> its file
        self._headers = {}
        for f, names in files.items():
            if not os.path.exists(f):
                raise UserError(f"{path}: the shard {f} is missing")
            try:
                h = safe_open(f, framework="pt")
                keys = list(h.keys())
            except Exception as e:  # a truncated or foreign file
                msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise UserError(f"{f}: not a readable safetensors file ({msg})")
            self.handles.append(h)
            self.paths[id(h)] = f
            for k in keys:
                if names is None or k in names:
                    self.where[k] = h
            if names is not None and not names <= set(keys):
                missing = sorted(names - set(keys))[0]
                raise UserError(f"{path}: the index puts '{missing}' in {f}, which lacks it")

    def names(self):
        return list(self.where)

    def shape(self, name):
        return tuple(self.where[name].get_slice(name).get_shape())

    def dtype(self, name):
        return self.where[name].get_slice(name).get_dtype()

    def get(self, name):
        return self.where[name].get_tensor(name)

    def locate(self, name):
        """(file, dtype, first byte, end byte) of a tensor's data, from the file's header."""
        h = self.where[name]
        path = self.paths[id(h)]
        if path not in self._headers:
            with open(path, "rb") as f:
                n = struct.unpack("<Q", f.read(8))[0]
                self._headers[path] = (json.loads(f.read(n)), 8 + n)
        header, start = self._headers[path]
        e = header[name]
        return path, e["dtype"], start + e["data_offsets"][0], start + e["data_offsets"][1]


# Tensors Hugging Face checkpoints may carry that are no parameters (buffers older versions saved);
# bigc compile and bigc run pass over these same names (format::safetensors::isSavedBuffer).
_BUFFER_SUFFIXES = (".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq")


def match(model, ckpt, path):
    """Which checkpoint tensor is each parameter: {model name: checkpoint name}, for every name of
    every parameter found (a tied parameter may come under any of its names; the checkpoint may lack
    or carry the base model's prefix, as Hugging Face's own GPT-2 checkpoint does). Checks names,
    shapes and dtypes from the headers alone (nothing is read); the first mismatch is an error."""
    params = list(model.named_parameters(remove_duplicate=False))
    names = {n for n, _ in params}
    prefix = getattr(model, "base_model_prefix", "") or ""
    renamed = {}  # model name -> checkpoint name
    extra = []
    for k in ckpt.names():
        if k in names:
            renamed[k] = k
        elif prefix and f"{prefix}.{k}" in names:
            renamed[f"{prefix}.{k}"] = k
        elif prefix and k.startswith(prefix + ".") and k[len(prefix) + 1:] in names:
            renamed[k[len(prefix) + 1:]] = k
        else:
            extra.append(k)
    ignore = [re.compile(p) for p in (getattr(model, "_keys_to_ignore_on_load_unexpected", None) or [])]
    buffers = {n for n, _ in model.named_buffers()}
    for k in extra:
        if k in buffers or (prefix and f"{prefix}.{k}" in buffers) or any(p.search(k) for p in ignore) or \
                k.endswith(_BUFFER_SUFFIXES):
            continue
        raise UserError(f"{path}: holds '{k}' {list(ckpt.shape(k))}, which is not a parameter of "
                        "the model")
    by_tensor = {}
    for n, p in params:
        by_tensor.setdefault(id(p), (p, []))[1].append(n)
    out = {}
    for p, group in by_tensor.values():
        name = next((n for n in group if n in renamed), None)
        if name is None:
            raise UserError(f"{path}: lacks the model's parameter '{group[0]}' {_shape(p)}")
        k = renamed[name]
        if ckpt.shape(k) != tuple(p.shape):
            raise UserError(f"{path}: '{k}' has shape {list(ckpt.shape(k))}, the model's is "
                            f"{_shape(p)}")
        if ckpt.dtype(k) not in _FLOAT_DTYPES:
            raise UserError(f"{path}: '{k}' is stored as {ckpt.dtype(k)}, not floating point (F32, BF16 "
                            "or F16)")
        for n in group:
            out[n] = renamed.get(n, k)
    return out


_FLOAT_DTYPES = {"F32", "BF16", "F16", "F64"}


def refers_in_place(ckpt, names, kept):
    """True when bigc can start from the checkpoint as it is (bigc run reads safetensors and
    Hugging Face indexes, widening 16-bit floats; bigc.weights_names gives a weight's name in the
    file where it differs: a checkpoint without the base model's prefix, GPT-2's own): every
    parameter kept (`kept`, the names of the MLIR's bigc.param) is there, in F32, BF16 or F16, and
    the checkpoint holds nothing else but the buffers bigc run passes over."""
    for n in kept:
        if ckpt.dtype(names[n]) == "F64":
            return False
    found = set(names.values())
    return all(k in found or k.endswith(_BUFFER_SUFFIXES) for k in ckpt.names())


def stored_names(names, kept):
    """{kept parameter: its name in the checkpoint} where the two differ (bigc.weights_names),
    except a tied parameter's other name that bigc.aliases already gives."""
    return {n: names[n] for n in kept if names[n] != n and names.get(names[n]) != names[n]}


def write_from_checkpoint(f, ckpt, items, progress=None):
    """Writes (bigc name, checkpoint name, shape) as a safetensors file under the model's names:
    each tensor's bytes as they are (F32, BF16 and F16: bigc run widens 16-bit floats exactly),
    copied by the kernel (copy_file_range) without passing through this process; F64 converted to
    F32 in pieces of at most 64 MB. Memory does not grow with the model. `progress(done_bytes,
    total_bytes)` is called as it goes."""
    header = {"__metadata__": {"format": "pt", "producer": "bigc import"}}
    where = []
    off = 0
    for name, k, shape in items:
        path, dtype, begin, end = ckpt.locate(k)
        out_dtype = "F32" if dtype == "F64" else dtype
        n = (end - begin) // (2 if dtype == "F64" else 1)
        header[name] = {"dtype": out_dtype, "shape": [int(d) for d in shape], "data_offsets": [off, off + n]}
        where.append((k, path, dtype, begin, end, n))
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    f.write(struct.pack("<Q", len(hb)))
    f.write(hb)
    f.flush()
    dst = f.fileno()
    pos = f.tell()
    total, done = off, 0
    piece = 64 << 20
    for k, path, dtype, begin, end, n in where:
        fd = os.open(path, os.O_RDONLY)
        try:
            at = begin
            while at < end:
                m = min(piece, end - at)
                if dtype == "F64":
                    raw = os.pread(fd, m - m % 8, at)
                    a = torch.frombuffer(bytearray(raw), dtype=torch.float64).to(torch.float32)
                    got, wrote = len(raw), os.pwrite(dst, memoryview(a.numpy()).cast("B"), pos)
                else:
                    try:
                        got = os.copy_file_range(fd, dst, m, at, pos)
                    except OSError:  # (a file system without it)
                        got = os.pwrite(dst, os.pread(fd, m, at), pos)
                    wrote = got
                if got <= 0:
                    raise UserError(f"{path}: ends inside tensor '{k}'")
                at += got
                pos += wrote
                done += wrote
                if progress:
                    progress(done, total)
        finally:
            os.close(fd)
    f.seek(pos)


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


def persistent_buffers(module, params, notes):
    """The module's persistent floating-point buffers (its state_dict's tensors that are not
    parameters: minGPT's causal mask), (name, tensor) in state_dict order: written beside the
    parameters so that bigc run --save-weights gives a file load_state_dict(strict=True) takes.
    Other dtypes are left out with a note."""
    names = {n for n, _ in module.named_parameters(remove_duplicate=False)} | {n for n, _ in params}
    out, skipped = [], []
    for n, t in module.state_dict(keep_vars=True).items():
        if n in names or not isinstance(t, torch.Tensor):
            continue
        if t.is_floating_point():
            out.append((n, t))
        else:
            skipped.append(f"{n} ({str(t.dtype).replace('torch.', '')})")
    if skipped:
        notes.append("persistent buffers not carried into the saved weights (not floating point): " +
                     ", ".join(skipped))
    return out


def write_safetensors(f, params):
    """Writes (name, tensor) pairs as a safetensors file, fp32, one tensor at a time."""
    header = {"__metadata__": {"format": "pt", "producer": "bigc import"}}
    off = 0
    for name, t in params:
        n = t.numel() * 4
        header[name] = {"dtype": "F32", "shape": [int(d) for d in t.shape], "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    f.write(struct.pack("<Q", len(hb)))
    f.write(hb)
    for name, t in params:
        a = t.detach().to(torch.float32).contiguous().cpu()
        if a.numel():
            f.write(memoryview(a.numpy()).cast("B"))
