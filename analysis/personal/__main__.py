"""`python -m analysis.personal ...`: see analysis/personal/report.py."""

import sys

from analysis.personal.report import main

sys.exit(main())
