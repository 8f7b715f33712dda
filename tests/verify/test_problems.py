"""`verify.problems` holds what checks and tests share; importing it registers no check."""

import subprocess
import sys

from tests.conftest import REPO_ROOT

MODULES = ("fit", "irls", "mpc", "recurrent", "rt_irls")


def test_problems_load_without_the_check_registry():
    script = (
        "import sys\n"
        + "".join(f"import verify.problems.{m}\n" for m in MODULES)
        + "from verify import registry\n"
        + "assert not [m for m in sys.modules if m.startswith('verify.checks')], 'checks loaded'\n"
        + "assert not registry.REGISTRY, 'checks registered'\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr


def test_checks_use_the_shared_problems():
    """One definition: the check modules import their problems, they do not copy them."""
    from verify.checks import fit, irls, mpc, recurrent, rt_irls
    from verify.problems import fit as p_fit
    from verify.problems import irls as p_irls
    from verify.problems import mpc as p_mpc
    from verify.problems import recurrent as p_recurrent
    from verify.problems import rt_irls as p_rt_irls

    assert fit.isotropic_data is p_fit.isotropic_data
    assert irls.outlier_rmse_ratios is p_irls.outlier_rmse_ratios
    assert mpc.random_problem is p_mpc.random_problem
    assert recurrent.mode_recursion is p_recurrent.mode_recursion
    assert rt_irls.reference_rt_irls is p_rt_irls.reference_rt_irls
