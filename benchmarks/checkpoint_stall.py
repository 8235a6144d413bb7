"""Where a training checkpoint's stall goes (issue 9: "metrics and checkpoints must not
stall the step"): the pieces the loop's thread runs (``pack``: the device-side copies
queued and the header pickled, then the metrics file's size) timed one by one, the writer
thread's pieces (waiting for the copies, the metrics fsync, the checkpoint file written and
synced), the earlier way's pieces for comparison (host copies, ``torch.save`` of the whole
payload), and how much a write on the writer's thread slows a thread that launches small
device kernels meanwhile (the GIL).

    python benchmarks/checkpoint_stall.py --envs 16 --device cuda [--repeats 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import statistics
import tempfile
import threading
import time
from pathlib import Path

import torch

from lobsurf.data.synth import SynthConfig, write_synth_store
from lobsurf.train import checkpoint as ck
from lobsurf.train.checkpoint_file import pack
from lobsurf.train.config import RunConfig
from lobsurf.train.data import load_training_data
from lobsurf.train.loop import build_state
from lobsurf.train.run_folder import MetricsLog


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _ms(fn, device: str, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        out = fn()
        _sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), out


def _device_tree(state) -> dict:
    # checkpoint_payload's tensors before their host copies
    return {"controllers": state.controllers.as_dict(), "online": state.online.state_dict(),
            "target": state.target.state_dict(), "optimizer": state.optimizer.state_dict(),
            "replay": state.replay.state_dict(),
            "sim_state": {f.name: getattr(state.env.state, f.name)
                          for f in dataclasses.fields(state.env.state)},
            "metric_sums": state.metrics.as_dict()}


def _leaves(tree) -> list[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return [tree.detach()]
    if isinstance(tree, dict):
        return [t for v in tree.values() for t in _leaves(v)]
    return []


def _one_copy_each(leaves):
    return [t.cpu().clone() for t in leaves]


def _packed(leaves, pinned: bool):
    groups: dict = {}
    for t in leaves:
        groups.setdefault(t.dtype, []).append(t)
    out = []
    for ts in groups.values():
        flat = torch.cat([t.reshape(-1) for t in ts])
        if pinned:
            host = torch.empty(flat.shape, dtype=flat.dtype, pin_memory=flat.is_cuda)
            host.copy_(flat)
        else:
            host = flat.cpu()
        out.append(host)
    return out


def _loop_side_ms(fn, repeats: int) -> float:
    # the calling thread's time only: no sync after (what the loop waits)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _serialised(tree) -> int:
    buffer = io.BytesIO()
    torch.save(tree, buffer)
    return buffer.tell()


def _launches(x: torch.Tensor, n: int, device: str) -> float:
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(1.0)
    _sync(device)
    return (time.perf_counter() - t0) * 1e6 / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--envs", type=int, default=16)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--launches", type=int, default=20000)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ckstall-"))
    write_synth_store(root / "store", SynthConfig(snapshots_per_day=50_000, days=2, edge=1.0))
    cfg = RunConfig()
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, envs=args.envs))
    data = load_training_data(cfg, args.device, root / "store")
    state = build_state(cfg, data, args.device)
    log = MetricsLog(root / "metrics.jsonl")
    log.write({"event": "x", "pad": "y" * 200})
    r = args.repeats
    rows = {}
    payload = ck.checkpoint_payload(state, 1, {}, 0, {})
    leaves = _leaves(_device_tree(state))
    rows[f"the state dicts ({len(leaves)} tensors)"], _ = _ms(
        lambda: _device_tree(state), args.device, r)
    rows["pack, the loop's thread (no sync)"] = _loop_side_ms(lambda: pack(payload), r)
    rows["pack, until its device copies are done"], packed = _ms(
        lambda: pack(payload), args.device, r)
    rows["metrics flushed_size (loop)"], _ = _ms(log.flushed_size, args.device, r)
    rows["metrics fsync (writer thread)"], _ = _ms(log.sync, args.device, r)
    rows["file write + fsync + marker (writer thread)"], _ = _ms(
        lambda: ck.write_marked_bytes(root / "step.pt", packed), args.device, r)
    rows["earlier: one .cpu().clone() per tensor"], _ = _ms(lambda: _one_copy_each(leaves),
                                                           args.device, r)
    rows["earlier: packed by dtype, pageable .cpu()"], _ = _ms(lambda: _packed(leaves, False),
                                                              args.device, r)
    rows["earlier: packed by dtype, fresh pinned memory"], _ = _ms(
        lambda: _packed(leaves, True), args.device, r)
    host = {"tensors": _one_copy_each(leaves)}
    rows["earlier: torch.save of the host payload"], size = _ms(
        lambda: _serialised(host), args.device, r)
    x = torch.zeros(1, device=args.device)
    alone = _launches(x, args.launches, args.device)
    writes = threading.Event()

    def keep_writing() -> None:
        while not writes.is_set():
            ck.write_marked_bytes(root / "bg.pt", packed)
    t = threading.Thread(target=keep_writing)
    t.start()
    beside = _launches(x, args.launches, args.device)
    writes.set()
    t.join()
    print(f"checkpoint pieces, {args.envs} envs on {args.device}, "
          f"{size / 1e6:.1f} MB payload, median of {r}:")
    for name, ms in rows.items():
        print(f"  {name:45s} {ms:8.2f} ms")
    print(f"  {'one small launch, alone':45s} {alone:8.2f} us")
    print(f"  {'one small launch, beside a background write':45s} {beside:8.2f} us")


if __name__ == "__main__":
    main()
