"""Command line: ``python -m attnlearn reproduce [--quick]`` (see :mod:`attnlearn.reproduce`)."""

import sys

from .reproduce import main

sys.exit(main())
