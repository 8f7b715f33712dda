"""Comparison helpers for kernel tests (in the manner of fla's ``assert_close``)."""

from __future__ import annotations

import torch


def rms_errors(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float]:
    """``(max abs error, relative RMS error)`` of ``actual`` against ``expected``."""
    actual = actual.detach().to(torch.float64)
    expected = expected.detach().to(torch.float64)
    diff = actual - expected
    max_abs = diff.abs().max().item() if diff.numel() else 0.0
    scale = expected.pow(2).mean().sqrt().item() if expected.numel() else 0.0
    rel_rms = diff.pow(2).mean().sqrt().item() / scale if scale > 0 else max_abs
    return max_abs, rel_rms


def assert_close(name: str, actual, expected, *, atol: float, rtol: float = 0.0) -> None:
    """Assert ``|actual - expected| <= atol + rtol |expected|`` elementwise; report RMS errors."""
    actual = torch.as_tensor(actual)
    expected = torch.as_tensor(expected)
    if actual.is_complex() or expected.is_complex():  # compare real and imaginary parts
        actual = torch.view_as_real(actual.to(torch.complex128))
        expected = torch.view_as_real(expected.to(torch.complex128))
    assert actual.shape == expected.shape, (
        f"{name}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    )
    max_abs, rel_rms = rms_errors(actual, expected)
    ok = torch.isclose(
        actual.detach().to(torch.float64),
        expected.detach().to(torch.float64),
        atol=atol,
        rtol=rtol,
    ).all()
    assert ok, (
        f"{name}: max abs error {max_abs:.3e}, relative RMS error {rel_rms:.3e} "
        f"(atol {atol}, rtol {rtol})"
    )


def record_inplace_paths(monkeypatch, module, exact: str) -> dict:
    """Record the key widths of every group the in-place inference paths of ``module`` (AFA's
    or RFA's isotropic op) see: ``{"bounded": [...], "exact": [...], "fallbacks": count,
    "rational": {...}}``; ``exact`` names the module's exact in-place function (the bounded
    one is ``_attend_bounded`` in both)."""
    seen = {"bounded": [], "exact": [], "fallbacks": 0, "rational": set()}
    bounded, exact_path = module._attend_bounded, getattr(module, exact)

    def record_bounded(chunks, *args, **kwargs):
        seen["bounded"].append([chunk[2].shape[-2] for chunk in chunks])
        seen["rational"].add(kwargs["rational"])
        out = bounded(chunks, *args, **kwargs)
        seen["fallbacks"] += out is None
        return out

    def record_exact(chunks, *args):
        seen["exact"].append([chunk[2].shape[-2] for chunk in chunks])
        return exact_path(chunks, *args)

    monkeypatch.setattr(module, "_attend_bounded", record_bounded)
    monkeypatch.setattr(module, exact, record_exact)
    return seen
