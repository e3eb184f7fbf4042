"""A seeded, bounded protocol fuzzer against a real Strata broker process (issue 21, "Tests").

``python -m tests.fuzz`` (``make fuzz``) runs it for a while and prints a summary; ``tests/fuzz/test_fuzz.py`` runs
it for a bounded count in the suite. See README.md, "Fuzzing".
"""
