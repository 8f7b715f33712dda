"""Entry point of ``python -m verify``."""

import sys

from verify.cli import main

sys.exit(main())
