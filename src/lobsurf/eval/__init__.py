"""Evaluation: the policy interface and the backtest runner (independent of any model)."""
