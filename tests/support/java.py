"""Locating kafka-clients.jar (shipped by shigawire-apache-flink-libraries
under pyflink/lib) and compiling the Java test programs with javac."""

from __future__ import annotations

import os
import shutil
import site
import sys
from pathlib import Path

from .processes import run_tool

# kafka-clients and the jars it needs at run time (compression codecs, slf4j).
JARS = ("kafka-clients.jar", "slf4j-api.jar", "lz4-java.jar", "snappy-java.jar", "zstd-jni.jar")


def _site_dirs() -> list[Path]:
    dirs = []
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # some virtualenv layouts
        pass
    dirs += [p for p in sys.path if p.endswith("site-packages")]
    seen, out = set(), []
    for d in dirs:
        if d not in seen:
            seen.add(d)
            out.append(Path(d))
    return out


def pyflink_lib_dir() -> Path | None:
    """``<site-packages>/pyflink/lib`` holding kafka-clients.jar, if present.

    pyflink is a namespace package here, so ``importlib.util.find_spec`` is
    not reliable; search the site-packages directories instead."""
    for d in _site_dirs():
        lib = d / "pyflink" / "lib"
        if (lib / "kafka-clients.jar").is_file():
            return lib
    return None


def kafka_classpath() -> list[Path]:
    lib = pyflink_lib_dir()
    if lib is None:
        raise FileNotFoundError(
            "kafka-clients.jar not found under <site-packages>/pyflink/lib "
            "(install the test extras: shigawire-apache-flink-libraries)")
    return [lib / j for j in JARS if (lib / j).is_file()]


def java_tools() -> tuple[str, str] | None:
    javac, java = shutil.which("javac"), shutil.which("java")
    return (javac, java) if javac and java else None


def compile_java(sources: list[Path], out_dir: Path, classpath: list[Path]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    tools = java_tools()
    if tools is None:
        raise FileNotFoundError("javac/java not found on PATH")
    run_tool([tools[0], "-nowarn", "-encoding", "UTF-8", "-cp",
              os.pathsep.join(map(str, classpath)), "-d", str(out_dir), *map(str, sources)],
             timeout=180)
    return out_dir
