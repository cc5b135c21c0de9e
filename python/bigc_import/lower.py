"""The exported ATen graph as bigc ops.

One walk over the graph of ``torch.export`` in program order. Each node gets a *value*:

* ``Const``  known at import time (buffers, literals, arange, the masks and rotary tables built
  from them): every node whose inputs are all constants is evaluated with torch itself;
* ``Param``  a parameter, read with ``bigc.get_param`` where it is used;
* ``Ten``    a bigc SSA value whose contents are the node's tensor;
* ``View``   a reshape/transpose chain over a ``Ten``/``Param``/``Part`` not yet emitted (a
  "heads view" ``x.view(B,T,H,D).transpose(1,2)`` of a [B,T,H*D] tensor stays one), emitted only
  when something other than a pattern consumes it;
* ``Part``   one of the parts of a split (GPT-2's packed q, k, v);
* ``Elem``   an elementwise expression over such values (GELU's tanh formula, silu(g)*u, a
  residual add), recognised as a bigc op (gelu, silu, swiglu, scale: recognise.py, by its
  structure) or lowered op by op (add, mul, scale) when consumed;
* ``Pat``    a partial pattern (RMSNorm's statistic, rotary embeddings' halves, repeat_kv's
  expand) completed by a later node into one bigc op, or an error when consumed otherwise.

Every node without a mapping is a ``UserError`` naming the ATen op and the Python line.
"""

import math
import operator
import re

import torch

from . import recognise, source
from .errors import UserError
from .mlir import Attr, Builder, tensor_type

# --------------------------------------------------------------------------------------------
# values


class Value:
    dtype = "f32"
    shape = ()


class Const(Value):
    def __init__(self, val, srcs=frozenset()):
        self.val = val
        self.srcs = frozenset(srcs)
        if isinstance(val, torch.Tensor):
            self.shape = tuple(val.shape)


class Ten(Value):
    def __init__(self, ssa, shape, dtype="f32"):
        self.ssa = ssa
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype


class Param(Value):
    def __init__(self, name, shape):
        self.name = name
        self.shape = tuple(int(d) for d in shape)


class Group:
    """The parts of one split of a tensor along an axis."""

    def __init__(self, src, axis, sizes):
        self.src = src
        self.axis = axis
        self.sizes = list(sizes)
        self.mats = None


class Part(Value):
    def __init__(self, group, index):
        self.group = group
        self.index = index
        shape = list(group.src.shape)
        shape[group.axis] = group.sizes[index]
        self.shape = tuple(shape)
        self.dtype = group.src.dtype


class View(Value):
    """base viewed through chain: ('r', shape) reshapes and ('t', perm) transposes."""

    def __init__(self, base, chain, shape):
        self.base = base
        self.chain = tuple(chain)
        self.shape = tuple(shape)
        self.dtype = base.dtype
        self.mat = None


class ENode:
    """A node of an elementwise expression: op, args (ENodes or floats), the fx node."""

    __slots__ = ("op", "args", "node")

    def __init__(self, op, args, node):
        self.op = op
        self.args = args
        self.node = node


class Elem(Value):
    def __init__(self, root, shape, node):
        self.root = root
        self.shape = tuple(shape)
        self.node = node
        self.mat = None


class Pat(Value):
    def __init__(self, kind, node, shape, **f):
        self.kind = kind
        self.node = node
        self.shape = tuple(shape)
        self.f = f


# --------------------------------------------------------------------------------------------
# helpers

PURPOSE = {
    "relu": "ReLU activation", "leaky_relu": "leaky ReLU activation", "elu": "ELU activation",
    "softmax": "softmax; an attention written out maps to bigc's when it is softmax(q @ k^T * scale "
               "+ a causal mask) @ v over heads views, as is F.scaled_dot_product_attention",
    "_softmax": "softmax; an attention written out maps to bigc's when it is softmax(q @ k^T * scale "
                "+ a causal mask) @ v over heads views",
    "log_softmax": "log-softmax; F.cross_entropy maps to bigc.cross_entropy",
    "nll_loss": "negative log-likelihood; F.cross_entropy maps to bigc.cross_entropy",
    "masked_fill": "masked fill; a causal mask maps as part of an attention: scores.masked_fill(mask, "
                   "-inf) of q @ k^T, then softmax and @ v",
    "where": "elementwise select", "cumsum": "cumulative sum", "sort": "sort", "topk": "top-k",
    "argmax": "argmax", "max": "maximum", "min": "minimum", "amax": "maximum", "sum": "sum",
    "mean": "mean; only RMSNorm's mean of squares maps (to bigc.rmsnorm)",
    "var": "variance; nn.LayerNorm maps to bigc.layernorm",
    "var_mean": "variance; nn.LayerNorm maps to bigc.layernorm",
    "exp": "exponential", "log": "logarithm", "tanh": "tanh", "sigmoid": "sigmoid",
    "sin": "sine", "cos": "cosine", "pow": "power", "sqrt": "square root",
    "rsqrt": "reciprocal square root", "erf": "error function", "abs": "absolute value",
    "convolution": "convolution", "conv1d": "convolution", "conv2d": "convolution",
    "max_pool2d": "pooling", "avg_pool2d": "pooling",
    "index": "advanced indexing", "index_select": "index select", "gather": "gather",
    "scatter": "scatter", "scatter_add": "scatter", "index_put": "indexed assignment",
    "view_as_complex": "complex numbers (interleaved rotary embeddings?); Hugging Face's "
                       "rotate_half form maps to bigc.rope",
    "view_as_real": "complex numbers", "polar": "complex numbers",
    "triu": "triangular mask", "tril": "triangular mask",
    "einsum": "einsum", "baddbmm": "batched matmul with add",
    "native_dropout": "dropout", "dropout": "dropout", "bernoulli": "random numbers",
    "rand": "random numbers", "randn": "random numbers", "multinomial": "sampling",
    "group_norm": "group normalisation", "batch_norm": "batch normalisation",
    "native_batch_norm": "batch normalisation", "_native_batch_norm_legit": "batch normalisation",
    "instance_norm": "instance normalisation",
    "clamp": "clamp", "div": "division by a tensor", "mul": "broadcast multiplication",
    "add": "broadcast addition", "sub": "broadcast subtraction",
    "expand": "broadcast copy", "slice": "slice", "cat": "concatenation",
    "select": "indexing one position", "repeat": "repeat", "roll": "roll", "flip": "flip",
    "pad": "padding", "constant_pad_nd": "padding", "matmul": "matrix product",
    "bmm": "batched matrix product", "mm": "matrix product", "embedding": "embedding",
    "scaled_dot_product_attention": "attention", "_to_copy": "a cast", "to": "a cast",
    "layer_norm": "layer normalisation", "silu": "SiLU", "gelu": "GELU",
    "mish": "Mish activation", "hardtanh": "hardtanh", "softplus": "softplus",
}

ADVICE = "bigc has no op for it (docs/frontend.md lists what an import maps to); nothing written"


def op_name(node):
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return f"aten.{t._schema.name.split('::')[-1]}"
    return getattr(t, "__name__", str(t))


def base_name(node):
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        n = t._schema.name.split("::")[-1]
        if n.endswith("_") and not n.startswith("_"):
            n = n[:-1]
        return n
    return getattr(t, "__name__", str(t))


def layer_of(node):
    """Transformer block index of a node: the first numeric component of its innermost module
    path (model.layers.3.self_attn -> 3, transformer.h.0.mlp -> 0), or None."""
    nms = node.meta.get("nn_module_stack") if node is not None else None
    if not nms:
        return None
    path = list(nms.values())[-1][0]
    m = re.search(r"(?:^|[.\[])(\d+)(?=$|[.\]])", str(path))
    return int(m.group(1)) if m else None


def bind(node, args, kwargs):
    """The op's arguments by schema name (defaults filled in)."""
    schema = node.target._schema
    out = {}
    pos = list(args)
    for i, a in enumerate(schema.arguments):
        if i < len(pos) and not a.kwarg_only:
            out[a.name] = pos[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            out[a.name] = None
    return out


def out_shape(node):
    v = node.meta.get("val")
    if isinstance(v, torch.Tensor):
        return tuple(int(d) for d in v.shape)
    return None


def is_tensor_value(v):
    return isinstance(v, (Ten, Param, View, Part, Elem, Pat))


def norm_dim(d, rank):
    return d + rank if d < 0 else d


def compose_chain(base_shape, chain):
    """Simplified chain: merged reshapes and transposes, identities and transposes that only
    move size-1 dims turned into reshapes or dropped."""
    ops = []
    shapes = [tuple(base_shape)]

    def push(op):
        while True:
            cur = shapes[-1]
            if op[0] == "t":
                perm = op[1]
                new = tuple(cur[p] for p in perm)
                if list(perm) == list(range(len(perm))):
                    return
                moved = [p for p in perm if cur[p] != 1]
                if moved == sorted(moved):
                    op = ("r", new)
                    continue
                if ops and ops[-1][0] == "t":
                    prev = ops.pop()
                    shapes.pop()
                    op = ("t", tuple(prev[1][p] for p in perm))
                    continue
                ops.append(("t", tuple(perm)))
                shapes.append(new)
                return
            new = tuple(op[1])
            if new == cur:
                return
            if ops and ops[-1][0] == "r":
                ops.pop()
                shapes.pop()
                continue
            ops.append(("r", new))
            shapes.append(new)
            return

    for op in chain:
        push(op)
    return ops


def make_view(v, op):
    """v viewed through one more op (a simplified View, or the base itself)."""
    if isinstance(v, View):
        base, chain = v.base, list(v.chain)
    else:
        base, chain = v, []
    chain.append(op)
    ops = compose_chain(base.shape, chain)
    if not ops:
        return base
    shape = ops[-1][1] if ops[-1][0] == "r" else None
    if shape is None:
        cur = tuple(base.shape)
        for o in ops:
            cur = tuple(o[1]) if o[0] == "r" else tuple(cur[p] for p in o[1])
        shape = cur
    return View(base, ops, shape)


def heads_layout(v):
    """(base, H, D, layout) if v is a [B,T,H*D] tensor seen as [B,H,T,D] ('bhtd', the heads
    view x.view(B,T,H,D).transpose(1,2)) or as [B,T,H,D] ('bthd')."""
    if not isinstance(v, View) or len(v.base.shape) != 3 or len(v.shape) != 4:
        return None
    B, T, HD = v.base.shape
    if v.shape[0] != B:
        return None
    if v.shape[2] == T and v.shape[1] * v.shape[3] == HD:
        H, D = v.shape[1], v.shape[3]
        if tuple(v.chain) == tuple(compose_chain(v.base.shape, [("r", (B, T, H, D)), ("t", (0, 2, 1, 3))])):
            return v.base, H, D, "bhtd"
    if v.shape[1] == T and v.shape[2] * v.shape[3] == HD:
        H, D = v.shape[2], v.shape[3]
        if tuple(v.chain) == tuple(compose_chain(v.base.shape, [("r", (B, T, H, D))])):
            return v.base, H, D, "bthd"
    return None


def same_src(u, v):
    """u and v are the same value: one object, or two slices of one value over the same range
    (a partial rotary's q[..., :R], seen by its two uses)."""
    if u is v:
        return True
    return isinstance(u, Pat) and isinstance(v, Pat) and u.kind == v.kind == "slice" and \
        u.f["x"] is v.f["x"] and (u.f["dim"], u.f["start"], u.f["end"]) == (v.f["dim"], v.f["start"], v.f["end"])


def heads_view(ten, H, D):
    B, T, _ = ten.shape
    return make_view(make_view(ten, ("r", (B, T, H, D))), ("t", (0, 2, 1, 3)))


def scalar_of(v):
    """A Python float if v is a number, a 0-dim or uniform constant tensor, else None."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, Const):
        t = v.val
        if isinstance(t, (int, float, bool)):
            return float(t)
        if isinstance(t, torch.Tensor) and t.dtype != torch.bool and t.numel() > 0:
            if t.numel() == 1:
                return float(t.reshape(()).item())
            f = t.flatten()
            if bool(torch.all(f == f[0])):
                return float(f[0].item())
    return None


def fit_inv_freq(c, n, s):
    """The fp32 frequencies f with c[t] = cos(f32(f) * f32(t)) * s, n[t] = sin(...) * s, from
    the tables (no inv_freq buffer): the angle at t = 1, refined at t = 2, 4, ... and T - 1, then
    the fp32 value among its neighbours that reproduces the tables best."""
    T = c.shape[0]
    ang = torch.atan2(n.double() / s, c.double() / s)
    f = ang[1].clone()
    ts = []
    t = 2
    while t < T:
        ts.append(t)
        t *= 2
    if T - 1 > 1:
        ts.append(T - 1)
    for t in ts:
        k = torch.round((f * t - ang[t]) / (2 * math.pi))
        f = (ang[t] + 2 * math.pi * k) / t
    pos = torch.arange(T, dtype=torch.float32)
    best = f.float()
    cands = [best]
    up, down = best, best
    for _ in range(4):
        up = torch.nextafter(up, torch.full_like(up, math.inf))
        down = torch.nextafter(down, torch.full_like(down, -math.inf))
        cands += [up, down]
    errs = []
    for cand in cands:
        a = cand[None, :] * pos[:, None]
        errs.append(torch.maximum((a.cos() * s - c).abs().amax(0), (a.sin() * s - n).abs().amax(0)))
    errs = torch.stack(errs)  # [candidates, D/2]
    pick = errs.argmin(0)
    return torch.stack(cands)[pick, torch.arange(best.numel())]


def collect_vars(en, out=None):
    if out is None:
        out = {}
    if isinstance(en, ENode):
        if en.op == "var":
            out.setdefault(id(en.args[0]), en.args[0])
        else:
            for a in en.args:
                collect_vars(a, out)
    return out


def first_unmappable(en):
    """The ENode (in graph order) of an op the structural lowering cannot emit."""
    found = []

    def walk(e):
        if isinstance(e, ENode) and e.op != "var":
            for a in e.args:
                walk(a)
            if e.op not in ("add", "sub", "mul", "neg", "div", "square") and \
                    not (e.op == "pow" and e.args[1] == 2.0):
                found.append(e)
    walk(en)
    return found[0] if found else None


PASSTHROUGH = {"contiguous", "clone", "alias", "detach", "lift_fresh_copy", "_assert_tensor_metadata",
               "to", "_to_copy", "type_as", "dropout", "feature_dropout", "alpha_dropout",
               "lift_fresh", "view_as", "identity"}


# --------------------------------------------------------------------------------------------


class Lowerer:
    def __init__(self, ep, strip_prefix="", buffers=None, replay=None):
        self.ep = ep
        self.gm = ep.graph_module
        self.buffers = buffers or {}  # fqn -> a buffer's value (a model built on the meta device)
        self.replay = replay  # runs the model's forward again (source.op_site), or None
        # A model captured on the meta device: the tensors its graph makes (positions, masks, the
        # rotary tables; folded into constants here) are made on the CPU instead.
        cpu = torch.device("cpu")
        for gm in self.gm.modules():
            if not isinstance(gm, torch.fx.GraphModule):
                continue
            changed = False
            def on_cpu(a):
                return cpu if isinstance(a, torch.device) and a.type == "meta" else a
            for n in gm.graph.nodes:
                args, kwargs = torch.fx.node.map_aggregate(n.args, on_cpu), \
                    torch.fx.node.map_aggregate(n.kwargs, on_cpu)
                if args != n.args or kwargs != n.kwargs:
                    n.args, n.kwargs = args, kwargs
                    changed = True
            if changed:
                gm.recompile()
        self.gm = ep.graph_module
        self.sig = ep.graph_signature
        self.strip = strip_prefix
        self.b = Builder()
        self.env = {}
        self.cur = None
        self.getparam_cache = {}
        self.params = []  # (name, tensor) in declaration order
        self.user_inputs = []
        self.uses_cache = {}
        # Writes of trained values into constant tensors (a KV cache: cache[:B, 0:T] = k): (the view
        # written, the value); a read of exactly that view is the value (see fold)
        self.cache_writes = []
        self.notes = []
        self.pad_noted = set()

    # --- errors --------------------------------------------------------------------------------
    def fail_node(self, node, what=None, advice=None):
        loc = source.location(node)
        name = op_name(node)
        purpose = what or PURPOSE.get(base_name(node))
        p = f" ({purpose})" if purpose else ""
        tail = f"{advice}; nothing written" if advice else ADVICE
        site = source.op_site(self.replay, self.ep.graph, node) if self.replay else None
        chain = ""
        if site and site[0] != loc:  # made in a function the forward calls: its own line, and how
            loc = site[0]
            chain = f"; called as {source.chain_text(site[1])}"
        raise UserError(f"{source.display(loc)}: unsupported operation {name}{p}{chain}; {tail}")

    def fail_at(self, node, message):
        raise UserError(f"{source.display(source.location(node))}: {message}; nothing written")

    # --- emission helpers ----------------------------------------------------------------------
    def loc(self, node=None):
        return source.location(node if node is not None else self.cur)

    def layer(self, node=None):
        return layer_of(node if node is not None else self.cur)

    def emit(self, name, operands, result_shapes, attrs=None, hints=None, node=None,
             result_dtypes=None):
        node = node if node is not None else self.cur
        ops = [o.ssa for o in operands]
        types = [tensor_type(o.shape, "i32" if o.dtype == "i32" else "f32") for o in operands]
        result_dtypes = result_dtypes or ["f32"] * len(result_shapes)
        rtypes = [tensor_type(s, d) for s, d in zip(result_shapes, result_dtypes)]
        hint = node.name if node is not None and hints is None else None
        res = self.b.op(name, ops, types, rtypes, attrs, hints or [hint or name],
                        layer=self.layer(node), loc=self.loc(node))
        return [Ten(r, s, d) for r, s, d in zip(res, result_shapes, result_dtypes)]

    def fill(self, value, shape, node=None):
        return self.emit("fill", [], [tuple(shape)], {"value": Attr.f64(value)}, hints=["fill"],
                         node=node)[0]

    def scale(self, t, factor, node=None):
        if factor == 1.0:
            return t
        return self.emit("scale", [t], [t.shape], {"factor": Attr.f64(factor)}, node=node)[0]

    # --- materialisation -----------------------------------------------------------------------
    def mat(self, v, node=None):
        """The value as a bigc tensor (emitting what it takes)."""
        if isinstance(v, Ten):
            return v
        if isinstance(v, Param):
            lay = self.layer(node)
            key = (v.name, lay)
            if key not in self.getparam_cache:
                hint = v.name.replace(".", "_")
                ssa = self.b.get_param(v.name, v.shape, hint, lay, self.loc(node))
                self.getparam_cache[key] = Ten(ssa, v.shape)
            return self.getparam_cache[key]
        if isinstance(v, View):
            if v.mat is None:
                t = self.mat(v.base, node)
                for op in v.chain:
                    if op[0] == "r":
                        t = self.emit("reshape", [t], [op[1]], hints=["reshape"], node=node,
                                      result_dtypes=[t.dtype])[0]
                    else:
                        shape = tuple(t.shape[p] for p in op[1])
                        t = self.emit("transpose", [t], [shape], {"perm": Attr.i64_array(op[1])},
                                      hints=["transpose"], node=node, result_dtypes=[t.dtype])[0]
                v.mat = t
            return v.mat
        if isinstance(v, Part):
            g = v.group
            if g.mats is None:
                src = self.mat(g.src, node)
                if len(set(g.sizes)) == 1:
                    shapes = []
                    for s in g.sizes:
                        sh = list(src.shape)
                        sh[g.axis] = s
                        shapes.append(tuple(sh))
                    g.mats = self.emit("split", [src], shapes, {"axis": Attr.i64(g.axis)},
                                       hints=["split"], node=node)
                else:
                    g.mats = []
                    off = 0
                    for s in g.sizes:
                        g.mats.append(self.slice_ten(src, g.axis, off, off + s, node))
                        off += s
            return g.mats[v.index]
        if isinstance(v, Elem):
            if v.mat is None:
                v.mat = self.lower_enode(v.root)
            return v.mat
        if isinstance(v, Pat):
            return self.force_pat(v, node)
        if isinstance(v, Const):
            s = scalar_of(v)
            if s is not None and isinstance(v.val, torch.Tensor) and v.val.is_floating_point():
                return self.fill(s, v.shape, node)
            self.fail_node(node if node is not None else self.cur,
                           "a constant tensor used as data: bigc's graph holds no constants")
        raise AssertionError(f"cannot materialise {type(v).__name__}")

    def slice_ten(self, t, axis, start, end, node=None):
        """t[start:end] along axis with split/concat (equal parts of gcd size)."""
        n = t.shape[axis]
        if start == 0 and end == n:
            return t
        g = math.gcd(math.gcd(start, end), n)
        parts = n // g
        if parts > 4096:
            self.fail_node(node if node is not None else self.cur,
                           f"a slice [{start}:{end}] of a dimension of {n}, which takes {parts} parts")
        shapes = []
        for _ in range(parts):
            sh = list(t.shape)
            sh[axis] = g
            shapes.append(tuple(sh))
        res = self.emit("split", [t], shapes, {"axis": Attr.i64(axis)}, hints=["slice"], node=node)
        take = res[start // g:end // g]
        if len(take) == 1:
            return take[0]
        sh = list(t.shape)
        sh[axis] = end - start
        return self.emit("concat", take, [tuple(sh)], {"axis": Attr.i64(axis)}, hints=["slice"],
                         node=node)[0]

    def force_pat(self, p, node=None):
        k = p.kind
        if k == "slice":
            x = self.mat(p.f["x"], node)
            return self.slice_ten(x, p.f["dim"], p.f["start"], p.f["end"], node)
        if k == "partrope":  # a partial rotary's rotated part used alone: the slice of the whole
            y = self.mat(p.f["y"], node)
            return self.slice_ten(y, len(y.shape) - 1, 0, p.f["R"], node)
        if k == "negslice":
            x = self.mat(p.f["x"], node)
            return self.scale(self.slice_ten(x, p.f["dim"], p.f["start"], p.f["end"], node), -1.0,
                              node)
        if k == "scores" and p.f["window"] is None:  # q @ k^T (times a number), not an attention
            y = self._bmm(p.node, p.f["x"], p.f["w"])
            return y if p.f["scale"] == 1.0 else self.scale(y, p.f["scale"], node)
        if k == "normed":  # RMSNorm without a weight
            x = self.mat(p.f["x"], node)
            w = self.fill(1.0, (x.shape[-1],), p.node)
            return self.emit("rmsnorm", [x, w], [x.shape, x.shape[:-1]], {"eps": Attr.f64(p.f["eps"])},
                             node=p.node)[0]
        what = {
            "mulc": "multiplication by a constant tensor: bigc's graph holds no constants",
            "addc": "addition of a constant tensor: bigc's graph holds no constants",
            "expand": "broadcast copy (expand)",
            "meansq": "mean of squares outside an RMSNorm",
            "meansq_eps": "mean of squares outside an RMSNorm",
            "rstd": "reciprocal square root outside an RMSNorm",
            "std": "square root outside an RMSNorm",
            "rothalf": "rotate_half outside rotary embeddings",
            "mulrot": "rotary embeddings not of the form q*cos + rotate_half(q)*sin",
            "repeat_kv": "repeat_kv outside attention",
            "repeat_kv_t": "repeat_kv outside attention",
            "repeat_kv_bthd": "repeat_kv outside attention",
            "scores": "attention scores q @ k^T used other than in softmax(q @ k^T * scale + a causal mask) "
                      "@ v (bigc's attention is that, whole)",
            "probs": "attention probabilities used other than multiplied by the values",
            "pair": "the pairs of adjacent elements (unbind(-1) of a [...,D/2,2] view) outside rotary "
                    "embeddings",
            "pairmul": "rotary embeddings of interleaved pairs not of the form (x_re*cos - x_im*sin, "
                       "x_re*sin + x_im*cos)",
            "pairrot": "rotary embeddings of interleaved pairs not stacked back (torch.stack([re, im], -1))",
            "pairstack": "rotary embeddings of interleaved pairs not flattened back to the heads",
            "cpx": "complex numbers other than a rotary embedding's pairs times a table (view_as_complex(x) * "
                   "freqs_cis, then view_as_real)",
            "cpxrot": "complex numbers other than a rotary embedding's pairs times a table (view_as_complex(x) * "
                      "freqs_cis, then view_as_real)",
        }.get(k)
        self.fail_node(p.node, what)

    # --- elementwise ---------------------------------------------------------------------------
    def effective_uses(self, node):
        if node in self.uses_cache:
            return self.uses_cache[node]
        n = 0
        for u in node.users:
            if u.op == "call_function" and base_name(u) == "_assert_tensor_metadata":
                continue
            if u.op == "call_function" and base_name(u) in PASSTHROUGH and u.args and u.args[0] is node:
                n += self.effective_uses(u)
            else:
                n += 1
        self.uses_cache[node] = n
        return n

    def leaf(self, v):
        if isinstance(v, Elem):
            if v.mat is None and self.effective_uses(v.node) <= 1:
                return v.root
            return ENode("var", [self.mat(v)], v.node)
        return ENode("var", [v], self.cur)

    def elementwise(self, node, op, operands):
        """op over operands (Values or numbers): an Elem, a pattern step, or bias_add for a
        broadcast add."""
        if any(isinstance(o, Pat) for o in operands):
            r = self.pattern_step(node, op, operands)
            if r is not None:
                return r
            for o in operands:
                if isinstance(o, Pat):
                    self.force_pat(o, node)
        shape = out_shape(node)
        vals = []
        for o in operands:
            if is_tensor_value(o):
                vals.append(o)
                continue
            s = scalar_of(o)
            if s is not None:
                vals.append(s)
                continue
            if isinstance(o, Const) and isinstance(o.val, torch.Tensor):
                others = [x for x in operands if is_tensor_value(x)]
                if op == "mul" and len(others) == 1 and not o.val.dtype == torch.bool:
                    return Pat("mulc", node, shape, x=others[0], c=o)
                if op == "add" and len(others) == 1:
                    return Pat("addc", node, shape, x=others[0], c=o)
                self.fail_node(node, "an elementwise op with a constant tensor: bigc's graph "
                                     "holds no constants")
            self.fail_node(node)
        tens = [v for v in vals if not isinstance(v, float)]
        if any(t.shape != shape for t in tens):
            return self.broadcast(node, op, vals, shape)
        args = [v if isinstance(v, float) else self.leaf(v) for v in vals]
        root = ENode(op, args, node)
        e = Elem(root, shape, node)
        if self.effective_uses(node) > 1:  # shared: emitted once, here
            return self.mat(e, node)
        return e

    def broadcast(self, node, op, vals, shape):
        if op in ("add", "sub") and len(vals) == 2 and all(not isinstance(v, float) for v in vals):
            a, b = vals
            big_first = a.shape == shape
            big, small = (a, b) if big_first else (b, a)
            if big.shape != shape:
                self.fail_node(node)
            while len(small.shape) > 0 and small.shape[0] == 1 and len(small.shape) > 1:
                small = make_view(small, ("r", small.shape[1:]))
            if tuple(shape[len(shape) - len(small.shape):]) != tuple(small.shape):
                self.fail_node(node)
            bt = self.mat(big, node)
            st = self.mat(small, node)
            if op == "sub":
                if big_first:
                    st = self.scale(st, -1.0, node)
                else:
                    bt = self.scale(bt, -1.0, node)
            return self.emit("bias_add", [bt, st], [shape])[0]
        if op == "mul" and len(vals) == 2 and all(not isinstance(v, float) for v in vals) and len(shape) >= 2:
            # a column times rows (Qwen-MoE's gate [N, 1] times its shared expert [N, C]): the column
            # spread over the C columns by a product with a row of ones
            a, b = vals
            col, full = (a, b) if tuple(b.shape) == tuple(shape) else (b, a)
            if tuple(full.shape) == tuple(shape) and tuple(col.shape) == tuple(shape[:-1]) + (1,):
                ct = self.mat(col, node)
                ones = self.fill(1.0, (1, shape[-1]), node)
                spread = self.emit("matmul", [ct, ones], [tuple(shape)], node=node)[0]
                return self.emit("mul", [spread, self.mat(full, node)], [tuple(shape)], node=node)[0]
        self.fail_node(node, f"broadcasting {op}: bigc's {op} takes equal shapes"
                       if op in ("mul", "div", "add", "sub") else None)

    def recognise(self, en, vs):
        """The bigc op the expression en computes over the variables vs (recognise.py: by its
        structure), emitted; or None."""
        m = recognise.recognise(en, vs)
        if m is None:
            return None
        node = en.node
        ts = [self.mat(v, node) for v in m.variables]
        if m.op == "identity":
            return ts[0]
        if m.op == "scale":
            return self.scale(ts[0], m.attrs["factor"], node)
        if m.op == "sigmoid":  # 0.5 + 0.5 tanh(x / 2)
            t = self.emit("softcap", [self.scale(ts[0], 0.5, node)], [ts[0].shape], {"cap": Attr.f64(1.0)},
                          node=node)[0]
            t = self.scale(t, 0.5, node)
            half = self.fill(0.5, (t.shape[-1],) if t.shape else (), node)
            if not t.shape:
                return self.emit("add", [t, half], [t.shape], node=node)[0]
            return self.emit("bias_add", [t, half], [t.shape], node=node)[0]
        if m.op == "softcap":
            x = ts[0] if abs(m.attrs["prescale"] - 1.0) <= 1e-12 else self.scale(ts[0], m.attrs["prescale"], node)
            return self.emit("softcap", [x], [x.shape], {"cap": Attr.f64(m.attrs["cap"])}, node=node)[0]
        attrs = {"approximate": Attr.str(m.attrs["approximate"])} if "approximate" in m.attrs else {}
        return self.emit(m.op, ts, [ts[0].shape], attrs, node=node)[0]

    def lower_enode(self, en):
        if en.op == "var":
            return self.mat(en.args[0], en.node)
        vs = collect_vars(en)
        if len(vs) <= 2:
            r = self.recognise(en, vs)
            if r is not None:
                return r
        node = en.node
        op = en.op
        args = en.args
        if op in ("add", "sub", "mul", "div") and len(args) == 2:
            a, b = args
            if isinstance(a, float) and isinstance(b, float):
                raise AssertionError("constant expression not folded")
            if isinstance(a, float) or isinstance(b, float):
                c = a if isinstance(a, float) else b
                x = self.lower_enode(b if isinstance(a, float) else a)
                if op == "mul":
                    return self.scale(x, c, node)
                if op == "div" and isinstance(b, float):
                    return self.scale(x, 1.0 / c, node)
                if op in ("add", "sub"):
                    if op == "sub" and isinstance(a, float):  # c - x
                        x = self.scale(x, -1.0, node)
                        cc = c
                    else:
                        cc = -c if op == "sub" else c
                    f = self.fill(cc, (x.shape[-1],) if x.shape else (), node)
                    if not x.shape:
                        return self.emit("add", [x, f], [x.shape], node=node)[0]
                    return self.emit("bias_add", [x, f], [x.shape], node=node)[0]
                self.fail_node(node)
            xa = self.lower_enode(a)
            xb = self.lower_enode(b)
            if op == "add":
                return self.emit("add", [xa, xb], [xa.shape], node=node)[0]
            if op == "sub":
                return self.emit("add", [xa, self.scale(xb, -1.0, node)], [xa.shape], node=node)[0]
            if op == "mul":
                return self.emit("mul", [xa, xb], [xa.shape], node=node)[0]
            self.fail_node(node, "division by a tensor")
        if op == "neg":
            return self.scale(self.lower_enode(args[0]), -1.0, node)
        if op == "pow" and args[1] == 2.0:
            x = self.lower_enode(args[0])
            return self.emit("mul", [x, x], [x.shape], node=node)[0]
        if op == "square":
            x = self.lower_enode(args[0])
            return self.emit("mul", [x, x], [x.shape], node=node)[0]
        bad = first_unmappable(en) or en
        self.fail_node(bad.node)

    # --- patterns ------------------------------------------------------------------------------
    def pattern_step(self, node, op, operands):
        shape = out_shape(node)
        P = [o for o in operands if isinstance(o, Pat)]
        others = [o for o in operands if not isinstance(o, Pat)]
        if op == "mul" and len(P) == 1 and P[0].kind == "slice" and P[0].f["start"] == 0 and \
                P[0].f["dim"] == len(shape) - 1 and len(others) == 1 and isinstance(others[0], Const) and \
                scalar_of(others[0]) is None and heads_layout(P[0].f["x"]) is not None:
            # a partial rotary's q[..., :R] * cos (GPT-NeoX, Phi): q_rot * cos + rotate_half(q_rot) * sin
            return Pat("mulc", node, shape, x=P[0], c=others[0])
        if op == "mul" and len(P) == 1 and P[0].kind == "cpx" and len(others) == 1 and \
                isinstance(others[0], Const) and isinstance(others[0].val, torch.Tensor) and \
                others[0].val.is_complex():  # the pairs times cos + i sin: a rotation
            c = others[0]
            return Pat("cpxrot", node, shape, **dict(P[0].f, cos=Const(c.val.real.contiguous(), c.srcs),
                                                     sin=Const(c.val.imag.contiguous(), c.srcs)))
        if op == "mul" and len(P) == 1 and P[0].kind == "pair" and len(others) == 1 and \
                isinstance(others[0], Const) and scalar_of(others[0]) is None:
            return Pat("pairmul", node, shape, **dict(P[0].f, c=others[0]))
        if op in ("add", "sub") and len(P) == 2 and all(p.kind == "pairmul" for p in P) and \
                P[0].f["x"] is P[1].f["x"] and {P[0].f["part"], P[1].f["part"]} == {0, 1}:
            # x_re * cos - x_im * sin (the real part), x_re * sin + x_im * cos (the imaginary part); the
            # sine's table is the one that is 0 at position 0
            re_, im_ = (P[0], P[1]) if P[0].f["part"] == 0 else (P[1], P[0])

            def sine(c):
                v = c.val
                return isinstance(v, torch.Tensor) and v.dim() >= 1 and bool(torch.all(v.reshape(-1, v.shape[-1])[0] == 0))
            if op == "sub" and operands[0] is re_ and not sine(re_.f["c"]) and sine(im_.f["c"]):
                return Pat("pairrot", node, shape, **dict(re_.f, which=0, cos=re_.f["c"], sin=im_.f["c"]))
            if op == "add" and sine(re_.f["c"]) and not sine(im_.f["c"]):
                return Pat("pairrot", node, shape, **dict(re_.f, which=1, cos=im_.f["c"], sin=re_.f["c"]))
        if op == "tanh" and len(P) == 1 and P[0].kind == "scores" and P[0].f["cap"] is None and \
                P[0].f["window"] is None:  # soft-capped scores: cap * tanh(scores / cap) (Gemma 2)
            return Pat("scores", node, shape, **dict(P[0].f, cap=1.0))
        if len(P) == 1 and P[0].kind == "scores" and len(others) == 1:  # a written-out attention
            p, o = P[0], others[0]
            c = scalar_of(o)
            k = "cap" if p.f["cap"] is not None else "scale"  # after tanh: the cap's multiplier
            if op == "mul" and c is not None and (k == "scale" or p.f["window"] is None):
                return Pat("scores", node, shape, **dict(p.f, **{k: p.f[k] * c}))
            if op == "div" and c is not None and operands[0] is p and c != 0 and \
                    (k == "scale" or p.f["window"] is None):
                return Pat("scores", node, shape, **dict(p.f, **{k: p.f[k] / c}))
            if op == "add" and isinstance(o, Const) and c is None and p.f["window"] is None:
                # an additive mask: 0 where a key is seen, -inf where not (llama2.c, Meta's llama)
                W = self._causal_window(node, o, p.f["H"], p.f["T"])
                return Pat("scores", node, shape, **dict(p.f, window=W))
        if op == "add" and len(P) == 1 and len(others) == 1:
            p = P[0]
            eps = scalar_of(others[0])
            if p.kind == "meansq" and eps is not None:
                return Pat("meansq_eps", node, shape, x=p.f["x"], eps=eps)
        if op == "add" and len(P) == 2:
            a, b = P
            if a.kind == "mulrot":
                a, b = b, a
            if a.kind == "mulc" and b.kind == "mulrot" and same_src(a.f["x"], b.f["x"]):
                return self.rope(node, a.f["x"], a.f["c"], b.f["c"])
        if op in ("rsqrt", "sqrt") and P[0].kind == "meansq_eps":
            return Pat("rstd" if op == "rsqrt" else "std", node, shape, x=P[0].f["x"], eps=P[0].f["eps"])
        if op == "reciprocal" and P[0].kind == "std":
            return Pat("rstd", node, shape, **P[0].f)
        if op == "mul" and len(P) == 1 and len(others) == 1:
            p, o = P[0], others[0]
            if p.kind == "rstd" and o is p.f["x"]:
                return Pat("normed", node, shape, **p.f)
            if p.kind == "normed" and is_tensor_value(o) and len(o.shape) == 1 and \
                    o.shape[0] == p.shape[-1]:
                x = self.mat(p.f["x"], node)
                w = self.mat(o, node)
                return self.emit("rmsnorm", [x, w], [x.shape, x.shape[:-1]],
                                 {"eps": Attr.f64(p.f["eps"])})[0]
            if p.kind == "rothalf" and isinstance(o, Const):
                return Pat("mulrot", node, shape, x=p.f["x"], c=o)
        if op == "div" and len(P) == 1 and operands[1] is P[0] and P[0].kind == "std" and \
                operands[0] is P[0].f["x"]:
            return Pat("normed", node, shape, **P[0].f)
        if op == "neg" and P[0].kind == "slice":
            return Pat("negslice", node, shape, **P[0].f)
        return None

    def rope(self, node, q, cos, sin):
        R = None  # a partial rotary: q is q_heads[..., :R] (GPT-NeoX, Phi)
        whole = q
        if isinstance(q, Pat) and q.kind == "slice":
            whole, R = q.f["x"], q.f["end"]
            if q.f["start"] != 0 or q.f["dim"] != len(whole.shape) - 1 or R % 2 != 0:
                self.fail_at(node, "rotary embeddings of a part of each head other than its first "
                                   "elements (an even number of them)")
        hl = heads_layout(whole)
        if hl is None:
            self.fail_at(node, "rotary embeddings of a tensor that is not the heads of a "
                               "[B,T,H*D] projection")
        base, H, D, lay = hl
        B, T, _ = base.shape
        qshape = q.shape
        try:
            cb = torch.broadcast_to(cos.val, qshape).to(torch.float32)
            sb = torch.broadcast_to(sin.val, qshape).to(torch.float32)
        except RuntimeError:
            self.fail_at(node, "rotary tables that do not broadcast to the query")
        if lay == "bhtd":
            ct, st = cb[0, 0], sb[0, 0]
            same = bool(torch.all(cb == ct)) and bool(torch.all(sb == st))
        else:
            ct, st = cb[0, :, 0], sb[0, :, 0]
            same = bool(torch.all(cb == ct[None, :, None])) and bool(torch.all(sb == st[None, :, None]))
        if not same:
            self.fail_at(node, "rotary tables that differ between sequences or heads (bigc.rope "
                               "rotates position t of every sequence alike)")
        half = (R if R is not None else D) // 2
        inv, s = self._rope_freqs(node, ct, st, sorted(set(cos.srcs) | set(sin.srcs)), T, half, halves=True)
        y = self._emit_rope(node, base, D, inv, s, interleaved=False)  # rotates the first 2 * len(inv)
        y = heads_view(y, H, D) if lay == "bhtd" else make_view(y, ("r", (B, T, H, D)))
        if R is not None:  # the rest joins it in torch.cat([q_embed, q[..., R:]], -1)
            return Pat("partrope", node, q.shape, y=y, src=whole, R=R)
        return y

    def _emit_rope(self, node, base, D, inv, s, interleaved):
        """bigc.rope of the [B,T,H*D] tensor `base` with frequencies `inv` and scale `s`."""
        x = self.mat(base, node)
        attrs = {"head_dim": Attr.i64(D), "inv_freq": Attr.f64_array([float(v) for v in inv])}
        if interleaved:
            attrs["interleaved"] = Attr.UNIT
        if s != 1.0:
            attrs["attention_scaling"] = Attr.f64(s)
        return self.emit("rope", [x], [x.shape], attrs)[0]

    def _rope_freqs(self, node, ct, st, srcs, T, half, halves=False):
        """(inv_freq, scale) of rotary tables ct, st [T, half] (cos and sin of inv_freq[i] * t, times
        the scale; `halves`: [T, 2*half], the table twice, as rotate_half's): the module's inv_freq
        buffer where it has one, else fitted to the tables; an error where the tables are not
        that formula."""
        s = float(ct[0, 0])
        inv = None
        for pref in (True, False):
            for name in srcs:
                if not name.endswith("inv_freq"):
                    continue
                if pref and name.endswith("original_inv_freq"):
                    continue
                t = self.buffer_value(name)
                if t is not None and t.numel() == half:
                    inv = t.detach().to(torch.float32).flatten()
                    break
            if inv is not None:
                break
        pos = torch.arange(T, dtype=torch.float32)
        if inv is None and T > 1 and s != 0:  # no inv_freq buffer: the frequencies of the tables
            inv = fit_inv_freq(ct[:, :half], st[:, :half], s)
        if inv is None:
            self.fail_at(node, "rotary embeddings whose frequencies cannot be found (no inv_freq "
                               "buffer)")
        a = inv[None, :] * pos[:, None]
        want_c, want_s = a.cos() * s, a.sin() * s
        if halves:
            want_c, want_s = torch.cat([want_c, want_c], dim=-1), torch.cat([want_s, want_s], dim=-1)
        err = max(float((want_c - ct).abs().max()), float((want_s - st).abs().max()))
        if not err <= 1e-5 * max(1.0, abs(s)):
            self.fail_at(node, f"rotary tables that are not bigc.rope's formula (cos/sin of "
                               f"inv_freq[i]*t for t = 0..{T - 1}, times {s:g}): they differ by "
                               f"{err:.3g}")
        return inv, s

    # --- the walk ------------------------------------------------------------------------------
    def buffer_value(self, fqn):
        """A buffer's value: the one given for it (a model built on the meta device has its buffers'
        values from its initialisation, taken aside), else the exported program's."""
        ep = self.ep
        t = self.buffers.get(fqn)
        if t is None and fqn in ep.state_dict:
            t = ep.state_dict[fqn]
        if t is None and fqn in ep.constants:
            t = ep.constants[fqn]
        if isinstance(t, torch.Tensor) and t.is_meta:
            self.fail_at(self.cur, f"the buffer '{fqn[len(self.strip):]}' has no value (the model is built "
                         "without materialising it, and its initialisation does not set it)")
        return t

    def placeholder(self, node):
        sig = self.sig
        name = node.name
        if name in sig.inputs_to_parameters:
            return self.tied[name]
        if name in sig.inputs_to_buffers:
            fqn = sig.inputs_to_buffers[name]
            t = self.buffer_value(fqn)
            return Const(t, {fqn})
        if name in getattr(sig, "inputs_to_lifted_tensor_constants", {}):
            fqn = sig.inputs_to_lifted_tensor_constants[name]
            return Const(self.buffer_value(fqn), {fqn})
        if name in getattr(sig, "inputs_to_lifted_custom_objs", {}):
            self.fail_at(node, "a module holding custom objects")
        # a user input: tokens, then targets
        idx = len(self.user_inputs)
        ssa = ["%tokens", "%targets"][idx] if idx < 2 else f"%input{idx}"
        self.b.names.add(ssa[1:])
        v = node.meta.get("val")
        if v is None or v.dtype not in (torch.int64, torch.int32):
            raise UserError("the example batch must be two integer tensors (tokens, targets)")
        t = Ten(ssa, v.shape, "i32")
        self.user_inputs.append(t)
        return t

    def resolve(self, a):
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.resolve(x) for x in a)
        if isinstance(a, dict):
            return {k: self.resolve(v) for k, v in a.items()}
        return a

    def all_const(self, a):
        if isinstance(a, (list, tuple)):
            return all(self.all_const(x) for x in a)
        if isinstance(a, dict):
            return all(self.all_const(x) for x in a.values())
        return not isinstance(a, Value) or isinstance(a, Const)

    @staticmethod
    def unwrap(a, srcs):
        if isinstance(a, Const):
            srcs |= a.srcs
            return a.val
        if isinstance(a, (list, tuple)):
            return type(a)(Lowerer.unwrap(x, srcs) for x in a)
        if isinstance(a, dict):
            return {k: Lowerer.unwrap(v, srcs) for k, v in a.items()}
        return a

    def fold(self, node, args, kwargs):
        srcs = set()
        a = self.unwrap(args, srcs)
        k = self.unwrap(kwargs, srcs)
        target = node.target
        name = getattr(target, "__name__", "")
        with torch.no_grad():
            if name == "wrap_with_set_grad_enabled":
                enabled, sub, *rest = a
                with torch.set_grad_enabled(enabled):
                    val = sub(*rest)
            elif name == "wrap_with_autocast":
                sub = a[4]
                val = sub(*a[5:])
            else:
                val = target(*a, **k)
        if isinstance(val, (list, tuple)):
            return type(val)(Const(x, srcs) for x in val)
        if self.cache_writes and isinstance(val, torch.Tensor):
            written = self._cache_read(node, val)
            if written is not None:
                return written
        return Const(val, srcs)

    @staticmethod
    def _span(t):
        """The bytes [first, last] a strided view reaches in its storage."""
        lo = t.storage_offset() * t.element_size()
        hi = lo + sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n > 0) * t.element_size()
        return t.untyped_storage().data_ptr(), lo, hi

    def _cache_read(self, node, val):
        """The value a step wrote into a cache, when val is a view of exactly what it wrote (Meta's
        llama: keys = cache_k[:B, :T] after cache_k[:B, 0:T] = xk); an error when it reads part of
        it or more; None when it reads none of it."""
        if val.numel() == 0:
            return None
        ptr, lo, hi = self._span(val)
        for dst, src in reversed(self.cache_writes):
            dptr, dlo, dhi = self._span(dst)
            if dptr != ptr or hi < dlo or dhi < lo:
                continue
            if tuple(dst.shape) == tuple(val.shape) and dst.stride() == val.stride() and \
                    dst.storage_offset() == val.storage_offset():
                return src
            self.fail_at(node, f"a read of {list(val.shape)} from a tensor this step wrote "
                               f"{list(dst.shape)} of (a KV cache?): bigc keeps no state between steps, so a "
                               "step may read back exactly what it wrote (cache[:B, :T] after cache[:B, 0:T] = "
                               "k, with start_pos 0), nothing older")
        return None

    def op_copy(self, node, a):
        """dst.copy_(src) into a constant tensor's view (a KV cache): later reads of that view are src."""
        dst, src = a["self"], a["src"]
        if not node.target._schema.name.endswith("_"):  # aten.copy: src's values in dst's shape
            if is_tensor_value(src) and tuple(dst.shape) == tuple(src.shape):
                return src
            self.fail_node(node)
        if isinstance(dst, Const) and isinstance(dst.val, torch.Tensor) and is_tensor_value(src) and \
                tuple(dst.val.shape) == tuple(src.shape):
            self.cache_writes.append((dst.val, src))
            return src
        self.fail_node(node, "an in-place copy into a tensor other than a constant's view (a KV cache "
                             "written by the step)")

    def declare_params(self):
        """One Param per parameter tensor: tied parameters (placeholders of one storage) are
        one, under the name of the placeholder the graph reads."""
        groups = {}
        order = []
        for node in self.ep.graph.nodes:
            if node.op != "placeholder" or node.name not in self.sig.inputs_to_parameters:
                continue
            fqn = self.sig.inputs_to_parameters[node.name]
            t = self.ep.state_dict[fqn]
            if t.is_meta:  # no storage: a tied parameter is one tensor object
                key = ("meta", id(t))
            else:
                key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()))
            if key not in groups:
                groups[key] = []
                order.append(key)
            groups[key].append((node, fqn, t))
        self.tied = {}
        for key in order:
            g = groups[key]
            node, fqn, t = next((x for x in g if len(x[0].users) > 0), g[0])
            pname = fqn[len(self.strip):] if fqn.startswith(self.strip) else fqn
            p = Param(pname, t.shape)
            self.params.append((pname, t))
            for n, _, _ in g:
                self.tied[n.name] = p

    def run(self):
        graph = self.ep.graph
        self.declare_params()
        outputs = None
        for node in graph.nodes:
            self.cur = node
            if node.op == "placeholder":
                self.env[node] = self.placeholder(node)
            elif node.op == "get_attr":
                obj = self.gm
                for part in node.target.split("."):
                    obj = getattr(obj, part)
                self.env[node] = Const(obj)
            elif node.op == "call_function":
                self.env[node] = self.call(node)
            elif node.op == "output":
                outputs = node.args[0]
        if not self.user_inputs or len(self.user_inputs) != 2:
            raise UserError("the module must take two inputs (tokens, targets)")
        user_outs = [s for s in self.sig.output_specs if s.kind.name == "USER_OUTPUT"]
        if len(user_outs) != 1:
            raise AssertionError("the wrapper returns one loss")
        idx = [s for s in self.sig.output_specs].index(user_outs[0])
        out_node = outputs[idx]
        self.cur = out_node
        loss = self.env[out_node]
        if isinstance(loss, Const):
            raise UserError("the loss does not depend on the inputs or the parameters")
        loss = self.mat(loss, out_node)
        if loss.shape != () or loss.dtype != "f32":
            raise UserError(f"the loss must be a 0-dim float tensor; it has shape {list(loss.shape)}")
        return loss

    def call(self, node):
        args = self.resolve(node.args)
        kwargs = self.resolve(node.kwargs)
        if self.all_const(args) and self.all_const(kwargs):
            return self.fold(node, args, kwargs)
        t = node.target
        if t is operator.getitem:
            c, i = args
            if isinstance(c, (list, tuple)):
                return c[i]
            self.fail_node(node)
        name = getattr(t, "__name__", "")
        if name in ("wrap_with_set_grad_enabled", "wrap_with_autocast"):
            self.fail_at(node, "a torch.no_grad()/autocast region over trained values (bigc "
                               "differentiates the whole step)")
        if not isinstance(t, torch._ops.OpOverload):
            self.fail_node(node)
        bn = base_name(node)
        h = getattr(self, "op_" + bn, None)
        if h is None:
            if bn in UNARY_OPS:
                return self.elementwise(node, UNARY_OPS[bn], [args[0]])
            self.fail_node(node)
        a = bind(node, args, kwargs)
        return h(node, a)

    # --- op handlers ---------------------------------------------------------------------------
    # pass-through

    def op__assert_tensor_metadata(self, node, a):
        return None

    def _identity(self, node, a):
        return a["self"]

    op_contiguous = op_clone = op_alias = op_detach = op_lift_fresh_copy = op_identity = _identity

    def _cast(self, node, x, dtype):
        if dtype is None or not is_tensor_value(x):
            return x
        if x.dtype == "i32" and dtype in (torch.int64, torch.int32):
            return x
        if x.dtype == "f32" and dtype == torch.float32:
            return x
        self.fail_node(node, f"a cast to {dtype}", "bigc computes in fp32 and makes its own "
                       "16-bit copies (bigc compile --precision)")

    def op_to(self, node, a):
        return self._cast(node, a["self"], a.get("dtype"))

    def op__to_copy(self, node, a):
        return self._cast(node, a["self"], a.get("dtype"))

    def op_type_as(self, node, a):
        o = a["other"]
        dt = torch.float32 if getattr(o, "dtype", "f32") == "f32" else torch.int64
        if isinstance(o, Const) and isinstance(o.val, torch.Tensor):
            dt = o.val.dtype
        return self._cast(node, a["self"], dt)

    def op_dropout(self, node, a):
        if a["p"] == 0 or not a["train"]:
            return a["input"]
        self.fail_node(node, f"dropout with p={a['p']:g} in training mode",
                       "bigc has no dropout: set it to 0, or call module.eval()")

    op_feature_dropout = op_alpha_dropout = op_dropout

    # views

    def _view(self, node, x, op):
        if isinstance(x, Pat) and x.kind == "pairstack" and op[0] == "r":
            r = self._interleaved_rope(node, x, tuple(op[1]))
            if r is not None:
                return r
        if isinstance(x, Pat):
            if x.kind == "expand" and op[0] == "r":
                r = self.repeat_kv(node, x, op[1])
                if r is not None:
                    return r
            if x.kind == "repeat_kv" and op == ("t", (0, 1, 3, 2)):  # repeat_kv(k).transpose(2, 3)
                return Pat("repeat_kv_t", node, out_shape(node), kv=x.f["kv"], n=x.f["n"])
            if x.kind == "repeat_kv_bthd" and op == ("t", (0, 2, 1, 3)):  # to [B,H,T,D]
                return Pat("repeat_kv", node, out_shape(node), kv=make_view(x.f["kv"], op), n=x.f["n"])
            self.force_pat(x, node)
        if isinstance(x, Elem):
            x = self.mat(x, node)
        return make_view(x, op)

    def op_view(self, node, a):
        return self._view(node, a["self"], ("r", out_shape(node)))

    op_reshape = op__unsafe_view = op_view_copy = op_unsqueeze = op_squeeze = op_view
    op_view_as = op_view  # (fairscale's model-parallel regions of one rank: x.view_as(x))

    def op_moe(self, node, a):
        """torch.ops.bigc.moe (moe.py: a Hugging Face MoE block captured whole) as bigc.moe."""
        x, ws = a["x"], [a["router"], a["gate_up"], a["down"]]
        if not all(isinstance(w, Param) for w in ws):
            self.fail_node(node, "a mixture of experts whose weights are not parameters")
        xt = self.mat(x, node)
        ts = [self.mat(w, node) for w in ws]
        attrs = {"top_k": Attr.i64(int(a["top_k"]))}
        if a["normalize"]:
            attrs["normalize"] = Attr.UNIT
        return self.emit("moe", [xt] + ts, [xt.shape], attrs, node=node)[0]
    op_flatten = op_unflatten = op_view

    def op_transpose(self, node, a):
        x = a["self"]
        r = len(x.shape)
        d0, d1 = norm_dim(a["dim0"], r), norm_dim(a["dim1"], r)
        perm = list(range(r))
        perm[d0], perm[d1] = perm[d1], perm[d0]
        return self._view(node, x, ("t", tuple(perm)))

    def op_permute(self, node, a):
        x = a["self"]
        r = len(x.shape)
        return self._view(node, x, ("t", tuple(norm_dim(d, r) for d in a["dims"])))

    def op_t(self, node, a):
        x = a["self"]
        if len(x.shape) < 2:
            return x
        return self._view(node, x, ("t", (1, 0)))

    def op_expand(self, node, a):
        x = a["self"]
        shape = out_shape(node)
        if tuple(x.shape) == shape:
            return x
        return Pat("expand", node, shape, x=x)

    def op_repeat_interleave(self, node, a):
        """k.repeat_interleave(n, dim=1) of a heads view: query head h reads key/value head
        h // n, as repeat_kv."""
        x, n, dim = a.get("self"), a.get("repeats"), a.get("dim")
        if isinstance(n, int) and dim is not None and is_tensor_value(x) and len(x.shape) == 4 and \
                norm_dim(dim, 4) == 1:
            hl = heads_layout(x)
            if hl is not None and hl[3] == "bhtd":
                return Pat("repeat_kv", node, out_shape(node), kv=x, n=n)
        self.fail_node(node, "repeat_interleave other than of key/value heads for attention")

    def repeat_kv(self, node, p, target):
        x = p.f["x"]
        s = x.shape
        e = p.shape
        if len(s) == 5 and s[2] == 1 and len(target) == 4 and e[2] * e[1] == target[1] and \
                e[0] == s[0] and e[1] == s[1] and e[3:] == s[3:] and tuple(target[2:]) == tuple(s[3:]):
            kv = make_view(x, ("r", (s[0], s[1], s[3], s[4])))
            if heads_layout(kv) is not None and heads_layout(kv)[3] == "bhtd":
                return Pat("repeat_kv", node, tuple(target), kv=kv, n=e[2])
        # Meta's llama: x [B,T,Hk,D] as x[:, :, :, None, :].expand(B,T,Hk,n,D).reshape(B,T,Hk*n,D),
        # then .transpose(1, 2) (below, in _view)
        if len(s) == 5 and s[3] == 1 and len(target) == 4 and e[2] * e[3] == target[2] and \
                tuple(e[:3]) == tuple(s[:3]) and e[4] == s[4] and tuple(target[:2]) == tuple(s[:2]) and \
                target[3] == s[4]:
            kv = make_view(x, ("r", (s[0], s[1], s[2], s[4])))
            if heads_layout(kv) is not None and heads_layout(kv)[3] == "bthd":
                return Pat("repeat_kv_bthd", node, tuple(target), kv=kv, n=e[3])
        return None

    def op_slice(self, node, a):
        x = a["self"]
        r = len(x.shape)
        dim = norm_dim(a["dim"], r)
        n = x.shape[dim]
        start = a["start"] if a["start"] is not None else 0
        end = a["end"] if a["end"] is not None else n
        start = max(0, min(n, norm_dim(start, n) if start < 0 else start))
        end = max(0, min(n, norm_dim(end, n) if end < 0 else end))
        if a.get("step", 1) not in (1, None):
            self.fail_node(node, "a strided slice")
        if start == 0 and end == n:
            return x
        if isinstance(x, Elem):
            x = self.mat(x, node)
        if isinstance(x, Pat) and x.kind == "slice" and x.f["dim"] == dim:  # a slice of a slice
            o = x.f["start"]
            return Pat("slice", node, out_shape(node), x=x.f["x"], dim=dim, start=o + start, end=o + end)
        if isinstance(x, Pat):  # materialised once: the slices of one value stay slices of one tensor
            if getattr(x, "forced", None) is None:
                x.forced = self.force_pat(x, node)
            x = x.forced
        return Pat("slice", node, out_shape(node), x=x, dim=dim, start=start, end=end)

    def _split(self, node, x, sizes, dim):
        hl = heads_layout(x)
        if hl is not None and norm_dim(dim, 4) == 3 and len(sizes) > 1:
            return self._split_heads(node, hl, sizes)
        if isinstance(x, (Elem, Pat, View)):
            x = self.mat(x, node)
        dim = norm_dim(dim, len(x.shape))
        if len(sizes) == 1:
            return [x]
        g = Group(x, dim, sizes)
        return [Part(g, i) for i in range(len(sizes))]

    def _split_heads(self, node, hl, sizes):
        """Each head of a [B,T,H*D] tensor split along its D into parts (GPT-NeoX's query_key_value
        holds [q k v] per head): the parts as [B,T,H*d] tensors seen in the same heads layout."""
        base, H, D, lay = hl
        B, T, _ = base.shape
        t4 = self.mat(make_view(base, ("r", (B, T, H, D))), node)
        if len(set(sizes)) == 1:
            parts = self.emit("split", [t4], [(B, T, H, sizes[0])] * len(sizes), {"axis": Attr.i64(3)},
                              hints=["split"], node=node)
        else:
            offs = [sum(sizes[:i]) for i in range(len(sizes))]
            parts = [self.slice_ten(t4, 3, o, o + s, node) for o, s in zip(offs, sizes)]
        out = []
        for p_, s in zip(parts, sizes):
            t = self.mat(make_view(p_, ("r", (B, T, H * s))), node)
            out.append(heads_view(t, H, s) if lay == "bhtd" else make_view(t, ("r", (B, T, H, s))))
        return out

    def op_split(self, node, a):
        x = a["self"]
        dim = a["dim"]
        n = x.shape[norm_dim(dim, len(x.shape))]
        step = a["split_size"]
        sizes = [min(step, n - o) for o in range(0, n, step)]
        return self._split(node, x, sizes, dim)

    def op_split_with_sizes(self, node, a):
        return self._split(node, a["self"], list(a["split_sizes"]), a["dim"])

    def op_chunk(self, node, a):
        x = a["self"]
        n = x.shape[norm_dim(a["dim"], len(x.shape))]
        step = -(-n // a["chunks"])
        sizes = [min(step, n - o) for o in range(0, n, step)]
        return self._split(node, x, sizes, a["dim"])

    # --- rotary embeddings of interleaved pairs (llama2.c: each head's adjacent elements as the real
    # and imaginary parts of a complex number, unbound, rotated by cos/sin tables, stacked back) -----
    def op_unbind(self, node, a):
        x, dim = a["self"], a.get("dim", 0)
        if isinstance(x, View) and len(x.shape) == 5 and norm_dim(dim, 5) == 4 and x.shape[4] == 2 and \
                len(x.base.shape) == 3 and list(x.chain) == compose_chain(x.base.shape, [("r", x.shape)]):
            B, T, C = x.base.shape
            H, half = x.shape[2], x.shape[3]
            if tuple(x.shape[:2]) == (B, T) and H * half * 2 == C:
                return [Pat("pair", node, x.shape[:4], x=x.base, H=H, D=2 * half, part=k) for k in (0, 1)]
        self.fail_node(node)

    # Meta's llama: the pairs as complex numbers (view_as_complex of a [..., D/2, 2] view), multiplied
    # by the complex table freqs_cis (torch.polar), view_as_real and flattened back: the same
    # rotation of interleaved pairs
    def op_view_as_complex(self, node, a):
        x = a["self"]
        if isinstance(x, View) and len(x.shape) == 5 and x.shape[4] == 2 and len(x.base.shape) == 3 and \
                list(x.chain) == compose_chain(x.base.shape, [("r", x.shape)]):
            B, T, C = x.base.shape
            H, half = x.shape[2], x.shape[3]
            if tuple(x.shape[:2]) == (B, T) and H * half * 2 == C:
                return Pat("cpx", node, x.shape[:4], x=x.base, H=H, D=2 * half)
        self.fail_node(node)

    def op_view_as_real(self, node, a):
        x = a["self"]
        if isinstance(x, Pat) and x.kind == "cpxrot":
            return Pat("pairstack", node, out_shape(node), **x.f)
        if isinstance(x, Pat):
            self.force_pat(x, node)
        self.fail_node(node)

    def op_stack(self, node, a):
        ts, dim = list(a["tensors"]), a.get("dim", 0)
        if len(ts) == 2 and all(isinstance(t, Pat) and t.kind == "pairrot" for t in ts) and \
                ts[0].f["x"] is ts[1].f["x"] and (ts[0].f["which"], ts[1].f["which"]) == (0, 1) and \
                norm_dim(dim, 5) == 4:
            re_, im_ = ts
            for k in ("cos", "sin"):
                a_, b_ = re_.f[k].val, im_.f[k].val
                if not (isinstance(a_, torch.Tensor) and isinstance(b_, torch.Tensor) and a_.shape == b_.shape
                        and torch.equal(a_, b_)):
                    self.fail_at(node, "rotary embeddings of interleaved pairs whose real and imaginary "
                                       "parts are rotated by different tables")
            return Pat("pairstack", node, out_shape(node), **re_.f)
        for t in ts:
            if isinstance(t, Pat):
                self.force_pat(t, node)
        self.fail_node(node)

    def _interleaved_rope(self, node, p, shape):
        base, H, D = p.f["x"], p.f["H"], p.f["D"]
        B, T, _ = base.shape
        if shape != (B, T, H, D):
            return None
        half = D // 2
        tabs = []
        for k in ("cos", "sin"):
            try:
                t = torch.broadcast_to(p.f[k].val, (B, T, H, half)).to(torch.float32)
            except RuntimeError:
                self.fail_at(node, "rotary tables that do not broadcast to the pairs")
            if not bool(torch.all(t == t[0:1, :, 0:1, :])):
                self.fail_at(node, "rotary tables that differ between sequences or heads (bigc.rope "
                                   "rotates position t of every sequence alike)")
            tabs.append(t[0, :, 0, :])
        srcs = sorted(set(p.f["cos"].srcs) | set(p.f["sin"].srcs))
        inv, s = self._rope_freqs(node, tabs[0], tabs[1], srcs, T, half)
        return make_view(self._emit_rope(node, base, D, inv, s, interleaved=True), ("r", (B, T, H, D)))

    def op_cat(self, node, a):
        xs = list(a["tensors"])
        shape = out_shape(node)
        dim = norm_dim(a["dim"], len(shape))
        if len(xs) == 2 and all(isinstance(x, Pat) for x in xs):
            n, s = xs
            if n.kind == "negslice" and s.kind == "slice" and n.f["x"] is s.f["x"]:
                q = s.f["x"]
                D = q.shape[-1]
                last = len(q.shape) - 1
                h = s.f["end"] - s.f["start"]
                if n.f["dim"] == last and s.f["dim"] == last and dim == last and s.f["start"] == 0 and \
                        (n.f["start"], n.f["end"]) == (h, 2 * h):
                    if 2 * h == D:
                        return Pat("rothalf", node, shape, x=q)
                    # rotate_half of a partial rotary's q[..., :2h]
                    part = Pat("slice", node, shape, x=q, dim=last, start=0, end=2 * h)
                    return Pat("rothalf", node, shape, x=part)
            if n.kind == "partrope" and s.kind == "slice" and s.f["x"] is n.f["src"]:
                last = len(shape) - 1
                if dim == last and s.f["dim"] == last and (s.f["start"], s.f["end"]) == (n.f["R"], shape[-1]):
                    return n.f["y"]
        xs = [x for x in xs if not (is_tensor_value(x) and 0 in x.shape)]
        if len(xs) == 1:  # beside empty parts (Phi-3's rotary: [rotated, the empty rest]): itself
            return xs[0]
        if any(isinstance(x, Const) for x in xs):
            self.fail_node(node, "concatenation with a constant tensor: bigc's graph holds no "
                                 "constants")
        ts = [self.mat(x, node) for x in xs]
        if len(ts) == 1:
            return ts[0]
        return self.emit("concat", ts, [shape], {"axis": Attr.i64(dim)})[0]

    # elementwise

    def op_add(self, node, a):
        alpha = a.get("alpha", 1)
        other = a["other"]
        if alpha not in (None, 1):
            if is_tensor_value(other):
                return self.elementwise(node, "add", [a["self"], self.elementwise_scaled(node, other, alpha)])
            other = Const(torch.as_tensor(self.unwrap(other, set())) * alpha)
        return self.elementwise(node, "add", [a["self"], other])

    def elementwise_scaled(self, node, x, alpha):
        return Elem(ENode("mul", [self.leaf(x), float(alpha)], node), x.shape, node)

    def op_sub(self, node, a):
        alpha = a.get("alpha", 1)
        other = a["other"]
        if alpha not in (None, 1):
            if is_tensor_value(other):
                return self.elementwise(node, "sub", [a["self"], self.elementwise_scaled(node, other, alpha)])
            other = Const(torch.as_tensor(self.unwrap(other, set())) * alpha)
        return self.elementwise(node, "sub", [a["self"], other])

    def op_rsub(self, node, a):
        return self.elementwise(node, "sub", [a["other"], a["self"]])

    def op_mul(self, node, a):
        return self.elementwise(node, "mul", [a["self"], a["other"]])

    def op_div(self, node, a):
        if a.get("rounding_mode") is not None:
            self.fail_node(node, "integer division")
        return self.elementwise(node, "div", [a["self"], a["other"]])

    def op_pow(self, node, a):
        if "exponent" in a and not is_tensor_value(a["exponent"]) and is_tensor_value(a.get("self")):
            return self.elementwise(node, "pow", [a["self"], a["exponent"]])
        self.fail_node(node)

    def op_gelu(self, node, a):
        approx = a.get("approximate") or "none"
        return self.elementwise(node, "gelu_tanh" if approx == "tanh" else "gelu_none", [a["self"]])

    def op_mean(self, node, a):
        x = a["self"]
        dims = a.get("dim")
        r = len(x.shape)
        if isinstance(x, Elem) and dims is not None and len(dims) == 1 and \
                norm_dim(dims[0], r) == r - 1 and a.get("keepdim"):
            vs = collect_vars(x.root)
            if len(vs) == 1:
                k, v = next(iter(vs.items()))
                if recognise.is_square(x.root, k):  # x * x, x ** 2, x.square(): an RMSNorm's statistic
                    return Pat("meansq", node, out_shape(node), x=v)
        self.fail_node(node)

    # compute

    def _rowwise(self, x):
        """(base, rewrap) when x is a reshape of base that keeps the last dimension (the 2-D
        view of a [B,T,C] activation that Conv1D and addmm use)."""
        if isinstance(x, View) and len(x.chain) == 1 and x.chain[0][0] == "r" and \
                len(x.base.shape) >= 2 and x.base.shape[-1] == x.shape[-1] and \
                x.base.dtype == "f32":
            lead = x.shape[:-1]
            return x.base, lambda t: make_view(t, ("r", tuple(lead) + (t.shape[-1],)))
        return x, lambda t: t

    def _weight(self, w, node):
        """(tensor, transposed) for a matmul's second operand: a transposed view of a 2-D
        tensor is the tensor with transpose_b."""
        if isinstance(w, View) and len(w.base.shape) == 2 and w.chain == (("t", (1, 0)),):
            return self.mat(w.base, node), True
        return self.mat(w, node), False

    def _linear(self, node, x, w, wt, bias):
        base, rewrap = self._rowwise(x)
        xt = self.mat(base, node)
        if len(xt.shape) < 2:
            self.fail_node(node, "a matrix product with a vector")
        n_out = w.shape[0] if wt else w.shape[1]
        attrs = {"transpose_b": Attr.UNIT} if wt else {}
        y = self.emit("matmul", [xt, w], [xt.shape[:-1] + (n_out,)], attrs)[0]
        if bias is not None:
            bt = self.mat(bias, node)
            y = self.emit("bias_add", [y, bt], [y.shape], hints=[node.name + "_bias"])[0]
        return rewrap(y)

    def op_linear(self, node, a):
        w = a["weight"]
        if len(w.shape) != 2:
            self.fail_node(node)
        wt, tr = self._weight(w, node)
        return self._linear(node, a["input"], wt, not tr, a.get("bias"))

    def op_addmm(self, node, a):
        if a.get("beta", 1) != 1 or a.get("alpha", 1) != 1:
            self.fail_node(node, "addmm with beta/alpha")
        bias = a["self"]
        if not is_tensor_value(bias) or len(bias.shape) != 1:
            self.fail_node(node, "addmm with a bias that is not a vector")
        wt, tr = self._weight(a["mat2"], node)
        return self._linear(node, a["mat1"], wt, tr, bias)

    def op_mm(self, node, a):
        wt, tr = self._weight(a["mat2"], node)
        return self._linear(node, a["self"], wt, tr, None)

    def op_matmul(self, node, a):
        x, w = a["self"], a["other"]
        if len(w.shape) == 2 and len(x.shape) >= 2:
            wt, tr = self._weight(w, node)
            return self._linear(node, x, wt, tr, None)
        return self.op_bmm(node, {"self": x, "mat2": w})

    def op_bmm(self, node, a):
        x, w = a["self"], a["mat2"]
        if isinstance(x, Pat) and x.kind == "probs":
            return self._written_attention(node, x, w)
        s = self._scores(node, x, w)
        if s is not None:
            return s
        return self._bmm(node, x, w)

    def _bmm(self, node, x, w):
        if len(x.shape) != len(w.shape) or len(x.shape) < 3 or x.shape[:-2] != w.shape[:-2]:
            self.fail_node(node, "a batched matrix product with broadcasting")
        tr = False
        if isinstance(w, View) and w.chain and w.chain[-1][0] == "t":
            perm = w.chain[-1][1]
            r = len(perm)
            if list(perm) == list(range(r - 2)) + [r - 1, r - 2]:
                inner = View(w.base, w.chain[:-1], tuple(w.shape[:-2]) + (w.shape[-1], w.shape[-2])) \
                    if len(w.chain) > 1 else w.base
                w, tr = inner, True
        xt = self.mat(x, node)
        wt = self.mat(w, node)
        n_out = wt.shape[-2] if tr else wt.shape[-1]
        attrs = {"transpose_b": Attr.UNIT} if tr else {}
        return self.emit("matmul", [xt, wt], [xt.shape[:-1] + (n_out,)], attrs)[0]

    def op_embedding(self, node, a):
        w, ids = a["weight"], a["indices"]
        if len(w.shape) != 2:
            self.fail_node(node)
        if isinstance(ids, Const):
            t = ids.val
            flat = t.flatten().to(torch.int64)
            if flat.numel() == 0:
                self.fail_node(node)
            start = int(flat[0])
            if not torch.equal(flat, torch.arange(start, start + flat.numel())):
                self.fail_node(node, "an embedding of constant indices other than a range of "
                                     "positions")
            end = start + flat.numel()
            if start == 0 and end == w.shape[0]:
                rows = w
            else:
                rows = self.slice_ten(self.mat(w, node), 0, start, end, node)
            return make_view(rows, ("r", tuple(t.shape) + (w.shape[1],)))
        if not is_tensor_value(ids) or ids.dtype != "i32":
            self.fail_node(node, "an embedding of computed indices")
        if a.get("scale_grad_by_freq") or a.get("sparse"):
            self.fail_node(node, "an embedding with scale_grad_by_freq or sparse gradients")
        pad = a.get("padding_idx")
        if pad is not None and pad >= 0 and pad not in self.pad_noted:
            self.pad_noted.add(pad)
            self.notes.append(f"{source.display(source.location(node))}: the embedding's padding_idx "
                              f"{pad}: bigc trains that row like the others (PyTorch keeps its "
                              f"gradient zero), which differs only where the data holds token {pad}")
        wt = self.mat(w, node)
        it = self.mat(ids, node)
        return self.emit("embedding", [wt, it], [it.shape + (w.shape[1],)])[0]

    def op_layer_norm(self, node, a):
        x = a["input"]
        ns = list(a["normalized_shape"])
        if len(ns) != 1 or ns[0] != x.shape[-1]:
            self.fail_node(node, "layer normalisation over more than the last dimension")
        xt = self.mat(x, node)
        C = ns[0]
        w = self.mat(a["weight"], node) if a.get("weight") is not None else self.fill(1.0, (C,))
        b = self.mat(a["bias"], node) if a.get("bias") is not None else self.fill(0.0, (C,))
        eps = a.get("eps", 1e-5)
        return self.emit("layernorm", [xt, w, b], [xt.shape, xt.shape[:-1], xt.shape[:-1]],
                         {"eps": Attr.f64(eps)})[0]

    def op_rms_norm(self, node, a):
        x = a["input"]
        ns = list(a["normalized_shape"])
        if len(ns) != 1 or ns[0] != x.shape[-1]:
            self.fail_node(node, "RMS normalisation over more than the last dimension")
        xt = self.mat(x, node)
        C = ns[0]
        w = self.mat(a["weight"], node) if a.get("weight") is not None else self.fill(1.0, (C,))
        eps = a.get("eps")
        if eps is None:
            eps = torch.finfo(torch.float32).eps
        return self.emit("rmsnorm", [xt, w], [xt.shape, xt.shape[:-1]], {"eps": Attr.f64(eps)})[0]

    def _causal_window(self, node, mask, H, T):
        m = mask.val
        if not isinstance(m, torch.Tensor):
            self.fail_at(node, "an attention mask that is not a tensor")
        if m.dtype == torch.bool:
            allowed = m
        elif m.is_floating_point():
            if not bool(torch.all((m == 0) | (m <= -1e30) | torch.isneginf(m))):
                self.fail_at(node, "an additive attention mask with values other than 0 and -inf "
                                   "(bigc's attention is causal, with an optional sliding window)")
            allowed = m == 0
        else:
            self.fail_at(node, "an attention mask of integers")
        if allowed.shape[-2:] != (T, T):
            self.fail_at(node, f"an attention mask of shape {list(allowed.shape)}")
        allowed = allowed.reshape(-1, T, T)
        last = allowed[0, T - 1]
        W = int(last.sum())
        i = torch.arange(T)[:, None]
        j = torch.arange(T)[None, :]
        want = j <= i
        if W < T:
            want = want & (j > i - W)
        if W == T:
            W = 0
        if not bool(torch.all(allowed == want[None])):
            self.fail_at(node, "an attention mask that is not causal (bigc's attention is "
                               "causal, with an optional sliding window; padding masks are not "
                               "supported)")
        return W

    def _kv(self, node, v, H):
        """(base, Hkv) of a key/value operand: a heads view, or repeat_kv of one."""
        if isinstance(v, Pat) and v.kind == "repeat_kv":
            hl = heads_layout(v.f["kv"])
            return hl[0], hl[1], hl[2]
        hl = heads_layout(v)
        if hl is None or hl[3] != "bhtd":
            self.fail_at(node, "attention over keys/values that are not the heads of a "
                               "[B,T,H*D] tensor (x.view(B,T,H,D).transpose(1,2))")
        return hl[0], hl[1], hl[2]

    # --- attention written out: softmax(q @ k^T * scale + causal mask) @ v (minGPT, nanoGPT without
    # flash, llama2.c, Meta's llama), recognised whole as bigc's attention ---------------------------
    def _scores(self, node, q, w):
        """Pat('scores') for q @ k^T of two heads views (x.view(B,T,H,D).transpose(1,2)), else None."""
        if len(q.shape) != 4 or len(w.shape) != 4:
            return None
        n = 1
        if isinstance(w, Pat) and w.kind == "repeat_kv_t":  # grouped keys (Gemma 2's eager attention)
            hk, n = heads_layout(w.f["kv"]), w.f["n"]
        elif isinstance(w, View):
            hk = heads_layout(make_view(w, ("t", (0, 1, 3, 2))))
        else:
            return None
        hq = heads_layout(q)
        if hq is None or hk is None or hq[3] != "bhtd" or hk[3] != "bhtd" or hq[1] != hk[1] * n or \
                hq[2] != hk[2] or hq[0].shape[:2] != hk[0].shape[:2]:
            return None
        B, T, _ = hq[0].shape
        return Pat("scores", node, out_shape(node), q=hq[0], k=hk[0], H=hq[1], Hk=hk[1], D=hq[2], T=T,
                   scale=1.0, cap=None, window=None, x=q, w=w)

    def op_masked_fill(self, node, a):
        x, mask, value = a["self"], a["mask"], a["value"]
        if isinstance(x, Pat) and x.kind == "scores" and x.f["window"] is None and isinstance(mask, Const) and \
                scalar_of(value) is not None and scalar_of(value) <= -1e30:
            m = mask.val  # True: masked out; the keys seen are the others
            if isinstance(m, torch.Tensor) and m.dtype == torch.bool:
                W = self._causal_window(node, Const(~m), x.f["H"], x.f["T"])
                return Pat("scores", node, out_shape(node), **dict(x.f, window=W))
        if isinstance(x, Pat):
            self.force_pat(x, node)
        self.fail_node(node)

    def op__softmax(self, node, a):
        x = a["self"]
        if isinstance(x, Pat) and x.kind == "scores" and norm_dim(a["dim"], 4) == 3:
            if x.f["window"] is None:
                self.fail_at(node, "non-causal attention (bigc's attention is causal: mask the scores "
                                   "with a causal mask, or use F.scaled_dot_product_attention with "
                                   "is_causal=True)")
            return Pat("probs", node, out_shape(node), **x.f)
        if isinstance(x, Pat):
            self.force_pat(x, node)
        self.fail_node(node)

    op_softmax = op__softmax

    def _written_attention(self, node, p, v):
        hv = heads_layout(v.f["kv"]) if isinstance(v, Pat) and v.kind == "repeat_kv" else heads_layout(v)
        if hv is None or hv[3] != "bhtd" or hv[1:3] != (p.f["Hk"], p.f["D"]) or \
                hv[0].shape[:2] != p.f["q"].shape[:2]:
            self.fail_at(node, "attention probabilities multiplied by values that are not the heads "
                               "of a [B,T,H*D] tensor with the keys' heads")
        cap = p.f["cap"]  # cap * tanh(scale * q.k): bigc's softcap c tanh(s / c) of s = (scale * cap) q.k
        return self._attention(node, p.f["q"], p.f["k"], hv[0], p.f["H"], p.f["Hk"], p.f["D"], p.f["window"],
                               p.f["scale"] * cap if cap else p.f["scale"], softcap=cap)

    def _attention(self, node, qb, kb, vb, H, Hk, D, W, scale, softcap=None):
        """bigc's attention over the [B,T,H*D] q and [B,T,Hk*D] k, v: the packed form (GPT-2's
        split of one qkv projection) or grouped-query attention; W the sliding window (0: none)."""
        B, T, _ = qb.shape
        default = 1.0 / math.sqrt(D)
        custom = scale is not None and abs(scale - default) > 1e-12 * default
        packed = (isinstance(qb, Part) and isinstance(kb, Part) and isinstance(vb, Part) and
                  qb.group is kb.group is vb.group and (qb.index, kb.index, vb.index) == (0, 1, 2) and
                  len(qb.group.sizes) == 3 and len(set(qb.group.sizes)) == 1 and
                  qb.group.axis == len(qb.group.src.shape) - 1 and Hk == H and W == 0 and not custom and
                  not softcap)
        if packed:
            qkv = self.mat(qb.group.src, node)
            out = self.emit("attention", [qkv], [(B, T, H * D), (B, H, T)], {"heads": Attr.i64(H)},
                            hints=[node.name, node.name + "_lse"])[0]
        else:
            qt, kt, vt = self.mat(qb, node), self.mat(kb, node), self.mat(vb, node)
            attrs = {"heads": Attr.i64(H), "kv_heads": Attr.i64(Hk)}
            if W:
                attrs["window"] = Attr.i64(W)
            if custom:
                attrs["scale"] = Attr.f64(scale)
            if softcap:
                attrs["softcap"] = Attr.f64(softcap)
            out = self.emit("gqa_attention", [qt, kt, vt], [(B, T, H * D), (B, H, T)], attrs,
                            hints=[node.name, node.name + "_lse"])[0]
        return heads_view(out, H, D)

    def op_scaled_dot_product_attention(self, node, a):
        q = a["query"]
        hq = heads_layout(q)
        if hq is None or hq[3] != "bhtd":
            self.fail_at(node, "attention over queries that are not the heads of a [B,T,H*D] "
                               "tensor (x.view(B,T,H,D).transpose(1,2))")
        qb, H, D, _ = hq
        B, T, _ = qb.shape
        kb, Hk, Dk = self._kv(node, a["key"], H)
        vb, Hv, Dv = self._kv(node, a["value"], H)
        if Dk != D or Dv != D or Hk != Hv or H % Hk != 0:
            self.fail_at(node, "attention whose keys and values have other head sizes than the "
                               "queries")
        if a.get("dropout_p", 0.0) not in (0, 0.0, None):
            self.fail_node(node, f"attention dropout p={a['dropout_p']}: bigc has no dropout")
        mask = a.get("attn_mask")
        W = 0
        if mask is None:
            if not a.get("is_causal"):
                self.fail_at(node, "non-causal attention (bigc's attention is causal: "
                                   "is_causal=True or a causal mask)")
        else:
            if not isinstance(mask, Const):
                self.fail_at(node, "an attention mask computed from the data (bigc's attention "
                                   "is causal, with an optional sliding window)")
            W = self._causal_window(node, mask, H, T)
        return self._attention(node, qb, kb, vb, H, Hk, D, W, a.get("scale"))

    def op_cross_entropy_loss(self, node, a):
        logits, target = a["self"], a["target"]
        if a.get("weight") is not None:
            self.fail_node(node, "cross-entropy with class weights")
        if a.get("reduction", 1) != 1:
            self.fail_node(node, "cross-entropy without the mean reduction")
        if a.get("label_smoothing", 0.0):
            self.fail_node(node, "cross-entropy with label smoothing")
        if not is_tensor_value(target) or target.dtype != "i32":
            self.fail_node(node, "cross-entropy against computed targets")
        ignore = a.get("ignore_index", -100)
        if ignore is not None and ignore >= 0:
            self.notes.append(f"{source.display(source.location(node))}: cross-entropy's "
                              f"ignore_index {ignore}: bigc averages over every position, which "
                              f"differs only where the targets hold {ignore}")
        lb, _ = self._rowwise(logits)
        if isinstance(target, View) and len(target.chain) == 1 and target.chain[0][0] == "r" and \
                lb is not logits and tuple(target.base.shape) == tuple(lb.shape[:-1]):
            logits, target = lb, target.base
        lt = self.mat(logits, node)
        tt = self.mat(target, node)
        if tuple(tt.shape) != tuple(lt.shape[:-1]):
            tt = self.emit("reshape", [tt], [lt.shape[:-1]], result_dtypes=["i32"])[0]
        return self.emit("cross_entropy", [lt, tt], [()], hints=["loss"])[0]

    def op__linear_cross_entropy_batch_chunked(self, node, a):
        """F.linear_cross_entropy with chunking options (PyTorch's chunked op, which computes the
        gradients in its forward): the head's matmul and the cross-entropy, the forms bigc's
        --fuse-loss fuses and chunks (without options the call exports as those two ops)."""
        if a.get("linear_bias") is not None:
            self.fail_node(node, "linear_cross_entropy with a bias on the head")
        if a.get("reduction", "mean") != "mean":
            self.fail_node(node, "linear_cross_entropy without the mean reduction")
        logits = self.op_linear(node, {"input": a["input"], "weight": a["linear_weight"], "bias": None})
        loss = self.op_cross_entropy_loss(node, {"self": logits, "target": a["target"], "weight": a.get("weight"),
                                                 "reduction": 1, "ignore_index": a.get("ignore_index", -100),
                                                 "label_smoothing": a.get("label_smoothing", 0.0)})
        self.notes.append(f"{source.display(source.location(node))}: linear_cross_entropy in chunks: bigc "
                          f"imports the head's matmul and the cross-entropy; `bigc compile --fuse-loss` computes "
                          f"them a chunk of the vocabulary at a time without storing the logits")
        return (loss, None, None, None)


UNARY_OPS = {"neg": "neg", "tanh": "tanh", "sigmoid": "sigmoid", "silu": "silu", "exp": "exp",
             "log": "log", "erf": "erf", "sqrt": "sqrt", "rsqrt": "rsqrt", "relu": "relu",
             "reciprocal": "reciprocal", "abs": "abs", "sin": "sin", "cos": "cos",
             "square": "square"}
