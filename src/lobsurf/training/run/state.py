"""A run's fresh state: every piece a step reads and writes, built from the config's seeds.

``build_state`` makes the network (seeded init; normaliser fitted on training rows, or a
pretrain checkpoint's weights), its target copy, the optimiser, the simulator over the
training book, the replay, the controllers and the step's device constants. Rank r of a
multi-process run offsets every seed but the network's by r * RANK_SEED_STRIDE.
``build_run_state`` adds what ``train.compile`` asks for. A checkpoint is copied into such a
fresh state (lobsurf.training.recovery), so a resumed run continues the same objects.
"""

from __future__ import annotations

import copy
import dataclasses

import torch

from lobsurf.agent.c51_triton import c51_target_triton, kernel_applies
from lobsurf.agent.controllers import ControllerState
from lobsurf.agent.flat import flatten_parameters_
from lobsurf.agent.metrics import MetricSums
from lobsurf.agent.network import AgentNetwork
from lobsurf.agent.optim import TensorAdam
from lobsurf.agent.policy import reference_log_probs
from lobsurf.agent.replay import PrioritizedReplay
from lobsurf.agent.state import StepConfig, StepTables, TrainState
from lobsurf.agent.step import eager_kernels
from lobsurf.data.labels import compute_labels
from lobsurf.data.split import evenly_spaced
from lobsurf.errors import UserError
from lobsurf.models.features import last_snapshot
from lobsurf.models.kernels.triton_support import use_kernels_
from lobsurf.sim.config import SimConfig
from lobsurf.sim.env import BatchedLobEnv
from lobsurf.sim.reward import money_scalar
from lobsurf.streams import side_stream
from lobsurf.training.config import RunConfig
from lobsurf.training.data import TrainingData
from lobsurf.training.distributed.collective import RANK_SEED_STRIDE
from lobsurf.training.speed.compile import compile_config, compile_networks_, compile_wanted

#: offsets of the run seed for each generator, so no two draw the same stream
SEED_OFFSETS = {"init": 0, "noise": 1, "acting": 2, "replay": 3}


def step_config(cfg: RunConfig) -> StepConfig:
    return StepConfig(network=cfg.network, replay=cfg.replay, learner=cfg.learner,
                      reward=cfg.reward, policy=cfg.policy, gates=cfg.gates, aux=cfg.aux,
                      window=cfg.sim.window,
                      position_unit=max(cfg.sim.order_sizes_lots), batch_size=cfg.learner_batch,
                      num_envs=cfg.train.envs,
                      precision=cfg.train.precision)


def _generator(device: torch.device | str, seed: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def build_network(cfg: RunConfig, data: TrainingData, device: torch.device | str,
                  pretrained: dict[str, torch.Tensor] | None = None) -> AgentNetwork:
    """Seeded network on ``device``; normaliser from training rows or the pretrain weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.train.seed + SEED_OFFSETS["init"])
        net = AgentNetwork(cfg.features, cfg.encoder, cfg.network, cfg.labels,
                           cfg.sim.num_actions, cfg.sim.passive_orders)
    net = net.to(device)
    if pretrained is not None:
        net.load_pretrained_(pretrained)
    else:
        rows = evenly_spaced(data.fit_rows, cfg.data.normalizer_rows)
        x, log_dt = last_snapshot(data.book, rows, cfg.features, cfg.sim.window)
        net.normalizer.fit_(x)
        if cfg.encoder.kind == "cfc":
            net.encoder.fit_time_scale_(log_dt)
    return net


def build_state(cfg: RunConfig, data: TrainingData, device: torch.device | str,
                pretrained: dict[str, torch.Tensor] | None = None, rank: int = 0
                ) -> TrainState:
    """Every piece of a step's state, freshly initialised from the config's seeds; rank r of
    a multi-process run offsets every seed but the network's by r * RANK_SEED_STRIDE."""
    seed = cfg.train.seed + rank * RANK_SEED_STRIDE
    sim = dataclasses.replace(cfg.sim, seed=cfg.sim.seed + rank * RANK_SEED_STRIDE)
    online = build_network(cfg, data, device, pretrained)
    target = copy.deepcopy(online)
    for p in target.parameters():
        p.requires_grad_(False)
    optimizer = TensorAdam(online.parameters(), lr=cfg.learner.lr, eps=cfg.learner.adam_eps)
    # the target's buffer in the online's layout: Polyak inside the flat Adam's pass
    flat_target = flatten_parameters_(target.parameters(), with_grads=False)
    try:
        env = BatchedLobEnv(data.train_book, cfg.train.envs, sim)
    except ValueError as exc:
        raise UserError(f"training rows too few for the simulator: {exc}") from exc
    env.reset()
    replay = PrioritizedReplay(cfg.replay, device, seed + SEED_OFFSETS["replay"],
                               cfg.sim.passive_orders)
    noise_generator = _generator(device, seed + SEED_OFFSETS["noise"])
    acting_generator = _generator(device, seed + SEED_OFFSETS["acting"])
    cuda = torch.device(device).type == "cuda"
    if cuda:
        # one generator for every draw of the step: fewer kernels before each graph replay
        # (lobsurf.training.speed.cuda_graph; benchmarks/RESULTS.md, Defaults decided by measurement)
        replay.generator = env.generator = acting_generator = noise_generator
    # train.kernels: the learner's C51 target side as one kernel on CUDA (else the PyTorch
    # one, which train.compile compiles)
    kernels = eager_kernels()
    mode = "auto" if cfg.train.kernels else "off"
    if kernel_applies(mode, device):
        kernels.c51_target = c51_target_triton
    for net in (online, target):  # the encoders' kernels (lobsurf.models.kernels)
        use_kernels_(net, mode)
    return TrainState(
        online=online, target=target, optimizer=optimizer, kernels=kernels,
        controllers=ControllerState.bootstrap(device, {"per_beta": cfg.replay.beta_start}),
        replay=replay, env=env, noise_generator=noise_generator,
        acting_generator=acting_generator,
        metrics=MetricSums.zeros(device),
        step_count=torch.zeros((), dtype=torch.int64, device=device),
        tables=step_tables(cfg, env, device),
        labels=compute_labels(data.train_book, cfg.labels),
        # on CUDA the learner's two side streams at the highest priority: its chain is the
        # step's critical path (lobsurf.streams)
        branch=side_stream(cuda, device, high_priority=True),
        learner_branch=side_stream(cuda, device, high_priority=True),
        flat_target=flat_target)


def step_tables(cfg: RunConfig, env: BatchedLobEnv, device: torch.device | str) -> StepTables:
    """The step's device constants: order table, the side each action trades (the gates':
    a posted bid buys, a posted ask sells, Hold and the cancels trade no side), pi_ref, FRD
    bucket bounds, fee constants."""
    edges = torch.tensor(cfg.labels.bucket_edges_ticks, dtype=torch.float32, device=device)
    inf = torch.full((1,), float("inf"), device=device)
    return StepTables(
        order_lots=env.order_table,
        action_side=action_sides(cfg.sim, device),
        log_pi_ref=reference_log_probs(cfg.sim.num_actions, cfg.policy, device),
        bucket_lower=torch.cat((-inf, edges)), bucket_upper=torch.cat((edges, inf)),
        fee_per_lot=money_scalar(env.fee_model.per_lot, device),
        fee_per_value_tick=money_scalar(env.fee_model.per_value_tick, device),
        tick_value=money_scalar(env.tick_value, device),
        loss_seed=torch.ones((), dtype=torch.float32, device=device))


def action_sides(sim: SimConfig, device: torch.device | str) -> torch.Tensor:
    """[A] int64 the side each action trades: +1 a buy or a posted bid, -1 a sell or a posted
    ask, 0 Hold and the cancels."""
    lots = torch.tensor(sim.signed_order_lots, dtype=torch.int64)
    posts = torch.tensor(sim.post_lots, dtype=torch.int64)  # [A, 2] (bid, ask)
    side = lots.sign() + posts[:, 0].sign() - posts[:, 1].sign()
    return side.to(device)


def build_run_state(cfg: RunConfig, data: TrainingData, device: torch.device | str,
                    pretrained: dict[str, torch.Tensor] | None, rank: int, processes: int = 1
                    ) -> TrainState:
    """build_state, then the networks compiled where train.compile asks for it."""
    state = build_state(cfg, data, device, pretrained, rank)
    if compile_wanted(cfg.train, device, processes):
        compile_networks_(state, compile_config(device))
    return state
