"""Building a SparkSession with the settings crowdspark relies on."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

__all__ = ["build_session", "DEFAULT_SPARK_CONF", "prefer_installed_pyspark"]

def _zip_member(path: str, name: str) -> bytes | None:
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            return archive.read(name)
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def _same_file(path: str, data: bytes | None) -> bool:
    try:
        with open(path, "rb") as handle:
            return data is not None and handle.read() == data
    except OSError:
        return False


def prefer_installed_pyspark() -> list[str]:
    """Under ``spark-submit`` of the installed pyspark package, import pyspark and py4j from the package rather than
    from the zip copies of the same files that spark-submit puts first on ``sys.path``.

    Python compiles a module imported from a zip every time (it keeps no compiled code there), which costs the
    driver about 1 s of each run to import pyspark; the installed package keeps its compiled code.  A zip moves to
    the end of ``sys.path`` only when the installed copy is the same release: ``SPARK_HOME`` is the installed
    ``pyspark`` package (spark-submit came with it), and its ``version.py`` is byte for byte the zip's; py4j's zip
    only when the installed py4j has the zip's version.  Call it before anything imports pyspark.

    Returns
    -------
    list of str
        The ``sys.path`` entries moved to the end (none outside spark-submit, or for a Spark distribution's own
        spark-submit).
    """
    home = os.environ.get("SPARK_HOME")
    if not home or "pyspark" in sys.modules or "py4j" in sys.modules:
        return []
    package = os.path.realpath(home)
    site = os.path.dirname(package)
    if os.path.basename(package) != "pyspark" or site not in {os.path.realpath(p) for p in sys.path if p}:
        return []
    lib = os.path.join(package, "python", "lib")
    moved = []
    for entry in list(sys.path):
        if not entry.endswith(".zip") or os.path.dirname(os.path.realpath(entry)) != lib:
            continue
        name = os.path.basename(entry)
        if name == "pyspark.zip":
            same = _same_file(os.path.join(package, "version.py"), _zip_member(entry, "pyspark/version.py"))
        elif name.startswith("py4j-") and name.endswith("-src.zip"):
            same = _installed_version("py4j") == name[len("py4j-"):-len("-src.zip")]
        else:
            continue
        if same:
            sys.path.remove(entry)
            sys.path.append(entry)
            moved.append(entry)
    return moved


def _installed_version(distribution: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


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
