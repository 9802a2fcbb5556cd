"""python -m bench.backends: the backend study from the command line."""

import sys

from .study import main

sys.exit(main())
