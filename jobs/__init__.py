"""Entry points (``spark-submit jobs/<name>.py``) and applications built on the crowdspark library.

``jobs`` is part of a checkout, not of the installed package: run it from the repository root.
"""
