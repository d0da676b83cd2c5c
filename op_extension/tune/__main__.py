"""python -m op_extension.tune --report | --clear [--device DEVICE]."""

import sys

from op_extension.tune import main

sys.exit(main())
