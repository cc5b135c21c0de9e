"""The checks of `bigc import`'s inputs that need neither torch nor transformers (importing those
takes seconds): the config file and its family, --seq against the config's positions, --batch,
the --weights file's presence, the FILE.py:FUNCTION form. They run before the environment is
loaded, so a mistyped path is reported at once."""

import json
import os
import struct

from .errors import UserError

# Hugging Face families: model_type -> what the importer maps.
FAMILIES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "gpt2": "GPT2LMHeadModel",
    "gemma": "GemmaForCausalLM",
    "olmo": "OlmoForCausalLM",
    "olmo2": "Olmo2ForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "gpt_neox": "GPTNeoXForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
}


def first_line(e):
    s = str(e).strip()
    return s.splitlines()[0].strip() if s else type(e).__name__


def read_config_json(path):
    if not os.path.exists(path):
        raise UserError(f"{path}: no such file")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: not a JSON config ({first_line(e)})")
    if not isinstance(cfg, dict):
        raise UserError(f"{path}: not a JSON object")
    return cfg


def family_of(cfg, path):
    mt = cfg.get("model_type")
    archs = cfg.get("architectures") or []
    if not mt and archs:
        a = str(archs[0]).lower()
        for fam in FAMILIES:
            if a == FAMILIES[fam].lower() or a.startswith(fam):
                mt = fam
                break
        else:
            mt = str(archs[0])
    supported = ", ".join(FAMILIES)
    if not mt:
        raise UserError(f"{path}: no model_type or architectures; supported families: {supported}")
    if mt not in FAMILIES:
        what = f"model_type '{mt}'" + (f" ({', '.join(map(str, archs))})" if archs else "")
        raise UserError(f"{path}: {what} is not supported; supported families: {supported} "
                        "(their causal LMs); `bigc import torch` takes any module built of "
                        "supported ops")
    return mt


def max_positions(cfg):
    """The config's position limit (max_position_embeddings, GPT-2's n_positions), or None."""
    for k in ("max_position_embeddings", "n_positions"):
        v = cfg.get(k)
        if isinstance(v, int) and v > 0:
            return v
    return None


def check_seq(seq, batch, max_pos):
    if max_pos and seq is not None and seq > max_pos:
        raise UserError(f"--seq {seq} exceeds the model's {max_pos} positions "
                        "(max_position_embeddings)")
    if (seq is not None and seq < 1) or batch < 1:
        raise UserError("--batch and --seq must be at least 1")


def check_weights_file(path):
    """The file exists and, unless it is a sharded checkpoint's index, starts with a safetensors
    header (8-byte little-endian length, then a JSON object)."""
    if not os.path.exists(path):
        raise UserError(f"{path}: no such file")
    if path.endswith(".json"):
        return
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ValueError("shorter than a header")
            n = struct.unpack("<Q", head)[0]
            if n > os.path.getsize(path) - 8:
                raise ValueError(f"header length {n} past the end of the file")
            header = json.loads(f.read(n))
            if not isinstance(header, dict):
                raise ValueError("the header is not a JSON object")
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: not a readable safetensors file ({first_line(e)})")


def precheck(args):
    if args.cmd == "hf":
        if args.seed is not None:
            raise UserError(f"--seed {args.seed}: the initial weights of an imported config are drawn by "
                            f"bigc run, by the family's rules: give --seed {args.seed} to `bigc run` (or "
                            "start from a checkpoint with --weights)")
        raw = read_config_json(args.config)
        from .config_check import check_config
        check_config(raw, family_of(raw, args.config), args.config)
        check_seq(args.seq, args.batch, max_positions(raw))
        if args.weights:
            check_weights_file(args.weights)
    else:
        spec = args.spec
        if ":" not in spec:
            raise UserError(f"'{spec}': expected FILE.py:FUNCTION")
        path = spec.rsplit(":", 1)[0]
        if not os.path.exists(path):
            raise UserError(f"{path}: no such file")
