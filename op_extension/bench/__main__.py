"""python -m op_extension.bench [options], or python op_extension/bench [options]."""

import os
import sys

# Run by path, Python puts this package's folder first on sys.path, where its
# modules would shadow top-level ones and ``import op_extension`` would fail.
# Swap it for the repository root, appended last so an installed package or
# PYTHONPATH entry still wins.
if not __package__:
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    sys.path.append(os.path.dirname(os.path.dirname(_here)))

from op_extension.bench import main  # noqa: E402

sys.exit(main())
