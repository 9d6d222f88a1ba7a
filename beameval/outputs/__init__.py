"""What guards an output directory while a run writes it: the one-run-at-a-time lock."""
