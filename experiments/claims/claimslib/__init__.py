"""The claims table's library: packed records, the plan's decision rules, the confirmatory amendment.

Used by the scripts beside this package (``experiments/claims/*.py``, which find it on their own folder's path)
and by the tests (``tests/conftest.py`` puts ``experiments/claims`` on ``sys.path``); the library in ``src/``
never imports it. Modules: :mod:`claimslib.records` (packed per-example records), :mod:`claimslib.claims` (the
plan's tests and decisions), :mod:`claimslib.claims_table` (the table's rows), :mod:`claimslib.confirm` (the
confirmatory amendment), :mod:`claimslib.mcerror` (Monte Carlo error of bootstrap p-values and interval ends),
:mod:`claimslib.overlap_records` (per-matrix overlap records of two draws' selections).
"""
