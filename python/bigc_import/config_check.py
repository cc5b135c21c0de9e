"""The values of a Hugging Face config, checked before anything is built: every size a positive
integer in range, every epsilon and rate finite and positive, the heads dividing the width (or a
head_dim given), the kv heads dividing the heads. One message naming the field (exit 1), instead of
a traceback from transformers or a model with no layers.

Only the fields the importer's families use are checked, and only when present (a missing field
takes transformers' default)."""

import math

from .errors import UserError

# The largest size of any one dimension: token ids are i32, and every tensor's element count must
# stay representable.
MAX_DIM = (1 << 31) - 1

# model_type -> {field: kind}. Kinds: "size" (an integer >= 1), "size0" (an integer >= 0),
# "opt_size" (null or an integer >= 1), "pos" (a finite number > 0), "nonneg" (a finite
# number >= 0), "opt_pos" (null or a finite number > 0).
_LLAMA = {
    "vocab_size": "size",
    "hidden_size": "size",
    "intermediate_size": "size",
    "num_hidden_layers": "size",
    "num_attention_heads": "size",
    "num_key_value_heads": "opt_size",
    "head_dim": "opt_size",
    "max_position_embeddings": "size",
    "rms_norm_eps": "pos",
    "rope_theta": "pos",
    "initializer_range": "nonneg",
    "sliding_window": "opt_size",
}
FIELDS = {
    "llama": _LLAMA,
    "mistral": _LLAMA,
    "qwen2": dict(_LLAMA, max_window_layers="size0"),
    "gemma": _LLAMA,
    "gemma2": dict(_LLAMA, query_pre_attn_scalar="pos", attn_logit_softcapping="opt_pos",
                   final_logit_softcapping="opt_pos"),
    "olmo": _LLAMA,
    "olmo2": _LLAMA,
    "phi3": _LLAMA,
    "mixtral": dict(_LLAMA, num_local_experts="size", num_experts_per_tok="size", router_jitter_noise="nonneg",
                    router_aux_loss_coef="nonneg"),
    "qwen2_moe": dict(_LLAMA, num_experts="size", num_experts_per_tok="size", moe_intermediate_size="size",
                      shared_expert_intermediate_size="size", decoder_sparse_step="size",
                      router_aux_loss_coef="nonneg"),
    "gpt_neox": {
        "vocab_size": "size",
        "hidden_size": "size",
        "intermediate_size": "size",
        "num_hidden_layers": "size",
        "num_attention_heads": "size",
        "max_position_embeddings": "size",
        "layer_norm_eps": "pos",
        "rotary_emb_base": "pos",
        "initializer_range": "nonneg",
    },
    "gpt2": {
        "vocab_size": "size",
        "n_embd": "size",
        "n_layer": "size",
        "n_head": "size",
        "n_positions": "size",
        "n_inner": "opt_size",
        "layer_norm_epsilon": "pos",
        "initializer_range": "nonneg",
    },
}

_WHAT = {
    "size": "a positive integer",
    "size0": "an integer >= 0",
    "opt_size": "null or a positive integer",
    "pos": "a finite number > 0",
    "nonneg": "a finite number >= 0",
    "opt_pos": "null or a finite number > 0",
}


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _ok(kind, v):
    if kind in ("opt_size", "opt_pos") and v is None:
        return True
    if kind in ("size", "opt_size"):
        return _is_int(v) and 1 <= v <= MAX_DIM
    if kind == "size0":
        return _is_int(v) and 0 <= v <= MAX_DIM
    if kind in ("pos", "opt_pos"):
        return _is_num(v) and math.isfinite(v) and v > 0
    if kind == "nonneg":
        return _is_num(v) and math.isfinite(v) and v >= 0
    raise AssertionError(kind)


def _show(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return repr(v) if isinstance(v, str) else str(v).replace("None", "null")


def check_config(cfg, family, path):
    """Raises UserError naming the first field of `cfg` (the parsed config.json of `family`) that
    is out of range or contradicts another."""
    for field, kind in FIELDS[family].items():
        if field not in cfg:
            continue
        v = cfg[field]
        if not _ok(kind, v):
            extra = " (at most 2^31 - 1)" if _is_int(v) and v > MAX_DIM else ""
            raise UserError(f"{path}: \"{field}\" is {_show(v)}; it must be {_WHAT[kind]}{extra}")
    g = cfg.get
    if family == "gpt2":
        width, heads = g("n_embd"), g("n_head")
        if _is_int(width) and _is_int(heads) and width % heads != 0:
            raise UserError(f"{path}: \"n_head\" {heads} does not divide \"n_embd\" {width} (the "
                            "head size is n_embd / n_head)")
        return
    if family in ("mixtral", "qwen2_moe"):
        experts = "num_local_experts" if family == "mixtral" else "num_experts"
        E, k = g(experts, 8 if family == "mixtral" else 60), g("num_experts_per_tok", 2 if family == "mixtral" else 4)
        if _is_int(E) and _is_int(k) and k > E:
            raise UserError(f"{path}: \"num_experts_per_tok\" {k} exceeds \"{experts}\" {E}")
        if g("router_jitter_noise", 0):
            raise UserError(f"{path}: \"router_jitter_noise\" is {_show(g('router_jitter_noise'))}: the router's "
                            "random jitter in training is not supported (bigc's steps are deterministic); set it to 0")
        if g("output_router_logits", False):
            raise UserError(f"{path}: \"output_router_logits\" is true: the router's auxiliary load-balancing "
                            "loss is not supported yet (bigc trains the cross-entropy alone); set it to false")
        if g("hidden_act", "silu") != "silu":
            raise UserError(f"{path}: \"hidden_act\" is {_show(g('hidden_act'))}: bigc.moe's experts are SwiGLU "
                            "(silu)")
    width, heads, kv, hd = (g("hidden_size"), g("num_attention_heads"),
                            g("num_key_value_heads"), g("head_dim"))
    rp = g("rope_parameters") if isinstance(g("rope_parameters"), dict) else {}
    field = "partial_rotary_factor"
    prf = rp.get(field, g(field))
    if prf is None and family == "gpt_neox":  # GPT-NeoX's own name, and transformers' default for it
        field, prf = "rotary_pct", g("rotary_pct", 0.25)
    if prf is not None and not (_is_num(prf) and 0 < prf <= 1):
        raise UserError(f"{path}: \"{field}\" is {_show(prf)}; it must be a number in (0, 1] (the "
                        "part of each head that rotary embeddings rotate)")
    if _is_int(width) and _is_int(heads) and hd is None and width % heads != 0:
        raise UserError(f"{path}: \"num_attention_heads\" {heads} does not divide \"hidden_size\" "
                        f"{width} (the head size is hidden_size / num_attention_heads; or give "
                        "\"head_dim\")")
    if _is_int(heads) and _is_int(kv) and heads % kv != 0:
        raise UserError(f"{path}: \"num_key_value_heads\" {kv} does not divide "
                        f"\"num_attention_heads\" {heads} (each kv head serves a whole group of "
                        "query heads)")
    if _is_int(hd) and hd % 2 != 0:
        raise UserError(f"{path}: \"head_dim\" {hd} is odd; rotary embeddings rotate pairs, so it "
                        "must be even")
    if hd is None and _is_int(width) and _is_int(heads) and (width // heads) % 2 != 0 and prf in (None, 1):
        raise UserError(f"{path}: the head size hidden_size / num_attention_heads = "
                        f"{width // heads} is odd; rotary embeddings rotate pairs, so it must be even")
    size = hd if _is_int(hd) else (width // heads if _is_int(width) and _is_int(heads) else None)
    if prf not in (None, 1) and size is not None:
        rot = int(size * prf)  # transformers' rotary_ndims
        if rot < 2 or rot % 2 != 0:
            raise UserError(f"{path}: \"{field}\" {_show(prf)} of a head of {size} rotates {rot} elements; "
                            "rotary embeddings rotate pairs, so that must be even and at least 2")
