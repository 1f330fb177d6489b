"""fuel_cy as a transformers attention backend: ``attn_implementation="fuel_cy"``.

>>> import fuel_cy.transformers                     # registers "fuel_cy"   # doctest: +SKIP
>>> model = AutoModelForCausalLM.from_config(config, attn_implementation="fuel_cy")  # doctest: +SKIP

Importing this module registers the name "fuel_cy" with transformers' ``AttentionInterface`` (the
attention function) and ``AttentionMaskInterface`` (the mask builder); ``register(name)`` adds
another name, and ``register(name, round_p=False)`` one whose bf16/f16 softmax weights stay float32
in the product with V (the default rounds them to the input's type first, as torch's CPU flash
attention does).  Registering the mask builder too matters: transformers builds no mask at all for an
implementation it does not know, and padding would be dropped without an error.

The masks are transformers' own boolean sdpa masks (True takes part): padding left or right,
holes, packed sequences, sliding windows and chunked attention all arrive as one ``[B, 1, L, S]``
mask, which ``attention_masked`` reads as it is (a mask that transformers expanded from a smaller
one is read at its own size, never materialized).  Where transformers can skip the mask (causal,
no padding) the kernel's ``causal`` runs instead, with its fully-masked key tiles never computed.
Grouped-query attention runs on the kv heads as they are (no ``repeat_kv`` copy); Gemma2's
``softcap`` and a model's ``scaling`` pass through.  float32, float64, bfloat16 and float16;
half types compute in float32 (the mixed kernels' numerics), the output rounded once.

Importing this module imports torch and transformers; ``import fuel_cy`` alone never does.
"""
from __future__ import annotations

import functools
from typing import Any, Optional

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import create_position_bias_mask
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from . import torch as _fuel_torch

NAME = "fuel_cy"


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: Optional[torch.Tensor], dropout: float = 0.0,
                      scaling: Optional[float] = None, is_causal: Optional[bool] = None,
                      softcap: Optional[float] = None, position_bias: Optional[torch.Tensor] = None,
                      round_p: bool = True, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function protocol: query ``[B, Hq, L, D]``, key and value ``[B,
    Hkv, S, D]``, the mask from the mask builder registered beside it; returns ``([B, L, Hq, D],
    None)`` (no attention weights).  round_p: as `fuel_cy.torch.scaled_dot_product_attention`'s."""
    q_length = query.shape[2]
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    # as sdpa: the kernel's top-left causal is the model's mask only when transformers dropped
    # the mask for it, and a single query (decode) attends to the whole cache
    causal = bool(q_length > 1 and attention_mask is None and causal)
    if position_bias is not None:  # T5-style learned bias: one additive mask, as sdpa builds it
        attention_mask = create_position_bias_mask(position_bias, attention_mask, causal, query, key)
        causal = False
    out = _fuel_torch.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, is_causal=causal, scale=scaling,
        enable_gqa=query.shape[1] != key.shape[1], softcap=softcap, round_p=round_p)
    return out.transpose(1, 2).contiguous(), None


def register(name: str = NAME, *, round_p: bool = True) -> None:
    """Register fuel_cy's attention and its mask builder under ``name`` (idempotent); round_p=False:
    bf16/f16 softmax weights kept float32 in the product with V (the exact-P mode)."""
    AttentionInterface.register(name, attention_forward if round_p else functools.partial(attention_forward,
                                                                                         round_p=False))
    AttentionMaskInterface.register(name, sdpa_mask)


register()

__all__ = ["NAME", "attention_forward", "register"]
