"""Data-parallel training on CPU: two gloo processes (docs/distributed.md).

- two ranks hold identical parameters and controllers (the run's own checksum check every
  step), experience differs by rank, rank 0 logs the sums over both;
- one learning step on the rank-split halves of a fixed batch with gradient averaging
  equals one process's step on the whole batch (at the ``learn_from`` level: end to end the
  two ranks act in different environments, so no single-process run is the same run);
- resume: 2 -> 2 is bit exact against an uninterrupted run; 2 -> 1 and 1 -> 2 run to
  completion with networks, optimizer and controllers carried exactly.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lobsurf.agent.learn import learn_from
from lobsurf.agent.replay import Sample
from lobsurf.agent.step import train_step
from lobsurf.errors import UserError
from lobsurf.training.data import load_training_data
from lobsurf.training.distributed.collective import Collective
from lobsurf.training.distributed.torchrun import check_gpus, strip_gpus, torchrun_args
from lobsurf.training.recovery.checkpoint import checkpoint_path, load_payload, rank_shard_path
from lobsurf.training.recovery.rank_shards import load_shard, restore_rank_
from lobsurf.training.recovery.run_folder import read_metrics
from lobsurf.training.run.state import build_state, step_config
from tests.agent.conftest import tiny_config
from tests.training.test_train_command import TIMING_KEYS, train

WORLD = 2
STEPS, HALF = 20, 10  # tiny run: checkpoints every 10 steps, metrics every 5
ENVS = 8
#: a learning step's transitions, split in two equal halves
BATCH = 16
#: collect steps that fill the replay before the fixed sample is drawn
FILL_STEPS = 6
#: first dataset row of the fixed sample (past the window, labels valid)
FIRST_ROW = 100
#: rows searched from FIRST_ROW for BATCH with every label valid
ROW_SEARCH = 1000


def _torchrun(*args) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={args[0]}", "-m", "lobsurf", "train", "--device", "cpu",
           "--no-progress", *map(str, args[1:])]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)


def _ok(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stderr[-3000:]


def _records(run: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS}
            for r in read_metrics(run / "metrics.jsonl")]


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory):
    """A 20-step two-process run on the tiny store (its ranks checked identical before each
    checkpoint)."""
    import tomli_w

    from tests.agent.conftest import TINY
    from tests.conftest import random_walk_books, write_store

    root = tmp_path_factory.mktemp("dist")
    store = write_store(root / "store", [random_walk_books(2000, 1), random_walk_books(
        1500, 2, start_ns=1_700_100_000 * 10**9)])
    toml = root / "tiny.toml"
    toml.write_text(tomli_w.dumps(TINY))
    run = root / "straight"
    _ok(_torchrun(WORLD, "--store", store.path, "--config", toml, "--out", run))
    return store.path, toml, run


@pytest.mark.slow  # separate processes (torchrun, mp.spawn): seconds each
def test_two_ranks_stay_identical_and_rank_0_logs_both(two_rank_run):
    _store, _toml, run = two_rank_run
    records = _records(run)
    metrics = [r for r in records if r["event"] == "metrics"]
    assert [r["step"] for r in metrics] == [5, 10, 15, 20]  # one writer, no duplicates
    assert records[0]["world_size"] == WORLD
    # rank 0's record counts every rank's environment steps
    assert all(r["env_steps"] == WORLD * ENVS * 5 for r in metrics)
    main = load_payload(checkpoint_path(run, STEPS))
    shard = load_shard(rank_shard_path(checkpoint_path(run, STEPS), 1), STEPS, 1)
    assert main["world_size"] == WORLD
    # rank-offset seeds: the two ranks lived different experience
    assert not torch.equal(main["replay"]["storage.row"], shard["replay"]["storage.row"])


@pytest.mark.slow  # separate processes (torchrun, mp.spawn): seconds each
def test_resume_two_to_two_is_bit_exact(two_rank_run, tmp_path):
    store, toml, straight = two_rank_run
    split = tmp_path / "split"
    _ok(_torchrun(WORLD, "--store", store, "--config", toml, "--out", split, "--steps", HALF))
    _ok(_torchrun(WORLD, "--resume", split, "--steps", STEPS))
    a = [r for r in _records(straight) if r["event"] == "metrics"]
    b = [r for r in _records(split) if r["event"] == "metrics"]
    assert a == b
    pa, pb = (load_payload(checkpoint_path(r, STEPS)) for r in (straight, split))
    for key in ("online", "target", "optimizer", "controllers", "replay", "sim_state"):
        assert all(torch.equal(x, y) for x, y in zip(_tensors(pa[key]), _tensors(pb[key]),
                                                     strict=True)), key
    sa, sb = (load_shard(rank_shard_path(checkpoint_path(r, STEPS), 1), STEPS, 1)
              for r in (straight, split))
    assert all(torch.equal(x, y) for x, y in zip(_tensors(sa["replay"]), _tensors(sb["replay"])))


@pytest.mark.slow  # separate processes (torchrun, mp.spawn): seconds each
def test_resume_two_to_one_carries_rank_0(two_rank_run, tmp_path):
    store, _toml, straight = two_rank_run
    run = tmp_path / "shrink"
    shutil.copytree(straight, run)
    for path in (checkpoint_path(run, STEPS).parent).glob(f"step_{STEPS:08d}*"):
        path.unlink()  # back to step 10, as if the run had stopped there
    payload = load_payload(checkpoint_path(run, HALF))
    state = _fresh_state(store, rank=0)
    assert restore_rank_(state, checkpoint_path(run, HALF), payload, rank=0) == "main"
    _assert_carried(state, payload)
    assert torch.equal(state.env.state.cursor, payload["sim_state"]["cursor"])
    assert train("--resume", run, "--steps", STEPS) == 0
    records = _records(run)
    assert records[-1] == {"event": "run_end", "step": STEPS, "stopped": "steps"}
    assert [r["step"] for r in records if r["event"] == "metrics"] == [5, 10, 15, 20]


@pytest.mark.slow  # separate processes (torchrun, mp.spawn): seconds each
def test_resume_one_to_two_starts_the_new_rank_from_rank_0(two_rank_run, tmp_path):
    store, toml, _straight = two_rank_run
    run = tmp_path / "grow"
    assert train("--store", store, "--config", toml, "--out", run, "--steps", HALF) == 0
    path = checkpoint_path(run, HALF)
    payload = load_payload(path)
    state = _fresh_state(store, rank=1)
    fresh_cursor = state.env.state.cursor.clone()
    assert restore_rank_(state, path, payload, rank=1) == "fresh"
    _assert_carried(state, payload)
    assert torch.equal(state.env.state.cursor, fresh_cursor)  # its own fresh episodes
    _ok(_torchrun(WORLD, "--resume", run, "--steps", STEPS))
    records = _records(run)
    assert records[-1] == {"event": "run_end", "step": STEPS, "stopped": "steps"}
    assert rank_shard_path(checkpoint_path(run, STEPS), 1).exists()


def _fresh_state(store: Path, rank: int):
    cfg = tiny_config(store)
    return build_state(cfg, load_training_data(cfg, "cpu", store), "cpu", rank=rank)


def _tensors(tree) -> list[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, dict):
        return [t for k in sorted(tree) for t in _tensors(tree[k])]
    if isinstance(tree, (list, tuple)):
        return [t for v in tree for t in _tensors(v)]
    return []


def _assert_carried(state, payload) -> None:
    """Networks, optimizer and controllers equal the checkpoint's, bit for bit."""
    pairs = [(state.online.state_dict(), payload["online"]),
             (state.target.state_dict(), payload["target"]),
             (state.optimizer.state_dict(), payload["optimizer"]),
             (state.controllers.as_dict(), payload["controllers"])]
    for have, saved in pairs:
        for x, y in zip(_tensors(have), _tensors(saved), strict=True):
            assert torch.equal(x.cpu(), y)
    assert torch.equal(state.step_count, payload["step_count"])


# ---- one learning step: rank-split halves with gradient averaging == the whole batch

def _fixed_setup(store: Path):
    """The same tiny state and fixed sample in every process (all seeded, CPU)."""
    cfg = tiny_config(store)
    data = load_training_data(cfg, "cpu", store)
    state, scfg = build_state(cfg, data, "cpu"), step_config(cfg)
    for _ in range(FILL_STEPS):
        train_step(state, data.train_book, scfg, learning=False)
    sample = state.replay.sample(BATCH, state.controllers.per_beta)
    # Every masked loss averages over its valid entries; equal counts in both halves make
    # the mean of the halves' means the whole batch's mean (rows with valid labels, every
    # transition a closed trade with a known outcome).
    candidates = torch.arange(FIRST_ROW, FIRST_ROW + ROW_SEARCH)
    lab = state.labels.rows(candidates)
    rows = candidates[lab.bucket_valid.all(1) & lab.direction_valid.all(1)][:BATCH]
    assert rows.numel() == BATCH
    yes = torch.ones(BATCH, dtype=torch.bool)
    t = dataclasses.replace(sample.transitions, row=rows, next_row=rows + 1,
                            trade_closed=yes, outcome_valid=yes)
    return state, data.train_book, dataclasses.replace(sample, transitions=t), scfg


def _rows(value, part: slice):
    """A field's rows (a field absent from this run, e.g. the resting orders, stays None)."""
    return None if value is None else value[part]


def _half(sample: Sample, rank: int) -> Sample:
    part = slice(rank * BATCH // WORLD, (rank + 1) * BATCH // WORLD)
    t = sample.transitions
    t = type(t)(**{f.name: _rows(getattr(t, f.name), part) for f in dataclasses.fields(t)})
    return Sample(transitions=t, index=sample.index[part], weight=sample.weight[part])


def _split_worker(rank: int, store: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out}/pg", rank=rank,
                            world_size=WORLD)
    try:
        state, book, sample, scfg = _fixed_setup(Path(store))
        learn_from(state, book, _half(sample, rank), scfg,
                   Collective(rank=rank, world_size=WORLD))
        torch.save({"grads": [p.grad for p in state.online.parameters()],
                    "params": [p.detach() for p in state.online.parameters()]},
                   f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # separate processes (torchrun, mp.spawn): seconds each
def test_split_batch_with_gradient_average_equals_whole_batch(tiny_store, tmp_path):
    mp.spawn(_split_worker, args=(str(tiny_store.path), str(tmp_path)), nprocs=WORLD)
    state, book, sample, scfg = _fixed_setup(tiny_store.path)
    learn_from(state, book, sample, scfg)
    whole = {"grads": [p.grad for p in state.online.parameters()],
             "params": [p.detach() for p in state.online.parameters()]}
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    for r in ranks[1:]:  # every rank took the same step
        for key in ("grads", "params"):
            assert all(torch.equal(x, y) for x, y in zip(ranks[0][key], r[key]))
    for key, tol in (("grads", 1e-6), ("params", 1e-6)):
        for x, y in zip(whole[key], ranks[0][key], strict=True):
            torch.testing.assert_close(y, x, rtol=1e-5, atol=tol)


# ---- the --gpus launcher (its arguments; no GPU here)

def test_gpus_launcher_arguments_and_refusal():
    argv = ["train", "--gpus", "2", "--steps", "5", "--gpus=3"]
    assert strip_gpus(argv) == ["train", "--steps", "5"]
    assert torchrun_args(2, ["--steps", "5"]) == [
        "--standalone", "--nproc-per-node=2", "-m", "lobsurf", "train", "--steps", "5"]
    with pytest.raises(UserError, match=r"--gpus 4: only 1 CUDA device\(s\) available"):
        check_gpus(4, 1)


def test_gpus_refuses_cpu(capsys):
    assert train("--gpus", "2", "--device", "cpu") == 2
    assert "--gpus needs CUDA" in capsys.readouterr().err
