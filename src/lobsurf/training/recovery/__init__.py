"""A run on disk and back after a crash (SIGKILL included): the run folder and its
metrics.jsonl, atomic marked checkpoints and their file layout, each rank's shard, the
resume from the newest complete checkpoint, a saved run's config read back, and the pause
points where crash tests land their kill."""
