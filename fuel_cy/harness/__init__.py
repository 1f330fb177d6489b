"""Measuring and checking the kernels, never needed by a kernel call: the benchmarks (`bench`, one
process per CPU level in `bench_levels`) and the calibration they write, the demo and `fuel-cy
run` (`runner`) with their float64 references (`reference`) and error bounds (`tolerance`), the
performance targets (`targets`) and the plain-text tables the CLI prints (`tables`).

Uses the public API and `fuel_cy.runtime`; never the command line (tests/test_layers.py).  This file
imports nothing.
"""
