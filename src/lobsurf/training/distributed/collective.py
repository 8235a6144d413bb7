"""Data-parallel training over several processes: one process per device (docs/distributed.md).

Each rank owns its environments, replay, generators and local statistics; what must be
global goes through ``Collective``:

- gradients: one all-reduce of the flattened gradients (sum, then times 1/world), copied
  through a buffer allocated once, so the sequence could stay inside a captured graph;
- controllers: after each ``collect`` every controller tensor is all-reduced and averaged,
  so each learning step sees the same atom span, reward scale, alpha, tau, beta and gate
  threshold on every rank (the learner's own updates then start from equal values and
  stay equal). Averaging the updated EMAs equals an EMA of the cross-rank mean statistic
  for the linear ones (action entropy, hold fraction, pnl magnitude) and is the simplest
  rule that keeps the others identical across ranks;
- parameters: broadcast from rank 0 at the start (and after a resume) and, before every
  checkpoint, a checksum of parameters and controllers compared through one all-reduce
  (max of +c and -c gives max - min);
- metrics: the device sums are all-reduced (summed) at a log interval, so rank 0 logs the
  means over every rank's steps; stop requests and divergence flags are agreed by max.

With one process ``Collective.local()`` does nothing, and the single-process run is the one
it always was. Backend: nccl on CUDA, gloo on CPU; NVLink multicast (NVLS) is switched off
through ``NVLS_OFF_ENV`` before the process group starts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from lobsurf.agent.controllers import ControllerState
from lobsurf.agent.metrics import MetricSums
from lobsurf.errors import UserError

#: environment that keeps NCCL, symmetric memory and NVSHMEM off NVLink multicast (NVLS)
NVLS_OFF_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}
#: seed distance between ranks' generators (replay, noise, acting, simulator resets): far
#: beyond the per-generator offsets, so rank r of seed s never replays rank 0 of seed s + 1
RANK_SEED_STRIDE = 10_000


def launched_by_torchrun() -> bool:
    """True inside a process that torchrun (torch.distributed.run) started."""
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ


@dataclass
class Collective:
    """This process's rank, the world size and the collective operations of a step."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    _flat: torch.Tensor | None = field(default=None, repr=False)

    @staticmethod
    def local() -> Collective:
        return Collective()

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    # ---- the step's collectives (no host sync)
    @torch.no_grad()
    def grads_(self, params: list[torch.Tensor], flat: torch.Tensor | None = None) -> None:
        """Average the gradients of ``params`` over the ranks, in place. ``flat``: the
        buffer they all live in (lobsurf.agent.flat), reduced
        as it is, without packing the gradients into a buffer of this object's and back
        (its gaps are zeros on every rank and stay so)."""
        if not self.active:
            return
        if flat is not None:
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            flat.mul_(1.0 / self.world_size)
            return
        grads = [p.grad for p in params]
        numel = sum(g.numel() for g in grads)
        if self._flat is None or self._flat.numel() != numel or \
                self._flat.device != grads[0].device:
            self._flat = torch.empty(numel, dtype=grads[0].dtype, device=grads[0].device)
        flat = self._flat
        torch.cat([g.reshape(-1) for g in grads], out=flat)
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)  # AVG is NCCL-only; gloo has SUM
        flat.mul_(1.0 / self.world_size)
        torch._foreach_copy_(grads, [v.view_as(g) for v, g in
                                     zip(flat.split([g.numel() for g in grads]), grads)])

    @torch.no_grad()
    def controllers_(self, ctl: ControllerState) -> None:
        """Every controller set to its mean over the ranks, in place."""
        self._average_(list(ctl.as_dict().values()))

    @torch.no_grad()
    def metric_sums_(self, m: MetricSums) -> None:
        """Every metric sum replaced by its total over the ranks (rank 0 then logs means)."""
        if not self.active:
            return
        values = list(m.as_dict().values())
        stacked = torch.stack(values)
        dist.all_reduce(stacked, op=dist.ReduceOp.SUM)
        torch._foreach_copy_(values, list(stacked.unbind()))

    def _average_(self, values: list[torch.Tensor]) -> None:
        if not self.active:
            return
        stacked = torch.stack(values)
        dist.all_reduce(stacked, op=dist.ReduceOp.SUM)
        stacked.mul_(1.0 / self.world_size)
        torch._foreach_copy_(values, list(stacked.unbind()))

    # ---- host-side agreement (a sync; called where the loop decides)
    def any_(self, flag: bool, device: torch.device | str) -> bool:
        """True on every rank when ``flag`` is True on any rank."""
        if not self.active:
            return flag
        t = torch.tensor(int(flag), dtype=torch.int64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    @torch.no_grad()
    def broadcast_(self, tensors: list[torch.Tensor]) -> None:
        """Rank 0's values of ``tensors`` copied to every rank, in place."""
        if not self.active:
            return
        for t in tensors:
            dist.broadcast(t, src=0)

    def spread(self, checksum: torch.Tensor) -> float:
        """max - min over the ranks of a 0-d float64 checksum (0.0 with one process)."""
        if not self.active:
            return 0.0
        both = torch.stack((checksum, -checksum))
        dist.all_reduce(both, op=dist.ReduceOp.MAX)
        return float(both.sum())


def init_collective(device: str) -> tuple[Collective, str]:
    """The process group of a torchrun launch (nccl on CUDA, gloo on CPU) and this rank's
    device; ``Collective.local()`` and ``device`` unchanged outside torchrun."""
    if not launched_by_torchrun():
        return Collective.local(), device
    for name, value in NVLS_OFF_ENV.items():
        os.environ.setdefault(name, value)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if device.startswith("cuda"):
        available = torch.cuda.device_count()
        if local_rank >= available:
            raise UserError(f"local rank {local_rank} has no CUDA device ({available} "
                            "visible): start at most one process per GPU")
        device = f"cuda:{local_rank}"
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo",
                                rank=rank, world_size=world)
    return Collective(rank=rank, world_size=world, local_rank=local_rank), device


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def state_tensors(online: torch.nn.Module, target: torch.nn.Module, ctl: ControllerState
                  ) -> list[torch.Tensor]:
    """What every rank must hold identically: both networks (parameters and buffers:
    normaliser statistics, noise) and the controllers."""
    return ([t.data for t in online.state_dict().values()]
            + [t.data for t in target.state_dict().values()] + list(ctl.as_dict().values()))


@torch.no_grad()
def checksum(params: list[torch.Tensor], ctl: ControllerState) -> torch.Tensor:
    """0-d float64 position-weighted sum of parameters and controllers (a swapped or
    drifted value changes it)."""
    sums = torch.stack([p.detach().to(torch.float64).sum() for p in params]
                       + list(ctl.as_dict().values()))
    weights = torch.arange(1, sums.numel() + 1, dtype=torch.float64, device=sums.device)
    return (sums * weights).sum()


def check_identical(collective: Collective, params: list[torch.Tensor], ctl: ControllerState,
                    step: int) -> None:
    """Raise a one-line error when the ranks' parameters or controllers differ."""
    gap = collective.spread(checksum(params, ctl))
    if gap != 0.0:
        raise UserError(f"step {step}: parameters/controllers differ across ranks (checksum "
                        f"spread {gap:.3g}); gradient or controller sync is broken")
