"""Float64 reference estimators: the optimum every attention layer is judged against.

One module per estimator: `kalman` (Kalman filter, RTS smoother, log-likelihood), `mle` (batch
precision-weighted MLE), `irls` (robust IRLS), `rt_irls` (radial-tangential and directional
estimators), `recurrent` (the reweighted recursive filter), `scan` (information-form scans),
`fit` (parameter MLE) and `oracle` (dense joint-Gaussian conditioning, a test oracle); closed
forms in `estimators.closed_forms`.
"""
