"""Every model token counted and priced: usage rows, totals, spend metrics (docs/costs.md)."""
