"""The README's Python example runs as written (keeps the README true)."""

import re

from tests.conftest import REPO_ROOT


def test_readme_python_blocks_run():
    text = (REPO_ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no python example"
    for block in blocks:
        namespace: dict = {}
        exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["sim"].x.shape == (100, 2001, 2)
    assert namespace["x_coarse"].shape == (1000, 65, 2)
