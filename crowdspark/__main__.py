"""``python -m crowdspark`` runs the command line."""

import sys

from crowdspark.cli import main

sys.exit(main())
