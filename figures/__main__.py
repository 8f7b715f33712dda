"""Entry point of ``python -m figures`` (the error contract is in `sde_sim.plumbing.run_cli`)."""

import sys

from figures.cli import main

sys.exit(main())
