"""Writing the bigc dialect as MLIR text (the syntax `bigc-opt` prints, docs/frontend.md).

``Builder`` collects the ops of ``func.func @forward`` in order, each with its results, operands,
attributes, a ``bigc.layer`` (or none) and a source location; ``text()`` drops the ops whose
results the loss does not need and writes the module.
"""

import math
import re


def f64(x):
    """An f64 literal MLIR parses: always with a decimal point (1e-06 -> 1.0e-06)."""
    x = float(x)
    if math.isnan(x) or math.isinf(x):
        raise ValueError(f"non-finite attribute value {x}")
    s = repr(x)
    if "e" in s or "E" in s:
        mant, exp = s.lower().split("e")
        if "." not in mant:
            mant += ".0"
        return f"{mant}e{exp}"
    if "." not in s:
        s += ".0"
    return s


def tensor_type(shape, dtype="f32"):
    dims = "".join(f"{int(d)}x" for d in shape)
    return f"tensor<{dims}{dtype}>"


def quote(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Attr:
    """Attribute values in MLIR syntax."""

    @staticmethod
    def i64(v):
        return f"{int(v)} : i64"

    @staticmethod
    def f64(v):
        return f"{f64(v)} : f64"

    @staticmethod
    def str(v):
        return quote(v)

    @staticmethod
    def f64_array(vals):
        return "array<f64: " + ", ".join(f64(v) for v in vals) + ">"

    @staticmethod
    def i64_array(vals):
        return "array<i64: " + ", ".join(str(int(v)) for v in vals) + ">"

    UNIT = object()


class Op:
    __slots__ = ("results", "operands", "text")

    def __init__(self, results, operands, text):
        self.results = results
        self.operands = operands
        self.text = text


_SSA_OK = re.compile(r"[^A-Za-z0-9_]")


class Builder:
    def __init__(self):
        self.ops = []
        self.names = set()
        self.params = []  # (name, shape, init dict)

    # --- names -------------------------------------------------------------------------------
    def fresh(self, hint):
        base = _SSA_OK.sub("_", hint or "v")
        if not base or base[0].isdigit():
            base = "v" + base
        name = base
        i = 1
        while name in self.names:
            name = f"{base}_{i}"
            i += 1
        self.names.add(name)
        return "%" + name

    # --- declarations ------------------------------------------------------------------------
    def param(self, name, shape, init):
        self.params.append((name, tuple(shape), init))

    # --- ops ---------------------------------------------------------------------------------
    @staticmethod
    def _attrs(attrs, layer):
        items = []
        if layer is not None:
            items.append(f"bigc.layer = {int(layer)} : i64")
        for k, v in attrs.items():
            items.append(k if v is Attr.UNIT else f"{k} = {v}")
        return (" {" + ", ".join(items) + "}") if items else ""

    @staticmethod
    def _loc(loc):
        if not loc:
            return ""
        path, line = loc
        return f" loc({quote(path)}:{int(line)}:0)"

    def get_param(self, name, shape, hint, layer, loc):
        r = self.fresh(hint)
        text = (f"{r} = bigc.get_param @{quote(name)}{self._attrs({}, layer)} : "
                f"{tensor_type(shape)}{self._loc(loc)}")
        self.ops.append(Op([r], [], text))
        return r

    def op(self, name, operands, operand_types, result_types, attrs=None, hints=None, layer=None,
           loc=None):
        """Appends `%r... = bigc.NAME operands {attrs} : (types) -> types`; returns the results."""
        hints = hints or [name]
        if len(hints) < len(result_types):
            hints = hints + [f"{hints[0]}_{i}" for i in range(len(hints), len(result_types))]
        results = [self.fresh(h) for h in hints[:len(result_types)]]
        ins = ", ".join(operand_types)
        outs = result_types[0] if len(result_types) == 1 else "(" + ", ".join(result_types) + ")"
        ops = (" " + ", ".join(operands)) if operands else ""
        text = (f"{', '.join(results)} = bigc.{name}{ops}{self._attrs(attrs or {}, layer)} : "
                f"({ins}) -> {outs}{self._loc(loc)}")
        self.ops.append(Op(results, list(operands), text))
        return results

    # --- the module --------------------------------------------------------------------------
    def text(self, args, result, header_lines, weights_file, module_attrs=None):
        """The module: param declarations, then @forward(args) returning `result`, keeping only
        the ops the result depends on. `module_attrs`: more module attributes, name -> the
        attribute's text."""
        live = {result}
        kept = []
        for op in reversed(self.ops):
            if any(r in live for r in op.results):
                kept.append(op)
                live.update(op.operands)
        kept.reverse()
        out = []
        for h in header_lines:
            out.append(f"// {h}" if h else "//")
        items = [f"bigc.weights = {quote(weights_file)}"] if weights_file else []
        items += [f"{k} = {v}" for k, v in (module_attrs or {}).items()]
        attrs = f" attributes {{{', '.join(items)}}}" if items else ""
        out.append(f"module{attrs} {{")
        for name, shape, init in self.params:
            items = [f"init = {quote(init['init'])}"]
            if "std" in init:
                items.append(f"std = {f64(init['std'])} : f64")
            if "value" in init:
                items.append(f"value = {f64(init['value'])} : f64")
            out.append(f"  bigc.param @{quote(name)} : {tensor_type(shape)} {{{', '.join(items)}}}")
        out.append("")
        sig = ", ".join(f"{n}: {t}" for n, t in args)
        out.append(f"  func.func @forward({sig}) -> tensor<f32> {{")
        for op in kept:
            out.append("    " + op.text)
        out.append(f"    return {result} : tensor<f32>")
        out.append("  }")
        out.append("}")
        return "\n".join(out) + "\n"
