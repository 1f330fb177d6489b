"""Malformed contracts: each is a ContractError with file, line, key path and a reason."""
from __future__ import annotations

import pytest

from fuel_cy.contract import ContractError, parse_document

FLASH_Q = """kernel: attention_flash
fused_op: FLASH_ATTN"""

# (id, old text, new text, expected message fragment, expected key-path fragment, text on the reported line)
CASES = [
    ("unknown-input-key", "      rank: 4 # [B, Hq, Sq, D]\n    - name: k\n      dtypes: [F32, F64, BF16, F16]\n      layout: { contiguous: required, strided: rejected, broadcast_stride0: rejected, start_offset: rejected, reverse_strides: rejected }\n      rank: 4 # [B, Hkv, Sk, D]\n      shape_constraint: \"divisible(q.dim[1], k.dim[1])\" # GQA: Hq % Hkv == 0\n    - name: v\n      dtypes: [F32, F64, BF16, F16]\n      layout: { contiguous: required, strided: rejected, broadcast_stride0: rejected, start_offset: rejected, reverse_strides: rejected }\n      rank: 4\n      shape_constraint: \"same_as=k\" # Hkv",
     "      rank: 4 # [B, Hq, Sq, D]\n      dtype: F32\n    - name: k\n      dtypes: [F32, F64, BF16, F16]\n      layout: { contiguous: required, strided: rejected, broadcast_stride0: rejected, start_offset: rejected, reverse_strides: rejected }\n      rank: 4 # [B, Hkv, Sk, D]\n      shape_constraint: \"divisible(q.dim[1], k.dim[1])\" # GQA: Hq % Hkv == 0\n    - name: v\n      dtypes: [F32, F64, BF16, F16]\n      layout: { contiguous: required, strided: rejected, broadcast_stride0: rejected, start_offset: rejected, reverse_strides: rejected }\n      rank: 4\n      shape_constraint: \"same_as=k\" # Hkv",
     "unknown key 'dtype'", "attention_naive.accept.inputs[0].dtype", "dtype: F32"),
    ("bad-dtype", "    - name: context_lens\n      dtypes: [U32]", "    - name: context_lens\n      dtypes: [U8]",
     "'U8' is not in the vocabulary", "inputs[4].dtypes", "dtypes: [U8]"),
    ("optional-before-required", "    - name: q\n      dtypes: [F32, F64, BF16, F16]\n      layout: { contiguous: required, strided: rejected, broadcast_stride0: rejected, start_offset: rejected, reverse_strides: rejected }\n      rank: 4 # [B, Hq, Sq, D]\n    - name: k_cache",
     "    - name: q\n      dtypes: [F32, F64, BF16, F16]\n      layout: { contiguous: required, strided: rejected, broadcast_stride0: rejected, start_offset: rejected, reverse_strides: rejected }\n      rank: 4 # [B, Hq, Sq, D]\n      optional: true\n    - name: k_cache",
     "follows optional input 'q'", "attention_paged_naive.accept.inputs[1]", "- name: k_cache"),
    ("unknown-symbol", 'flops: "12 * b * hq * sq * sk * d"', 'flops: "12 * b * hq * sq * zz * d"',
     "unknown symbol 'zz'", "attention_flash_backward.cost.flops", None),
    ("dunder-call", 'flops: "12 * b * hq * sq * sk * d"', "flops: \"__import__('os').system('x')\"",
     "invalid formula", "cost.flops", "__import__"),
    ("attribute-access", 'flops: "12 * b * hq * sq * sk * d"', 'flops: "12 * q.shape"',
     "only '.dim[i]' attribute access", "cost.flops", "q.shape"),
    ("call", 'flops: "12 * b * hq * sq * sk * d"', 'flops: "max(b, d)"',
     "calls are not allowed", "cost.flops", "max(b, d)"),
    ("power", 'flops: "12 * b * hq * sq * sk * d"', 'flops: "b ** 99999999"',
     "unexpected '*'", "cost.flops", "b ** 99999999"),
    ("bad-identifier", "kernel: attention_flash_backward\n", "kernel: attention-flash-backward\n",
     "identifier", "kernel", "kernel: attention-flash-backward"),
    ("duplicate-yaml-key", "      rank: 2 # [B, max_blocks_per_seq]", "      rank: 2 # [B, max_blocks_per_seq]\n      rank: 2",
     "duplicate key 'rank'", "", None),
    ("python-tag", "determinism: same_hardware_bitwise\n```\n## attention_flash (", "determinism: !!python/object/apply:os.system ['true']\n```\n## attention_flash (",
     "not allowed", "", "!!python"),
    ("yaml-alias", "  variant: PagedAttn", "  variant: &x PagedAttn",
     "anchors are not allowed", "", "&x"),
    ("same-as-unknown", 'shape_constraint: "same_as=k_cache"', 'shape_constraint: "same_as=k_pool"',
     "same_as names unknown input 'k_pool'", "inputs[2].shape_constraint", None),
    ("dim-out-of-range", 'constraint: "== k_cache.dim[1] == v_cache.dim[1]"', 'constraint: "== k_cache.dim[7] == v_cache.dim[1]"',
     "out of range for rank 4", "fields.block_size.constraint", None),
    ("unknown-fused-op", "fused_op: PAGED_ATTN #", "fused_op: PAGED_ATTN_V2 #",
     "not in contracts/fused_ops.yaml", "attention_paged_naive.fused_op", None),
    ("fused-id-mismatch", "fused_op: PAGED_ATTN # FusedOpId(13)", "fused_op: PAGED_ATTN # FusedOpId(99)",
     "disagrees with fused_ops.yaml id 13", "fused_op", None),
    ("missing-blurb", 'blurb: "Paged-cache attention; per-seq block table + variable context_lens; implicit causal mask at context_lens[b]-Sq+q_pos."\n', "",
     "missing required key 'blurb'", "attention_paged_naive.blurb", None),
    ("bad-layout-policy", "    - name: block_table\n      dtypes: [U32]\n      layout: { contiguous: required,", "    - name: block_table\n      dtypes: [U32]\n      layout: { contiguous: maybe,",
     "expected one of", "layout.contiguous", "contiguous: maybe"),
    ("unknown-param-kind", "    softcap: { kind: \"Option<f32>\" }\nreturn:\n  outputs:\n    - name: out\n      dtype_rule: passthrough(q)\n      shape_rule: from_params(q) # [B, Hq, Sq, D]\n      layout_guarantee: contiguous\n      aliasing: none\ncaps:\n  awkward_layout_strategy: requires_contiguous # RefTensor contiguous-only; planner inserts Op::Contiguize + sums its cost\n  fast_paths:\n    - { when: \"softcap == false\"",
     "    softcap: { kind: \"Option<u8>\" }\nreturn:\n  outputs:\n    - name: out\n      dtype_rule: passthrough(q)\n      shape_rule: from_params(q) # [B, Hq, Sq, D]\n      layout_guarantee: contiguous\n      aliasing: none\ncaps:\n  awkward_layout_strategy: requires_contiguous # RefTensor contiguous-only; planner inserts Op::Contiguize + sums its cost\n  fast_paths:\n    - { when: \"softcap == false\"",
     "param kind 'Option<u8>'", "fields.softcap.kind", "Option<u8>"),
    ("dims-rank-mismatch", "      rank: 1 # [B]", "      rank: 2 # [B]",
     "1 dim names ['B'] for rank 2", "inputs[4].dims", "rank: 2 # [B]"),
    ("return-unknown-input", "{ name: dq, dtype_rule: passthrough(q)", "{ name: dq, dtype_rule: passthrough(query)",
     "unknown input 'query'", "return.bundle.dq", None),
    ("section-name-mismatch", "## attention_paged_naive (", "## attention_paged (",
     "does not match its section", "attention_paged_naive.kernel", None),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_malformed_contract_is_located(canonical_text, case):
    name, old, new, message, keypath, line_text = case
    assert canonical_text.count(old) >= 1, f"fixture text for {name} not found"
    text = canonical_text.replace(old, new, 1)
    with pytest.raises(ContractError) as info:
        parse_document(text, "bad.md")
    problems = info.value.problems
    hit = [p for p in problems if message in p.message]
    assert hit, f"{name}: expected {message!r} in {[str(p) for p in problems]}"
    p = hit[0]
    assert p.path == "bad.md" and p.line > 0
    assert keypath in p.keypath
    if line_text is not None:
        assert line_text in text.splitlines()[p.line - 1], (p, text.splitlines()[p.line - 1])
    assert str(p).startswith(f"bad.md:{p.line}:")


def test_duplicate_kernel(canonical_text):
    start = canonical_text.index("## attention_flash (")
    end = canonical_text.index("## attention_paged_naive (")
    text = canonical_text + "\n" + canonical_text[start:end]
    with pytest.raises(ContractError) as info:
        parse_document(text, "dup.md")
    assert any("duplicate kernel 'attention_flash'" in p.message for p in info.value.problems)


def test_unclosed_fence(canonical_text):
    text = canonical_text.rsplit("```", 1)[0]
    with pytest.raises(ContractError, match="never closed"):
        parse_document(text, "x.md")


def test_all_problems_reported_at_once(canonical_text):
    text = (canonical_text.replace("    - name: context_lens\n      dtypes: [U32]", "    - name: context_lens\n      dtypes: [U8]", 1)
            .replace('flops: "12 * b * hq * sq * sk * d"', 'flops: "12 * zz"', 1)
            .replace("fused_op: PAGED_ATTN # FusedOpId(13)", "fused_op: PAGED_ATTN # FusedOpId(99)", 1))
    with pytest.raises(ContractError) as info:
        parse_document(text, "three.md")
    messages = " | ".join(p.message for p in info.value.problems)
    assert "U8" in messages and "zz" in messages and "FusedOpId(99)" in messages
    assert len({p.line for p in info.value.problems}) >= 3


def test_billion_laughs_is_refused():
    text = "---\nfkc_version: 1\nprovider:\n  name: &a x\n  backend: *a\n---\n"
    with pytest.raises(ContractError, match="not allowed"):
        parse_document(text, "lol.md")


def _copy_contracts(tmp_path):
    import shutil

    from conftest import ROOT

    dest = tmp_path / "contracts"
    shutil.copytree(ROOT / "contracts", dest)
    return dest


def test_fused_op_ids_are_one_namespace_across_contracts(tmp_path):
    """fuel_cy's own contract may not reuse an id of the founding one (or of another op)."""
    from fuel_cy.contract import load_contracts

    folder = _copy_contracts(tmp_path)
    mixed = folder / "fuel-cy-mixed.md"
    mixed.write_text(mixed.read_text().replace("fused_op_id: 41", "fused_op_id: 13", 1))
    table = folder / "fused_ops.yaml"
    table.write_text(table.read_text().replace("  PAGED_ATTN_MIXED:\n    id: 41", "  PAGED_ATTN_MIXED:\n    id: 13"))
    with pytest.raises(ContractError) as e:
        load_contracts(folder)
    text = str(e.value)
    assert "FusedOpId(13) of PAGED_ATTN" in text and "is already PAGED_ATTN" in text
    assert "fuel-cy-mixed.md:" in text and "fuel-reference-backend.md:" in text


def test_compute_mode_is_checked(tmp_path):
    from fuel_cy.contract import load_contracts

    folder = _copy_contracts(tmp_path)
    mixed = folder / "fuel-cy-mixed.md"
    mixed.write_text(mixed.read_text().replace("  compute: f32\n", "  compute: f16\n", 1))
    with pytest.raises(ContractError) as e:
        load_contracts(folder)
    assert "attention_flash_mixed.precision.compute" in str(e.value) and "one of T, f32" in str(e.value)
