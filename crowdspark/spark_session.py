"""Building a SparkSession with the settings crowdspark relies on."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

__all__ = ["build_session", "DEFAULT_SPARK_CONF"]

#: settings applied unless the caller, spark-submit's --conf or spark-defaults.conf sets them
DEFAULT_SPARK_CONF = {
    "spark.ui.showConsoleProgress": "false",
    # warnings and errors only, from the JVM's start (setLogLevel afterwards lets the start-up INFO lines through)
    "spark.log.level": "WARN",
    # Unix domain sockets between the JVM and Python workers cut the per-task cost (BENCHMARKS.md, "Kernel
    # and data-path choices").
    "spark.python.unix.domain.socket.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Arrow batches of 200k rows, not Spark's default 10k, between the JVM and Python (block building, item
    # output): the label columns' hand-off is faster in fewer, larger batches (BENCHMARKS.md, "Kernel and
    # data-path choices").
    "spark.sql.execution.arrow.maxRecordsPerBatch": "200000",
    # Spark keys its pools of Python workers by their environment, and this setting (on by default) is part of
    # the environment of SQL's Python tasks only: off, the mapInArrow tasks (block building, item output) and
    # the RDD tasks (sweeps, evaluation) share one daemon and its idle workers, so each executor starts its
    # Python workers once per run instead of once per kind of task
    # (docs/decisions/0215-one-python-worker-pool.md).  Python errors in SQL tasks then carry their whole
    # traceback.
    "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false",
}


def _launch_settings() -> set[str]:
    """The Spark settings the launcher already set (``spark-submit --conf``, ``spark-defaults.conf``): a
    default of :data:`DEFAULT_SPARK_CONF` never overrides them."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return set()
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    return {key for key, _ in SparkConf().getAll()}


def build_session(app_name: str, master: str | None = None, conf: Mapping[str, str] | None = None):
    """Get or create a SparkSession.

    Parameters
    ----------
    app_name : str
    master : str, optional
        e.g. ``"local[*]"``; ``None`` leaves it to ``spark-submit``, or uses ``local[*]`` when the process
        was not started by ``spark-submit``.
    conf : mapping, optional
        Extra Spark settings; they override :data:`DEFAULT_SPARK_CONF`.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ and not os.environ.get("PYSPARK_SUBMIT_ARGS"):
        # plain Python, not spark-submit (which starts the JVM first and sets PYSPARK_GATEWAY_PORT)
        builder = builder.master("local[*]")
    launched = _launch_settings()
    settings = {key: value for key, value in DEFAULT_SPARK_CONF.items() if key not in launched}
    if master is not None and master.startswith("local") and "spark.ui.enabled" not in launched:
        settings["spark.ui.enabled"] = "false"
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
