"""``lobsurf train --gpus N``: start N training processes, one per GPU, through torchrun's
own API (``torch.distributed.run``), each running ``python -m lobsurf train`` with the
same arguments (docs/distributed.md)."""

from __future__ import annotations

import os

from lobsurf.errors import UserError
from lobsurf.training.distributed.collective import NVLS_OFF_ENV

#: torchrun's flag for the process count (the rest of the command follows it)
_NPROC_FLAG = "--nproc-per-node"


def strip_gpus(argv: list[str]) -> list[str]:
    """``argv`` without its ``--gpus N`` / ``--gpus=N`` (the launched processes must not
    launch again)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--gpus":
            skip = True
        elif not arg.startswith("--gpus="):
            out.append(arg)
    return out


def torchrun_args(gpus: int, train_argv: list[str]) -> list[str]:
    """torchrun's arguments for ``gpus`` processes of ``lobsurf train train_argv``."""
    return ["--standalone", f"{_NPROC_FLAG}={gpus}", "-m", "lobsurf", "train", *train_argv]


def check_gpus(gpus: int, available: int) -> None:
    if gpus < 1:
        raise UserError(f"--gpus {gpus}: give at least 1")
    if gpus > available:
        raise UserError(f"--gpus {gpus}: only {available} CUDA device(s) available")


def launch(gpus: int, argv: list[str]) -> int:
    """Run ``lobsurf train argv`` (``--gpus`` removed) in ``gpus`` processes; the exit
    status is 0 when every process succeeded, 1 otherwise."""
    import torch
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    check_gpus(gpus, torch.cuda.device_count())
    os.environ.update(NVLS_OFF_ENV)  # inherited by every process before NCCL starts
    try:
        run(parse_args(torchrun_args(gpus, strip_gpus(argv))))
    except ChildFailedError as exc:
        raise UserError(f"--gpus {gpus}: a training process failed "
                        f"({', '.join(f'rank {r}' for r in exc.failures)}); see its output "
                        "above") from exc
    return 0
