"""The recognition stage: which bigc op an elementwise expression of the captured graph computes.

The lowering gathers the elementwise nodes of the exported graph into expression trees (``ENode``:
``op``, ``args``; a leaf is ``ENode("var", [value])``). This stage decides, by the structure of an
expression alone, whether it is one of bigc's fused elementwise ops:

* the identity and ``scale`` (c * x),
* ``gelu`` in its tanh form and in its erf form (``approximate = "none"``),
* ``silu``, ``swiglu`` (silu(gate) * up) and ``geglu`` (gelu(gate) * up, either GELU),
* ``softcap`` (c * tanh(x / c), Gemma 2's capped logits; c * tanh(a x) as softcap of a scaled x),
* ``sigmoid`` alone (lowered as 0.5 + 0.5 tanh(x / 2): softcap 1 between scales; Qwen-MoE's gate),

whatever way a model writes them: ``F.gelu``, nanoGPT's ``0.5 * x * (1 + tanh(...))``,
``x * sigmoid(x)``, ``x / (1 + exp(-x))``, factors in any order. Each expression is brought to a
canonical form, a sum of monomials (a coefficient times a multiset of factors: the variables and
the functions -- tanh, exp, erf, 1/u, ... -- of canonical arguments), with products expanded over
sums, powers by small integers multiplied out and ``sigmoid(u)`` written ``1 / (1 + exp(-u))``;
two expressions are the same function when their canonical forms have the same monomials with
coefficients equal to 1e-9 (relative). The fused ops' own canonical forms are built by the same
code from their definitions. Nothing is evaluated: a near miss (quick GELU's x * sigmoid(1.702 x), a
sigmoid of the other operand) is simply not recognised, and the lowering maps it op by op or names the op
it cannot map. RMSNorm, rotary embeddings and repeat_kv are recognised by the lowering's pattern
states (``Pat``), which follow the graph's reductions, slices and views.

No torch here: the stage works on the expression trees only.
"""

import math

# Expansion stops (no match) beyond this many monomials: no fused op needs more.
MAX_TERMS = 64
REL = 1e-9


class _T:
    """An expression node of a template (the same shape as the lowering's ENode)."""

    __slots__ = ("op", "args", "node")

    def __init__(self, op, args):
        self.op = op
        self.args = args
        self.node = None


def _key_coef(c):
    # Coefficients inside a factor's argument take part in the factor's identity: rounded so that
    # two orders of the same floating-point products compare equal.
    return float(f"{c:.10g}")


class Poly:
    """A sum of monomials: {factors (a sorted tuple of factor keys): coefficient}."""

    __slots__ = ("terms",)

    def __init__(self, terms):
        self.terms = {f: c for f, c in terms.items() if c != 0.0}

    @staticmethod
    def const(c):
        return Poly({(): float(c)})

    @staticmethod
    def atom(a):
        return Poly({(a,): 1.0})

    def key(self):
        return tuple(sorted((f, _key_coef(c)) for f, c in self.terms.items()))

    def constant(self):
        """Its value when it is a constant, else None."""
        if not self.terms:
            return 0.0
        if len(self.terms) == 1 and () in self.terms:
            return self.terms[()]
        return None

    def add(self, other, sign=1.0):
        t = dict(self.terms)
        for f, c in other.terms.items():
            t[f] = t.get(f, 0.0) + sign * c
        return Poly(t)

    def scale(self, k):
        return Poly({f: c * k for f, c in self.terms.items()})

    def mul(self, other):
        if len(self.terms) * len(other.terms) > MAX_TERMS:
            return None
        t = {}
        for fa, ca in self.terms.items():
            for fb, cb in other.terms.items():
                f = tuple(sorted(fa + fb))
                t[f] = t.get(f, 0.0) + ca * cb
        return Poly(t)

    def close(self, other):
        if set(self.terms) != set(other.terms):
            return False
        return all(abs(c - other.terms[f]) <= REL * max(abs(c), abs(other.terms[f])) for f, c in self.terms.items())


def _recip(p):
    c = p.constant()
    if c is not None:
        return None if c == 0.0 else Poly.const(1.0 / c)
    if len(p.terms) == 1:  # c * F -> (1/c) * recip(F)
        (f, c), = p.terms.items()
        return Poly.atom(("recip", Poly({f: 1.0}).key())).scale(1.0 / c)
    return Poly.atom(("recip", p.key()))


FUNCTIONS = {"tanh", "exp", "erf", "log", "sqrt", "rsqrt", "relu", "abs", "sin", "cos"}


def canonical(en, var_key=id):
    """The canonical form (a Poly) of an expression tree, or None when it has an op this stage does
    not know (the lowering then maps it op by op). `var_key` names a leaf's value."""
    if isinstance(en, (int, float)):
        return Poly.const(en)
    op, args = en.op, en.args
    if op == "var":
        return Poly.atom(("v", var_key(args[0])))
    a = [canonical(x, var_key) for x in args]
    if any(x is None for x in a):
        return None
    if op == "add":
        return a[0].add(a[1])
    if op == "sub":
        return a[0].add(a[1], -1.0)
    if op == "neg":
        return a[0].scale(-1.0)
    if op == "mul":
        return a[0].mul(a[1])
    if op == "square":
        return a[0].mul(a[0])
    if op == "div":
        r = _recip(a[1])
        return None if r is None else a[0].mul(r)
    if op == "reciprocal":
        return _recip(a[0])
    if op == "pow":
        e = a[1].constant()
        if e is not None and e == int(e) and 0 <= e <= 4:
            p = Poly.const(1.0)
            for _ in range(int(e)):
                p = p.mul(a[0])
                if p is None:
                    return None
            return p
        if e == 0.5:
            return Poly.atom(("sqrt", a[0].key()))
        return Poly.atom(("pow", a[0].key(), a[1].key()))
    if op == "sigmoid":  # 1 / (1 + exp(-u))
        return _recip(Poly.const(1.0).add(Poly.atom(("exp", a[0].scale(-1.0).key()))))
    if op in TEMPLATES:  # the op's definition over its argument
        return canonical(TEMPLATES[op](args[0]), var_key)
    if op in FUNCTIONS:
        return Poly.atom((op, a[0].key()))
    return None


# The fused ops by their definitions (over template leaves).
def _silu(x):
    return _T("mul", [x, _T("sigmoid", [x])])


def _gelu_tanh(x):
    inner = _T("mul", [math.sqrt(2.0 / math.pi), _T("add", [x, _T("mul", [0.044715, _T("pow", [x, 3.0])])])])
    return _T("mul", [_T("mul", [0.5, x]), _T("add", [1.0, _T("tanh", [inner])])])


def _gelu_none(x):
    return _T("mul", [_T("mul", [0.5, x]), _T("add", [1.0, _T("erf", [_T("div", [x, math.sqrt(2.0)])])])])


def _sigmoid(x):
    return _T("sigmoid", [x])


TEMPLATES = {"silu": _silu, "gelu_tanh": _gelu_tanh, "gelu_none": _gelu_none, "sigmoid": _sigmoid}


class Match:
    """A recognised op: its name, the variables (in the op's operand order) and its attributes
    (``approximate`` for the erf GELU, ``factor`` for scale)."""

    def __init__(self, op, variables, **attrs):
        self.op = op
        self.variables = variables
        self.attrs = attrs

    def __repr__(self):
        return f"Match({self.op}, {len(self.variables)} operands, {self.attrs})"


def _leaf(key):
    return _T("var", [key])


def _canon_of(template_expr):
    # Template leaves hold the variables' keys directly.
    return canonical(template_expr, var_key=lambda k: k)


def _softcap(p, k):
    """(c, a) when p is c * tanh(a * x) of the variable k (c, a != 0): softcap with cap c of x scaled
    by a * c (Gemma 2's logits / c, tanh, * c: a = 1 / c), else None."""
    if len(p.terms) != 1:
        return None
    (f, c), = p.terms.items()
    if len(f) != 1 or f[0][0] != "tanh" or c == 0.0:
        return None
    inner = f[0][1]  # the argument's key: ((factors, coefficient), ...)
    if len(inner) != 1 or inner[0][0] != (("v", k),):
        return None
    a = inner[0][1]  # (rounded to 10 digits in the key: a * c within REL of 1 is 1)
    if a == 0.0:
        return None
    return (c, 1.0 if abs(a * c - 1.0) <= REL else a * c)


def recognise(en, variables, var_key=id):
    """The fused op `en` computes over `variables` ({var_key(leaf value): value}, one or two), or
    None."""
    p = canonical(en, var_key)
    if p is None:
        return None
    keys = list(variables)
    if len(keys) == 1:
        (k,) = keys
        v = variables[k]
        x = _leaf(k)
        if len(p.terms) == 1:
            (f, c), = p.terms.items()
            if f == (("v", k),):
                return Match("identity", [v]) if c == 1.0 else Match("scale", [v], factor=c)
        cap = _softcap(p, k)
        if cap is not None:
            return Match("softcap", [v], cap=cap[0], prescale=cap[1])
        for op, name, attrs in (("gelu_tanh", "gelu", {}), ("gelu_none", "gelu", {"approximate": "none"}),
                                ("silu", "silu", {}), ("sigmoid", "sigmoid", {})):
            if p.close(_canon_of(TEMPLATES[op](x))):
                return Match(name, [v], **attrs)
        return None
    if len(keys) == 2:
        for g, u in ((keys[0], keys[1]), (keys[1], keys[0])):
            for op, name, attrs in (("silu", "swiglu", {}), ("gelu_tanh", "geglu", {}),
                                    ("gelu_none", "geglu", {"approximate": "none"})):
                if p.close(_canon_of(_T("mul", [TEMPLATES[op](_leaf(g)), _leaf(u)]))):
                    return Match(name, [variables[g], variables[u]], **attrs)
    return None


def is_square(en, key, var_key=id):
    """Whether `en` is x * x of the variable `key` (an RMSNorm's mean of squares)."""
    p = canonical(en, var_key)
    return p is not None and p.terms == {(("v", key), ("v", key)): 1.0}
