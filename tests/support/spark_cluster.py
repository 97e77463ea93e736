"""A Spark standalone cluster from the installed PySpark distribution: one master and
``workers`` workers (``bin/spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``),
on free ports, each in the foreground, its logs under the test's directory, stopped by its own
process id.  Ready when the master's JSON status lists every worker ALIVE."""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .ports import HOST, free_port
from .processes import ManagedProcess, ProcessError, wait_until

__all__ = ["SparkCluster", "start_spark_cluster"]

REPO = Path(__file__).resolve().parents[2]


@dataclass
class SparkCluster:
    master_url: str
    web_url: str
    processes: list[ManagedProcess] = field(default_factory=list)

    def status(self) -> dict:
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop(20)


def start_spark_cluster(work: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> SparkCluster:
    import pyspark

    home = Path(pyspark.__file__).parent
    spark_class = home / "bin" / "spark-class"
    if not spark_class.exists():
        raise ProcessError(f"{spark_class} is missing: the installed PySpark has no launch scripts")
    env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": HOST, "SPARK_NO_DAEMONIZE": "1",
           "PYTHONPATH": str(REPO) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}
    port, web = free_port(), free_port()
    cluster = SparkCluster(f"spark://{HOST}:{port}", f"http://{HOST}:{web}")
    try:
        cluster.processes.append(ManagedProcess("spark-master", [
            spark_class, "org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(port),
            "--webui-port", str(web)], log_dir=work, env=env).start())
        for i in range(workers):
            cluster.processes.append(ManagedProcess(f"spark-worker-{i}", [
                spark_class, "org.apache.spark.deploy.worker.Worker", "--host", HOST, "--port", str(free_port()),
                "--webui-port", str(free_port()), "--cores", str(cores), "--memory", memory,
                "--work-dir", str(work / f"worker-{i}"), cluster.master_url], log_dir=work, env=env).start())

        def ready() -> bool:
            for process in cluster.processes:
                if not process.alive():
                    raise ProcessError(process.describe_failure(f"{process.name} exited"))
            alive = [w for w in cluster.status().get("workers", []) if w.get("state") == "ALIVE"]
            return len(alive) == workers

        wait_until(ready, 90, interval=0.5, message=f"a Spark master with {workers} ALIVE workers")
    except BaseException:
        cluster.stop()
        raise
    return cluster
