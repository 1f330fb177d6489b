"""fuel_cy.transformers: transformers models built from configs (random weights, nothing downloaded)
run with attn_implementation="fuel_cy", against the same weights under transformers' own "eager"
attention (and "sdpa" for the bf16 distance): logits of padded batches, greedy generation with
the KV cache, torch.compile, and proof that the registered mask builder is really used."""
from __future__ import annotations

import copy

import pytest
import torch
import transformers as tf

import fuel_cy.transformers as fct

VOCAB = 97


def _config(name: str):
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    if name == "llama":
        return tf.LlamaConfig(**common), tf.LlamaForCausalLM
    if name == "mistral":   # a sliding window shorter than the prompts
        return tf.MistralConfig(sliding_window=7, **common), tf.MistralForCausalLM
    if name == "qwen2":     # sliding window on the upper layers only
        return tf.Qwen2Config(sliding_window=6, use_sliding_window=True, max_window_layers=1,
                              layer_types=["full_attention", "sliding_attention"], **common), tf.Qwen2ForCausalLM
    if name == "gemma2":    # attention softcap and alternating sliding layers; head_dim != hidden / heads
        return tf.Gemma2Config(sliding_window=8, head_dim=24, attn_logit_softcapping=20.0, **common), tf.Gemma2ForCausalLM
    raise KeyError(name)


def _pair(name: str, other: str = "eager", dtype=torch.float32):
    """The same random weights under `other` attention and under fuel_cy's."""
    config, cls = _config(name)
    torch.manual_seed(0)
    ref = cls._from_config(copy.deepcopy(config), attn_implementation=other, dtype=dtype).eval()
    ours = cls._from_config(copy.deepcopy(config), attn_implementation=fct.NAME, dtype=dtype).eval()
    ours.load_state_dict(ref.state_dict())
    assert ours.config._attn_implementation == fct.NAME and ref.config._attn_implementation == other
    return ref, ours


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (3, 21), generator=g)
    mask = torch.ones(3, 21, dtype=torch.long)
    mask[0, :6] = 0          # left padding
    mask[1, 14:] = 0         # right padding
    return ids, mask


MODELS = ["llama", "mistral", "qwen2", "gemma2"]


@pytest.mark.parametrize("name", MODELS)
def test_logits_match_eager_with_and_without_padding(name):
    ref, ours = _pair(name)
    ids, mask = _batch()
    keep = mask.bool()
    with torch.no_grad():
        one_ref, one = ref(ids[2:]).logits, ours(ids[2:]).logits
        pad_ref, pad = ref(ids, attention_mask=mask).logits, ours(ids, attention_mask=mask).logits
    scale = float(one_ref.abs().max())
    assert float((one - one_ref).abs().max()) <= 1e-5 * scale
    assert float((pad - pad_ref)[keep].abs().max()) <= 1e-5 * scale
    # the mask builder registered beside the attention is used: dropping the mask changes the
    # padded rows' logits (without AttentionMaskInterface transformers would pass None silently)
    with torch.no_grad():
        unmasked = ours(ids).logits
    assert float((unmasked - pad)[keep].abs().max()) > 1e-2 * scale


@pytest.mark.parametrize("name", MODELS)
def test_greedy_generation_gives_eagers_tokens(name):
    ref, ours = _pair(name)
    ids, mask = _batch(1)
    prompt, prompt_mask = ids[:2, :12], mask[:2, :12].clone()
    prompt_mask[0, :3] = 0   # a left-padded prompt in the batch
    prompt_mask[1] = 1
    kw = dict(max_new_tokens=12, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        expected = ref.generate(prompt, attention_mask=prompt_mask, **kw)
        got = ours.generate(prompt, attention_mask=prompt_mask, **kw)
    assert torch.equal(got, expected)


def test_bert_encoder_with_padding():
    config = tf.BertConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                           num_attention_heads=4, max_position_embeddings=64)
    torch.manual_seed(0)
    ref = tf.BertModel._from_config(copy.deepcopy(config), attn_implementation="eager").eval()
    ours = tf.BertModel._from_config(copy.deepcopy(config), attn_implementation=fct.NAME).eval()
    ours.load_state_dict(ref.state_dict())
    ids, mask = _batch(2)
    with torch.no_grad():
        a = ref(ids, attention_mask=mask).last_hidden_state
        b = ours(ids, attention_mask=mask).last_hidden_state
    keep = mask.bool()
    assert float((a - b)[keep].abs().max()) <= 1e-5 * float(a.abs().max())


def test_bf16_is_within_sdpas_distance_of_the_f32_truth():
    """In both P V modes: the default (P rounded to bf16, as torch's CPU flash) and the exact-P
    backend one register() argument away; the two are different computations."""
    fct.register("fuel_cy_exact", round_p=False)
    truth_model, _ = _pair("llama")
    sdpa16, ours16 = _pair("llama", other="sdpa", dtype=torch.bfloat16)
    exact16 = copy.deepcopy(ours16)
    exact16.config._attn_implementation = "fuel_cy_exact"
    ids, mask = _batch(3)
    keep = mask.bool()
    with torch.no_grad():
        truth = truth_model(ids, attention_mask=mask).logits
        err_sdpa = float((sdpa16(ids, attention_mask=mask).logits.float() - truth)[keep].abs().max())
        fast = ours16(ids, attention_mask=mask).logits
        exact = exact16(ids, attention_mask=mask).logits
    for got in (fast, exact):
        err_ours = float((got.float() - truth)[keep].abs().max())
        assert err_ours <= 1.5 * err_sdpa, (err_ours, err_sdpa)
    assert not torch.equal(fast, exact)


def test_a_compiled_model_gives_the_eager_models_logits():
    ref, ours = _pair("llama")
    ids, mask = _batch(4)
    compiled = torch.compile(ours, fullgraph=True)
    with torch.no_grad():
        got = compiled(ids, attention_mask=mask).logits
        expected = ref(ids, attention_mask=mask).logits
    keep = mask.bool()
    assert float((got - expected)[keep].abs().max()) <= 1e-5 * float(expected.abs().max())


def test_register_is_idempotent_and_takes_a_name():
    fct.register()
    fct.register("fuel_cy_alt")
    assert tf.AttentionInterface._global_mapping["fuel_cy_alt"] is fct.attention_forward
    from transformers.masking_utils import AttentionMaskInterface

    assert "fuel_cy_alt" in AttentionMaskInterface._global_mapping
