"""A small decoder-only language model whose custom pieces are opclass ops, from training to deployment.

The model (``TinyLM``: an embedding, decoder blocks, a head) calls four ops per block, each with a
fake kernel and an autograd formula:

* ``RMSNorm``: ``x / sqrt(mean(x**2) + eps) * weight``;
* ``Rotary``: the rotary position embedding of queries and keys;
* ``SwiGLU``: ``silu(gate) * up``, the MLP's gated activation;
* ``Attention``: causal softmax attention.

The same model is written three ways, one ``Ops`` table each, all with the same math:
``PLAIN`` (plain functions, torch's autograd differentiates them), ``CUSTOM_OP``
(``torch.library.custom_op`` with the same fake kernels and formulas) and ``OPCLASS``.
``main()`` trains each a few steps from the same weights (same losses), compiles the opclass model
(``fullgraph=True``: each op stays one node), exports it with a dynamic sequence length, decomposes
the ops into torch ops (``opclass.decompositions``: each ``default`` is torch ops) and builds an
AOTInductor package that it runs in a fresh process which imports neither opclass nor this file.

What each version costs per step: ``python -m benchmarks --model`` (docs/performance.md).

Run it with ``python examples/decoder_block.py``.
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import opclass
from opclass import CustomOp

# --- The math, as plain functions: the kernels of every version. ---------------------------------------


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _rotate_half_t(x: Tensor) -> Tensor:
    # The transpose of _rotate_half, for its gradient.
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x2, -x1), dim=-1)


def rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    return x * cos + _rotate_half(x) * sin


def swiglu(gate: Tensor, up: Tensor) -> Tensor:
    return F.silu(gate) * up


def _probabilities(q: Tensor, k: Tensor) -> Tensor:
    n = q.shape[-2]
    scores = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5)
    future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
    p: Tensor = scores.masked_fill(future, -math.inf).softmax(dim=-1)
    return p


def attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    out: Tensor = _probabilities(q, k) @ v
    return out


# --- The ops. ------------------------------------------------------------------------------------------


class RMSNorm(CustomOp, name="ex_decoder::rms_norm"):
    """Root-mean-square normalization over the last dimension, scaled by ``weight``."""

    @staticmethod
    def default(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
        return rms_norm(x, weight, eps)

    @staticmethod
    def abstract(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
        return torch.empty_like(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        x, weight, eps = inputs
        ctx.save_for_backward(x, weight)
        ctx.eps = eps

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None]:
        x, weight = ctx.saved_tensors
        r = x.pow(2).mean(-1, keepdim=True).add_(ctx.eps).rsqrt_()
        xr, gw = x * r, grad * weight
        # d/dx of x*r*w, r = rsqrt(mean(x**2) + eps), is r * (gw - x*r * mean(gw * x*r)).
        dx = (gw - xr * (gw * xr).mean(-1, keepdim=True)).mul_(r) if ctx.needs_input_grad[0] else None
        dw = (grad * xr).sum_to_size(weight.shape) if ctx.needs_input_grad[1] else None
        return dx, dw, None


class Rotary(CustomOp, name="ex_decoder::rotary"):
    """The rotary position embedding: rotates pairs of features by position-dependent angles."""

    @staticmethod
    def default(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        return rotary(x, cos, sin)

    @staticmethod
    def abstract(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        return torch.empty_like(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        x, cos, sin = inputs
        ctx.save_for_backward(x, cos, sin)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        x, cos, sin = ctx.saved_tensors
        needs = ctx.needs_input_grad
        dx = grad * cos + _rotate_half_t(grad * sin) if needs[0] else None
        dcos = (grad * x).sum_to_size(cos.shape) if needs[1] else None
        dsin = (grad * _rotate_half(x)).sum_to_size(sin.shape) if needs[2] else None
        return dx, dcos, dsin


class SwiGLU(CustomOp, name="ex_decoder::swiglu"):
    """``silu(gate) * up``: the gated activation of the model's MLP."""

    @staticmethod
    def default(gate: Tensor, up: Tensor) -> Tensor:
        return swiglu(gate, up)

    @staticmethod
    def abstract(gate: Tensor, up: Tensor) -> Tensor:
        return torch.empty_like(gate)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor]:
        gate, up = ctx.saved_tensors
        return torch.ops.aten.silu_backward(grad * up, gate), grad * F.silu(gate)


class Attention(CustomOp, name="ex_decoder::attention"):
    """Causal softmax attention over ``(batch, heads, sequence, head_dim)`` queries, keys and values."""

    @staticmethod
    def default(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return attention(q, k, v)

    @staticmethod
    def abstract(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        # A matmul's output is contiguous, whatever the layout of q.
        return q.new_empty((*q.shape[:-1], v.shape[-1]))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        # The probabilities are recomputed rather than saved: (sequence x sequence) per head.
        q, k, v = ctx.saved_tensors
        p = _probabilities(q, k)
        ds = torch.ops.aten._softmax_backward_data(grad @ v.transpose(-2, -1), p, -1, p.dtype).mul_(q.shape[-1] ** -0.5)
        return ds @ k, ds.transpose(-2, -1) @ q, p.transpose(-2, -1) @ grad


# --- The same ops with torch.library.custom_op, and the three tables. ----------------------------------


def _custom_op(name: str, fn: Callable[..., Tensor], op_cls: Any) -> Any:
    op = torch.library.custom_op(f"ex_decoder_custom_op::{name}", mutates_args=())(fn)
    op.register_fake(op_cls.abstract)
    op.register_autograd(op_cls.backward, setup_context=op_cls.setup_context)
    return op


def _rms_norm_co(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    return rms_norm(x, weight, eps)


def _rotary_co(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    return rotary(x, cos, sin)


def _swiglu_co(gate: Tensor, up: Tensor) -> Tensor:
    return swiglu(gate, up)


def _attention_co(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return attention(q, k, v)


class Ops(NamedTuple):
    """What a model calls for its four custom pieces."""

    rms_norm: Callable[[Tensor, Tensor, float], Tensor]
    rotary: Callable[[Tensor, Tensor, Tensor], Tensor]
    swiglu: Callable[[Tensor, Tensor], Tensor]
    attention: Callable[[Tensor, Tensor, Tensor], Tensor]


PLAIN = Ops(rms_norm, rotary, swiglu, attention)
CUSTOM_OP = Ops(
    _custom_op("rms_norm", _rms_norm_co, RMSNorm),
    _custom_op("rotary", _rotary_co, Rotary),
    _custom_op("swiglu", _swiglu_co, SwiGLU),
    _custom_op("attention", _attention_co, Attention),
)
OPCLASS = Ops(RMSNorm, Rotary, SwiGLU, Attention)
VERSIONS = {"plain": PLAIN, "custom_op": CUSTOM_OP, "opclass": OPCLASS}
OP_CLASSES = (RMSNorm, Rotary, SwiGLU, Attention)


# --- The model. ----------------------------------------------------------------------------------------


class Config(NamedTuple):
    """The model's sizes."""

    vocab: int = 256
    dim: int = 64
    heads: int = 4
    hidden: int = 128
    layers: int = 2
    max_seq: int = 64
    eps: float = 1e-6


class DecoderBlock(nn.Module):
    """Pre-norm attention, then a pre-norm SwiGLU MLP, each added to the residual stream."""

    def __init__(self, ops: Ops, config: Config) -> None:
        super().__init__()
        self.ops, self.heads, self.eps = ops, config.heads, config.eps
        self.attn_norm = nn.Parameter(torch.ones(config.dim))
        self.qkv = nn.Linear(config.dim, 3 * config.dim, bias=False)
        self.out = nn.Linear(config.dim, config.dim, bias=False)
        self.mlp_norm = nn.Parameter(torch.ones(config.dim))
        self.gate_up = nn.Linear(config.dim, 2 * config.hidden, bias=False)
        self.down = nn.Linear(config.hidden, config.dim, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        ops, (batch, seq, dim) = self.ops, x.shape
        h = ops.rms_norm(x, self.attn_norm, self.eps)
        q, k, v = self.qkv(h).view(batch, seq, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        a = ops.attention(ops.rotary(q, cos, sin), ops.rotary(k, cos, sin), v)
        x = x + self.out(a.transpose(1, 2).reshape(batch, seq, dim))
        gate, up = self.gate_up(ops.rms_norm(x, self.mlp_norm, self.eps)).chunk(2, dim=-1)
        out: Tensor = x + self.down(ops.swiglu(gate, up))
        return out


class TinyLM(nn.Module):
    """Token ids ``(batch, sequence)`` to next-token logits ``(batch, sequence, vocab)``."""

    cos: Tensor
    sin: Tensor

    def __init__(self, ops: Ops, config: Config = Config()) -> None:
        super().__init__()
        self.ops, self.eps = ops, config.eps
        self.embed = nn.Embedding(config.vocab, config.dim)
        self.blocks = nn.ModuleList(DecoderBlock(ops, config) for _ in range(config.layers))
        self.norm = nn.Parameter(torch.ones(config.dim))
        self.head = nn.Linear(config.dim, config.vocab, bias=False)
        half = config.dim // config.heads // 2
        angles = torch.outer(torch.arange(config.max_seq, dtype=torch.float32), 10000.0 ** (-torch.arange(half) / half))
        self.register_buffer("cos", torch.cat((angles, angles), dim=-1).cos(), persistent=False)
        self.register_buffer("sin", torch.cat((angles, angles), dim=-1).sin(), persistent=False)

    def forward(self, tokens: Tensor) -> Tensor:
        seq = tokens.shape[1]
        cos, sin = self.cos[:seq], self.sin[:seq]
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, cos, sin)
        logits: Tensor = self.head(self.ops.rms_norm(x, self.norm, self.eps))
        return logits


def models(config: Config = Config(), seed: int = 0, versions: Mapping[str, Ops] = VERSIONS) -> dict[str, TinyLM]:
    """One ``TinyLM`` per version (``VERSIONS``), all with the same weights."""
    torch.manual_seed(seed)
    first = TinyLM(PLAIN, config)
    out = {}
    for name, ops in versions.items():
        model = TinyLM(ops, config)
        model.load_state_dict(first.state_dict())
        out[name] = model
    return out


def loss_of(model: Callable[[Tensor], Tensor], tokens: Tensor) -> Tensor:
    """Next-token cross entropy over ``tokens`` (batch, sequence)."""
    logits = model(tokens[:, :-1])
    loss: Tensor = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    return loss


def train(model: nn.Module, tokens: Tensor, steps: int = 5, lr: float = 1e-2) -> list[float]:
    """``steps`` AdamW steps on ``tokens``; the losses before each step."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_of(model, tokens)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


_LOAD_AND_RUN = """
import sys, torch
model = torch._inductor.aoti_load_package(sys.argv[1])
torch.save(model(torch.load(sys.argv[2])), sys.argv[3])
print(sorted(m for m in sys.modules if m.startswith(("opclass", "decoder_block"))))
"""


def deploy(model: TinyLM, tokens: Tensor, where: Path) -> Tensor:
    """Export ``model`` (sequence length dynamic), decompose its ops, build an AOTInductor package in
    ``where`` and run it on ``tokens`` in a fresh Python process that imports neither opclass nor this
    file. Returns the logits that process computed."""
    seq = torch.export.Dim("seq", min=2, max=model.cos.shape[0])
    exported = torch.export.export(model, (tokens[:, :4],), dynamic_shapes=({1: seq},))
    decomposed = exported.run_decompositions(opclass.decompositions(*OP_CLASSES, base=torch.export.default_decompositions()))
    left = {str(n.target) for n in decomposed.graph.nodes if "ex_decoder" in str(n.target)}
    assert not left, f"ops left in the decomposed program: {left}"
    package = torch._inductor.aoti_compile_and_package(decomposed, package_path=str(where / "tiny_lm.pt2"))
    torch.save(tokens, where / "tokens.pt")
    run = subprocess.run(
        [sys.executable, "-c", _LOAD_AND_RUN, package, str(where / "tokens.pt"), str(where / "logits.pt")],
        cwd=where, capture_output=True, text=True, check=True,
    )
    assert run.stdout.strip() == "[]", run.stdout  # no opclass module, no op class, in that process
    logits: Tensor = torch.load(where / "logits.pt")
    return logits


def _no_compiler() -> str | None:
    """Why inductor cannot build C++ here (``None``: it can): CPU code and AOTInductor packages need a compiler."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        get_cpp_compiler()
    except Exception as e:  # noqa: BLE001 - whatever inductor's own lookup says
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


def main() -> None:
    torch.manual_seed(0)
    tokens = torch.randint(0, Config().vocab, (2, 17))
    # Training: the same losses from the same weights, whichever way the ops are defined.
    versions = models()
    losses = {name: train(model, tokens) for name, model in versions.items()}
    for name in ("custom_op", "opclass"):
        torch.testing.assert_close(losses[name], losses["plain"], rtol=1e-4, atol=1e-5)
    assert losses["opclass"][-1] < losses["opclass"][0]
    print("loss per step: " + " ".join(f"{x:.3f}" for x in losses["opclass"]) + " (plain functions, custom_op and opclass alike)")

    model, no_compiler = versions["opclass"], _no_compiler()
    # torch.compile: one graph for the whole step; each op is one node, differentiated by its formula.
    backend = "aot_eager" if no_compiler else "inductor"
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    expected = loss_of(model, tokens)
    got = loss_of(compiled, tokens)
    torch.testing.assert_close(got, expected)
    got.backward()
    print(f"compiled (fullgraph=True, {backend}): loss {got.item():.4f}, the same as eager")

    # Deployment: the exported program decomposed into torch ops, run where no op class exists.
    if no_compiler:
        print(f"no AOTInductor package: inductor finds no C++ compiler here ({no_compiler})")
        return
    with torch.no_grad(), tempfile.TemporaryDirectory() as where:
        prompt = tokens[:1, :9]  # another sequence length than exported with
        deployed = deploy(model, prompt, Path(where))
        torch.testing.assert_close(deployed, model(prompt), rtol=1e-4, atol=1e-4)
    print("AOTInductor package of the decomposed program: same logits in a process without opclass")


if __name__ == "__main__":
    main()
