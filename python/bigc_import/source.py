"""Source locations of exported nodes: the Python line that made each op.

torch.export records a node's Python stack in ``node.meta["stack_trace"]`` (outermost frame
first). The location of an op is the innermost frame outside PyTorch's own package (an
``nn.Linear`` is reported at the model line that calls it, not inside torch/nn/modules/linear.py);
the innermost frame when every frame is PyTorch's.
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
