"""CleanRL-style PPO on lobsurf's Gymnasium VectorEnv (an example, not a CI dependency).

    python examples/train_cleanrl_ppo.py                      # in-memory random-walk book
    python examples/train_cleanrl_ppo.py --store store/ --total-steps 20000

A small MLP reads the flattened K-window and agent state; rollouts of ``num_steps`` per
env, GAE, clipped surrogate, value loss and entropy bonus, as in CleanRL's ppo.py.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from lobsurf.envs import make_vec_env
from lobsurf.sim.books import random_walk_book


@dataclass(frozen=True)
class Args:
    total_steps: int = 8192  # env steps over all envs
    num_envs: int = 16
    num_steps: int = 64  # rollout length per env
    window: int = 16  # K snapshots per observation
    lr: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    epochs: int = 4
    minibatches: int = 4
    clip: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    reward_scale: float = 0.01  # currency -> reward units
    seed: int = 0


def features(obs: dict[str, np.ndarray]) -> torch.Tensor:
    book = torch.as_tensor(obs["book"])
    prices, sizes = book[..., :20] / 10.0, torch.log1p(book[..., 20:])
    agent = torch.as_tensor(obs["agent"]) * torch.tensor([0.1, 0.01, 0.01])
    return torch.cat((prices.flatten(1), sizes.flatten(1), agent), 1)


class Agent(nn.Module):
    def __init__(self, n_in: int, n_actions: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_in, 128), nn.Tanh(), nn.Linear(128, 128), nn.Tanh())
        self.pi, self.v = nn.Linear(128, n_actions), nn.Linear(128, 1)

    def forward(self, x: torch.Tensor):
        h = self.body(x)
        return torch.distributions.Categorical(logits=self.pi(h)), self.v(h).squeeze(-1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", default=None)
    p.add_argument("--total-steps", type=int, default=Args.total_steps)
    a = p.parse_args()
    args = Args(total_steps=a.total_steps)
    torch.manual_seed(args.seed)
    source = a.store or random_walk_book(50_000, 2, seed=args.seed)
    envs = make_vec_env(source, args.num_envs, window=args.window, fee_per_lot=0.5, seed=args.seed)
    obs, _ = envs.reset(seed=args.seed)
    x = features(obs)
    agent = Agent(x.shape[1], envs.single_action_space.n)
    opt = torch.optim.Adam(agent.parameters(), lr=args.lr)
    T, B = args.num_steps, args.num_envs
    for update in range(args.total_steps // (T * B)):
        # ---- collect
        xs, acts, logps, vals, rews, dones = [], [], [], [], [], []
        pnl = 0.0
        for _ in range(T):
            with torch.no_grad():
                dist, v = agent(x)
                act = dist.sample()
            obs, r, term, trunc, info = envs.step(act.numpy())
            xs.append(x), acts.append(act), logps.append(dist.log_prob(act)), vals.append(v)
            rews.append(torch.as_tensor(r, dtype=torch.float32) * args.reward_scale)
            dones.append(torch.as_tensor(term | trunc, dtype=torch.float32))
            pnl += float(r.sum())
            x = features(obs)
        # ---- advantages (GAE; SAME_STEP autoreset: done cuts the bootstrap)
        with torch.no_grad():
            next_v = agent(x)[1]
        adv, last = torch.zeros(T, B), torch.zeros(B)
        for t in reversed(range(T)):
            nv = next_v if t == T - 1 else vals[t + 1]
            delta = rews[t] + args.gamma * nv * (1 - dones[t]) - vals[t]
            last = delta + args.gamma * args.gae_lambda * (1 - dones[t]) * last
            adv[t] = last
        ret = adv + torch.stack(vals)
        bx, ba, blp = torch.cat(xs), torch.cat(acts), torch.cat(logps)
        badv, bret = adv.flatten(), ret.flatten()
        # ---- learn
        for _ in range(args.epochs):
            for mb in torch.randperm(T * B).chunk(args.minibatches):
                dist, v = agent(bx[mb])
                ratio = (dist.log_prob(ba[mb]) - blp[mb]).exp()
                a_mb = (badv[mb] - badv[mb].mean()) / (badv[mb].std() + 1e-8)
                pg = torch.max(-a_mb * ratio, -a_mb * ratio.clamp(1 - args.clip, 1 + args.clip)).mean()
                v_loss = ((v - bret[mb]) ** 2).mean()
                loss = pg + args.vf_coef * v_loss - args.ent_coef * dist.entropy().mean()
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                opt.step()
        hold = float((ba == 0).float().mean())
        print(f"update {update}: rollout PnL {pnl:10.2f}  hold {hold:.2f}  loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
