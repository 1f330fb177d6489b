"""The layer a kernel call goes through: argument validation (`_validation`, `_prose_checks`), the
CPU level and its choice (`cpu_levels`, `cpu`), threads (`_threads`), the registry built from the
generated tables (`kernel_entry`, `registry`), `dispatch`, and `cost` (with the fitted time model
it may add, `calibration`).  The public names are re-exported by `fuel_cy` itself.

Never imports the harness, the code generator or the command line (tests/test_layers.py).  This
file imports nothing: setup.py loads `runtime.cpu_levels` (and the code generator loads
`runtime.kernel_entry`) before the extension exists.
"""
