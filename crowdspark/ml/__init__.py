"""The pyspark.ml face: an Estimator/Model pair for every registered algorithm, and plain functions.

For users who hold their labels in a Spark DataFrame (notebooks, existing pipelines).  Everything runs
through the same shared runner as the command line (:func:`crowdspark.pipeline.fit_frames`), so validation,
errors and answers are the command line's, and with its small-input rule: a DataFrame of at most
``smallInputBytes / 3`` rows (about 2.8M labels at the default ``engine.small_input_bytes`` of 8 MiB) whose
fit's predicted peak fits the driver's memory budget is collected to the driver and fitted with the local
engine (:mod:`crowdspark.pipeline.small_frame`; ``summary["engine"]`` is ``"local"`` and
``summary["small_input"]`` records the rows, the threshold, the prediction and the budget).  On a local master
a larger one is fitted there too when the local fit's predicted peak is within the ``maxMemory`` Param's budget
(``engine.max_memory``; docs/engines.md); otherwise it is fitted on the Spark engine, and
``smallInputBytes=0`` always fits on Spark.  Both give the same answers; ``summary["engine_choice"]`` says why.

>>> from crowdspark.ml import DawidSkeneAggregator
>>> labels = spark.createDataFrame(
...     [("a", "w1", "x"), ("a", "w2", "x"), ("a", "w3", "y"),
...      ("b", "w1", "y"), ("b", "w2", "y"), ("b", "w3", "y")],
...     "item string, worker string, label string")
>>> model = DawidSkeneAggregator(seed=0, tol=1e-4).fit(labels)
>>> model.transform(labels).select("item", "label").orderBy("item").collect()
[Row(item='a', label='x'), Row(item='b', label='y')]
>>> model.summary["counts"]["items"], model.summary["classes"]
(2, ['x', 'y'])
>>> sorted(model.workers.columns)
['accuracy', 'agreement', 'confusion', 'n_labels', 'spammer', 'spammer_probability', 'spammer_score', 'worker']

The classes
-----------
:class:`CrowdAggregator` runs any registered algorithm (``algorithm="ds"``, its parameters in
``algorithmParams``); every registered algorithm also has its own estimator, ``<api_name>Aggregator``
(:data:`ESTIMATORS`: ``MajorityVoteAggregator``, ``DawidSkeneAggregator``, ``BccAggregator``,
``IdblaAggregator``, ``FixedIdblaAggregator``, ``IdblaCvbAggregator``, ``IdblaCvb0Aggregator``,
``DifficultyDawidSkeneAggregator``) with the algorithm fixed and one camelCase ``Param`` per parameter of its
model (``maxIter``, ``tol``, ``smoothing`` ...; pyspark.ml's spelling, :mod:`crowdspark.faces`), with
``getMaxIter``/``setMaxIter``; the constructor also takes the field names (``max_iter=5``).  Messages name
settings as this face does (``itemCol="task"``, ``maxIter``).

What ``fit`` and ``transform`` do
---------------------------------
``CrowdAggregator.fit(labels_df)`` validates the labels, runs the configured algorithm (on the driver
or on the Spark engine, as above) and returns a :class:`CrowdAggregatorModel` holding

* ``items``: the fitted item table (one row per item: ``item``, ``label``, ``confidence``, ``posterior``
  and model extras such as ``level``, ``level_posterior``, ``epsilon``), exactly what the command line
  writes to ``items/``.  It is materialized at fit time (a reliable checkpoint when the SparkContext has a
  checkpoint directory, else a local checkpoint), so the engine's cached blocks and broadcasts are released
  before ``fit`` returns.  It stays distributed.  After a fit on the driver it is a DataFrame created
  from the local engine's table, with the same schema.
* ``workers``: the worker table (a Spark DataFrame, as in ``workers/``); ``summary``: the run summary
  (a dict, as in ``summary.json``);
* ``kernel``, ``globalParams``, ``encoding``: the fitted numpy model, its global parameters (arrays sized
  by workers, classes and levels) and the worker/class encoding; what a warm start reads.

``model.transform(labels_df)`` *scores* a labels DataFrame with the fitted global parameters: each item's
result is ``kernel.finish_block(block, None, globalParams)``, computed on the executors (nothing
item-level reaches the driver).  For ``mv`` and ``ds`` this is exactly how the fit computes its item
table, so ``transform`` of the training labels equals ``model.items``.  For the samplers (``bcc``,
``idbla``, ``fixed-idbla``) the fit's item table averages per-item posteriors over the kept sweeps, while
``transform`` gives each item's posterior under the posterior-mean parameters (one exact E-step; ``epsilon``
is NaN): close, not identical; use ``model.items`` for the fit's own answers.  Models whose per-item
results need per-item state (collapsed VI) refuse ``transform`` with a ``ConfigError``.  A model fitted
with the quality signals (docs/quality.md) adds the per-item quality columns of the scored labels
(``n_labels``, ``vote_entropy``, ``agreement``, ``posterior_entropy``, ``relabel_gain`` from the fitted
workers' label-weighted average confusion as in the item table, ``margin``).  Labels outside
the fitted classes are an error; workers not seen at fit time are an error unless
``handleUnknownWorkers="skip"`` (their labels are then ignored).

Save format (``model.write().save(path)``, ``CrowdAggregatorModel.load(path)``)
------------------------------------------------------------------------------
``path/metadata/``
    pyspark.ml's metadata (one JSON line: ``class``, ``uid``, ``paramMap``, ``defaultParamMap``,
    ``sparkVersion``) plus ``crowdspark``: ``format`` (:data:`crowdspark.io.saved_model.FORMAT`), ``summary`` and
    ``has_items``.
``path/_model/``
    The saved model in crowdspark's one format (:mod:`crowdspark.io.saved_model`): what the command line writes to
    a run's ``_model/``, so ``--warm-start path`` starts from it, and ``CrowdAggregatorModel.load`` also
    loads a command-line run's output (its Params then come from the saved model).  Models saved in format 1
    (a Parquet table of arrays, crowdspark 0.1) load too.
``path/workers/``, ``path/items/``
    Parquet: the worker table and the fitted item table (no ``items/`` after :meth:`~CrowdAggregatorModel.close`).

A :class:`pyspark.ml.PipelineModel` holding a crowdspark model saves and loads it this way too.
"""

from crowdspark.io.chain import read_items
from crowdspark.ml.estimator import ESTIMATORS, CrowdAggregator, aggregate_df
from crowdspark.ml.model import CrowdAggregatorModel, score_labels

__all__ = ["CrowdAggregator", "CrowdAggregatorModel", "ESTIMATORS", "aggregate_df", "read_items", "score_labels",
           *ESTIMATORS]

globals().update(ESTIMATORS)
