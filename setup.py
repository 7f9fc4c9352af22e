"""The one compiled extension, beside pyproject.toml (which holds everything else): the SIMD
decoder of strata.entropy.rans32. It is optional: where it cannot be built (no C compiler),
the package installs and decodes with its numba reference instead."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("strata.entropy._rans32", ["src/strata/entropy/_rans32.c"], optional=True,
                             extra_compile_args=["-O3", "-std=c99"])])
