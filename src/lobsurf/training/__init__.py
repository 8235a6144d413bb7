"""Training runs: config, data and split, the loop, validation and model choice, seeds,
checkpoints and the run folder (``lobsurf.train``, the function, is lobsurf.api's)."""
