"""Entry point of ``python -m sde_sim``."""

import sys

from sde_sim.cli import main

sys.exit(main())
