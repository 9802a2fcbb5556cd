"""`python -m harness.run stage=NAME [overrides]`: the command line in harness.cli.run."""

import sys

from harness.cli.run import main
from harness.run.sweep import multirun_flag_first

sys.argv = multirun_flag_first(sys.argv)
main()
