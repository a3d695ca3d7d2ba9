"""spark-submit entry point: ``spark-submit jobs/aggregate.py --labels ... --algorithm ds --output ...``.

It takes the same arguments as ``crowdspark aggregate``; under spark-submit the master and resources come
from spark-submit's own flags.  It exits as the command line does (``docs/operations.md``): 0 committed, 2 a
person must fix it, 75 a later run can succeed (retry), 1 anything else; ``--status-file PATH`` writes the outcome
as JSON.
"""

import sys

from crowdspark.spark_session import prefer_installed_pyspark

if __name__ == "__main__":
    prefer_installed_pyspark()  # before anything imports pyspark: its compiled code, not the zip's source

    from crowdspark.cli import main

    sys.exit(main(["aggregate", *sys.argv[1:]]))
