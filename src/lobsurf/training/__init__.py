"""Training runs (``lobsurf.train``, the function, is lobsurf.api's).

    config.py      the run's settings (RunConfig)
    data.py        the data a run trains on: store, time split, validation slice
    run/           the run itself: ``lobsurf train`` (job), train() (loop), the state it
                   builds, the step, the readouts, ``--seeds N`` (seed_group)
    recovery/      a run on disk and back after a crash: run folder, checkpoints, resume
    faults/        a run that goes wrong: NaN/Inf (guard, rollback), signals, memory
    selection/     validation and the chosen policy (RUN/chosen.pt, chosen.json)
    distributed/   several processes: the collectives, the torchrun launch
    speed/         the step made fast: one CUDA graph, torch.compile
"""
