"""Seed 004 Fig. 5: eigenvalue spectra of RoPE + isotropic decay and of SC-RoPE."""

from __future__ import annotations

import numpy as np
import pytest

from figures import rope_spectra as fig


@pytest.fixture(scope="module")
def data():
    return fig.compute(fig.Config.quick())


def test_spectra_shapes_pairs_and_stability(data):
    cfg = data.config
    for s in data.spectra:
        assert s.eigenvalues.shape == (cfg.heads, 2 * cfg.frequencies)
        assert s.conjugate_closed and s.stable
    # The coupled decays: mu_h = b max omega_h, the lowest quarter of the heads at zero.
    rope, sc = data.spectra
    zero = cfg.heads // 4
    assert np.all(data.head_decay[:zero] == 0)
    band_max = np.abs(sc.eigenvalues.imag).max(axis=1)
    np.testing.assert_allclose(data.head_decay[zero:], cfg.damping * band_max[zero:], rtol=1e-12)
    # Isotropic: every head holds the whole bank.
    assert all(
        np.array_equal(np.sort(r.imag), np.sort(rope.eigenvalues[0].imag)) for r in rope.eigenvalues
    )


def test_decay_grows_with_frequency_only_when_coupled(data):
    cfg = data.config
    rope, sc = data.spectra
    # Isotropic: each head has the same frequencies, so |omega| and mu are independent.
    assert abs(rope.rank_correlation) < 1e-12
    slow, fast = rope.quartile_decay()
    assert slow == pytest.approx(fast, rel=1e-12)
    assert sc.rank_correlation > 0.9
    slow, fast = sc.quartile_decay()
    assert slow == 0.0 and fast > 0.1
    # SC-RoPE: no decaying mode completes more than 1/(2 pi b) cycles per e-folding time; the
    # fastest mode of each decaying head meets the bound.
    assert sc.max_cycles == pytest.approx(1 / (2 * np.pi * cfg.damping), rel=1e-12)
    assert rope.max_cycles > 1.0


def test_statistics_have_power(data):
    # A coupling with the decays reversed (fast heads slow) must fail the claims.
    _, sc = data.spectra
    reversed_ = fig.Spectrum(
        "reversed", fig._eigenvalues(sc.eigenvalues.imag, data.head_decay[::-1].copy())
    )
    assert reversed_.rank_correlation < -0.5
    assert reversed_.max_cycles > 1 / (2 * np.pi * data.config.damping)


def test_plot_and_caption(data):
    fig_ = fig.plot(data)
    assert len(fig_.axes) == 2
    text = fig.caption(data)
    assert "Paper:" in text and "Here:" in text
    rope, sc = data.spectra
    assert f"{sc.rank_correlation:.2f}" in text and f"{rope.max_cycles:.3g}" in text


@pytest.mark.parametrize(
    ("kwargs", "match"), [({"heads": 0}, "heads"), ({"damping": 0.0}, "damping")]
)
def test_config_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        fig.Config(**kwargs)
