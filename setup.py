"""The one native part of kgw: protocol/_native.c (the Produce request walk), built by
``pip install`` where a C compiler is found.  It is optional: without it kgw runs the Python
reference walk (protocol/apis/produce.py), and the test suite fails if it was not built."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("protocol._native", ["protocol/_native.c"], optional=True,
                             extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"])])
