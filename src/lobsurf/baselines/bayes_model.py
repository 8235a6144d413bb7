"""The known law of a synthetic store, reduced to what ``baseline:bayes``'s DP needs.

At a decision row c an agent sees the top-of-book imbalance I_c, the spread s_c (and its
position, and the steps to its episode's end). The observed state is x = (bin of I_c,
spread state), ``observed_state``. Its order fills at row c + L (L = latency rows); it
decides again at c + k (k = the stride). Per state the model holds, in half ticks (the
units of bid + ask, so one tick of the mid is 2):

* ``transition[x, x']`` = P(x_{c+k} = x' | x_c = x);
* ``drift[x]`` = E[mid(c+L+k) - mid(c+L) | x_c = x], the move a position held over the
  step earns per lot;
* ``buy_cost[x, q]``, ``sell_cost[x, q]`` = E[cost of walking q lots into the book at row
  c + L, relative to its mid | x_c = x] (the walk of ``lobsurf.sim.matching``: level by
  level, so depth is modelled where an order outgrows the top of book).

They are estimated from the generator's own processes (``synth_book.book_chunk``) with the
store's ``SynthConfig`` on sessions the store does not hold (day indices from
``cfg.days`` on, so the seeds are disjoint from every held row). Two parts use the law in
closed form, where Monte Carlo would only add noise:

* the drift is Rao-Blackwellised: the mid move at event t has expectation
  edge · I_{t-1} · (1{the spread changed by an odd number of ticks} + 2 · move_prob ·
  1{it did not change}) half ticks given the imbalance and spread paths, so the direction
  and shift draws are replaced by their expectations (exactly 0 when edge = 0);
* the transition factorises: the imbalance (latent AR(1) and depth) and the spread runs are
  independent processes of the law, so K = K_imbalance ⊗ K_spread, each estimated from
  every decision row.

A state the Monte Carlo never visits keeps its imbalance bin (identity transition), drifts
0 and pays the mean cost of its spread state. docs/ceilings.md states the approximations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import lru_cache

import numpy as np
import torch

from lobsurf.data.synth import SynthConfig
from lobsurf.data.synth.synth_book import BookStreams, book_chunk, initial_book

#: spread states: 1 tick, 2 ticks, 3 or more ticks
SPREAD_STATES = 3
#: random-stream id of the generator's book (``lobsurf.data.synth.synth.BOOK_STREAM``)
BOOK_STREAM = 0


def observed_state(bid_sz0: torch.Tensor, ask_sz0: torch.Tensor, spread_ticks: torch.Tensor,
                   bins: int) -> torch.Tensor:
    """[N] int64 state index bin(I) * SPREAD_STATES + spread state, from the top sizes and
    the spread (ticks); I = (bid - ask) / (bid + ask) in ``bins`` equal bins of [-1, 1]."""
    b, a = bid_sz0.double(), ask_sz0.double()
    imbalance = (b - a) / (b + a).clamp(min=1)
    imbalance_bin = ((imbalance + 1) / 2 * bins).floor().long().clamp(0, bins - 1)
    spread = (spread_ticks.long() - 1).clamp(0, SPREAD_STATES - 1)
    return imbalance_bin * SPREAD_STATES + spread


@dataclass(frozen=True)
class LawModel:
    """The law per observed state (module doc); X = bins x SPREAD_STATES states.

    Attributes:
        bins: imbalance bins.
        transition: [X, X] float64 rows sum to 1.
        drift: [X] float64 half ticks.
        buy_cost, sell_cost: [X, Q + 1] float64 half ticks x lots of q = 0..Q lots.
        visits: [X] int64 decision rows of the Monte Carlo in each state.
        rows: snapshots generated.
    """

    bins: int
    transition: np.ndarray
    drift: np.ndarray
    buy_cost: np.ndarray
    sell_cost: np.ndarray
    visits: np.ndarray
    rows: int


def law_of(recorded: dict) -> SynthConfig:
    """The SynthConfig of a store's generator record; keys this version does not know (a
    newer generator's order-flow processes that leave the book as it is) are ignored."""
    known = {f.name for f in fields(SynthConfig)}
    return SynthConfig(**{k: v for k, v in recorded.items() if k in known})


def _walk_costs(px: np.ndarray, sz: np.ndarray, mid2: np.ndarray, max_lots: int,
                sign: int) -> np.ndarray:
    """[n, Q + 1] half ticks x lots of walking q lots best level first (buys: sign +1 on
    the asks, sells: -1 on the bids), relative to the mid: sum over levels of the lots taken
    there times sign (2 px - mid2). Written as q (level 0's price) plus, per deeper level,
    its step in price times the lots that reach it, max(0, q - depth above it): only rows
    whose levels above hold fewer than Q lots need the level (the visible depth covers Q)."""
    lots = np.arange(max_lots + 1)
    relative = sign * (2 * px - mid2[:, None])
    out = lots[None, :] * relative[:, :1].astype(np.float64)
    depth = sz[:, 0].astype(np.int64)
    for level in range(1, px.shape[1]):
        rows = np.flatnonzero(depth < max_lots)
        if len(rows) == 0:
            break
        step = relative[rows, level] - relative[rows, level - 1]
        out[rows] += step[:, None] * np.maximum(lots[None, :] - depth[rows, None], 0)
        depth[rows] += sz[rows, level]
    return out


def _session(law: SynthConfig, day: int, rows: int, max_lots: int, pad_lots: int):
    """One generated session: per row the top sizes, the spread (ticks), the drift summand
    e_t (half ticks) and the walk costs (half ticks x lots)."""
    streams = BookStreams.spawn(np.random.SeedSequence([law.seed, day, BOOK_STREAM]))
    carry = initial_book(streams, law)
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("bid0", "ask0", "spread", "e", "buy",
                                                          "sell")}
    done = 0
    while done < rows:
        n = min(law.chunk_rows, rows - done)
        before_imbalance, before_spread = carry.imbalance, carry.spread.value
        book, _, carry = book_chunk(streams, law, carry, n)
        tick = law.tick_size_fixed
        bid, ask = book["bid_px"] // tick, book["ask_px"] // tick
        bid0, ask0 = book["bid_sz"][:, 0], book["ask_sz"][:, 0]
        imb = (bid0 - ask0) / (bid0 + ask0)
        spread = ask[:, 0] - bid[:, 0]
        change = np.diff(spread, prepend=before_spread)
        weight = (change % 2 != 0) + 2 * law.move_prob * (change == 0)
        imb_before = np.concatenate([[before_imbalance], imb[:-1]])
        mid2 = bid[:, 0] + ask[:, 0]
        # the forced close's padding of the deepest level (lobsurf.sim.env)
        ask_sz, bid_sz = book["ask_sz"].copy(), book["bid_sz"].copy()
        ask_sz[:, -1] += pad_lots
        bid_sz[:, -1] += pad_lots
        parts["bid0"].append(bid0)
        parts["ask0"].append(ask0)
        parts["spread"].append(spread)
        parts["e"].append(law.edge * imb_before * weight)
        parts["buy"].append(_walk_costs(ask, ask_sz, mid2, max_lots, +1))
        parts["sell"].append(_walk_costs(bid, bid_sz, mid2, max_lots, -1))
        done += n
    return {k: np.concatenate(v) for k, v in parts.items()}


def _normalised(counts: np.ndarray) -> np.ndarray:
    total = counts.sum(1, keepdims=True)
    return np.where(total > 0, counts / np.maximum(total, 1), np.eye(len(counts)))


@lru_cache(maxsize=4)
def law_model(law: SynthConfig, stride: int, latency: int, bins: int, mc_rows: int,
              max_lots: int, pad_lots: int) -> LawModel:
    """Estimate the model of the module doc from about ``mc_rows`` generated snapshots
    (whole sessions of ``law.snapshots_per_day``; cached per process)."""
    n_states = bins * SPREAD_STATES
    imb_counts = np.zeros((bins, bins))
    spread_counts = np.zeros((SPREAD_STATES, SPREAD_STATES))
    visits = np.zeros(n_states)
    drift = np.zeros(n_states)
    buy = np.zeros((n_states, max_lots + 1))
    sell = np.zeros((n_states, max_lots + 1))
    sessions = max(1, math.ceil(mc_rows / law.snapshots_per_day))
    for j in range(sessions):
        s = _session(law, law.days + j, law.snapshots_per_day, max_lots, pad_lots)
        x = observed_state(*(torch.from_numpy(s[k]) for k in ("bid0", "ask0", "spread")),
                           bins).numpy()
        decisions = len(x) - latency - stride  # c + L + k is the session's last row at most
        if decisions <= 0:
            continue
        c = np.arange(decisions)
        summed = np.concatenate([[0.0], np.cumsum(s["e"])])
        step_drift = summed[c + latency + stride + 1] - summed[c + latency + 1]
        xc, xn = x[c], x[c + stride]
        imb_counts += np.bincount(xc // SPREAD_STATES * bins + xn // SPREAD_STATES,
                                  minlength=bins * bins).reshape(bins, bins)
        spread_counts += np.bincount(xc % SPREAD_STATES * SPREAD_STATES + xn % SPREAD_STATES,
                                     minlength=SPREAD_STATES ** 2).reshape(SPREAD_STATES, -1)
        visits += np.bincount(xc, minlength=n_states)
        drift += np.bincount(xc, weights=step_drift, minlength=n_states)
        for q in range(1, max_lots + 1):
            buy[:, q] += np.bincount(xc, weights=s["buy"][c + latency, q], minlength=n_states)
            sell[:, q] += np.bincount(xc, weights=s["sell"][c + latency, q], minlength=n_states)
    seen = visits > 0
    drift = np.where(seen, drift / np.maximum(visits, 1), 0.0)
    buy, sell = (_fill_unseen(cost, visits) for cost in (buy, sell))
    transition = np.kron(_normalised(imb_counts), _normalised(spread_counts))
    return LawModel(bins=bins, transition=transition, drift=drift, buy_cost=buy,
                    sell_cost=sell, visits=visits.astype(np.int64),
                    rows=sessions * law.snapshots_per_day)


def _fill_unseen(cost_sum: np.ndarray, visits: np.ndarray) -> np.ndarray:
    # mean cost per state; an unseen state pays the mean of its spread state (else of all)
    per_state = cost_sum / np.maximum(visits, 1)[:, None]
    spread_of = np.arange(len(visits)) % SPREAD_STATES
    pooled_all = cost_sum.sum(0) / max(visits.sum(), 1)
    for s in range(SPREAD_STATES):
        mine = spread_of == s
        n = visits[mine].sum()
        pooled = cost_sum[mine].sum(0) / n if n else pooled_all
        per_state[mine & (visits == 0)] = pooled
    return per_state
