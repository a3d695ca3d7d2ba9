"""The package's version: stamped into summaries, markers and saved models."""

__version__ = "0.2.0.dev0"
