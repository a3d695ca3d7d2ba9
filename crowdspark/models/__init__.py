"""Model kernels: pure numpy functions over blocks of items (no pyspark here)."""
