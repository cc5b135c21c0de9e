"""Modules `bigc import torch` must refuse, each with one clear line (test/e2e/import_errors.sh).
The line numbers of the marked statements are checked by the test: keep the markers."""
import torch
import torch.nn as nn
import torch.nn.functional as F

V, C, B, T = 64, 32, 2, 8


def batch():
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)


class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.fc = nn.Linear(C, C)
        self.head = nn.Linear(C, V, bias=False)

    def loss(self, x, targets):
        logits = self.head(x)
        return F.cross_entropy(logits.view(-1, V), targets.view(-1))


class Relu(Base):
    def forward(self, idx, targets):
        x = self.fc(self.wte(idx))
        x = torch.relu(x)  # MARK: relu
        return self.loss(x, targets)


class Cumsum(Base):
    def forward(self, idx, targets):
        x = self.wte(idx)
        x = x.cumsum(dim=1)  # MARK: cumsum
        return self.loss(self.fc(x), targets)


def apply_rotary_emb(xq, freqs_cis):
    """Meta's reference llama's complex pairs (model.py), squared: not a rotation."""
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))  # MARK: complex
    return torch.view_as_real(xq_ * xq_).flatten(3).type_as(xq)


class Complex(Base):
    def forward(self, idx, targets):
        x = self.fc(self.wte(idx)).view(B, T, 4, C // 4)
        freqs = torch.polar(torch.ones(T, C // 8), torch.outer(torch.arange(T).float(), torch.ones(C // 8)))
        x = apply_rotary_emb(x, freqs[None, :, None, :])  # MARK: calls complex
        return self.loss(x.reshape(B, T, C), targets)


class OldCache(Base):
    """A KV cache read beyond what the step wrote (decoding from start_pos > 0)."""
    def __init__(self):
        super().__init__()
        self.cache = torch.zeros(B, 2 * T, C)

    def forward(self, idx, targets):
        x = self.fc(self.wte(idx))
        self.cache[:, T : 2 * T] = x
        x = self.cache[:, T - 1 : 2 * T - 1]  # MARK: oldcache
        return self.loss(x, targets)


class Branchy(Base):
    def forward(self, idx, targets):
        x = self.fc(self.wte(idx))
        if x.sum() > 0:  # data-dependent control flow
            x = x * 2
        return self.loss(x, targets)


class Dropout(Base):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.1)

    def forward(self, idx, targets):
        return self.loss(self.drop(self.fc(self.wte(idx))), targets)  # MARK: dropout


class NoLoss(Base):
    def forward(self, idx, targets):
        return self.fc(self.wte(idx)), targets


class NonCausal(Base):
    def forward(self, idx, targets):
        x = self.fc(self.wte(idx))
        q = x.view(B, T, 4, C // 4).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, q, q)  # MARK: noncausal
        return self.loss(y.transpose(1, 2).reshape(B, T, C), targets)


class Half(Base):
    """bf16 parameters: imported in fp32 with a note (not an error)."""

    def forward(self, idx, targets):
        return self.loss(F.gelu(self.fc(self.wte(idx)), approximate="tanh"), targets)


def relu():
    return Relu(), batch()


def cumsum():
    return Cumsum(), batch()


def complex():
    return Complex(), batch()


def oldcache():
    return OldCache(), batch()


def branchy():
    return Branchy(), batch()


def dropout():
    return Dropout().train(), batch()


def noloss():
    return NoLoss(), batch()


def noncausal():
    return NonCausal(), batch()


def raises():
    raise RuntimeError("the user's function failed")


def notamodule():
    return 3, batch()


def half():
    torch.manual_seed(0)
    return Half().to(torch.bfloat16), batch()
