"""Reading labels and gold (pandas and Spark readers, one set of rules), writing results, the saved-model format,
and the filesystem and deletion rules they share."""
