"""`fuel-cy`: regenerate, check, format, inspect and run kernels from the command line.

Exit codes: 0 ok, 1 check failed / problems found, 2 usage or input error.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from .contract import ContractError, load_contract
from .contract.loader import contract_files, default_contracts_dir
from .dtypes import DTYPES, FLOAT_CODES
from .errors import UsageError
from .harness.tables import format_table

OK, PROBLEMS, USAGE = 0, 1, 2


def _status(msg: str) -> None:
    """A transient progress line, rewritten in place on a terminal; silent when piped."""
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K" + msg)
        sys.stderr.flush()


def _stage(msg: str) -> None:
    """A stage line of a long command: in place on a terminal, one line each otherwise."""
    if sys.stderr.isatty():
        _status(msg)
    else:
        print(msg, file=sys.stderr, flush=True)


def _done_status() -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\n")


def _contract_paths(args: Sequence[str]) -> list[Path]:
    """The files named, else every contract of the checkout around the current folder (else of
    the installed fuel_cy), saying which on the first line."""
    if args:
        paths = [Path(a) for a in args]
        for p in paths:
            if not p.is_file():
                raise UsageError(f"no such contract file: {p}")
        return paths
    from .workspace import contracts_to_check

    folder, which = contracts_to_check()
    print(f"contracts: {folder} -- {which}")
    return contract_files(folder)


# ---- validate / fmt / generate / build -------------------------------------------------------

def cmd_validate(ns: argparse.Namespace) -> int:
    problems = 0
    paths = _contract_paths(ns.contracts)
    for path in paths:
        try:
            doc = load_contract(path)
            print(f"{path}: ok ({len(doc.kernels)} kernels: {', '.join(k.name for k in doc.kernels)})")
        except ContractError as exc:
            for p in exc.problems:
                print(p)
            problems += len(exc.problems)
    if not problems and not ns.contracts:
        problems = _validate_pipeline(paths[0].parent if paths else None)
    if problems:
        print(f"{problems} problem(s) found", file=sys.stderr)
    return PROBLEMS if problems else OK


def _validate_pipeline(contracts: Optional[Path]) -> int:
    """What `fuel-cy generate` checks beyond each file, for a checkout's contracts folder: the
    fused-op table, python-api.yaml (descriptions, defaults) and that every kernel bound to a core
    driver still fits it.  Returns the number of problems (printed)."""
    from .workspace import can_generate, find_checkout

    root = find_checkout(contracts) if contracts is not None else None
    if root is None or not can_generate(root) or root / "contracts" != contracts:
        return 0
    from .codegen.generate import Layout, views

    try:
        v = views(Layout(root))
    except ContractError as exc:
        for p in exc.problems:
            print(p)
        return len(exc.problems)
    print(f"{len(v.kernels)} kernels fit the fused-op table, python-api.yaml and the core's drivers")
    return 0


def cmd_fmt(ns: argparse.Namespace) -> int:
    from .contract.format import format_document

    changed = 0
    for path in _contract_paths(ns.contracts):
        text = path.read_text(encoding="utf-8")
        try:
            out = format_document(text, str(path))
        except ContractError as exc:
            for p in exc.problems:
                print(p, file=sys.stderr)
            return PROBLEMS
        if out != text:
            changed += 1
            if ns.check:
                print(f"would reformat {path}")
            else:
                path.write_text(out, encoding="utf-8")
                print(f"reformatted {path}")
    if ns.check and changed:
        return PROBLEMS
    if not changed:
        print("all contracts already canonical")
    return OK


def cmd_generate(ns: argparse.Namespace) -> int:
    from .codegen import generate_all
    from .workspace import extension_status, workspace

    ws = workspace(ns.root)
    print(ws.describe())
    root = ws.root
    out = Path(ns.out).resolve() if ns.out else None
    try:
        result = generate_all(root, out, check=ns.check)
    except ContractError as exc:
        for p in exc.problems:
            print(p, file=sys.stderr)
        print("generation refused: nothing was written", file=sys.stderr)
        return PROBLEMS
    target = out or root / "fuel_cy" / "_generated"
    if ns.check:
        status = PROBLEMS if result.stale else OK
        if result.stale:
            for rel in result.changed:
                print(f"stale: {target / rel}")
            for rel in result.extras:
                print(f"extra: {target / rel}")
            print(f"{len(result.changed) + len(result.extras)} generated file(s) out of date; run "
                  f"`{ws.build_command()}` to regenerate and compile (`fuel-cy generate` writes the sources only)")
        else:
            print(f"generated files in {target} are up to date")
        if out is None:  # the generated sources are only half the story: is the compiled code theirs?
            ext = extension_status(ws)
            for line in ext.lines:
                print(line)
            if ext.fresh is False:
                status = PROBLEMS
        return status
    for rel in result.changed:
        print(f"wrote {target / rel}")
    print(f"{len(result.changed)} file(s) written, the rest unchanged")
    if out is None and result.changed:
        if ws.imported_here:
            print("the compiled extension is stale until `fuel-cy build` compiles them")
        else:
            print(f"note: this Python imports fuel_cy from {ws.install.describe()}, which these files do not "
                  f"change; to use them: {ws.build_command()}")
    return OK


def _module_times(root: Path) -> dict[str, tuple[float, Path]]:
    """Each compiled module of the checkout: (its file's mtime, the file)."""
    found = {}
    for folder in (root / "fuel_cy", root / "fuel_cy" / "_generated"):
        for path in folder.glob("*.so"):
            found[path.name.split(".")[0]] = (path.stat().st_mtime, path)
    return found


def _module_inputs(root: Path, name: str) -> list[Path]:
    """What a compiled module is built from, as setup.py compiles it (for saying why it was rebuilt)."""
    core, gen = root / "fuel_cy" / "_core", root / "fuel_cy" / "_generated"
    if name.startswith("_core_"):  # (fastcheck.pxi is the validators' alone)
        return [gen / f"{name}.pyx", gen / "_core_dtypes.pxi", gen / "fc_dtypes.h",
                *sorted(p for p in core.glob("*.pxi") if p.name != "fastcheck.pxi"), *sorted(core.glob("*.h"))]
    if name == "_kernels":
        return [gen / "_kernels.pyx", gen / "_fastcheck_dtypes.pxi", core / "fastcheck.pxi"]
    return [root / "fuel_cy" / f"{name}.pyx", core / "fc_cpuid.h"]


# where Cython's error block ends: the located message ("fuel_cy/_core/entries.pxi:190:60: ...")
_CYTHON_LOCATED = re.compile(r"^\S+\.(pyx|pxi|pxd):\d+:\d+: ")


def compile_errors(output: str, limit: int = 6000) -> str:
    """The compiler's own error messages in a failed build's output, in order: Cython's "Error
    compiling Cython file" blocks (the source excerpt and the located message) and the C
    compiler's error lines, each once (every CPU level compiles the same sources and repeats
    them).  Behind a few hundred warnings and a traceback, the tail of the output has none."""
    found: list[str] = []
    seen: set[str] = set()
    lines = output.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("Error compiling Cython file:"):
            j = i + 1
            while j < len(lines) and not _CYTHON_LOCATED.match(lines[j]):
                j += 1
            block, key = "\n".join(lines[i:j + 1]), lines[min(j, len(lines) - 1)]
            i = j + 1
        elif ": error:" in lines[i] or ": fatal error:" in lines[i]:
            block = key = lines[i]
            i += 1
        else:
            i += 1
            continue
        if key not in seen:
            seen.add(key)
            found.append(block)
    text = "\n\n".join(found)
    return text if len(text) <= limit else text[:limit] + "\n…"


def _build_report(root: Path, before: dict[str, tuple[float, Path]], after: dict[str, tuple[float, Path]],
                  seconds: float) -> str:
    """One line: which modules were compiled, why (the inputs newer than the module they replaced),
    how long it took, and which were up to date."""
    rebuilt, fresh = [], []
    for name in sorted(after, key=lambda n: (not n.startswith("_core_"), n)):
        mtime, _ = after[name]
        old = before.get(name)
        if old is not None and old[0] == mtime:
            fresh.append(name)
            continue
        newer = [p.name for p in _module_inputs(root, name) if p.exists() and (old is None or p.stat().st_mtime > old[0])]
        why = "not built before" if old is None else (", ".join(newer[:4]) + (" …" if len(newer) > 4 else "")
                                                       + " changed" if newer else "rebuilt by setup.py")
        rebuilt.append(f"{name} ({why})")
    done = f"compiled {len(rebuilt)} module(s) in {seconds:.1f} s" + (": " + "; ".join(rebuilt) if rebuilt else "")
    return done + (f"; up to date: {', '.join(fresh)}" if fresh else "")


def cmd_build(ns: argparse.Namespace) -> int:
    from .codegen import generate_all
    from .workspace import build_tools_advice, missing_build_tools, pip_install, workspace

    ws = workspace(ns.root)
    print(ws.describe(), file=sys.stderr)
    root = ws.root
    # Everything that can stop the build is checked before a single file is written.
    if not ws.imported_here and not ws.explicit:
        why = ("an installed package cannot be rebuilt in place" if not ws.install.editable else
               "a build here would not change what `import fuel_cy` runs "
               f"(to build this tree anyway: fuel-cy build --root {root})")
        print(f"fuel-cy build: error: this Python imports fuel_cy from {ws.install.describe()}, not from {root}: "
              f"{why}. Nothing was written.\n"
              f"  install your edits:        {pip_install(root)}\n"
              f"  or switch to editable:     {pip_install(root, editable=True)}   "
              "(then `fuel-cy build` rebuilds in place)", file=sys.stderr)
        return PROBLEMS
    missing = missing_build_tools()
    if missing:
        print(f"fuel-cy build: error: cannot compile here: {'; '.join(missing)}. Nothing was written.\n"
              + build_tools_advice(missing, root), file=sys.stderr)
        return PROBLEMS
    _stage("[1/3] validating contracts")
    try:
        _stage("[2/3] generating code")
        result = generate_all(root)
    except ContractError as exc:
        _done_status()
        for p in exc.problems:
            print(p, file=sys.stderr)
        print("build refused: nothing was written", file=sys.stderr)
        return PROBLEMS
    _stage(f"[3/3] compiling the extension ({len(result.changed)} generated file(s) changed)")
    before = _module_times(root)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=root,
                          capture_output=True, text=True)
    _done_status()
    if proc.returncode == 0:
        print(_build_report(root, before, _module_times(root), time.monotonic() - started), file=sys.stderr)
    if proc.returncode != 0:
        errors = compile_errors(proc.stdout + "\n" + proc.stderr)
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-2000:])
        if errors:
            print(f"\nthe compiler's errors:\n{errors}\n", file=sys.stderr)
        print("build failed: the generated sources are current but the extension was not rebuilt "
              "(`fuel-cy generate --check` reports it stale until a build succeeds)", file=sys.stderr)
        return PROBLEMS
    where = root / "fuel_cy" / "_generated"
    if ws.imported_here:
        print(f"built {where}: from now on `import fuel_cy` in this environment loads it")
    else:
        print(f"built {where}; this Python imports fuel_cy from {ws.install.describe()}: run with "
              f"PYTHONPATH={root} to use this build, or install it: {pip_install(root, editable=True)}")
    return OK


# ---- list / show / cost ------------------------------------------------------------------------

def _registry():
    import fuel_cy

    return fuel_cy.registry


def cmd_list(ns: argparse.Namespace) -> int:
    rows = []
    for e in _registry().values():
        rows.append({
            "name": e.name, "contract": Path(e.contract).name, "fused_op": e.fused_op, "fused_op_id": e.fused_op_id,
            "dtypes": list(e.dtypes), "compute": e.compute, "exec_arm": e.exec_arm,
            "exec_dtypes": list(e.exec_dtypes), "exec_wired": e.exec_wired, "revision_hash": e.revision_hash,
            "entry_point": e.entry_point, "implemented": e.implemented,
        })
    if ns.json:
        print(json.dumps({"schema": "fuel-cy.list/1", "kernels": rows}, indent=2))
        return OK
    table = [["contract", "kernel", "fused op", "id", "dtypes", "math", "exec wiring", "revision"]]
    for r in rows:
        wiring = (f"exec arm ({'/'.join(r['exec_dtypes'])})" if r["exec_wired"]
                  else f"sibling of {r['exec_arm']}" if r["exec_arm"] else "not exec-wired")
        table.append([r["contract"], r["name"], r["fused_op"], str(r["fused_op_id"]), ",".join(r["dtypes"]),
                      "f32" if r["compute"] == "f32" else "in T", wiring, r["revision_hash"]])
    print(format_table(table))
    return OK


def _find_kernel(name: str):
    for path in contract_files(default_contracts_dir()):
        doc = load_contract(path)
        for k in doc.kernels:
            if k.name == name:
                return doc, k
    known = [k.name for p in contract_files(default_contracts_dir()) for k in load_contract(p).kernels]
    raise UsageError(f"unknown kernel {name!r} (known: {', '.join(known)})")


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)
                if f.name not in ("loc", "block_text")}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def cmd_show(ns: argparse.Namespace) -> int:
    doc, k = _find_kernel(ns.kernel)
    if ns.json:
        print(json.dumps({"schema": "fuel-cy.show/1", "contract": doc.path, "kernel": _jsonable(k)}, indent=2))
        return OK
    print(f"{k.name} -- {k.title}\n")
    print(f"  {k.blurb}\n")
    print(f"  contract: {k.loc}   fused op: {k.fused_op} (id {k.fused_op_id})   entry point: {k.entry_point}\n")
    print("inputs:")
    for i in k.inputs:
        opt = " (optional)" if i.optional else ""
        sc = f"  constraint: {i.shape_constraint}" if i.shape_constraint else ""
        print(f"  {i.name:<14} {'|'.join(i.dtypes):<20} rank {i.rank if i.lowest_rank == i.rank else f'{i.lowest_rank}-{i.rank}'} [{', '.join(i.dims)}]{opt}{sc}")
    print("params:")
    for f in k.op_params.fields:
        extra = f"  constraint: {f.constraint}" if f.constraint else ""
        print(f"  {f.name:<18} {f.kind}{extra}")
    print(f"returns ({k.returns.kind}):")
    for o in k.returns.items:
        print(f"  {o.name:<6} dtype {o.dtype_rule}, shape {o.shape_rule}, {o.layout_guarantee}")
    print("cost:")
    print(f"  flops        {k.cost.flops}\n  bytes_moved  {k.cost.bytes_moved}\n  host_bytes   {k.cost.memory.host_bytes}")
    print(f"precision: {k.precision.notes}\ndeterminism: {k.determinism}\n")
    print("```fkc\n" + k.block_text + "\n```")
    return OK


def _parse_shapes(items: Sequence[str]) -> dict[str, tuple[int, ...]]:
    shapes = {}
    for item in items or ():
        name, _, dims = item.partition("=")
        try:
            if not name or not dims:
                raise ValueError
            shapes[name.strip()] = tuple(int(x) for x in dims.split(","))
            if any(x < 0 for x in shapes[name.strip()]):
                raise ValueError
        except ValueError:
            raise UsageError(f"bad --shape {item!r}: expected NAME=D0,D1,... with non-negative integers") from None
    return shapes


# every spelling of an element type T (a float dtype of the vocabulary): f32, float32, bf16, ...
DTYPE_ALIASES = {alias: code for code in FLOAT_CODES for alias in DTYPES[code].aliases}


def _dtype_arg(value: Optional[str], kernel: Optional[str] = None) -> str:
    """A --dtype value as a contract dtype; none given: F32, or the kernel's first if it takes no F32."""
    if value is None:
        entry = _registry().get(kernel or "")
        return "F32" if entry is None or "F32" in entry.dtypes else entry.dtypes[0]
    code = DTYPE_ALIASES.get(value.lower())
    if code is None:
        names = [code.lower() for code in FLOAT_CODES]
        raise UsageError(f"unknown dtype {value!r} (use {', '.join(names[:-1])} or {names[-1]})")
    return code


def cmd_cost(ns: argparse.Namespace) -> int:
    import fuel_cy

    entry = fuel_cy.registry.get(ns.kernel)
    if entry is None:
        raise UsageError(f"unknown kernel {ns.kernel!r} (known: {', '.join(fuel_cy.registry)})")
    shapes = _parse_shapes(ns.shape)
    unknown = set(shapes) - set(entry.inputs)
    if unknown:
        raise UsageError(f"{ns.kernel} has no input {sorted(unknown)[0]!r} (inputs: {', '.join(entry.inputs)})")
    from .runtime.cost import check_shapes

    dtype = _dtype_arg(ns.dtype, ns.kernel)
    check_shapes(ns.kernel, shapes, dtype)  # the kernel's own checks and messages: InputError, exit 2
    args = [shapes.get(n) for n in entry.inputs]
    report = fuel_cy.cost(ns.kernel, *args, dtype=dtype)
    data = report.as_dict()
    if ns.json:
        print(json.dumps({"schema": "fuel-cy.cost/1", **data}, indent=2))
        return OK
    for key in ("kernel", "dtype", "flops", "bytes_moved", "host_bytes", "device_bytes", "disk_bytes", "predicted_ns"):
        value = data[key]
        if key == "predicted_ns":
            value = "no calibration file (run `fuel-cy calibrate`)" if value is None else f"{value / 1e6:.3f} ms"
        print(f"{key:<13} {value}")
    return OK


# ---- run / demo --------------------------------------------------------------------------------

def cmd_run(ns: argparse.Namespace) -> int:
    from .harness.runner import RunSpec, run_kernel

    window = None
    if ns.window:
        try:
            left, right = ns.window.split(",")
            window = (None if left == "" else int(left), None if right == "" else int(right))
        except ValueError:
            raise UsageError(f"bad --window {ns.window!r}: expected L,R (either may be empty)") from None
    spec = RunSpec(kernel=ns.kernel, dtype=_dtype_arg(ns.dtype, ns.kernel), shapes=_parse_shapes(ns.shape),
                   causal=ns.causal, window=window, softcap=ns.softcap, alibi=ns.alibi, seed=ns.seed,
                   k_len=ns.k_len)
    result = run_kernel(spec)
    print(result.describe())
    return OK if result.ok else PROBLEMS


def cmd_demo(ns: argparse.Namespace) -> int:
    from .harness.runner import demo

    print(_level_line())
    ok = demo(progress=_status, json_out=ns.json)
    _done_status()
    return OK if ok else PROBLEMS


def _level_line() -> str:
    """What runs here: version, threads, the CPU level in use and its flags, the compiled levels."""
    import fuel_cy

    info = fuel_cy.build_info()
    level = info["cpu_capability"]
    return (f"fuel_cy {fuel_cy.__version__}: {fuel_cy.get_num_threads()} thread(s) on {info['cpu']}; "
            f"CPU level {level} ({' '.join(info['levels'][level]['compile_args'])}); "
            f"compiled levels: {', '.join(info['cpu_capabilities'])}; "
            f"this CPU runs: {', '.join(info['supported_capabilities'])}")


def cmd_bench(ns: argparse.Namespace) -> int:
    import os

    from .harness import bench_levels
    from .runtime.cpu_levels import ENV_CAPABILITY

    if ns.level_json:  # the child process of --cpu-capability all: one level, as JSON
        Path(ns.level_json).write_text(json.dumps(bench_levels.measure_this_level(progress=_status)))
        _done_status()
        return OK
    level = ns.cpu_capability
    if level == "all":
        return bench_levels.main(json_out=ns.json, progress=_status)
    if level and os.environ.get(ENV_CAPABILITY) != level:
        argv = ["bench", *(["--quick"] if ns.quick else []), *(["--json", ns.json] if ns.json else []),
                *(["--plot", ns.plot] if ns.plot else []), "--cpu-capability", level]
        return bench_levels.rerun_at_level(level, argv)
    from .harness.bench import main as bench_main

    print(_level_line())
    return bench_main(quick=ns.quick, json_out=ns.json, plot=ns.plot, progress=_status)


def cmd_calibrate(ns: argparse.Namespace) -> int:
    from .harness.bench import calibrate

    return calibrate(quick=ns.quick, progress=_status)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fuel-cy", description=__doc__.splitlines()[0],
                                epilog="Exit codes: 0 ok, 1 problems found, 2 usage or input error.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def add(name: str, fn: Callable, help: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help)
        sp.set_defaults(fn=fn)
        return sp

    sp = add("validate", cmd_validate, "parse and validate contracts; print file:line: key.path: message per problem")
    sp.add_argument("contracts", nargs="*", help="contract files (default: every contract in contracts/)")
    sp = add("fmt", cmd_fmt, "rewrite contracts in the canonical indented form")
    sp.add_argument("--check", action="store_true", help="only report files that would change")
    sp.add_argument("contracts", nargs="*")
    sp = add("generate", cmd_generate, "render the templates from contracts/ into fuel_cy/_generated/")
    sp.add_argument("--check", action="store_true", help="exit 1 if generated files are stale; write nothing")
    sp.add_argument("--out", help="output folder (default fuel_cy/_generated)")
    sp.add_argument("--root", help="project checkout (default: found from the current folder)")
    sp = add("build", cmd_build, "regenerate and rebuild the extension in place")
    sp.add_argument("--root", help="project checkout (default: found from the current folder)")
    sp = add("list", cmd_list, "kernels with fused op, id, dtypes, exec wiring and revision hash")
    sp.add_argument("--json", action="store_true", help="machine-readable output (schema fuel-cy.list/1)")
    sp = add("show", cmd_show, "the full contract of one kernel")
    sp.add_argument("kernel")
    sp.add_argument("--json", action="store_true", help="machine-readable output (schema fuel-cy.show/1)")
    sp = add("cost", cmd_cost, "flops, bytes and memory from the contract's cost formulas")
    sp.add_argument("kernel")
    sp.add_argument("--shape", action="append", default=[], metavar="INPUT=D0,D1,..")
    sp.add_argument("--dtype", help="f32, f64, bf16 or f16 (default: f32, or the kernel's first dtype)")
    sp.add_argument("--json", action="store_true", help="machine-readable output (schema fuel-cy.cost/1)")
    sp = add("run", cmd_run, "run a kernel on random inputs and check it against the float64 reference")
    sp.add_argument("kernel")
    sp.add_argument("--shape", action="append", default=[], metavar="INPUT=D0,D1,..")
    sp.add_argument("--dtype", help="f32, f64, bf16 or f16 (default: f32, or the kernel's first dtype)")
    sp.add_argument("--causal", action="store_true")
    sp.add_argument("--window", metavar="L,R")
    sp.add_argument("--softcap", type=float)
    sp.add_argument("--alibi", action="store_true")
    sp.add_argument("--k-len", type=int, dest="k_len")
    sp.add_argument("--seed", type=int, default=0)
    sp = add("demo", cmd_demo, "run all kernels in every dtype on a default problem, verify, print a table")
    sp.add_argument("--json", metavar="OUT", help="also write the rows as a precision audit file")
    sp = add("bench", cmd_bench, "benchmark ours vs peers (torch SDPA, NumPy) and print a table")
    sp.add_argument("--quick", action="store_true", help="a small grid (about a minute)")
    sp.add_argument("--json", metavar="OUT", help="write results as JSON")
    sp.add_argument("--plot", metavar="OUT.png", help="write a plot (needs matplotlib)")
    sp.add_argument("--cpu-capability", metavar="LEVEL",
                    help="run ours and torch at this CPU level (default, avx2, avx512, ...); 'all': the target "
                         "shapes at every level this CPU runs, with the per-level targets")
    sp.add_argument("--_level-json", dest="level_json", help=argparse.SUPPRESS)
    sp = add("calibrate", cmd_calibrate, "fit the cost-model judge (time vs flops and bytes) per kernel and dtype")
    sp.add_argument("--quick", action="store_true")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0) if exc.code in (0, None) else USAGE
    try:
        return int(ns.fn(ns))
    except UsageError as exc:
        print(f"fuel-cy {ns.command}: error: {exc}", file=sys.stderr)
        return USAGE
    except ContractError as exc:
        for p in exc.problems:
            print(p, file=sys.stderr)
        return PROBLEMS
    except ImportError as exc:
        print(f"fuel-cy {ns.command}: {exc}", file=sys.stderr)
        return USAGE
    except FileNotFoundError as exc:
        print(f"fuel-cy {ns.command}: error: {exc}", file=sys.stderr)
        return USAGE
    except Exception as exc:  # InputError and friends: bad input, clearly reported
        from .errors import CpuCapabilityError, InputError

        if isinstance(exc, (InputError, CpuCapabilityError)):
            print(f"fuel-cy {ns.command}: error: {exc}", file=sys.stderr)
            return USAGE
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
