# cython: language_level=3
"""cpuid and xgetbv as Python values: which instruction sets this CPU and its OS let us run.
Hand-written; built for the baseline (no -march) so that it runs on any CPU of the
architecture, before a level of the core is chosen."""

cdef extern from "fc_cpuid.h" nogil:
    int FC_F_COUNT
    int FC_X86
    const char* fc_feature_names[]
    void fc_cpu_features(unsigned char* have, char* vendor, unsigned* family, unsigned* model)


def probe():
    """(features, vendor, family, model): the usable features (Linux /proc/cpuinfo names, as a
    frozenset), the cpuid vendor string, and the display family and model numbers."""
    cdef unsigned char have[64]
    cdef char vendor[16]
    cdef unsigned family = 0, model = 0
    cdef int i
    if FC_F_COUNT > 64:
        raise AssertionError("fc_cpuid.h lists more features than probe() has room for")
    fc_cpu_features(have, vendor, &family, &model)
    names = frozenset(fc_feature_names[i].decode("ascii") for i in range(FC_F_COUNT) if have[i])
    return names, vendor.decode("ascii", "replace"), family, model


def known_features():
    """Every feature name the probe can report."""
    cdef int i
    return tuple(fc_feature_names[i].decode("ascii") for i in range(FC_F_COUNT))


IS_X86 = bool(FC_X86)
