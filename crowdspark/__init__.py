"""crowdspark: truth inference from noisy crowd labels, on numpy and on Spark.

See the README for the command line, and :mod:`crowdspark.api` for the pandas API.
"""

from crowdspark.version import __version__

__all__ = ["__version__", "read_items", "read_runs"]


def read_items(output: str, spark=None, folder: str = "items"):
    """The whole answer of a run, one row per item (an incremental night's ``items/`` holds only the items it
    fitted); :func:`crowdspark.io.chain.read_items`."""
    from crowdspark.io.chain import read_items as read

    return read(output, spark, folder)


def read_runs(root: str, spark=None, folder: str = "items"):
    """Every committed run's ``folder`` table of a folder of runs, with ``run_id`` as text;
    :func:`crowdspark.io.runs.read_runs`."""
    from crowdspark.io.runs import read_runs as read

    return read(root, spark, folder)
