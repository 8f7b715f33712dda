"""Problems of the open-loop waypoint control (seed 000 B.4): random decoupled problems shared by
`verify.checks.mpc` and the tests of `estimators.closed_forms.mpc`.
"""

from __future__ import annotations

import numpy as np

from estimators.closed_forms import mpc
from sde_sim.models import real_from_eigen
from verify.tools import random_eigensystem


def random_problem(rng: np.random.Generator, d: int, sign: float | None = None):
    """A decoupled waypoint problem: real A, B, Q_f, R_c built from shared eigen-data.

    The eigenvalues are multiplied by `sign` (random +-1 when None: B.4 needs no stability).
    Returns ``(problem, S, A, B, Q_f, R_c)``; also used by the unit tests.
    """
    lam, S = random_eigensystem(rng, d, decay=(0.05, 1.0))
    lam = lam * (rng.choice([1.0, -1.0]) if sign is None else sign)
    b, q, r = [], [], []
    for _ in range(d // 2):
        v = rng.uniform(0.3, 1.5) * np.exp(1j * rng.uniform(-1.0, 1.0))
        b += [v, np.conj(v)]
        q += [rng.uniform(0.2, 5.0)] * 2
        r += [rng.uniform(0.05, 2.0)] * 2
    if d % 2:
        b.append(complex(rng.uniform(0.3, 1.5)))
        q.append(rng.uniform(0.2, 5.0))
        r.append(rng.uniform(0.05, 2.0))
    problem = mpc.modal_problem(lam, b, q, r)
    A, B = real_from_eigen(lam, S), real_from_eigen(np.array(b), S, name="B")
    Q_f = mpc.eigen_weight_matrix(S, q, name="Q_f")
    R_c = mpc.eigen_weight_matrix(S, r, name="R_c")
    return problem, S, A, B, Q_f, R_c
