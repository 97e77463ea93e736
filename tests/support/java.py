"""Locating the 3.x Kafka Java client (``make setup`` resolves it with Maven from
``deploy/kafka-clients/pom.xml``) and compiling the Java test programs with javac."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from .processes import run_tool

REPO = Path(__file__).resolve().parents[2]


def clients_version() -> str:
    """The 3.x kafka-clients release ``deploy/kafka-clients/pom.xml`` names."""
    pom = (REPO / "deploy" / "kafka-clients" / "pom.xml").read_text()
    found = re.search(r"<kafka.clients.version>(.+?)</kafka.clients.version>", pom)
    assert found, "deploy/kafka-clients/pom.xml names no kafka.clients.version"
    return found.group(1)


def kafka_classpath() -> list[Path]:
    """kafka-clients 3.x and what it needs at run time (compression codecs, slf4j)."""
    version = clients_version()
    libs = Path(os.environ.get("KGW_KAFKA_CLIENTS_LIBS")
                or Path.home() / ".cache" / "kgw" / f"kafka-clients-{version}" / "libs")
    if not (libs / f"kafka-clients-{version}.jar").is_file():
        raise FileNotFoundError(f"kafka-clients {version} is not in {libs}: run `make setup` (it resolves it with Maven)")
    return sorted(libs.glob("*.jar"))


def client_check_command(out_dir: Path, classpath: list[Path]) -> list[str]:
    """The ``java`` command line (classpath included) of tests/integration/java/KgwClientCheck.java
    compiled into ``out_dir`` against ``classpath``; its arguments follow."""
    classes = compile_java([REPO / "tests" / "integration" / "java" / "KgwClientCheck.java"], out_dir, classpath)
    tools = java_tools()
    assert tools is not None, "javac/java not found on PATH"
    return [tools[1], "-Xss1m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-cp", os.pathsep.join([str(classes), *map(str, classpath)]), "KgwClientCheck"]


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
