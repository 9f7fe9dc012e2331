"""The SparkSession of a job: embedded local Spark under `python -m`, the submitted one under spark-submit."""
from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession


def under_spark_submit() -> bool:
    """spark-submit starts Python with a gateway to its own JVM already running."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def get_spark(app: str, master: str | None = None) -> SparkSession:
    """The job's session; local[*] unless spark-submit (or `master`) says otherwise."""
    builder = SparkSession.builder.appName(f"reput-{app}")
    if master or not under_spark_submit():
        # Workers must run the same interpreter (the venv) as the driver.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (builder.master(master or os.environ.get("REPUT_SPARK_MASTER", "local[*]"))
                   .config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.driver.memory", os.environ.get("REPUT_DRIVER_MEMORY", "4g"))
                   # The embedded JVM only schedules tasks (the work is in the Python workers): the
                   # quick C1 compiler alone leaves the cores to the workers instead of C2 compiling.
                   .config("spark.driver.extraJavaOptions",
                           os.environ.get("REPUT_DRIVER_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1"))
                   .config("spark.sql.shuffle.partitions", "8")
                   .config("spark.python.worker.reuse", "true")
                   .config("spark.sql.execution.arrow.pyspark.enabled", "true"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("REPUT_SPARK_LOG_LEVEL", "WARN"))
    return spark
