"""What a user spends: every model token counted and priced (usage rows, totals, spend metrics;
docs/costs.md), and the per-user disk budget."""
