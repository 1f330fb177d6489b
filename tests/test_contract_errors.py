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


# ---- issue #16: every independent error once, no follow-on errors, YAML errors located ----------
# Both spellings of the founding contract are tried: the committed, indented one and the seed,
# whose fkc blocks are flattened to column 0 (its nesting is recovered from the schema).

SPELLINGS = ["indented", "flattened"]


@pytest.fixture(params=SPELLINGS)
def spelling(request, canonical_text, seed_text):
    """(contract text, indent(n) -> the n-space prefix this spelling writes in fkc blocks)."""
    if request.param == "indented":
        return canonical_text, lambda n: " " * n
    return seed_text, lambda n: ""


def _mutate(text: str, kernel: str, *pairs: tuple[str, str]) -> str:
    """Replace each ``old`` with ``new`` at its first occurrence inside ``kernel``'s block."""
    start = text.index(f"kernel: {kernel}\n")
    end = text.index("```", start)
    block = text[start:end]
    for old, new in pairs:
        assert old in block, f"{old!r} not in {kernel}"
        block = block.replace(old, new, 1)
    return text[:start] + block + text[end:]


def _problems(text: str) -> list:
    with pytest.raises(ContractError) as info:
        parse_document(text, "bad.md")
    return list(info.value.problems)


def _line(text: str, problem) -> str:
    return text.splitlines()[problem.line - 1]


def test_unknown_caps_key_does_not_hide_the_kernels_other_errors(spelling):
    text, ind = spelling
    bad = _mutate(text, "attention_flash",
                  (ind(6) + "dtypes: [F32, F64, BF16, F16]\n", ind(6) + "dtypes: [F8]\n"),
                  (ind(2) + "in_place: false\n", ind(2) + "in_place: false\n" + ind(2) + "inplace: true\n"))
    problems = _problems(bad)
    assert len(problems) == 2, [str(p) for p in problems]
    dtype = next(p for p in problems if "'F8'" in p.message)
    assert dtype.keypath == "attention_flash.accept.inputs[0].dtypes" and "dtypes: [F8]" in _line(bad, dtype)
    key = next(p for p in problems if "unknown key 'inplace'" in p.message)
    assert key.keypath == "attention_flash.caps.inplace" and "inplace: true" in _line(bad, key)
    assert "did you mean 'in_place'" in key.message


def test_unknown_key_in_one_kernel_keeps_other_kernels_errors(spelling):
    text, ind = spelling
    bad = _mutate(text, "attention_flash", (ind(2) + "in_place: false\n", ind(2) + "in_place: false\n" + ind(2) + "inplace: true\n"))
    bad = _mutate(bad, "attention_flash_backward", ('flops: "12 * b * hq * sq * sk * d"', 'flops: "12 * zz"'))
    messages = [p.message for p in _problems(bad)]
    assert any("'inplace'" in m for m in messages) and any("'zz'" in m for m in messages), messages


@pytest.mark.parametrize("dtypes", ["[BF61]", "[F32, BF61]", "[BF61, U32]"])
def test_bad_dtype_is_one_message(spelling, dtypes):
    text, ind = spelling
    bad = _mutate(text, "attention_flash", (ind(6) + "dtypes: [F32, F64, BF16, F16]\n", ind(6) + f"dtypes: {dtypes}\n"))
    problems = _problems(bad)
    assert len(problems) == 1, [str(p) for p in problems]
    p = problems[0]
    assert "'BF61'" in p.message and "did you mean 'BF16'" in p.message
    assert p.keypath == "attention_flash.accept.inputs[0].dtypes" and "BF61" in _line(bad, p)


@pytest.mark.parametrize("old", ["rank: 4 # [B, Hq, Sq, D]\n", "rank: 4\n"], ids=["q-dims-in-comment", "v-dims-from-same-as"])
def test_bad_rank_is_one_message(spelling, old):
    text, ind = spelling
    bad = _mutate(text, "attention_flash", (ind(6) + old, ind(6) + old.replace("4", "four", 1)))
    problems = _problems(bad)
    assert len(problems) == 1, [str(p) for p in problems]
    p = problems[0]
    assert "expected a non-negative integer, found 'four'" in p.message
    assert p.keypath.startswith("attention_flash.accept.inputs[") and p.keypath.endswith("].rank")
    assert "rank: four" in _line(bad, p)


# (id, kernel, old, new, message fragment, exact key path): each is one cause, so one message
ONE_CAUSE = [
    ("typo-of-required-section", "attention_flash", "accept:\n", "acept:\n",
     "unknown key 'acept' (did you mean 'accept'?)", "attention_flash.acept"),
    ("typo-of-required-key", "attention_flash", "blurb:", "blub:",
     "unknown key 'blub' (did you mean 'blurb'?)", "attention_flash.blub"),
    ("bad-dtype-rule", "attention_flash", "dtype_rule: passthrough(q)", "dtype_rule: passthru(q)",
     "found 'passthru(q)'", "attention_flash.return.outputs[0].dtype_rule"),
    ("bad-kernel-identifier", "attention_flash", "kernel: attention_flash\n", "kernel: attention-flash\n",
     "found 'attention-flash'", "kernel"),
    ("bad-fused-op-identifier", "attention_flash", "fused_op: FLASH_ATTN", "fused_op: FLASH-ATTN",
     "found 'FLASH-ATTN'", "attention_flash.fused_op"),
    ("typo-of-section-after-params", "attention_flash", "return:\n", "retur:\n",
     "unknown key 'retur' (did you mean 'return'?)", "attention_flash.retur"),
    ("typo-of-list-item-key", "attention_flash", "- name: k\n", "- nam: k\n",
     "unknown key 'nam' (did you mean 'name'?)", "attention_flash.accept.inputs[1].nam"),
]


@pytest.mark.parametrize("case", ONE_CAUSE, ids=[c[0] for c in ONE_CAUSE])
def test_one_cause_one_message(spelling, case):
    _, kernel, old, new, message, keypath = case
    text, _ = spelling
    bad = _mutate(text, kernel, (old, new))
    problems = _problems(bad)
    assert len(problems) == 1, [str(p) for p in problems]
    assert message in problems[0].message and problems[0].keypath == keypath, str(problems[0])
    assert new.strip().split(":")[0] in _line(bad, problems[0])


# lines the flattened spelling's recovery cannot place: reported, and the rest of the block still read
FLAT_ONE_CAUSE = [
    ("missing-colon", "rank: 4 # [B, Hkv, Sk, D]\n", "rank 4 # [B, Hkv, Sk, D]\n",
     "expected 'key: value', found 'rank 4'", "attention_flash.accept.inputs[1]"),
    ("stray-list-item", "in_place: false\n", "- in_place: false\n",
     "unknown key 'in_place'", "attention_flash.caps.fast_paths[1].in_place"),
]


@pytest.mark.parametrize("case", FLAT_ONE_CAUSE, ids=[c[0] for c in FLAT_ONE_CAUSE])
def test_flattened_unplaceable_line_is_one_message(seed_text, case):
    _, old, new, message, keypath = case
    bad = _mutate(seed_text, "attention_flash", (old, new))
    bad = _mutate(bad, "attention_flash", ("dtypes: [F32, F64, BF16, F16]\n", "dtypes: [F8]\n"))  # independent
    problems = _problems(bad)
    assert len(problems) == 2, [str(p) for p in problems]
    p = next(p for p in problems if message in p.message)
    assert p.keypath == keypath and new.strip() in _line(bad, p), str(p)
    assert any("'F8'" in p.message for p in problems)


# YAML syntax errors in the indented spelling:
# (id, old, new, text on the reported line, exact key path, plain-words fragment)
YAML_SYNTAX = [
    ("unclosed-quote", 'equals naive up to f32-assoc drift."', "equals naive up to f32-assoc drift.",
     "blurb: ", "attention_flash.blurb", "quoted string"),
    ("unclosed-quote-in-list-item", 'shape_constraint: "same_as=k"', 'shape_constraint: "same_as=k',
     'shape_constraint: "same_as=k', "attention_flash.accept.inputs[2].shape_constraint", "quoted string"),
    ("unclosed-quote-at-end", "determinism: same_hardware_bitwise", "determinism: 'same_hardware_bitwise",
     "determinism: 'same", "attention_flash.determinism", "quoted string is never closed"),
    ("unclosed-bracket", "    - name: k\n      dtypes: [F32, F64, BF16, F16]", "    - name: k\n      dtypes: [F32, F64, BF16, F16",
     "dtypes: [F32, F64, BF16, F16", "attention_flash.accept.inputs[1].dtypes", "'['"),
    ("unclosed-brace", "    - name: k\n      dtypes: [F32, F64, BF16, F16]\n      layout: { contiguous: required, strided: rejected, broadcast_stride0: rejected, start_offset: rejected, reverse_strides: rejected }",
     "    - name: k\n      dtypes: [F32, F64, BF16, F16]\n      layout: { contiguous: required, strided: rejected, broadcast_stride0: rejected, start_offset: rejected, reverse_strides: rejected",
     "layout: { contiguous", "attention_flash.accept.inputs[1].layout", "'{'"),
    ("missing-colon", "      rank: 4 # [B, Hkv, Sk, D]", "      rank 4 # [B, Hkv, Sk, D]",
     "rank 4", "attention_flash.accept.inputs[1]", "':'"),
    ("missing-colon-space", "      rank: 4 # [B, Hkv, Sk, D]", "      rank:4 # [B, Hkv, Sk, D]",
     "rank:4", "attention_flash.accept.inputs[1]", "':'"),
    ("tab-indent", "    - name: k\n      dtypes", "    - name: k\n\tdtypes",
     "\tdtypes", "attention_flash.accept.inputs[1].dtypes", "tab"),
    ("over-indented-key", "    - name: k\n      dtypes", "    - name: k\n        dtypes",
     "        dtypes", "attention_flash.accept.inputs[1].dtypes", "indent"),
    ("over-indented-later-key", "      rank: 4 # [B, Hkv, Sk, D]\n", "        rank: 4 # [B, Hkv, Sk, D]\n",
     "        rank: 4", "attention_flash.accept.inputs[1].rank", "indent"),
    ("under-indented-key", "    - name: k\n      dtypes", "    - name: k\n     dtypes",
     "     dtypes", "attention_flash.accept.inputs", "indent"),
    ("missing-dash", "    - name: k\n", "    name: k\n",
     "    name: k", "attention_flash.accept.inputs", "'- '"),
    ("colon-in-value", "determinism: same_hardware_bitwise", "determinism: same: hardware",
     "determinism: same: hardware", "attention_flash.determinism", "quote"),
    ("duplicate-key", "      rank: 4 # [B, Hkv, Sk, D]\n", "      rank: 4 # [B, Hkv, Sk, D]\n      rank: 4\n",
     "      rank: 4", "attention_flash.accept.inputs[1].rank", "duplicate key 'rank'"),
]


@pytest.mark.parametrize("case", YAML_SYNTAX, ids=[c[0] for c in YAML_SYNTAX])
def test_yaml_syntax_error_is_located_in_plain_words(canonical_text, case):
    _, old, new, line_text, keypath, words = case
    bad = _mutate(canonical_text, "attention_flash", (old, new))
    problems = _problems(bad)
    assert len(problems) == 1, [str(p) for p in problems]
    p = problems[0]
    assert line_text in _line(bad, p), (str(p), _line(bad, p))
    if line_text == "      rank: 4":  # the duplicate is the second 'rank' line
        assert "#" not in _line(bad, p)
    assert p.keypath == keypath, str(p)
    plain = p.message.split(" (YAML parser:")[0]
    assert words in plain and "<block end>" not in plain and not plain.startswith("while "), p.message
    assert str(p).startswith(f"bad.md:{p.line}: {keypath}: ")


def _flat(text: str) -> str:
    """The flattened spelling of indented fkc lines."""
    return "\n".join(line.lstrip() for line in text.split("\n"))


@pytest.mark.parametrize("case", [c for c in YAML_SYNTAX if c[0] in ("unclosed-quote", "unclosed-bracket")],
                         ids=["unclosed-quote", "unclosed-bracket"])
def test_yaml_syntax_error_in_the_flattened_spelling(seed_text, case):
    _, old, new, line_text, keypath, words = case
    bad = _mutate(seed_text, "attention_flash", (_flat(old), _flat(new)))
    problems = _problems(bad)
    assert len(problems) == 1, [str(p) for p in problems]
    p = problems[0]
    assert line_text.strip() in _line(bad, p) and p.keypath == keypath and words in p.message, str(p)


def test_yaml_syntax_error_in_front_matter_has_a_key_path(canonical_text):
    bad = canonical_text.replace('  kernel_source: "reference-oracle"', '  kernel_source: "reference-oracle', 1)
    problems = _problems(bad)
    assert len(problems) == 1, [str(p) for p in problems]
    p = problems[0]
    assert 'kernel_source: "reference-oracle' in _line(bad, p) and p.keypath == "provider.kernel_source", str(p)
    assert "quoted string" in p.message


def test_yaml_syntax_error_keeps_other_blocks_errors(canonical_text):
    bad = _mutate(canonical_text, "attention_flash", ("      rank: 4 # [B, Hkv, Sk, D]", "      rank 4 # [B, Hkv, Sk, D]"))
    bad = _mutate(bad, "attention_flash_backward", ('flops: "12 * b * hq * sq * sk * d"', 'flops: "12 * zz"'))
    problems = _problems(bad)
    assert len(problems) == 2 and any("'zz'" in p.message for p in problems), [str(p) for p in problems]
