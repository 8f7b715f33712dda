"""Registry of every check: symbolic (SymPy), numeric and Monte Carlo.

Not implemented yet: see the open issues.
"""
