"""Training runs: config, data and split, the loop, checkpoints and the run folder."""
