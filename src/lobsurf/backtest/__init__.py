"""A policy traded over recorded books, and measured: the policy interface, the
deterministic sweep over chosen rows, the random-cursor backtest, the metrics of their
records, and a trained agent as a policy. Validation, the baselines and ``lobsurf eval``
all trade through it."""
