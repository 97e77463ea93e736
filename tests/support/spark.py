"""One way to start Spark in the tests: local[2], workers on this venv, the `kgw` Python data
source registered, and Spark's own Kafka connector (the pinned PySpark's release, resolved
by `make setup`) on the driver's classpath. Every session of a test process gets the same
classpath: the first one starts the JVM, and jars added to a later session would not reach
the classloader Spark finds data sources with."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

__all__ = ["connector_jars", "make_spark"]

REPO = Path(__file__).resolve().parents[2]


def connector_jars() -> list[Path]:
    pom = (REPO / "deploy" / "spark" / "pom.xml").read_text()
    version = re.search(r"<spark.version>(.+?)</spark.version>", pom).group(1)
    where = os.environ.get("KGW_SPARK_KAFKA_JARS") or Path.home() / ".cache" / "kgw" / f"spark-kafka-{version}" / "jars"
    jars = sorted(Path(where).glob("*.jar"))
    if not any("spark-sql-kafka" in j.name for j in jars):
        raise FileNotFoundError(f"Spark's Kafka connector {version} is not resolved: run `make setup`")
    import pyspark

    if pyspark.__version__ != version:
        raise RuntimeError(f"PySpark {pyspark.__version__} is installed but the Kafka connector is {version}")
    return jars


def make_spark(app: str):
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    path = os.environ.get("PYTHONPATH", "")
    if str(REPO) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = str(REPO) + (os.pathsep + path if path else "")
    jars = [str(j) for j in connector_jars()]
    spark = (SparkSession.builder.master("local[2]").appName(app)
             .config("spark.jars", ",".join(jars))
             .config("spark.driver.extraClassPath", os.pathsep.join(jars))
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.default.parallelism", "2")
             .config("spark.driver.memory", "1g")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.streaming.metricsEnabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from kgw_spark.source import register

    register(spark)
    return spark
