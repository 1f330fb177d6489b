"""What a Python reader is told about each contract kernel: the descriptions of
contracts/python-api.yaml joined with the contract's own facts (types, shapes, dtypes, defaults).

One source for the kernels' docstrings (`docstring_text`, via view.docstring), the kernel pages
(codegen/docs.py) and the API reference (codegen/griffe_kernels.py), so the three cannot disagree.
"""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from ..contract.model import Kernel

PYTHON_API_FILE = "python-api.yaml"
NUMPY_NAMES = {"F32": "float32", "F64": "float64", "BF16": "bfloat16", "F16": "float16", "U32": "uint32",
               "I32": "int32", "I64": "int64", "U8": "uint8"}
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
        import yaml

        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping at the top level")
        _API_CACHE[key] = data
    return _API_CACHE[key]


def dtype_words(codes: list[str]) -> str:
    """["F32", "BF16"] -> "float32 or bfloat16"."""
    names = [NUMPY_NAMES.get(c, c.lower()) for c in codes]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _one_line(text: Any) -> str:
    return " ".join(str(text or "").split())


def _entry(api: dict[str, Any], kernel: str, section: str, name: str) -> dict[str, Any]:
    own = ((api.get("kernels") or {}).get(kernel) or {}).get(section) or {}
    shared = (api.get(section) or {}).get(name) or {}
    return {**shared, **(own.get(name) or {})}


def _missing(what: str, name: str) -> str:
    return f"The contract's {what} `{name}` (not described in contracts/{PYTHON_API_FILE} yet)."


def python_view(kernel: Kernel, params: list[dict[str, Any]], api: dict[str, Any]) -> dict[str, Any]:
    """A kernel in Python terms: `float | None`, not `Option<f32>`; for every argument a
    description, its default and an example value; each returned array; the errors.

    `params` are kernel_view's param entries (their Python defaults are decided there, once)."""
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
        inputs.append({
            "name": spec.name, "kind": "input", "required": not spec.optional,
            "type": "numpy.ndarray | None" if spec.optional else "numpy.ndarray",
            "default": "None" if spec.optional else None,
            "doc": _one_line(e.get("doc")) or _missing("input", spec.name),
            "detail": f"Shape `[{', '.join(spec.dims)}]`, {dtype}" + (", C-contiguous." if contiguous else "."),
            "shape": list(spec.dims), "dtype_text": dtype,
            "example": _one_line(e.get("example")) or None,
        })
    out_params = []
    for p in params:
        e = _entry(api, kernel.name, "params", p["name"])
        base = {"f32": "float", "f64": "float", "bool": "bool"}.get(p["base_kind"], "int")
        doc = _one_line(e.get("doc")) or (_missing("param", p["name"]) + (f" {p['note']}" if p["note"] else ""))
        out_params.append({
            "name": p["name"], "kind": "param", "required": p["default"] is None,
            "type": f"{base} | None" if p["default"] == "None" else base, "default": p["default"],
            "doc": doc, "detail": "Keyword-only.", "example": _one_line(e.get("example")) or None,
        })
    names = {s.name for s in kernel.inputs}
    outputs: list[dict[str, Any]] = []
    for o in kernel.returns.items:
        e = _entry(api, kernel.name, "outputs", o.name)
        src = kernel.input(o.shape_source) if o.shape_source in names else None
        shape = f"`[{', '.join(src.dims)}]` (that of `{src.name}`)" if src else f"that of `{o.shape_source}`"
        outputs.append({
            "name": o.name, "type": "numpy.ndarray",
            "doc": _one_line(e.get("doc")) or _missing("output", o.name),
            "detail": f"Shape {shape}, the dtype of `{o.dtype_source}`; a new C-contiguous array.",
            "shape": list(src.dims) if src else [],
        })
    raises = [
        {"type": "fuel_cy.InputError",
         "doc": "An input or param outside the contract (dtype, rank, shape, layout or value), raised before any "
                "computation; the message names the kernel, the argument, the contract clause and what was received."},
        {"type": "MemoryError",
         "doc": "The outputs cannot be allocated; the message names the kernel and the bytes they need."},
    ]
    bundle = kernel.returns.kind == "bundle"
    return {
        "summary": _one_line(k_api.get("summary")) or _one_line(kernel.blurb),
        "about": _one_line(k_api.get("about")),
        "use_when": _one_line(k_api.get("use_when")),
        "differs": [_one_line(d) for d in k_api.get("differs") or []],
        "inputs": inputs, "params": out_params, "outputs": outputs, "raises": raises, "bundle": bundle,
        "returns_type": ("tuple[" + ", ".join(o["type"] for o in outputs) + "]") if bundle else "numpy.ndarray",
    }


def signature_lines(name: str, py: dict[str, Any], prefix: str = "fuel_cy.", array: str = "") -> list[str]:
    """The Python signature, one argument per line, with types (`array` replaces numpy.ndarray)."""
    def typed(a: dict[str, Any]) -> str:
        t = a["type"].replace("numpy.ndarray", array) if array else a["type"]
        return f"{a['name']}: {t}" + ("" if a["default"] is None else f" = {a['default']}")

    args = [typed(a) for a in py["inputs"]]
    if py["params"]:
        args += ["*"] + [typed(p) for p in py["params"]]
    ret = py["returns_type"].replace("numpy.ndarray", array) if array else py["returns_type"]
    return [f"{prefix}{name}("] + [f"    {a}," for a in args] + [f") -> {ret}"]


def docstring_text(view: dict[str, Any]) -> str:
    """The NumPy-style docstring of `fuel_cy.<kernel>` (help(), IDEs, the API reference)."""
    py = view["py"]

    def para(text: str, indent: str = "    ") -> list[str]:
        # wrap at spaces outside code spans only, so `[B, Hq, Sq, D]` stays on one line
        parts = _one_line(text).split("`")
        protected = "`".join(p.replace(" ", "\0") if i % 2 else p for i, p in enumerate(parts))
        return [line.replace("\0", " ") for line in textwrap.wrap(
            protected, 96 - len(indent), initial_indent=indent, subsequent_indent=indent,
            break_on_hyphens=False, break_long_words=False)]

    lines = [py["summary"], ""]
    if py["about"]:
        lines += para(py["about"], "") + [""]
    if py["bundle"]:
        lines += para(f"Returns the tuple ({', '.join(o['name'] for o in py['outputs'])}).", "") + [""]
    lines += ["Parameters", "----------"]
    for a in py["inputs"] + py["params"]:
        lines.append(f"{a['name']} : {a['type']}" + ("" if a["default"] is None else f", default {a['default']}"))
        text = f"{a['doc']} {a['detail']}"
        if a["example"]:
            text += f" Example: `{a['example']}`."
        lines += para(text)
    lines += ["", "Returns", "-------"]
    for o in py["outputs"]:
        lines.append(f"{o['name']} : {o['type']}")
        lines += para(f"{o['doc']} {o['detail']}")
    lines += ["", "Raises", "------"]
    for r in py["raises"]:
        lines.append(r["type"])
        lines += para(r["doc"])
    lines += ["", "Notes", "-----",
              *para(f"Declared in `{view['contract']}` (line {view['line']}; kernel revision "
                    f"`{view['revision_hash']}`).", "")]
    return "\n".join(lines)
