"""The verbatim seed parses into exactly the facts it states."""
from __future__ import annotations

import yaml
import pytest

from fuel_cy.contract import parse_document
from fuel_cy.contract.format import format_document


@pytest.fixture(scope="module")
def doc(seed_text):
    return parse_document(seed_text, "seed.txt")


def test_plain_yaml_load_of_the_seed_loses_the_nesting(seed_text, doc):
    # Why recovery exists: a naive load of a flattened block never yields accept.inputs (as
    # written, the blocks are not even valid YAML) ...
    blocks = [block.split("```")[0] for block in seed_text.split("```fkc\n")[1:]]
    assert len(blocks) == 4
    lost = 0
    for block in blocks:
        try:
            naive = yaml.safe_load(block)
        except yaml.YAMLError:
            lost += 1
            continue
        accept = naive.get("accept") if isinstance(naive, dict) else None
        lost += not (isinstance(accept, dict) and "inputs" in accept)
    assert lost == len(blocks)
    # ... while the parser recovers every kernel's inputs, with their dtypes
    assert [len(k.inputs) for k in doc.kernels] == [4, 4, 6, 5]
    assert all(spec.dtypes for k in doc.kernels for spec in k.inputs)


def test_provider_front_matter(doc):
    p = doc.provider
    assert (p.name, p.backend, p.kernel_source) == ("fuel-reference-backend", "Cpu", "reference-oracle")
    assert p.link_registry == "fuel_reference_backend::fkc::ENTRY_POINTS"
    assert p.revision_base == "git:f41137b4"
    assert doc.fkc_version == 1


def test_four_kernels_in_order(doc):
    assert [k.name for k in doc.kernels] == [
        "attention_naive", "attention_flash", "attention_paged_naive", "attention_flash_backward"]


def test_fused_ops_and_ids(doc):
    ids = {k.name: (k.fused_op, k.fused_op_id) for k in doc.kernels}
    assert ids == {"attention_naive": ("FLASH_ATTN", 12), "attention_flash": ("FLASH_ATTN", 12),
                   "attention_paged_naive": ("PAGED_ATTN", 13),
                   "attention_flash_backward": ("FLASH_ATTN_BACKWARD_Q", 22)}


def test_paged_inputs_exactly(doc):
    k = doc.kernel("attention_paged_naive")
    assert [i.name for i in k.inputs] == ["q", "k_cache", "v_cache", "block_table", "context_lens", "alibi_slopes"]
    assert [i.optional for i in k.inputs] == [False] * 5 + [True]
    bt = k.input("block_table")
    assert (bt.dtypes, bt.rank, bt.dims) == (("U32",), 2, ("B", "max_blocks_per_seq"))
    assert k.input("k_cache").dims == ("num_blocks", "block_size", "Hkv", "D")
    assert k.input("v_cache").dims == ("num_blocks", "block_size", "Hkv", "D")  # inherited via same_as
    assert k.input("context_lens").dims == ("B",)
    g = k.input("k_cache").fdx.gather
    assert (g.kind, g.block_table, g.context_lens) == ("paged_blocks", "block_table", "context_lens")
    assert k.input("k_cache").fdx.requires_ext is True
    assert k.input("k_cache").fdx.extent_kind == "range"
    assert k.input("context_lens").fdx.symbolic_extent == "required"
    bs = next(f for f in k.op_params.fields if f.name == "block_size")
    assert bs.kind == "usize" and str(bs.constraint) == "== k_cache.dim[1] == v_cache.dim[1]"


def test_forward_inputs_dims_and_constraints(doc):
    for name in ("attention_naive", "attention_flash"):
        k = doc.kernel(name)
        assert [(i.name, i.dims) for i in k.inputs] == [
            ("q", ("B", "Hq", "Sq", "D")), ("k", ("B", "Hkv", "Sk", "D")),
            ("v", ("B", "Hkv", "Sk", "D")), ("alibi_slopes", ("Hq",))]
        assert [str(i.shape_constraint) if i.shape_constraint else None for i in k.inputs] == [
            None, "divisible(q.dim[1], k.dim[1])", "same_as=k", "dim[0] == q.dim[1]"]
        assert all(i.dtypes == ("F32", "F64", "BF16", "F16") for i in k.inputs)
        assert all(dict(i.layout) == {"contiguous": "required", "strided": "rejected", "broadcast_stride0": "rejected",
                                      "start_offset": "rejected", "reverse_strides": "rejected"} for i in k.inputs)


def test_params(doc):
    fields = [(f.name, f.kind) for f in doc.kernel("attention_flash").op_params.fields]
    assert fields == [("softmax_scale", "f32"), ("causal", "bool"), ("window_size_left", "Option<usize>"),
                      ("window_size_right", "Option<usize>"), ("softcap", "Option<f32>"),
                      ("k_len", "Option<DynScalar>")]
    assert doc.kernel("attention_flash").op_params.variant == "FlashAttn"
    assert doc.kernel("attention_flash_backward").op_params.variant == "FlashAttnBackward"
    assert [f.name for f in doc.kernel("attention_flash_backward").op_params.fields] == [
        "softmax_scale", "causal", "window_size_left", "window_size_right", "softcap"]
    k_len = doc.kernel("attention_naive").op_params.fields[-1]
    assert k_len.note.startswith("None ⇒ full Sk")


def test_returns(doc):
    out = doc.kernel("attention_flash").returns
    assert out.kind == "outputs" and [(o.name, o.dtype_rule, o.shape_rule, o.aliasing) for o in out.items] == [
        ("out", "passthrough(q)", "from_params(q)", "none")]
    bundle = doc.kernel("attention_flash_backward").returns
    assert bundle.kind == "bundle"
    assert [(o.name, o.dtype_rule, o.shape_rule) for o in bundle.items] == [
        ("dq", "passthrough(q)", "same_as(q)"), ("dk", "passthrough(k)", "same_as(k)"),
        ("dv", "passthrough(v)", "same_as(v)")]


def test_caps(doc):
    caps = doc.kernel("attention_flash_backward").caps
    assert caps.awkward_layout_strategy == "requires_contiguous"
    assert [(f.when, f.note) for f in caps.fast_paths] == [
        ("causal == false", "no causal-mask branch in recompute"),
        ("softcap == false", "skips the 1 - tanh^2 softcap-derivative factor")]
    assert (caps.in_place, caps.alignment_bytes, caps.access_granularity_bits) == (False, 64, 8)


def test_cost_formulas(doc):
    flash = doc.kernel("attention_flash")
    assert str(flash.cost.flops) == "4 * b * hq * sq * sk * d"
    env = {"b": 2, "hq": 8, "sq": 128, "d": 64, "hkv": 2, "sk": 256, "dtype_bytes": 4}
    assert flash.cost.flops.evaluate(env) == 4 * 2 * 8 * 128 * 256 * 64
    assert flash.cost.bytes_moved.evaluate(env) == 2 * (8 * 128 * 64 + 2 * 2 * 256 * 64 + 8 * 128 * 64) * 4
    assert flash.cost.provenance == "judge_measured" and flash.cost.cost_class == "attention"
    assert flash.cost.overhead_ns is None
    assert str(flash.cost.memory.host_bytes) == "b * hq * sq * d * dtype_bytes"
    assert flash.cost.memory.device_bytes.evaluate({}) == 0
    paged = doc.kernel("attention_paged_naive")
    assert str(paged.cost.flops) == "4 * b * hq * sq * (block_table.dim[1] * block_size) * d"
    value = paged.cost.flops.evaluate({"b": 2, "hq": 4, "sq": 1, "d": 8, "block_size": 16},
                                      {"block_table": (2, 5)})
    assert value == 4 * 2 * 4 * 1 * 5 * 16 * 8
    assert str(doc.kernel("attention_flash_backward").cost.flops) == "12 * b * hq * sq * sk * d"


def test_precision_and_determinism(doc):
    for k in doc.kernels:
        assert k.precision.bit_stable_on_same_hardware is True and k.precision.audited is True
        assert (k.precision.max_ulp, k.precision.max_relative, k.precision.max_absolute) == (None, None, None)
        assert k.determinism == "same_hardware_bitwise"
    assert "NOT bit-identical to naive" in doc.kernel("attention_flash").precision.notes


def test_prose_sections(doc):
    k = doc.kernel("attention_paged_naive")
    assert k.title.startswith("paged-cache attention")
    assert "vLLM-style paged layout" in k.description
    assert doc.title.startswith("fuel-reference-backend")


def test_canonical_contract_equals_seed(doc, canonical_text):
    assert parse_document(canonical_text, "contracts/fuel-reference-backend.md") == doc


def test_formatter_round_trip_and_idempotence(seed_text, doc):
    once = format_document(seed_text)
    assert parse_document(once) == doc
    assert format_document(once) == once


def test_formatting_the_seed_gives_the_committed_contract(seed_text, canonical_text):
    assert format_document(seed_text) == canonical_text


def test_indented_input_flattened_back_parses_equal(canonical_text, doc):
    # strip every block's indentation: the flattened spelling must recover the same model
    flat = "\n".join(line.lstrip() if not line.startswith("#") else line for line in canonical_text.splitlines())
    assert parse_document(flat) == doc
