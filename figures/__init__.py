"""Regeneration of the papers' figures.

Not implemented yet: see the open issues. Until then `make reproduce` writes the simulator's
preset gallery (`python -m sde_sim simulate-all`).
"""
