"""A batch of transitions as the replay stores them, and its packing by dtype.

``Transitions`` holds what rebuilds a transition (dataset rows, the agent's own state at
both ends, action, reward, done, trade_closed, the outcome labels), every field [B]; with
passive orders the agent's state at both ends includes its resting orders (lots, queue
fraction and age a side: lobsurf.agent.orders), twelve fields that are None otherwise. The
replay keeps the fields packed (``packing``: one [C, k] tensor per dtype, a field a
column), so a write or a gather of every field is one kernel per dtype
(lobsurf.agent.replay). Without passive orders the layout is ``PACKING``, column for
column as before resting orders existed; with them, ``PASSIVE_PACKING`` appends their
columns to the int64 and float32 packs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from lobsurf.agent.orders import RestingOrders


@dataclass
class Transitions:
    """A batch of transitions, every field [B] (the resting orders' None without them)."""

    row: torch.Tensor  # int64 dataset row of the state's newest snapshot
    position: torch.Tensor  # int64 lots
    time_in_trade: torch.Tensor  # int64 steps
    unrealized_pnl: torch.Tensor  # float64 currency
    action: torch.Tensor  # int64
    reward: torch.Tensor  # float32 reward units (scaled, clamped)
    done: torch.Tensor  # bool: the episode ended (terminal: no bootstrap)
    trade_closed: torch.Tensor  # bool: a trade closed (V's done-gate, outcome labels)
    next_row: torch.Tensor
    next_position: torch.Tensor
    next_time_in_trade: torch.Tensor
    next_unrealized_pnl: torch.Tensor
    outcome_valid: torch.Tensor  # bool: the trade this action opened has closed since
    outcome_win: torch.Tensor  # bool: ... with net PnL > 0
    # the resting orders at s, then at s' (passive orders only; lobsurf.agent.orders)
    bid_lots: torch.Tensor | None = None  # int64 lots resting (0: none)
    ask_lots: torch.Tensor | None = None
    bid_queue: torch.Tensor | None = None  # float32 queue ahead / size at its price
    ask_queue: torch.Tensor | None = None
    bid_age: torch.Tensor | None = None  # int64 steps rested
    ask_age: torch.Tensor | None = None
    next_bid_lots: torch.Tensor | None = None
    next_ask_lots: torch.Tensor | None = None
    next_bid_queue: torch.Tensor | None = None
    next_ask_queue: torch.Tensor | None = None
    next_bid_age: torch.Tensor | None = None
    next_ask_age: torch.Tensor | None = None

    @property
    def has_orders(self) -> bool:
        """Whether the batch holds the resting orders (passive orders on)."""
        return self.bid_lots is not None

    def stored(self) -> dict[str, torch.Tensor]:
        """The fields it holds by name, in field order (the resting orders' only with them)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}


#: the resting orders' fields of one state, in RestingOrders' order (lots, queue, age; bid
#: then ask); the next state's carry the prefix "next_"
ORDER_FIELDS = ("bid_lots", "ask_lots", "bid_queue", "ask_queue", "bid_age", "ask_age")
_DTYPES = {"unrealized_pnl": torch.float64, "next_unrealized_pnl": torch.float64,
           "reward": torch.float32, "done": torch.bool, "trade_closed": torch.bool,
           "outcome_valid": torch.bool, "outcome_win": torch.bool,
           **{f"{p}{s}_queue": torch.float32 for p in ("", "next_") for s in ("bid", "ask")}}
#: the fields the outcome labels write, in this order (the last two of the bool pack)
OUTCOME_FIELDS = ("outcome_valid", "outcome_win")
_ALL_ORDER_FIELDS = ORDER_FIELDS + tuple(f"next_{name}" for name in ORDER_FIELDS)

Packing = tuple[tuple[torch.dtype, tuple[str, ...]], ...]


def _packing(passive_orders: bool) -> Packing:
    groups: dict[torch.dtype, list[str]] = {}
    for f in fields(Transitions):
        if f.name in _ALL_ORDER_FIELDS and not passive_orders:
            continue
        groups.setdefault(_DTYPES.get(f.name, torch.int64), []).append(f.name)
    packing = tuple((dtype, tuple(names)) for dtype, names in groups.items())
    assert dict(packing)[torch.bool][-2:] == OUTCOME_FIELDS
    return packing


#: the storage layout: the fields packed by dtype (field order), one [C, k] tensor per dtype
#: and a field a column, so a write or a gather of every field is one kernel per dtype (four)
#: rather than one per field (fourteen)
PACKING = _packing(False)
#: the layout with passive orders: PACKING's columns, then the resting orders' (int64 and
#: float32 packs)
PASSIVE_PACKING = _packing(True)


def packing(passive_orders: bool) -> Packing:
    """The storage layout of a run with or without passive orders."""
    return PASSIVE_PACKING if passive_orders else PACKING


def packing_of(packs: tuple[torch.Tensor, ...]) -> Packing:
    """The layout of packed storage, told by its int64 pack's width (static: a shape)."""
    passive_width = len(PASSIVE_PACKING[0][1])
    return PASSIVE_PACKING if packs[0].shape[-1] == passive_width else PACKING


def field_names(layout: Packing) -> tuple[str, ...]:
    """The fields a layout stores, in Transitions' order."""
    stored = {name for _, names in layout for name in names}
    return tuple(f.name for f in fields(Transitions) if f.name in stored)


def pack(batch: Transitions) -> tuple[torch.Tensor, ...]:
    """[B] fields -> one [B, k] tensor per group of the batch's layout."""
    return tuple(torch.stack([getattr(batch, name) for name in names], 1)
                 for _, names in packing(batch.has_orders))


def unpack(packs: tuple[torch.Tensor, ...]) -> Transitions:
    """One [N, k] tensor per group -> Transitions of its [N] columns (views)."""
    return Transitions(**{name: packed[:, j] for packed, (_, names)
                          in zip(packs, packing_of(packs)) for j, name in enumerate(names)})


def order_fields(orders: RestingOrders | None, prefix: str = "") -> dict[str, torch.Tensor]:
    """Transitions' fields of ``orders`` (prefix "next_" for s'); none without them."""
    if orders is None:
        return {}
    columns = [x[:, side] for x in orders for side in (0, 1)]
    return {prefix + name: column for name, column in zip(ORDER_FIELDS, columns)}


def stored_orders(t: Transitions, prefix: str = "", index: torch.Tensor | None = None
                  ) -> RestingOrders | None:
    """The resting orders of s (prefix "") or s' ("next_") in ``t``, at ``index`` when given
    (storage indices); None without passive orders."""
    if not t.has_orders:
        return None

    def side_pair(what: str) -> torch.Tensor:
        pair = [getattr(t, f"{prefix}{side}_{what}") for side in ("bid", "ask")]
        return torch.stack([x if index is None else x[index] for x in pair], 1)

    return RestingOrders(lots=side_pair("lots"), queue_fraction=side_pair("queue"),
                         age=side_pair("age"))
