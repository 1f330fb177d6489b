"""Half-precision accuracy beside torch's: flash-attn's rule for its own tests, on its shapes.

flash-attn checks each kernel output `out` in bf16/f16 against a float32-upcast reference with
`(out - ref).abs().max() <= 2 * (out_pt - ref).abs().max()`, where `out_pt` is PyTorch's attention
in the same dtype. Here `ref` is the float64 reference (fuel_cy.harness.reference), `out_pt`
torch's `scaled_dot_product_attention` in the dtype, and `out` attention_masked in both P V modes
(`round_p`). torch is a test/bench extra: without it there is nothing to compare with.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from . import reference

# flash-attn's tests/test_flash_attn.py seqlen pairs (a subset: ragged, rectangular, long) and head dims
SEQLENS = [(113, 203), (256, 512), (1024, 1024)]
HEAD_DIMS = [64, 128]
BATCH, HEADS = 2, 4
RATIO = 2.0


def rows(progress: Callable[[str], None] = lambda s: None) -> Optional[list[dict[str, Any]]]:
    """One row per (dtype, seqlens, head dim, causal): the max abs error against float64 of torch
    SDPA in the dtype and of attention_masked in each mode, and whether each is within RATIO of
    torch's; None without torch."""
    try:
        import torch
    except ImportError:
        return None
    import ml_dtypes

    import fuel_cy

    out: list[dict[str, Any]] = []
    for name, np_t, torch_t in (("BF16", ml_dtypes.bfloat16, torch.bfloat16), ("F16", np.float16, torch.float16)):
        for sq, sk in SEQLENS:
            for d in HEAD_DIMS:
                for causal in (False, True):
                    progress(f"peer accuracy: {name} {sq}x{sk} D={d}{' causal' if causal else ''}")
                    rng = np.random.default_rng(sq * 7 + sk + d)
                    q, k, v = (rng.standard_normal((BATCH, HEADS, n, d)).astype(np_t) for n in (sq, sk, sk))
                    ref = reference.masked_attention(q, k, v, causal=causal)
                    tq, tk, tv = (torch.from_numpy(x.astype(np.float32)).to(torch_t) for x in (q, k, v))
                    with torch.no_grad():
                        pt = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
                    err_pt = float(np.abs(pt.float().numpy().astype(np.float64) - ref).max())
                    row: dict[str, Any] = {"dtype": name, "shape": f"B={BATCH} H={HEADS} Sq={sq} Sk={sk} D={d}",
                                           "causal": causal, "torch_error": err_pt}
                    for mode, round_p in (("p_in_t", True), ("p_in_f32", False)):
                        ours = fuel_cy.attention_masked(q, k, v, causal=causal, round_p=round_p)
                        err = float(np.abs(ours.astype(np.float64) - ref).max())
                        row[f"{mode}_error"] = err
                        row[f"{mode}_ok"] = err <= RATIO * err_pt
                    out.append(row)
    progress("")
    return out
