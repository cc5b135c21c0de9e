"""The command line of `bigc import` (python -m bigc_import): the contract with the C++ driver."""

import argparse
import json
import os
import sys
import tempfile

from .errors import UserError
from .precheck import precheck

PROG = "bigc import"

MAIN_HELP = """\
Writes a PyTorch model as bigc MLIR (docs/frontend.md) plus its initial weights.

  bigc import hf CONFIG.json [--batch B] [--seq T] [--weights FILE] -o model.mlir
  bigc import torch FILE.py:FUNCTION [-o model.mlir]

The model is captured with torch.export (strict=False) as forward(tokens, targets) -> loss, its
ATen ops mapped to the bigc dialect, each op located at the Python line that made it and the
ops of transformer block i marked {bigc.layer = i}. The initial weights: `bigc import torch`
writes the module's own beside model.mlir (model.safetensors: every parameter, fp32, under the
module's own names; a tied parameter once); `bigc import hf` builds the model on PyTorch's meta
device (no memory for its weights) and either names the checkpoint given with --weights (read by
`bigc run` where it is) or lets `bigc run --seed S` draw them by the family's own rules. The
module attribute bigc.weights names the file; `bigc compile` checks it and `bigc run` starts from
it. The files are written atomically, and nothing is written on an error.

Exit status: 0 done; 1 bad input (one line: an unsupported op with its source line, a config of
another family, weights that do not match, a module torch.export cannot capture); 2 an internal
error (please report it).
"""

HF_HELP = """\
A Hugging Face causal LM from its config.json: the families llama, mistral, qwen2, gpt2, gemma,
gemma2, olmo, olmo2, phi3, gpt_neox, mixtral and qwen2_moe (chosen by model_type, else architectures). The model is built by transformers
(AutoModelForCausalLM.from_config, attn_implementation="sdpa", fp32) on the meta device: shapes
without storage, so a 70B config imports in seconds and little memory. Without --weights, each
parameter's initialisation is the one transformers' own init gives it (normal with the config's
initializer_range, GPT-2's scaled projections, ones or zeros for norms, zeros for biases), drawn
by `bigc run` with its --seed. With --weights (a safetensors file or a sharded checkpoint's
index), names, shapes and dtypes are checked from the headers and the MLIR names the checkpoint
as it is (bigc run reads it, widening 16-bit floats exactly), also when it names the weights
otherwise (GPT-2's own, without "transformer.": the file's names go into bigc.weights_names); an
F64 checkpoint is copied beside the MLIR in F32 under the model's names. The
loss is the mean cross-entropy of the logits against the targets, over B x T positions; dropout
is set to 0 (bigc has no dropout). LLaMA-family models map to bigc.rmsnorm, bigc.rope (inv_freq
from the model), bigc.gqa_attention (Mistral's sliding window included) and bigc.swiglu; Gemma's
GELU-gated MLP to bigc.geglu; OLMo's weightless LayerNorm to bigc.layernorm; GPT-2 to
bigc.layernorm, bigc.attention on its packed q,k,v and bigc.gelu.
"""

TORCH_HELP = """\
Your own nn.Module. FILE.py is imported and FUNCTION() called; it returns
(module, (tokens, targets)): the module and an example batch, two int64 tensors [B,T] whose
shape the model is compiled for. The module is called as module(tokens, targets) and its loss
is its result if that is a 0-dim tensor, else the first 0-dim tensor of a returned tuple
(nanoGPT returns (logits, loss)), else the result's .loss, else a 0-dim tensor the call stored in
the module's .last_loss (llama2.c's). A module whose forward takes one
argument is called as module(tokens); if it returns logits [B,T,V], the loss is the mean
cross-entropy against the targets. The module runs in the mode it is returned in (train or
eval); bigc has no dropout, so dropout must be 0 or the module in eval mode.
The module is real (FUNCTION builds it in memory) and its parameters (and persistent floating-point
buffers) are written beside the MLIR in fp32: the import holds its weights once plus about 0.9 GB
(measured: 1.34 GB for 124 M parameters, 2.25 GB for 355 M), so it suits modules whose fp32 weights
fit in host memory; a Hugging Face model of any size imports without its weights (bigc import hf).
"""


class Parser(argparse.ArgumentParser):
    def error(self, message):
        from .driver import failed
        sys.stderr.write(f"{PROG}: {message} (`{self.prog} --help` lists the options)\n")
        failed(message)
        sys.exit(1)


def parser():
    p = Parser(prog=PROG, description=MAIN_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", metavar="{hf,torch}")
    h = sub.add_parser("hf", help="a Hugging Face causal-LM config (llama, mistral, qwen2, gpt2, gemma, gemma2, olmo, olmo2, phi3, gpt_neox, mixtral, qwen2_moe)",
                       description=HF_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    h.add_argument("config", metavar="CONFIG.json", help="the model's config.json")
    h.add_argument("--batch", type=int, default=1, metavar="B",
                   help="sequences per step (default 1)")
    h.add_argument("--seq", type=int, default=None, metavar="T",
                   help="sequence length (default: the model's max_position_embeddings, at most 1024)")
    h.add_argument("--weights", metavar="FILE",
                   help="start from these weights: a .safetensors file, or a sharded checkpoint's "
                        "model.safetensors.index.json (names and shapes must match the model's; "
                        "referred to where it is, not copied)")
    h.add_argument("--seed", type=int, default=None, metavar="S", help=argparse.SUPPRESS)
    h.add_argument("-o", "--output", required=True, metavar="model.mlir",
                   help="the MLIR file; model.safetensors goes beside it")
    t = sub.add_parser("torch", help="your own nn.Module: FILE.py:FUNCTION",
                       description=TORCH_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("spec", metavar="FILE.py:FUNCTION",
                   help="FUNCTION() returns (module, (tokens, targets))")
    t.add_argument("-o", "--output", metavar="model.mlir",
                   help="the MLIR file (default: FILE.mlir in the current directory); "
                        "model.safetensors goes beside it")
    for sp in (h, t):
        sp.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="stop after S seconds (default 1800 under bigc; 0: no limit); nothing "
                             "is written then")
        sp.error = Parser.error.__get__(sp)
    return p


def write_atomically(files):
    """Writes every (path, writer) or nothing: writer(f) fills a temporary file in the target's
    directory (under the bigc driver: its staging directory), renamed over the target once all are
    written."""
    from .driver import write_path
    temps = []
    umask = os.umask(0)
    os.umask(umask)
    try:
        for path, writer in files:
            target = write_path(path)
            d = os.path.dirname(os.path.abspath(target))
            fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(target) + ".", suffix=".tmp", dir=d)
            temps.append((tmp, target))
            os.fchmod(fd, 0o666 & ~umask)  # as open() would make it (mkstemp's is 0600)
            with os.fdopen(fd, "wb") as f:
                writer(f)
                f.flush()
                os.fsync(f.fileno())
        for tmp, target in temps:
            os.replace(tmp, target)
        temps = []
    finally:
        for tmp, _ in temps:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def hf_config_of(path):
    """The config.json a Hugging Face directory written by bigc holds (`bigc run --save-hf`): the
    imported config as given, with its architecture named and the weights' dtype (fp32)."""
    from .precheck import FAMILIES, family_of, read_config_json
    cfg = dict(read_config_json(path))
    cfg.setdefault("architectures", [FAMILIES[family_of(cfg, path)]])
    cfg["torch_dtype"] = "float32"
    return cfg


def module_attrs(module, params, hf_config, stored=None, buffers=None):
    """The module attributes that carry what bigc needs to write the model back as its authors'
    tools read it: `bigc.aliases` (a tied parameter's other names: the module's state_dict holds
    every name, Hugging Face's save_pretrained the input embedding's) and `bigc.hf_config` (an
    imported Hugging Face config, for `bigc run --save-hf`)."""
    from .mlir import quote
    groups = {}
    for n, p in module.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(n)
    kept = {name for name, _ in params}
    aliases = {}
    for names in groups.values():
        k = [n for n in names if n in kept]
        if k and len(names) > 1:
            aliases[k[0]] = [n for n in names if n != k[0]]
    out = {}
    if aliases:
        out["bigc.aliases"] = "{" + ", ".join(
            f"{quote(k)} = [{', '.join(quote(a) for a in v)}]" for k, v in sorted(aliases.items())) + "}"
    if hf_config is not None:
        out["bigc.hf_config"] = quote(json.dumps(hf_config, sort_keys=True))
    if buffers:  # persistent buffers written with the weights, carried into --save-weights
        out["bigc.buffers"] = "[" + ", ".join(quote(n) for n, _ in buffers) + "]"
    if stored:  # a checkpoint referred to as it is, under other names (GPT-2's own: no prefix)
        out["bigc.weights_names"] = "{" + ", ".join(f"{quote(k)} = {quote(v)}" for k, v in sorted(stored.items())) + "}"
    return out


def _exit_site(tb):
    """'file.py:LINE' of the innermost frame outside this package and PyTorch that a SystemExit
    came from."""
    import traceback
    here = os.path.dirname(os.path.abspath(__file__)) + os.sep
    site = None
    for fr in traceback.extract_tb(tb):
        f = os.path.abspath(fr.filename)
        if f.startswith(here) or os.sep + "torch" + os.sep in f or os.sep + "transformers" + os.sep in f:
            continue
        site = f"{fr.filename}:{fr.lineno}"
    return site


NEEDS = {"torch": (2, 15), "transformers": (5, 23), "safetensors": (0, 0), "numpy": (0, 0)}


def _version(v):
    out = []
    for part in v.split("+")[0].split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out + [0] * (2 - len(out)))


def check_environment(hf):
    """torch >= 2.15 (and transformers >= 5.23 for hf configs), the versions the importer is
    verified with; anything else is a clear error naming the fix."""
    fix = ("run scripts/setup-python.sh, or set BIGC_PYTHON to an interpreter with torch 2.15 and "
           "transformers 5.23")
    for mod in ("torch", "safetensors", "numpy") + (("transformers",) if hf else ()):
        try:
            m = __import__(mod)
        except Exception as e:
            raise UserError(f"{sys.executable} cannot import {mod} ({type(e).__name__}: {e}): {fix}")
        want = NEEDS[mod]
        have = _version(getattr(m, "__version__", "0"))
        if have < want:
            raise UserError(f"{sys.executable} has {mod} {m.__version__}; the importer needs "
                            f"{want[0]}.{want[1]} or later: {fix}")


def run(argv):
    p = parser()
    args, extra = p.parse_known_args(argv)
    if extra:
        prog = f"{PROG} {args.cmd}" if args.cmd else PROG
        raise UserError(f"unrecognized arguments: {' '.join(extra)} (`{prog} --help` lists the "
                        "options)")
    if args.cmd is None:
        parser().print_help(sys.stderr)
        from .driver import failed
        failed("no subcommand (hf or torch)")
        return 1
    out = args.output
    if args.cmd == "torch" and not out:
        f = args.spec.rsplit(":", 1)[0]
        out = os.path.splitext(os.path.basename(f))[0] + ".mlir"
    if out == "-" or not out:
        raise UserError("-o needs a file name (the weights go beside it)")
    out_dir = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(out_dir):
        raise UserError(f"-o {out}: the directory {out_dir} does not exist")
    stem = os.path.splitext(os.path.basename(out))[0]
    weights_name = stem + ".safetensors"
    weights_path = os.path.join(out_dir, weights_name)

    if args.timeout is not None:
        if not args.timeout >= 0:
            raise UserError(f"--timeout {args.timeout:g}: expected a number of seconds >= 0")
        if args.timeout > 0:  # run directly (under bigc the driver keeps the time)
            import signal

            def _late(signum, frame):
                raise UserError(f"did not finish within {args.timeout:g} s (--timeout); nothing "
                                "written")
            signal.signal(signal.SIGALRM, _late)
            signal.setitimer(signal.ITIMER_REAL, args.timeout)
    try:
        return _run(args, out, weights_name, weights_path)
    except SystemExit as e:
        site = _exit_site(e.__traceback__)
        raise UserError(f"{site + ': ' if site else ''}the model's code called sys.exit({e.code!r}) "
                        "while it was being imported; nothing written (return from the function "
                        "instead of exiting)")


def _run(args, out, weights_name, weights_path):
    precheck(args)  # the inputs' checks that need no torch: at once
    check_environment(args.cmd == "hf")
    from . import capture, lower, weights

    notes = []
    hf_config = None
    hf = None
    if args.cmd == "hf":
        wrapper, tokens, targets, desc, hf = capture.build_hf(args.config, args.batch, args.seq,
                                                              args.weights, notes)
        hf_config = hf_config_of(args.config)
        cmd = f"bigc import hf {os.path.basename(args.config)}"
    else:
        wrapper, tokens, targets, desc = capture.build_torch(args.spec, notes)
        cmd = f"bigc import torch {os.path.basename(args.spec)}"
    for n in notes:
        print(f"{PROG}: note: {n}", file=sys.stderr)
    ep = capture.export(wrapper, tokens, targets, desc)
    lw = lower.Lowerer(ep, strip_prefix=capture.WRAPPER_PREFIX, buffers=hf.buffers if hf else None,
                       replay=lambda: wrapper(tokens, targets))
    loss = lw.run()
    buffers = weights.persistent_buffers(wrapper.m, lw.params, lw.notes) if hf is None else []
    for n in lw.notes:
        print(f"{PROG}: note: {n}", file=sys.stderr)
    nparams = 0
    for name, t in lw.params:
        lw.b.param(name, t.shape, hf.inits[name] if hf else weights.init_of(t))
        nparams += t.numel()
    # The initial weights: the module's own, written beside the model (bigc import torch); a
    # checkpoint's (--weights), referred to where it is when bigc run can read it as it is (under
    # other names too: bigc.weights_names), else (F64) copied beside the model in F32 under its names;
    # none for a config alone (bigc run draws them, seeded, by the family's rules: the params' init).
    files = []
    refer = None
    stored = None
    if hf is None:
        files.append((weights_path, lambda f: weights.write_safetensors(f, lw.params + buffers)))
        weights_note = f"initial weights in {weights_name}"
    elif hf.ckpt is not None and weights.refers_in_place(hf.ckpt, hf.names, [n for n, _ in lw.params]):
        refer = os.path.abspath(args.weights)
        stored = weights.stored_names(hf.names, [n for n, _ in lw.params])
        weights_name, weights_note = refer, f"initial weights: {refer} (read by bigc run as it is" + (
            f"; {len(stored)} under other names there: bigc.weights_names)" if stored else ")")
    elif hf.ckpt is not None:
        items = [(n, hf.names[n], tuple(t.shape)) for n, t in lw.params]
        files.append((weights_path, lambda f: weights.write_from_checkpoint(f, hf.ckpt, items)))
        weights_note = f"initial weights in {weights_name} ({os.path.basename(args.weights)}'s, under the model's names)"
    else:
        weights_name = None
        weights_note = "initial weights drawn by bigc run (--seed) by the family's rules (each param's init)"
    B, T = tokens.shape
    header = [f"Imported by `{cmd}`: {desc}.",
              f"parameters: {nparams:,} ({len(lw.params)} tensors), {weights_note}",
              "Names and shapes: the module's own (linear weights [out, in] with transpose_b)."]
    text = lw.b.text([("%tokens", f"tensor<{B}x{T}xi32>"), ("%targets", f"tensor<{B}x{T}xi32>")],
                     loss.ssa, header, weights_name, module_attrs(wrapper.m, lw.params, hf_config, stored, buffers))
    files.append((out, lambda f: f.write(text.encode())))
    try:
        write_atomically(files)
    except OSError as e:
        raise UserError(f"cannot write {' and '.join(p for p, _ in files)}: {e.strerror or e}")
    nops = sum(1 for line in text.splitlines() if line.strip().startswith("%"))
    from .driver import done
    written = [p for p, _ in files]
    what = f"{PROG}: wrote {out} ({nops} ops, {nparams:,} parameters)"
    if len(written) > 1:
        what += f" and {weights_path}"
    elif refer:
        what += f", starting from {refer}"
    else:
        what += ", initial weights drawn by bigc run"
    done(written, what)
    return 0
