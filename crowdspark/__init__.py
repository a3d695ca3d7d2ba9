"""crowdspark: truth inference from noisy crowd labels, on numpy and on Spark.

See the README for the command line, and :mod:`crowdspark.api` for the pandas API.
"""

__version__ = "0.1.0"
