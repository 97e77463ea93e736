"""kgw's native parts, the byte path only: protocol/_native.c (framing, the request header, the
Produce walks) and gateway/connection/_plane_steps.c (the data plane's poll, epoll masks, reads,
writes and per-request handlers), built by ``pip install`` (or ``make setup``, in place) where a C compiler is found.  They are optional: without
them kgw runs the Python references (protocol/framing.py, protocol/headers.py,
protocol/apis/produce.py, gateway/connection/plane_steps.py and data_plane.py), and the test suite
fails if they were not built."""

from setuptools import Extension, setup

_FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]

setup(ext_modules=[Extension("protocol._native", ["protocol/_native.c"], optional=True, extra_compile_args=_FLAGS),
                   Extension("gateway.connection._plane_steps", ["gateway/connection/_plane_steps.c"], optional=True,
                             extra_compile_args=_FLAGS)])
