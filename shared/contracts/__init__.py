"""Wire contracts: one module per stream, plus HTTP bodies and disk files."""
