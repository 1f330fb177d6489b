"""Exceptions of the public API."""
from __future__ import annotations

from .contract.errors import ContractError

__all__ = ["InputError", "ContractError", "CpuCapabilityError", "StaleBuildWarning", "UsageError"]


class InputError(ValueError):
    """A call violates its kernel's contract.

    The message names the kernel, the input (or param), the contract clause, what was received,
    and where the clause is written; the same facts are attributes for programs.
    """

    def __init__(self, kernel: str, input: str, clause: str, received: str, where: str = ""):
        self.kernel = kernel
        self.input = input
        self.clause = clause
        self.received = received
        self.where = where
        text = f"{kernel}: {input}: {clause}: {received}"
        super().__init__(text + (f" ({where})" if where else ""))

    def __reduce__(self):
        # pickle rebuilds an exception from self.args (the message alone), which this __init__
        # cannot take; an error raised in another process (a Dask worker) must arrive whole
        return type(self), (self.kernel, self.input, self.clause, self.received, self.where)


class StaleBuildWarning(UserWarning):
    """The compiled extension was generated from a different version of a contract."""


class CpuCapabilityError(RuntimeError):
    """No compiled level of the core can run here, or FUEL_CY_CPU_CAPABILITY names one that the
    build lacks or this CPU cannot run.  The message lists the levels that would work."""


class UsageError(Exception):
    """A request that names something the kernel or the tool does not have (an unknown kernel, an
    option a kernel lacks, a malformed shape): `fuel-cy` reports it on stderr with exit code 2.

    Raised by the library layers the command line drives (`fuel_cy.harness.runner`), so it lives
    here, below the CLI, rather than in `fuel_cy.cli`."""
