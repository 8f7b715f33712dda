"""Float64 reference estimators (Kalman filter/smoother, batch MLE, IRLS, scans).

Not implemented yet: see the open issues. The package exists so that the distribution's layout
is fixed from the start.
"""
