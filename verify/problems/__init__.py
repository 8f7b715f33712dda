"""Shared problems: the data, reference loops and diagnostics that the checks (`verify.checks`)
and the tests of the lower packages both use, one module per topic.

Importing a module here registers no check (importing any `verify.checks` module runs the
package's ``__init__``, which imports and registers every check), so a test of `estimators` can
build a check's problem without loading SymPy and the whole registry.
"""
