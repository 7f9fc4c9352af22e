"""The one compiled extension, beside pyproject.toml (which holds everything else): the SIMD
coder of strata.entropy.rans64 (checkpoint byte planes). It is optional: where it cannot be built (no C compiler),
the package installs and decodes with its numba reference instead."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("strata.entropy._rans64", ["src/strata/entropy/_rans64.c"], optional=True,
                             extra_compile_args=["-O3", "-std=c99"])])
