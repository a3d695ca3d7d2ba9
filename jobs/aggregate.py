"""spark-submit entry point: ``spark-submit jobs/aggregate.py --labels ... --algorithm ds --output ...``.

It takes the same arguments as ``crowdspark aggregate``; under spark-submit the master and resources come
from spark-submit's own flags.
"""

import sys

from crowdspark.cli import main

if __name__ == "__main__":
    sys.exit(main(["aggregate", *sys.argv[1:]]))
