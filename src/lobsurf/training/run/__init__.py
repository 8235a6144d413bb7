"""The run itself: ``lobsurf train`` (job), ``train()`` (loop) and the parts it tells in
order (prepare, state, step, readout), and ``lobsurf train --seeds N`` (seed_group)."""
