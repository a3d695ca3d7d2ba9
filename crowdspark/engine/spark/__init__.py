"""The Spark engine, whole: it builds its own blocks from the labels and keeps them until the run ends.

* :mod:`~crowdspark.engine.spark.blocks`: labels to blocks in one pass on the executors
  (:class:`~crowdspark.engine.spark.blocks.BlockBuild`, what the pipeline calls);
* :mod:`~crowdspark.engine.spark.engine`: :class:`~crowdspark.engine.spark.engine.SparkEngine`, the sweeps
  (one Spark job per sweep, or a sweep session);
* :mod:`~crowdspark.engine.spark.session` and :mod:`~crowdspark.engine.spark.session_net`: the sweep session
  and its authenticated channel;
* :mod:`~crowdspark.engine.spark.resident`: blocks kept resident in the Python workers, and their spill files.

Nothing outside this package reads or removes its spill files.  The package imports none of its modules
itself: a Python worker that unpickles a block function loads only what that function needs.
"""
