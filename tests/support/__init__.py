"""Code the tests share that is not itself a test: hypothesis strategies, frame damage, the
far side of transports, an old worker for rolling upgrades, the C++ build harness and the
serving request classes. pytest collects nothing here (no test_*.py)."""
