"""Float64 closed forms the papers' layers rely on, each with its seed equation.

One module per topic; import from the module, e.g.
``from estimators.closed_forms.dle import propagated_covariance``. Every function here is
checked by `python -m verify` (symbolically, numerically and by Monte Carlo).
"""
