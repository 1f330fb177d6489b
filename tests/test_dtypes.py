"""The dtype record (fuel_cy.dtypes) agrees with numpy, the core's C side, and every table derived
from it; the contract layer reads it without loading numpy."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT
from fuel_cy import dtypes
from fuel_cy.dtypes import DTYPES, FLOAT_CODES


@pytest.mark.parametrize("code", list(DTYPES))
def test_record_agrees_with_numpy(code):
    d = DTYPES[code]
    npd = d.numpy_dtype()
    assert npd.itemsize == d.bytes
    assert repr(npd) == d.numpy_repr and npd.name == d.numpy_name
    assert d.is_float == (npd.kind not in "iub")
    assert np.dtype(d.work_numpy).itemsize >= d.bytes
    if d.is_float and code != "BF16":
        assert d.unit_roundoff == np.finfo(npd).eps / 2
    if d.is_float:
        assert d.policy is not None and d.rounding is not None
        assert d.narrow == (npd != np.dtype(d.work_numpy))
    else:
        assert d.policy is None and d.unit_roundoff is None


def test_policies_and_derived_tables():
    import fuel_cy.harness.tolerance as tolerance
    from fuel_cy.cli import DTYPE_ALIASES
    from fuel_cy.codegen.cores import INT_WORK, POLICIES
    from fuel_cy.codegen.generate import npy_typenum
    from fuel_cy.runtime._validation import NUMPY_DTYPES, dtype_code

    assert POLICIES == {"F32": ("RoundNone", "float", "float32"), "F64": ("RoundNone", "double", "float64"),
                        "BF16": ("RoundBF16", "float", "float32"), "F16": ("RoundF16", "float", "float32")}
    assert dtypes.policy("f32", "BF16") == POLICIES["F32"] and dtypes.policy("f32", "F64") == POLICIES["F64"]
    assert dtypes.policy("T", "U32") is None and INT_WORK == {"U32": ("unsigned int", "uint32"), "BOOL": ("unsigned char", "bool"),
                                                            # int32 indices are read as the uint32 they equal
                                                            "I32": ("unsigned int", "uint32")}
    assert [npy_typenum(c) for c in ("float", "double", "unsigned int")] == \
        ["cnp.NPY_FLOAT32", "cnp.NPY_FLOAT64", "cnp.NPY_UINT32"]
    assert tolerance.UNIT_ROUNDOFF == {"F32": 2.0 ** -24, "F64": 2.0 ** -53, "BF16": 2.0 ** -8, "F16": 2.0 ** -11}
    assert DTYPE_ALIASES == {"f32": "F32", "float32": "F32", "f64": "F64", "float64": "F64", "bf16": "BF16",
                             "bfloat16": "BF16", "f16": "F16", "float16": "F16"}
    assert set(FLOAT_CODES) == {"F32", "F64", "BF16", "F16"}
    for code, npd in NUMPY_DTYPES.items():
        assert dtype_code(npd) == code


def test_the_core_knows_every_dtype():
    """The compiled validators have a bit per dtype, and the core rounds (_test_round) exactly the
    dtypes rounded at every step, as ml_dtypes / numpy round.  Both lists are generated from the
    record (tests/test_dtype_codegen.py checks the generated text itself)."""
    from fuel_cy._generated import _kernels
    from fuel_cy.runtime.cpu import core

    assert sorted(_kernels._FC_CODES.values()) == sorted(DTYPES)
    x = np.array([1.0 + 2.0 ** -9, 3.0e-5, -70000.0, np.nan], dtype=np.float32)
    for code, d in DTYPES.items():
        if d.rounds_each_step:
            with np.errstate(over="ignore"):  # -70000 is beyond f16: inf, as the core rounds it
                want = x.astype(d.numpy_dtype()).astype(np.float32)
            assert np.array_equal(core()._test_round(x, code), want, equal_nan=True), code
        else:
            with pytest.raises(ValueError):
                core()._test_round(x, code)


def test_contract_layer_and_codegen_do_not_need_numpy(tmp_path):
    code = ("import sys; sys.modules['numpy'] = None; sys.modules['ml_dtypes'] = None\n"
            "import pathlib\n"
            "from fuel_cy.contract import load_contracts\n"
            "from fuel_cy.codegen.generate import Layout, render\n"
            f"load_contracts({str(ROOT / 'contracts')!r})\n"
            f"render(Layout(pathlib.Path({str(ROOT)!r})), pathlib.Path({str(tmp_path)!r}))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
