"""Several training processes: the collectives inside the step (one process per GPU), and
``lobsurf train --gpus N``, which starts them through torchrun."""
