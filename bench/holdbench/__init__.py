"""The holds benchmark (bench/README.md): engines, workloads, reference model, checks."""
