"""Moved: the backend study's calibration is bench/backends/calibrate.py. This name is the same module
(an alias, not a copy), so old imports, monkeypatches and `python -m harness.memory.calibrate` keep working."""

import sys

from bench.backends import calibrate as _calibrate

if __name__ == "__main__":
    sys.exit(_calibrate.main())
else:
    sys.modules[__name__] = _calibrate
