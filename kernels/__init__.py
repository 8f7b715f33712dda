"""Filtering attention layers in torch and Triton (AFA, RFA, RT-RFA, KLA, OsciFormer).

Not implemented yet: see the open issues.
"""
