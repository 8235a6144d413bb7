"""A run that goes wrong: the divergence guard and the rollback after a NaN/Inf, SIGINT and
SIGTERM (stop after the step), and the memory refusal before anything loads."""
