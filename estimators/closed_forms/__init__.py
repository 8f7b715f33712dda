"""Float64 closed forms the papers' layers rely on, each with its seed equation.

One module per topic; import from the module, e.g.
``from estimators.closed_forms.dle import eigen_propagated_covariance``:

* `dle`: propagated state covariance (differential Lyapunov equation), causal and non-causal.
* `measurement`: propagated measurement covariance, isotropic lag kernels, RFA's eq. 9 form.
* `unitary`: the ``alpha = 0`` limit and its rotary (RoPE) reading.
* `radial_tangential`: RT covariance (Proposition 1), Sherman-Morrison precision, Ito forms.
* `drift`: inhomogeneous drift, measurement bias and the cancelling measurement delay.
* `riccati`: covariance under continuous measurements (the corrected tanh solution).
* `separable`: the separable precision approximation and its three properties.
* `robust_weights`: Student-t / Gamma weights and the power-law logits.
* `kla`: KLA's OU discretisation, Moebius precision step and affine mean step.
* `oscillator`: damped driven oscillator propagators, responses and transients.
* `mpc`: open-loop waypoint control and its convex-combination closed form.

Every function is checked by ``python -m verify`` (symbolically, numerically, by Monte Carlo).
"""
