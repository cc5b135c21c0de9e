"""bigc import: a PyTorch model (a Hugging Face causal-LM config or your own nn.Module) captured
with torch.export and written as bigc MLIR (docs/frontend.md) plus its initial weights.

    python -m bigc_import hf CONFIG.json [--batch B] [--seq T] [--weights FILE] [--seed S] -o model.mlir
    python -m bigc_import torch FILE.py:FUNCTION [-o model.mlir]

The package is what `bigc import` runs; its command line (``python -m bigc_import --help``) is the
contract between the two.

Modules: ``capture`` builds the module and exports it (torch.export), ``lower`` maps the exported
ATen graph to bigc ops, ``mlir`` writes the dialect text, ``weights`` reads and writes safetensors,
``cli`` is the command line.
"""

__all__ = ["UserError"]

from .errors import UserError  # noqa: E402
