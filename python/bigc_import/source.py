"""Source locations of exported nodes: the Python line that made each op.

torch.export records a node's Python stack in ``node.meta["stack_trace"]`` (outermost frame
first). The location of an op is the innermost frame outside PyTorch's own package (an
``nn.Linear`` is reported at the model line that calls it, not inside torch/nn/modules/linear.py);
the innermost frame when every frame is PyTorch's.

That stack stops at the innermost module's forward: an op made in a plain function the forward
calls (Meta's apply_rotary_emb, a helper in another file) is reported at the forward's line that
calls it. For an error, ``op_site`` finds the op's own line and its call chain by running the
model once more under a dispatch mode that records the Python stack of the same op.
"""

import os
import re

_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def _torch_dir():
    try:
        import torch
        return os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    except Exception:  # pragma: no cover
        return None


_TORCH = _torch_dir()


def frames(node):
    st = node.meta.get("stack_trace") if node is not None else None
    if not st:
        return []
    return [(f, int(l)) for f, l in _FRAME.findall(st)]


def location(node):
    """(path, line) of the node's op, or None."""
    fr = frames(node)
    if not fr:
        return None
    for f, l in reversed(fr):
        if not (_TORCH and os.path.abspath(f).startswith(_TORCH)):
            return (f, l)
    return fr[-1]


def display(loc):
    """'file.py:LINE' for messages: relative to the working directory when below it."""
    if not loc:
        return "<unknown source>"
    path, line = loc
    try:
        rel = os.path.relpath(path)
        if not rel.startswith(".."):
            path = rel
    except ValueError:
        pass
    return f"{path}:{line}"


_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep


class _Found(Exception):
    pass


def op_site(replay, graph, node):
    """(the op's own (path, line), [the frames of the call chain, outermost first]) for a node of
    the exported graph, or None: `replay()` runs the model's forward again (on the same inputs);
    the k-th call of the node's ATen op there is the node when the node is the k-th of that op in
    the graph (a module-level frame of the node's recorded stack must be on that call's stack)."""
    target = node.target
    if not isinstance(target, __import__("torch")._ops.OpOverload):
        return None
    k = 0
    for n in graph.nodes:
        if n is node:
            break
        if n.op == "call_function" and n.target == target:
            k += 1
    import traceback
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = 0
            self.stack = None

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func == target:
                if self.seen == k:
                    self.stack = traceback.extract_stack()
                    raise _Found()
                self.seen += 1
            return func(*args, **(kwargs or {}))

    rec = Record()
    try:
        with torch.no_grad(), rec:
            replay()
    except _Found:
        pass
    except Exception:  # the replay is a best effort; the recorded location stands
        return None
    if rec.stack is None:
        return None
    user = [(fr.filename, fr.lineno, fr.name) for fr in rec.stack
            if not (_TORCH and os.path.abspath(fr.filename).startswith(_TORCH))
            and not os.path.abspath(fr.filename).startswith(_HERE) and "<" not in fr.filename]
    known = location(node)
    if not user or (known and (known[0], known[1]) not in {(f, l) for f, l, _ in user}):
        return None
    return (user[-1][0], user[-1][1]), user


def chain_text(chain):
    """'m.py:8 forward -> helper.py:4 weird': the user's frames from the outermost model line."""
    return " -> ".join(f"{display((f, l))} {name}" for f, l, name in chain)
