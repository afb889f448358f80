"""How the GPU tests judge a kernel output, and the NaN poison they put in the workspace.

An output is compared with the fp64 reference (:func:`.ref.verify_attention_ref`) by relative
Frobenius error, and that error is bounded by what plain PyTorch at the inputs' precision costs
on the same inputs (:func:`.ref.verify_attention_torch`: bf16 logits, ``torch.softmax`` to
bf16, a bf16 output), as flash-attention's tests bound theirs:

    err(kernel) <= TORCH_FACTOR * err(PyTorch bf16) + EPS

The kernel keeps its logits and softmax in fp32 and rounds P and the output to bf16, so its
error (1.4e-3 to 2.8e-3 on the tests' shapes, docs/kernel.md) is 0.3 to 0.8 times PyTorch's
(1.9e-3 to 8e-3 on the same shapes; 2e-2 and more where logits spread wide). TORCH_FACTOR = 1.5
keeps a margin over the highest ratio, where both are mostly the bf16 rounding of the output
(short prefixes), and still fails a kernel twice as far off as it is today on long prefixes;
EPS covers outputs that both round exactly (a row that sees one column).
"""

from __future__ import annotations

from typing import Any

import torch

TORCH_FACTOR = 1.5
EPS = 1e-4


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative Frobenius error of ``x`` against ``ref`` (in ref's precision)."""
    return float((x.to(ref.dtype) - ref).norm() / ref.norm().clamp_min(1e-30))


def error_bound(torch_out: torch.Tensor, ref: torch.Tensor) -> float:
    """The largest error the kernel may have where PyTorch bf16 gives ``torch_out``."""
    return TORCH_FACTOR * rel_err(torch_out, ref) + EPS


def assert_within_torch_error(
    out: torch.Tensor, ref: torch.Tensor, torch_out: torch.Tensor, what: str = ""
) -> float:
    """Asserts err(out) <= TORCH_FACTOR * err(torch_out) + EPS against ``ref``; returns err."""
    err = rel_err(out, ref)
    torch_err = rel_err(torch_out, ref)
    assert err <= TORCH_FACTOR * torch_err + EPS, (
        f"{what}relative Frobenius error {err:.3e} above {TORCH_FACTOR} x PyTorch bf16's "
        f"{torch_err:.3e} + {EPS:g}"
    )
    return err


def poison_partials(ws: Any) -> None:
    """NaN in a workspace's partial outputs and LSEs, so a merge that reads a partial no CTA of
    the call wrote shows it in the output."""
    ws.partial_o.fill_(float("nan"))
    ws.partial_lse.fill_(float("nan"))
