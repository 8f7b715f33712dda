"""Float64 reference estimators: the optimum every attention layer is judged against.

One module per estimator: `kalman` (Kalman filter, RTS smoother, log-likelihood), `mle` (batch
precision-weighted MLE), `irls` (robust IRLS), `recurrent` (the reweighted recursive filter),
`scan` (information-form scans), `fit` (parameter MLE; its parts `fit_families` and
`fit_likelihood`), `rt_irls` (RT-Kalman IRLS, and the entry point of the radial-tangential
estimators: `directional` for the directional MLE / IRLS, `sphere` for the steps on the sphere,
`rt_model` for the model they share) and `oracle` (dense joint-Gaussian conditioning, a test
oracle); closed forms in `estimators.closed_forms`.

Shared by them: `batch_input` (the measurements, mask and times of every estimator, checked
and prepared once) and `linear_gaussian` (what the estimators of a linear SDE share: model
checks, the prior and the diffuse start, step classes, one predict/update pair).
"""
