"""Entry point of ``python -m verify`` (the error contract is in `sde_sim.plumbing.run_cli`)."""

import sys

from verify.cli import main

sys.exit(main())
