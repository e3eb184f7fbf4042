"""The optional C record walk (protocol/_recwalk.c): built when a C compiler is there, else the broker uses the
Python walk of strata.protocol.record_validation (same results, slower; bench/validate_bench.py)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("strata.protocol._recwalk", ["protocol/_recwalk.c"], optional=True)])
