"""Building the module (a Hugging Face config, or a user's function) and capturing its loss with
torch.export.

Both forms are wrapped as ``forward(tokens, targets) -> loss`` and exported with
``torch.export.export(wrapper, (tokens, targets), strict=False)``; the wrapper holds the module as
its attribute ``m``, so the exported parameter names are the module's own after stripping ``m.``.
"""

import contextlib
import importlib.util
import inspect
import os
import re
import sys
import tempfile
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

from .errors import UserError
from . import weights as W
from .precheck import FAMILIES, check_seq, family_of, first_line, read_config_json

WRAPPER_PREFIX = "m."

class _NoLoss(Exception):
    pass


class LossWrapper(nn.Module):
    """forward(tokens, targets) -> the scalar loss of the wrapped module."""

    def __init__(self, m, mode):
        super().__init__()
        self.m = m
        self.mode = mode  # "hf", "tokens_targets" or "tokens"

    def forward(self, tokens, targets):
        if self.mode == "hf":
            logits = self.m(input_ids=tokens, use_cache=False).logits
            V = logits.shape[-1]
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))
        before = getattr(self.m, "last_loss", None)
        if self.mode == "tokens":
            out = self.m(tokens)
        else:
            out = self.m(tokens, targets)
        loss = pick_loss(out)
        if loss is not None:
            return loss
        stored = getattr(self.m, "last_loss", None)  # a loss the module keeps (llama2.c's self.last_loss)
        if self.mode != "tokens" and isinstance(stored, torch.Tensor) and stored.dim() == 0 and stored is not before:
            return stored
        if self.mode == "tokens":
            logits = out[0] if isinstance(out, (tuple, list)) else getattr(out, "logits", out)
            if isinstance(logits, torch.Tensor) and logits.dim() == 3 and \
                    tuple(logits.shape[:2]) == tuple(tokens.shape):
                V = logits.shape[-1]
                return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
        raise _NoLoss(describe(out))


def pick_loss(out):
    if isinstance(out, torch.Tensor):
        return out if out.dim() == 0 else None
    if isinstance(out, (tuple, list)):
        for o in out:
            if isinstance(o, torch.Tensor) and o.dim() == 0:
                return o
        return None
    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.dim() == 0:
        return loss
    return None


def describe(out):
    if isinstance(out, torch.Tensor):
        return f"a tensor of shape {list(out.shape)}"
    if isinstance(out, (tuple, list)):
        return f"a {type(out).__name__} of " + ", ".join(describe(o) if isinstance(o, torch.Tensor)
                                                         else type(o).__name__ for o in out)
    return f"a {type(out).__name__}"


def user_frame(tb, path):
    """'file.py:LINE' of the innermost traceback frame in the user's file."""
    best = None
    for fr in traceback.extract_tb(tb):
        if os.path.abspath(fr.filename) == os.path.abspath(path):
            best = f"{path}:{fr.lineno}"
    return best


# --------------------------------------------------------------------------------------------
# Hugging Face


class HfModel:
    """What `bigc import hf` knows of a model besides its graph: each parameter's initialisation
    (the `init` of its bigc.param, from Hugging Face's own rules), its buffers' values (the model
    is built on the meta device, so nothing of its size is ever allocated) and, with --weights, the
    checkpoint (weights.Checkpoint) and how its tensors are named."""

    def __init__(self, inits, buffers, ckpt=None, names=None):
        self.inits = inits
        self.buffers = buffers
        self.ckpt = ckpt
        self.names = names or {}


_BIGC_INITS = {"normal_", "zeros_", "ones_", "constant_", "trunc_normal_"}


def _arg(r, i, key, default=None):
    """Argument `key` (or the i-th after the tensor) of a recorded init call."""
    _, _, a, k = r
    return k[key] if key in k else (a[i] if len(a) > i else default)


def _bigc_init(name, p, rules, refuse):
    """The bigc init of a parameter from the init calls recorded on it (hf_inits); refuse(message)
    for a rule bigc does not draw."""
    whole = [r for r in rules if not r[1]]
    if not whole:
        return refuse(f"the model's initialisation leaves '{name}' {list(p.shape)} unset: give its weights "
                      "with --weights")
    r = whole[-1]  # the last rule wins, as it would in place
    fn = r[0]
    if fn not in _BIGC_INITS:
        return refuse(f"'{name}' {list(p.shape)} is initialised with {fn.rstrip('_')}, which bigc does not "
                      "draw (it draws normal, zeros, ones and constants): give its weights with --weights")
    if fn in ("normal_", "trunc_normal_"):
        mean, std = float(_arg(r, 0, "mean", 0.0)), float(_arg(r, 1, "std", 1.0))
        if mean != 0.0:
            return refuse(f"'{name}' is initialised as normal with mean {mean:g}, which bigc does not draw "
                          "(mean 0 only): give its weights with --weights")
        lo, hi = float(_arg(r, 2, "a", -2.0)), float(_arg(r, 3, "b", 2.0))
        if fn == "trunc_normal_" and (lo > -3 * std or hi < 3 * std):
            return refuse(f"'{name}' is initialised as a normal truncated to [{lo:g}, {hi:g}] (std {std:g}), "
                          "which bigc does not draw: give its weights with --weights")
        return {"init": "normal", "std": std} if std > 0 else {"init": "zeros"}
    if fn in ("zeros_", "ones_"):
        return {"init": fn.rstrip("_")}
    v = float(_arg(r, 0, "val"))
    return {"init": "zeros"} if v == 0 else {"init": "ones"} if v == 1 else {"init": "fill", "value": v}


def hf_inits(model, notes, drawn=True):
    """Runs the model's own initialisation (PreTrainedModel.initialize_weights: the family's rules,
    GPT-2's scaled residual projections and Gemma's zero-centred norms included) with its init
    functions replaced by recorders, on the meta model. Returns ({parameter name: bigc init},
    {buffer name: value on the CPU}): a buffer's value is computed as the rule says (rotary
    frequencies, Gemma's embedding scale); a parameter's rule becomes bigc's `init` (normal with
    its std, zeros, ones, a constant), drawn by `bigc run --seed` at run time. `drawn` False (the
    weights come from a checkpoint): a rule bigc cannot draw is no error, and nothing is noted."""
    import transformers.initialization as I

    rules = {}  # id(tensor) -> [(function, is_view, args, kwargs)]

    def recorder(fn):
        def record(tensor, *a, **k):
            base = tensor._base if tensor._base is not None else tensor
            rules.setdefault(id(base), []).append((fn, tensor._base is not None, a, k))
            return tensor
        return record

    saved, saved_copy = dict(I.TORCH_INIT_FUNCTIONS), I.copy_
    for fn in list(I.TORCH_INIT_FUNCTIONS):
        I.TORCH_INIT_FUNCTIONS[fn] = recorder(fn)
    I.copy_ = recorder("copy_")
    for m in model.modules():
        if getattr(m, "_is_hf_initialized", False):
            m._is_hf_initialized = False
    try:
        model.initialize_weights()
    except Exception as e:
        raise UserError(f"transformers cannot initialise the model ({first_line(e)})")
    finally:
        I.TORCH_INIT_FUNCTIONS.clear()
        I.TORCH_INIT_FUNCTIONS.update(saved)
        I.copy_ = saved_copy

    inits = {}
    rows = []

    def refuse(msg):
        if drawn:
            raise UserError(msg)
        return {"init": "zeros"}  # (the checkpoint's weights replace it)

    for name, p in model.named_parameters(remove_duplicate=False):
        inits[name] = _bigc_init(name, p, rules.get(id(p), []), refuse)
        if drawn and any(r[1] for r in rules.get(id(p), [])):
            rows.append(name)
    if rows:
        notes.append("the padding row of " + ", ".join(rows) + " (pad_token_id) starts drawn like the "
                     "other rows, not as zeros (bigc draws a whole tensor alike)")
    buffers = {}
    for name, b in model.named_buffers():
        rs = [r for r in rules.get(id(b), []) if not r[1]]
        if not rs:
            continue
        r = rs[-1]
        val = torch.zeros(b.shape, dtype=b.dtype)
        if r[0] == "copy_":
            val.copy_(r[2][0].to("cpu"))
        elif r[0] == "ones_":
            val.fill_(1)
        elif r[0] == "constant_":
            val.fill_(float(_arg(r, 0, "val")))
        elif r[0] != "zeros_":
            continue
        buffers[name] = val
    return inits, buffers


def build_hf(config_path, batch, seq, weights_path, notes):
    raw = read_config_json(config_path)
    family = family_of(raw, config_path)
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    transformers.logging.set_verbosity_error()
    try:
        cfg = AutoConfig.from_pretrained(config_path)
    except Exception as e:
        raise UserError(f"{config_path}: transformers cannot read it as a {family} config "
                        f"({first_line(e)})")
    dropped = []
    for k, v in sorted(vars(cfg).items()):
        if ("dropout" in k or "pdrop" in k) and isinstance(v, float) and v > 0:
            setattr(cfg, k, 0.0)
            dropped.append(f"{k}={v:g}")
    if dropped:
        notes.append("dropout set to 0 (" + ", ".join(dropped) + "): bigc has no dropout")
    dt = raw.get("torch_dtype") or raw.get("dtype")
    if dt and dt not in ("float32", "torch.float32"):
        notes.append(f"the config's dtype is {dt}: imported in fp32 (bigc compile --precision "
                     "makes 16-bit copies)")
    max_pos = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    if seq is None:
        seq = min(max_pos, 1024) if max_pos else 1024
    check_seq(seq, batch, max_pos)
    # On the meta device: shapes without storage (a 70B model is built in seconds, in no memory).
    try:
        with torch.device("meta"):
            # Gemma 2's soft-capped attention has no SDPA form: its own eager attention (written out,
            # recognised whole as bigc's attention with a softcap)
            attn = "eager" if family == "gemma2" else "sdpa"
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, dtype=torch.float32)
    except Exception as e:
        raise UserError(f"{config_path}: transformers cannot build the model ({first_line(e)})")
    inits, buffers = hf_inits(model, notes, drawn=not weights_path)
    if family in ("mixtral", "qwen2_moe"):  # its experts route with data-dependent shapes: the block as one op
        from . import moe
        moe.patch(model)
    hf = HfModel(inits, {WRAPPER_PREFIX + k: v for k, v in buffers.items()})
    if weights_path:
        hf.ckpt = W.Checkpoint(weights_path)
        hf.names = W.match(model, hf.ckpt, weights_path)
    model.eval()
    tokens = torch.zeros((batch, seq), dtype=torch.int64, device="meta")
    targets = torch.zeros((batch, seq), dtype=torch.int64, device="meta")
    desc = (f"{FAMILIES[family]} ({family}) from {os.path.basename(config_path)}, "
            f"batch {batch}, seq {seq}" + (f", weights {os.path.basename(weights_path)}"
                                          if weights_path else ", initial weights drawn by bigc run "
                                          "(--seed) as transformers initialises them"))
    return LossWrapper(model, "hf"), tokens, targets, desc, hf


# --------------------------------------------------------------------------------------------
# a user's module


def build_torch(spec, notes):
    if ":" not in spec:
        raise UserError(f"'{spec}': expected FILE.py:FUNCTION")
    path, fname = spec.rsplit(":", 1)
    if not os.path.exists(path):
        raise UserError(f"{path}: no such file")
    d = os.path.dirname(os.path.abspath(path))
    if d not in sys.path:
        sys.path.insert(0, d)
    modname = "_bigc_user_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    sys.dont_write_bytecode = True  # no __pycache__ beside the user's file
    try:
        ms = importlib.util.spec_from_file_location(modname, path)
        mod = importlib.util.module_from_spec(ms)
        sys.modules[modname] = mod
        ms.loader.exec_module(mod)
    except Exception as e:
        where = user_frame(e.__traceback__, path) or path
        raise UserError(f"{where}: importing it raised {type(e).__name__}: {first_line(e)}")
    fn = getattr(mod, fname, None)
    if not callable(fn):
        raise UserError(f"{path}: has no function '{fname}'")
    try:
        res = fn()
    except Exception as e:
        where = user_frame(e.__traceback__, path) or path
        raise UserError(f"{where}: {fname}() raised {type(e).__name__}: {first_line(e)}")
    usage = (f"{fname}() must return (module, (tokens, targets)): an nn.Module and two int64 "
             "tensors [B,T]")
    if not (isinstance(res, (tuple, list)) and len(res) == 2):
        raise UserError(f"{spec}: {usage}")
    module, batch = res
    if not isinstance(module, nn.Module) or not (isinstance(batch, (tuple, list)) and len(batch) == 2):
        raise UserError(f"{spec}: {usage}")
    tokens, targets = batch
    for n, t in (("tokens", tokens), ("targets", targets)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.dtype not in (torch.int64, torch.int32):
            raise UserError(f"{spec}: {usage} ({n} is "
                            f"{describe(t) if isinstance(t, torch.Tensor) else type(t).__name__}"
                            f"{'' if not isinstance(t, torch.Tensor) else ' of ' + str(t.dtype)})")
    if tuple(tokens.shape) != tuple(targets.shape):
        raise UserError(f"{spec}: tokens {list(tokens.shape)} and targets {list(targets.shape)} "
                        "differ in shape")
    if tokens.shape[0] < 1 or tokens.shape[1] < 1:
        raise UserError(f"{spec}: the example batch is empty (tokens {list(tokens.shape)}): give at "
                        "least one sequence of at least one token; its shape [B,T] is the shape the "
                        "model is compiled for")
    dtypes = sorted({str(p.dtype) for p in module.parameters() if p.dtype != torch.float32})
    if dtypes:
        notes.append(f"the module's parameters are {', '.join(dtypes)}: imported in fp32 (bigc "
                     "compile --precision makes 16-bit copies)")
    module = module.to(device="cpu", dtype=torch.float32)
    tokens, targets = tokens.to("cpu", torch.int64), targets.to("cpu", torch.int64)
    try:
        sig = inspect.signature(module.forward)
        positional = [p for p in sig.parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        var = any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values())
    except (TypeError, ValueError):
        positional, var = [1, 2], False
    mode = "tokens" if len(positional) == 1 and not var else "tokens_targets"
    B, T = tokens.shape
    desc = f"{type(module).__name__} from {spec}, batch {B}, seq {T}"
    return LossWrapper(module, mode), tokens, targets, desc


# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def quiet_stderr():
    """torch.export's own logging (guards, graph dumps) off the terminal: the importer reports
    a failure in one line."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as tmp:
            os.dup2(tmp.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
    finally:
        os.close(saved)


_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def user_line(text):
    """'file.py:LINE' of the innermost frame outside PyTorch named in an error's text."""
    tdir = os.path.dirname(os.path.abspath(torch.__file__))
    best = None
    for f, line in _FRAME.findall(text):
        if not os.path.abspath(f).startswith(tdir) and os.path.exists(f) and "<" not in f:
            best = (f, line)
    if not best:
        return None
    from .source import display
    return display((best[0], int(best[1])))


def export(wrapper, tokens, targets, what):
    try:
        with quiet_stderr():
            return torch.export.export(wrapper, (tokens, targets), strict=False)
    except _NoLoss as e:
        raise UserError(f"{what}: the module returned {e}, with no loss: return the loss (a 0-dim "
                        "tensor), a tuple holding it, an object with .loss, or (for module(tokens)) "
                        "logits [B,T,V]")
    except UserError:
        raise
    except Exception as e:
        msg = str(e)
        low = msg.lower()
        name = type(e).__name__
        if "data-dependent" in low or "datadependent" in name.lower() or "guardondatadependent" in name.lower():
            fix = ("the forward branches on tensor values (data-dependent control flow): make the "
                   "branch independent of the data, or write it with torch.cond")
        elif "constraint" in low or "dynamic" in low or "symint" in low or "symbolic" in low:
            fix = ("the model must run with the fixed shapes of the example batch (no dynamic "
                   "shapes)")
        else:
            fix = ("the forward must run under torch.export with the example batch; see "
                   "https://pytorch.org/docs/stable/export.html")
        where = user_line(msg + "\n" + "".join(traceback.format_tb(e.__traceback__)))
        raise UserError(f"{where + ': ' if where else ''}torch.export cannot capture the model: "
                        f"{name}: {first_line(e)} ({fix})")
