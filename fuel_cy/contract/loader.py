"""Entry points of the contract layer: text or files in, validated ContractDoc out."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional, Union

from .build import BlockContext, Reader, build_kernel, load_block
from .checks import check_document, check_kernel
from .document import split_document
from .errors import Collector, ContractError
from .files import FUSED_OPS_FILE, contract_files, default_contracts_dir, text_hash  # noqa: F401 (re-exported)
from .model import ContractDoc, FusedOpInfo, Kernel, Provider
from .recover import is_indented, reindent
from ..dtypes import DTYPES
from .schema import FRONT_MATTER
from .yamlload import YamlProblem, load

MAX_FILE_BYTES = 2_000_000


def parse_fused_ops(text: str, path: str = FUSED_OPS_FILE) -> dict[str, FusedOpInfo]:
    problems = Collector()
    try:
        data = load(text)
    except YamlProblem as exc:
        raise ContractError([_p(path, exc.line, exc.keypath, exc.message)]) from None
    out: dict[str, FusedOpInfo] = {}
    top = Reader(data, "", BlockContext(path, 0, problems, {}), 1)
    ops = top.sub("fused_ops")
    top.finish()
    if ops is not None:
        for name in list(ops.data):
            r = ops.sub(name)
            assert r is not None
            ident = r.integer("id")
            arm = r.take("exec_arm", lambda v: v is None or isinstance(v, str), "a kernel name or null", None)
            dtypes = r.take("exec_dtypes", lambda v: isinstance(v, list) and all(d in DTYPES for d in v),
                            "a list of dtypes", [])
            bundle_of = r.take("bundle_of", lambda v: isinstance(v, str), "a kernel name", None)
            output = r.take("output", lambda v: isinstance(v, str), "an output name", None)
            r.finish()
            out[name] = FusedOpInfo(name, ident if ident is not None else -1, arm, tuple(dtypes), output, bundle_of)
    problems.raise_if_any()
    return out


def _p(path, line, key, msg):
    from .errors import Problem
    return Problem(path, line, key, msg)


def parse_document(text: str, path: str = "<contract>", fused_ops: Optional[Mapping[str, FusedOpInfo]] = None) -> ContractDoc:
    """Parse one FKC document; raises ContractError listing every problem found."""
    problems = Collector()
    if fused_ops is None:
        fused_ops = default_fused_ops()
    split = split_document(text, path, problems)
    provider = _front_matter(split.front_matter.lines, split.front_matter.first_line, path, problems)
    kernels: list[Kernel] = []
    failed: dict[int, set[str]] = {}  # id(kernel) -> key paths already reported for it
    for section in split.sections:
        if len(section.blocks) > 1:
            problems.add(path, section.line, section.name, "a section holds at most one fkc block")
        for block in section.blocks[:1]:
            covered: set[str] = set()
            data, comments, canon = load_block(list(block.lines), block.first_line, path, problems,
                                               section.name, covered)
            if data is None:
                continue
            ctx = BlockContext(path, block.first_line - 1, problems, comments)
            ctx.failed |= covered
            if not section.description:
                problems.add(path, section.line, section.name, "a kernel section needs a prose description")
            kernel = build_kernel(data, ctx, section.title, section.description, canon, section.name)
            if kernel is None:
                continue
            if kernel.name != section.name:
                problems.add(path, kernel.loc.line, f"{kernel.name}.kernel",
                             f"kernel name {kernel.name!r} does not match its section '## {section.name}'")
            kernels.append(kernel)
            failed[id(kernel)] = ctx.failed
    for k in kernels:
        check_kernel(k, fused_ops, problems, failed[id(k)])
    check_document(kernels, problems)
    problems.raise_if_any()
    assert provider is not None
    return ContractDoc(path, 1, provider, split.title, split.intro, tuple(kernels), text_hash(text))


def _front_matter(lines, first_line: int, path: str, problems: Collector) -> Optional[Provider]:
    lines = list(lines)
    try:
        if is_indented(lines):
            text = "\n".join(lines)
        else:  # recover past unplaceable lines, reporting each (see recover._Recovery)
            found: list[YamlProblem] = []
            text = "\n".join(reindent(lines, FRONT_MATTER, "", found))
            for exc in found:
                problems.add(path, first_line + exc.line - 1, exc.keypath, exc.message)
        data = load(text)
    except YamlProblem as exc:
        problems.add(path, first_line + exc.line - 1, exc.keypath, exc.message)
        return Provider("", "", "", "", "")
    r = Reader(data, "", BlockContext(path, first_line - 1, problems, {}), first_line)
    version = r.integer("fkc_version")
    if version is not None and version != 1:
        r.error("fkc_version", f"unsupported fkc_version {version} (this parser reads version 1)")
    p = r.sub("provider")
    r.finish()
    if p is None:
        return Provider("", "", "", "", "")
    provider = Provider(p.string("name") or "", p.ident("backend") or "", p.string("kernel_source") or "",
                        p.string("link_registry") or "", p.string("revision_base") or "")
    p.finish()
    return provider


def load_contract(path: Union[str, Path], fused_ops: Optional[Mapping[str, FusedOpInfo]] = None,
                  display_path: Optional[str] = None) -> ContractDoc:
    path = Path(path)
    shown = display_path or str(path)
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ContractError([_p(shown, 0, "", f"file larger than {MAX_FILE_BYTES} bytes")])
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ContractError([_p(shown, 0, "", f"cannot read contract: {exc.strerror or exc}")]) from None
    except UnicodeDecodeError as exc:
        raise ContractError([_p(shown, 0, "", f"contract is not UTF-8: {exc.reason}")]) from None
    if fused_ops is None:
        table = path.parent / FUSED_OPS_FILE
        fused_ops = parse_fused_ops(table.read_text(encoding="utf-8"), str(table)) if table.exists() else default_fused_ops()
    return parse_document(text, shown, fused_ops)


def load_contracts(directory: Union[str, Path]) -> list[ContractDoc]:
    """Load every ``*.md`` contract in ``directory`` with its fused-op table; all problems at once."""
    directory = Path(directory)
    table = directory / FUSED_OPS_FILE
    fused = parse_fused_ops(table.read_text(encoding="utf-8"), str(table)) if table.exists() else default_fused_ops()
    docs, problems = [], Collector()
    for path in contract_files(directory):
        try:
            docs.append(load_contract(path, fused))
        except ContractError as exc:
            problems.extend(exc)
    problems.raise_if_any()
    kernels = [k for d in docs for k in d.kernels]
    check_document(kernels, problems)
    problems.raise_if_any()
    return docs


_DEFAULT_FUSED: Optional[dict[str, FusedOpInfo]] = None


def default_fused_ops() -> dict[str, FusedOpInfo]:
    global _DEFAULT_FUSED
    if _DEFAULT_FUSED is None:
        table = default_contracts_dir() / FUSED_OPS_FILE
        _DEFAULT_FUSED = parse_fused_ops(table.read_text(encoding="utf-8"), str(table))
    return _DEFAULT_FUSED
