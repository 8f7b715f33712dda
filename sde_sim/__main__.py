"""Entry point of ``python -m sde_sim`` (the error contract is in `sde_sim.plumbing.run_cli`)."""

import sys

from sde_sim.cli import main

sys.exit(main())
