"""Mixtures of experts as one op: each Hugging Face MoE block (Mixtral's MixtralSparseMoeBlock,
Qwen-MoE's Qwen2MoeSparseMoeBlock with its shared expert left as ordinary ops) is
captured as ``torch.ops.bigc.moe(x, router, gate_up, down, top_k, normalize)``, which the lowering
maps to ``bigc.moe``. Its experts' own forward routes tokens with data-dependent shapes
(``nonzero``, ``torch.where``), which torch.export cannot capture; the op says the same thing whole.

The op's definition (bigc.moe's): p = softmax(x router^T) in fp32, its top_k (``normalize``:
divided by their sum, Mixtral's), y = sum over the chosen experts e of w_e down_e (silu(g) * u),
[g; u] = gate_up_e x (Hugging Face's fused 3-D expert weights: gate_up_proj [E, 2F, C],
down_proj [E, C, F])."""

import torch

_OP = None


def op():
    """torch.ops.bigc.moe, registered on first use (with its meta/fake shape rule)."""
    global _OP
    if _OP is not None:
        return _OP

    @torch.library.custom_op("bigc::moe", mutates_args=())
    def moe(x: torch.Tensor, router: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, top_k: int,
            normalize: bool) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        p = torch.softmax(flat.float() @ router.float().t(), dim=-1)
        w, idx = torch.topk(p, top_k, dim=-1)
        if normalize:
            w = w / w.sum(dim=-1, keepdim=True)
        y = torch.zeros_like(flat)
        F_ = gate_up.shape[1] // 2
        for n in range(flat.shape[0]):
            for j in range(top_k):
                e = int(idx[n, j])
                a = gate_up[e] @ flat[n]
                y[n] += w[n, j].to(y.dtype) * (down[e] @ (torch.nn.functional.silu(a[:F_]) * a[F_:]))
        return y.reshape(x.shape)

    @moe.register_fake
    def _(x, router, gate_up, down, top_k, normalize):
        return torch.empty_like(x)

    _OP = torch.ops.bigc.moe
    return _OP


def _mixtral_forward(self, hidden_states):
    B, T, C = hidden_states.shape
    y = op()(hidden_states.reshape(B * T, C), self.gate.weight, self.experts.gate_up_proj,
             self.experts.down_proj, int(self.top_k), True)
    return y.reshape(B, T, C)


def _qwen2_moe_forward(self, hidden_states):
    """Qwen-MoE's block: the routed experts (bigc.moe, normalised as norm_topk_prob says) plus a
    shared expert gated by sigmoid(x w) (ordinary ops)."""
    B, T, C = hidden_states.shape
    x = hidden_states.reshape(B * T, C)
    y = op()(x, self.gate.weight, self.experts.gate_up_proj, self.experts.down_proj, int(self.gate.top_k),
             bool(self.gate.norm_topk_prob))
    y = y + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
    return y.reshape(B, T, C)


def _blocks():
    out = []
    for mod, cls, fwd in (("mixtral.modeling_mixtral", "MixtralSparseMoeBlock", _mixtral_forward),
                          ("qwen2_moe.modeling_qwen2_moe", "Qwen2MoeSparseMoeBlock", _qwen2_moe_forward)):
        try:
            m = __import__(f"transformers.models.{mod}", fromlist=[cls])
            out.append((getattr(m, cls), fwd))
        except (ImportError, AttributeError):  # (an older transformers)
            pass
    return out


def patch(model):
    """Each MoE block of `model` captured as bigc.moe; the number patched."""
    import types
    n = 0
    blocks = _blocks()
    for m in model.modules():
        for cls, fwd in blocks:
            if isinstance(m, cls):
                m.forward = types.MethodType(fwd, m)
                n += 1
    return n
