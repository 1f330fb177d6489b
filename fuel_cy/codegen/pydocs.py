"""What a Python reader is told about each contract kernel: the descriptions of
contracts/python-api.yaml joined with the contract's own facts (types, shapes, dtypes, defaults).

One source for the kernels' docstrings (`docstring_text`, kept in each KernelView), the kernel pages
(fuel_cy/docs/pages.py) and the API reference (fuel_cy/docs/griffe_kernels.py), so the three cannot disagree.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

from ..contract.model import Kernel
from ..dtypes import DTYPES

if TYPE_CHECKING:
    from .view import ParamView

PYTHON_API_FILE = "python-api.yaml"
NUMPY_NAMES = {code: d.numpy_name for code, d in DTYPES.items()}
_API_CACHE: dict[tuple[str, float], dict[str, Any]] = {}


def python_api(contracts_dir: Path) -> dict[str, Any]:
    """contracts/python-api.yaml (an empty mapping when it is absent: a bare contract folder still
    generates, with placeholder descriptions that name this file)."""
    path = Path(contracts_dir) / PYTHON_API_FILE
    try:
        key = (str(path.resolve()), path.stat().st_mtime)
    except OSError:
        return {}
    if key not in _API_CACHE:
        from ..contract.errors import ContractError, Problem
        from ..contract.yamlload import YamlProblem, load

        try:  # the contracts' safe loader: no tags or aliases, and a line for every key
            data = load(path.read_text(encoding="utf-8")) or {}
        except YamlProblem as exc:
            raise ContractError([Problem(str(path), exc.line, exc.keypath, exc.message)]) from None
        if not isinstance(data, dict):
            raise ContractError([Problem(str(path), 1, "", "expected a mapping at the top level")])
        _API_CACHE[key] = data
    return _API_CACHE[key]


def contract_title(api: dict[str, Any], file_name: str) -> Optional[str]:
    """What python-api.yaml calls a contract's group of kernels (`contracts.<file name>`), or None."""
    title = (api.get("contracts") or {}).get(file_name)
    return str(title) if title else None


def api_default(api: dict[str, Any], kernel: str, param: str) -> Optional[tuple[Any, int]]:
    """fuel_cy's default for a kernel's param as python-api.yaml writes it (the kernel's own
    entry first, then the shared one) with its line, or None when it gives none."""
    own = (((api.get("kernels") or {}).get(kernel) or {}).get("params") or {}).get(param)
    shared = (api.get("params") or {}).get(param)
    for entry in (own, shared):
        if isinstance(entry, dict) and "default" in entry:
            return entry["default"], entry.line_of("default") if hasattr(entry, "line_of") else 0
    return None


def dtype_words(codes: list[str]) -> str:
    """["F32", "BF16"] -> "float32 or bfloat16"."""
    names = [NUMPY_NAMES.get(c, c.lower()) for c in codes]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _one_line(text: Any) -> str:
    return " ".join(str(text or "").split())


def _dim_name(kernel: Kernel, f: Any) -> str:
    """The dim symbol a dims(...) extent names (`q.dim[1]` -> Hq), else the formula as written."""
    from ..contract import expr

    node = f.ast
    if isinstance(node, expr.DimRef) and node.tensor:
        return kernel.input(node.tensor).dims[node.index]
    return str(f)


def _entry(api: dict[str, Any], kernel: str, section: str, name: str) -> dict[str, Any]:
    own = ((api.get("kernels") or {}).get(kernel) or {}).get(section) or {}
    shared = (api.get(section) or {}).get(name) or {}
    return {**shared, **(own.get(name) or {})}


def _missing(what: str, name: str) -> str:
    return f"The contract's {what} `{name}` (not described in contracts/{PYTHON_API_FILE} yet)."


@dataclass(frozen=True)
class PyArg:
    """An argument of the Python function: an input array or a keyword-only param."""

    name: str
    kind: str  # "input" or "param"
    required: bool
    type: str  # e.g. "numpy.ndarray | None", "float | None"
    default: Optional[str]  # Python source; None: required
    doc: str
    detail: str
    example: Optional[str]
    shape: tuple[str, ...] = ()  # an input's dim symbols
    dtype_text: Optional[str] = None  # an input's dtypes in words


@dataclass(frozen=True)
class PyOutput:
    name: str
    type: str
    doc: str
    detail: str
    shape: tuple[str, ...]


@dataclass(frozen=True)
class PyRaise:
    type: str
    doc: str


@dataclass(frozen=True)
class PythonView:
    """A kernel in Python terms (docstrings, kernel pages, API reference)."""

    summary: str
    about: str
    use_when: str
    differs: tuple[str, ...]
    inputs: tuple[PyArg, ...]
    params: tuple[PyArg, ...]
    outputs: tuple[PyOutput, ...]
    raises: tuple[PyRaise, ...]
    bundle: bool
    returns_type: str


RAISES = (
    PyRaise("fuel_cy.InputError",
            "An input or param outside the contract (dtype, rank, shape, layout or value), raised before any "
            "computation; the message names the kernel, the argument, the contract clause and what was received."),
    PyRaise("MemoryError", "The outputs cannot be allocated; the message names the kernel and the bytes they need."),
)


def python_view(kernel: Kernel, params: Sequence["ParamView"], api: dict[str, Any]) -> PythonView:
    """A kernel in Python terms: `float | None`, not `Option<f32>`; for every argument a
    description, its default and an example value; each returned array; the errors.

    `params` are the kernel's ParamViews (their Python defaults are decided there, once)."""
    k_api = (api.get("kernels") or {}).get(kernel.name) or {}
    floats = list(kernel.float_dtypes)
    first_float = next((s.name for s in kernel.inputs if s.is_float), None)
    inputs = []
    for spec in kernel.inputs:
        e = _entry(api, kernel.name, "inputs", spec.name)
        if spec.is_float and spec.name != first_float and list(spec.dtypes) == floats:
            dtype = f"the dtype of `{first_float}`"
        else:
            dtype = dtype_words(list(spec.dtypes))
        contiguous = spec.layout_policy("contiguous") == "required"
        inputs.append(PyArg(
            name=spec.name, kind="input", required=not spec.optional,
            type="numpy.ndarray | None" if spec.optional else "numpy.ndarray",
            default="None" if spec.optional else None,
            doc=_one_line(e.get("doc")) or _missing("input", spec.name),
            detail=f"Shape `[{', '.join(spec.dims)}]`, {dtype}" + (", C-contiguous." if contiguous else "."),
            example=_one_line(e.get("example")) or None, shape=spec.dims, dtype_text=dtype,
        ))
    out_params = []
    for p in params:
        e = _entry(api, kernel.name, "params", p.name)
        base = {"f32": "float", "f64": "float", "bool": "bool"}.get(p.base_kind, "int")
        doc = _one_line(e.get("doc")) or (_missing("param", p.name) + (f" {p.note}" if p.note else ""))
        out_params.append(PyArg(
            name=p.name, kind="param", required=p.default is None,
            type=f"{base} | None" if p.default == "None" else base, default=p.default,
            doc=doc, detail="Keyword-only.", example=_one_line(e.get("example")) or None,
        ))
    for o in kernel.returns.items:
        if o.caller_buffer:
            like = (f"{o.caller_buffer}=np.empty_like({o.shape_source})"
                    if o.shape_dims is None and o.shape_source == o.dtype_source else None)
            out_params.append(PyArg(
                name=o.caller_buffer, kind="param", required=False, type="numpy.ndarray | None", default="None",
                doc=f"An array to write `{o.name}` into instead of a new one; the kernel returns it in `{o.name}`'s place.",
                detail=("Keyword-only. It must have the output's dtype and shape, be C-contiguous and writeable, and "
                        "share no memory with any input (each checked before any compute)."),
                example=like,
            ))
    names = {s.name for s in kernel.inputs}
    outputs = []
    for o in kernel.returns.items:
        e = _entry(api, kernel.name, "outputs", o.name)
        src = kernel.input(o.shape_source) if o.shape_source in names else None
        if o.shape_dims is not None:
            dims = tuple(_dim_name(kernel, f) for f in o.shape_dims)
            shape = f"`[{', '.join(dims)}]`"
        else:
            dims = src.dims if src else ()
            shape = f"`[{', '.join(src.dims)}]` (that of `{src.name}`)" if src else f"that of `{o.shape_source}`"
        dtype = DTYPES[o.dtype_fixed].numpy_name if o.dtype_fixed else f"the dtype of `{o.dtype_source}`"
        when = f" Returned only with `{o.when}=True` (then the kernel returns a tuple)." if o.when else ""
        outputs.append(PyOutput(
            name=o.name, type="numpy.ndarray",
            doc=_one_line(e.get("doc")) or _missing("output", o.name),
            detail=f"Shape {shape}, {dtype}; a new C-contiguous array.{when}",
            shape=dims,
        ))
    bundle = kernel.returns.kind == "bundle"
    return PythonView(
        summary=_one_line(k_api.get("summary")) or _one_line(kernel.blurb),
        about=_one_line(k_api.get("about")),
        use_when=_one_line(k_api.get("use_when")),
        differs=tuple(_one_line(d) for d in k_api.get("differs") or []),
        inputs=tuple(inputs), params=tuple(out_params), outputs=tuple(outputs), raises=RAISES, bundle=bundle,
        returns_type=("tuple[" + ", ".join(o.type for o in outputs) + "]") if bundle else "numpy.ndarray",
    )


def signature_lines(name: str, py: PythonView, prefix: str = "fuel_cy.", array: str = "") -> list[str]:
    """The Python signature, one argument per line, with types (`array` replaces numpy.ndarray)."""
    def typed(a: PyArg) -> str:
        t = a.type.replace("numpy.ndarray", array) if array else a.type
        return f"{a.name}: {t}" + ("" if a.default is None else f" = {a.default}")

    args = [typed(a) for a in py.inputs]
    if py.params:
        args += ["*"] + [typed(p) for p in py.params]
    ret = py.returns_type.replace("numpy.ndarray", array) if array else py.returns_type
    return [f"{prefix}{name}("] + [f"    {a}," for a in args] + [f") -> {ret}"]


def docstring_text(py: PythonView, contract: str, line: int, revision_hash: str) -> str:
    """The NumPy-style docstring of `fuel_cy.<kernel>` (help(), IDEs, the API reference): Python
    types and a description of every argument and returned array, the errors, and last where the
    contract declares the kernel."""

    def para(text: str, indent: str = "    ") -> list[str]:
        # wrap at spaces outside code spans only, so `[B, Hq, Sq, D]` stays on one line
        parts = _one_line(text).split("`")
        protected = "`".join(p.replace(" ", "\0") if i % 2 else p for i, p in enumerate(parts))
        return [row.replace("\0", " ") for row in textwrap.wrap(
            protected, 96 - len(indent), initial_indent=indent, subsequent_indent=indent,
            break_on_hyphens=False, break_long_words=False)]

    lines = [py.summary, ""]
    if py.about:
        lines += para(py.about, "") + [""]
    if py.bundle:
        lines += para(f"Returns the tuple ({', '.join(o.name for o in py.outputs)}).", "") + [""]
    elif len(py.outputs) > 1:
        lines += para(f"Returns {py.outputs[0].name}, or the tuple ({', '.join(o.name for o in py.outputs)}) "
                      "when asked for the others.", "") + [""]
    lines += ["Parameters", "----------"]
    for a in py.inputs + py.params:
        lines.append(f"{a.name} : {a.type}" + ("" if a.default is None else f", default {a.default}"))
        text = f"{a.doc} {a.detail}"
        if a.example:
            text += f" Example: `{a.example}`."
        lines += para(text)
    lines += ["", "Returns", "-------"]
    for o in py.outputs:
        lines.append(f"{o.name} : {o.type}")
        lines += para(f"{o.doc} {o.detail}")
    lines += ["", "Raises", "------"]
    for r in py.raises:
        lines.append(r.type)
        lines += para(r.doc)
    lines += ["", "Notes", "-----",
              *para(f"Declared in `{contract}` (line {line}; kernel revision `{revision_hash}`).", "")]
    return "\n".join(lines)
