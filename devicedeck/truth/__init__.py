"""The truth oracle: runs the simulated cluster under a seeded workload and checks what the
service says against what the simulators themselves hold (docs/truth.md)."""
