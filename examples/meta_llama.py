"""Meta's reference LLaMA model (github.com/meta-llama/llama, llama/model.py), unmodified, trained
by bigc: the wrapper a user writes around it.

    pip install fairscale                       # (its file imports fairscale's parallel layers)
    LLAMA_REPO=path/to/llama bigc import torch examples/meta_llama.py:make -o meta.mlir
    bigc compile meta.mlir -o meta.bigc && bigc run meta.bigc --data tokens.bin

What the wrapper does, and why (nothing in Meta's file is changed):
- one process, model-parallel size 1: torch.distributed (gloo) and fairscale's model-parallel
  groups, which its ColumnParallelLinear / RowParallelLinear / ParallelEmbedding need;
- its KV caches are made with .cuda(): made on the CPU here (torch.Tensor.cuda is the identity
  while the model is built);
- its linear layers are left uninitialised (init_method=lambda x: x: it loads checkpoints): drawn
  here as normal(0, 0.02);
- its forward runs under @torch.inference_mode() and takes start_pos: Train calls the undecorated
  forward (forward.__wrapped__) from position 0, and detaches the caches at each step (they
  outlive the step; PyTorch's second backward would reach into the first step's graph).
bigc maps the rest: the complex rotary (view_as_complex * freqs_cis, view_as_real) to
bigc.rope {interleaved}, the cache written and read back within the step to the values themselves,
repeat_kv and the triu/hstack mask into grouped-query causal attention.

The sizes below are small; set ModelArgs as Meta's params.json does for a published size (a torch
import writes the module's weights beside the model, so keep it to sizes that fit in memory).
"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.environ.get("LLAMA_REPO", os.path.dirname(os.path.abspath(__file__))))
import fairscale.nn.model_parallel.initialize as fs_init  # noqa: E402
from llama.model import ModelArgs, Transformer  # noqa: E402

B, T = 4, 32


class Train(nn.Module):
    """forward(tokens) -> logits: Meta's forward without @torch.inference_mode(), from position 0."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, tokens):
        for layer in self.m.layers:  # the KV caches outlive a step: detached, a backward stays in its step
            layer.attention.cache_k = layer.attention.cache_k.detach()
            layer.attention.cache_v = layer.attention.cache_v.detach()
        return Transformer.forward.__wrapped__(self.m, tokens, 0)


def make():
    if not dist.is_initialized():  # one process: fairscale's model-parallel group of 1
        dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
    if not fs_init.model_parallel_is_initialized():
        fs_init.initialize_model_parallel(1)
    args = ModelArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=256, multiple_of=32,
                     max_batch_size=B, max_seq_len=T)
    cuda = torch.Tensor.cuda  # its KV caches are made on the GPU: here, on the CPU
    torch.Tensor.cuda = lambda self, *a, **k: self
    try:
        torch.manual_seed(0)
        m = Transformer(args)
    finally:
        torch.Tensor.cuda = cuda
    with torch.no_grad():  # its linear layers are left uninitialised (init_method=lambda x: x)
        for p in m.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
    g = torch.Generator().manual_seed(1)
    return Train(m), (torch.randint(0, 256, (B, T), generator=g), torch.randint(0, 256, (B, T), generator=g))
