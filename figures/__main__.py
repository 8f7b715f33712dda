"""Entry point of ``python -m figures``."""

import os
import sys

from figures.cli import main

try:
    sys.exit(main())
except BrokenPipeError:  # stdout closed early (piped into head): stop quietly
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(1)
