"""`torch.compile` traces every layer with a fused path in one graph (issue 19, target 4).

The value checks of the layers and the functions (finite, increasing stamps; positive
variances; `kernels.layers.causal`'s finite-input test) read tensor values, which breaks
Dynamo's graph; they run in eager mode and are skipped while `torch.compile` traces
(``torch.compiler.is_compiling()``). `torch._dynamo.explain` counts the graph breaks; the
``aot_eager`` backend (no C++ compiler needed) runs the traced graph, which must give the eager
output.
"""

import pytest
import torch
import torch._dynamo as dynamo

from kernels.layers.afa import AdaptiveFilterAttention
from kernels.layers.afa_transformer import AFATransformerBlock
from kernels.layers.kla import KalmanLinearAttention
from kernels.layers.rfa import RobustFilterAttention

E = 8


def _layer(name: str) -> torch.nn.Module:
    g = torch.Generator().manual_seed(0)
    build = {
        "afa": lambda: AdaptiveFilterAttention(E, 2, generator=g),
        "afa robust": lambda: AdaptiveFilterAttention(E, 2, nu=2.0, generator=g),
        "rfa": lambda: RobustFilterAttention(E, 2),
        "afa block": lambda: AFATransformerBlock(E, 2, generator=g),
        "kla": lambda: KalmanLinearAttention(E, num_slots=2, generator=g),
    }[name]
    return build().eval()


def _inputs(with_times: bool):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 12, E, generator=g)
    t = torch.cumsum(torch.rand(2, 12, generator=g) + 0.1, 1)
    return (x, t) if with_times else (x,)


NAMES = ["afa", "afa robust", "rfa", "afa block", "kla"]


@pytest.mark.parametrize("with_times", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_forward_traces_without_graph_breaks(name, with_times):
    dynamo.reset()
    explained = dynamo.explain(_layer(name))(*_inputs(with_times))
    assert explained.graph_break_count == 0, [str(b.reason)[:120] for b in explained.break_reasons]
    assert explained.graph_count == 1


@pytest.mark.parametrize("name", ["afa robust", "rfa", "kla"])
def test_compiled_forward_equals_eager(name):
    layer, args = _layer(name), _inputs(True)
    with torch.no_grad():
        eager = layer(*args)[0]
        dynamo.reset()
        compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)(*args)[0]
    torch.testing.assert_close(compiled, eager, rtol=1e-6, atol=1e-6)


def test_explain_counts_a_data_dependent_branch():
    """The negative control: a forward that tests a tensor's values breaks the graph."""

    class Branching(torch.nn.Module):
        def forward(self, x):
            y = x + 1
            if (y > 0).any():  # both branches compute, so the break leaves a second graph
                return y * 2
            return y * 3

    dynamo.reset()
    explained = dynamo.explain(Branching())(torch.ones(3))
    assert explained.graph_break_count >= 1
    assert explained.break_reasons
