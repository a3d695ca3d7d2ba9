"""Reproduce the IDBLA paper's experiments (section 5) and write a report next to the paper's numbers.

Every (dataset, method, seed) combination is fitted: a *method* is a registered algorithm with a parameter
set (``idbla``; ``idbla:paper`` = ``preset="paper"``; ``idbla:random-init`` = ``init="random"``, the
initialization ablation of Table 3).  The entry point is ``jobs/reproduce_paper.py``; the definitions of
every reported number are in ``docs/reproduce.md``.

Modules, each importing only those above it:

* :mod:`~jobs.reproduce.paper`: the numbers the paper reports (the only hard-coded results);
* :mod:`~jobs.reproduce.datasets`: loading the datasets, Table 1's statistics;
* :mod:`~jobs.reproduce.methods`: method keys -> algorithm and parameters;
* :mod:`~jobs.reproduce.runs`: fitting, one record per run, the experiment loop, reading ``results.json``;
* :mod:`~jobs.reproduce.aggregates`: per (dataset, method) summaries of the records;
* :mod:`~jobs.reproduce.claims`: the paper's claims checked against the aggregates;
* :mod:`~jobs.reproduce.tables`: markdown tables, ``report.md`` and the README summary;
* :mod:`~jobs.reproduce.figures`: the PNG figures;
* :mod:`~jobs.reproduce.report`: writing the report directory and a document's generated block;
* :mod:`~jobs.reproduce.cli`: arguments and what they ask for (no logging configuration).
"""
