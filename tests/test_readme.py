"""The README's Python examples run as written (keeps the README true)."""

import re

from tests.conftest import REPO_ROOT


def test_readme_python_blocks_run(capsys):
    text = (REPO_ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 2, "README lost a python example"
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["sim"].x.shape == (100, 2001, 2)
    assert namespace["x_coarse"].shape == (1000, 65, 2)
    assert namespace["kf"].means.shape == (16, 101, 2)
    assert namespace["smooth"].means.shape == (16, 101, 2)
    # the fitted parameters are within 4 standard errors of the preset's true values
    truth = {"alpha": -0.1, "sigma2": 0.1, "eta2": 0.25}
    fitted = namespace["result"].as_dict()
    for name, value in truth.items():
        estimate, se = fitted[name]
        assert abs(estimate - value) < 4 * se, (name, estimate, se)
    assert "alpha" in capsys.readouterr().out
    assert namespace["y"].shape == (2, 64, 32)
    assert namespace["weights"].shape == (2, 4, 64, 64)
    assert all(out.shape == (2, 64, 32) for out in namespace["outputs"])
