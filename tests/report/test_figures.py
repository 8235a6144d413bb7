"""The report's small pieces: the busiest window of fills, action labels, table cells."""

from __future__ import annotations

import numpy as np

from lobsurf.report.figures import action_labels, busiest_window
from lobsurf.report.page import fmt, metrics_table


def test_busiest_window_finds_the_most_fills():
    filled = np.zeros(100, np.int64)
    filled[[60, 62, 65, 69]] = [1, -2, 1, -1]
    filled[5] = 3
    assert busiest_window(filled, 10) == 60
    assert busiest_window(filled[:8], 10) == 0  # shorter than the window: all of it


def test_action_labels_follow_the_simulator():
    assert action_labels((1, 3)) == ["hold", "buy 1", "buy 3", "sell 1", "sell 3"]


def test_cells_and_table():
    assert fmt("net_pnl", None) == "-" and fmt("trades", 1234) == "1,234"
    assert fmt("capture", 0.12345) == "0.123" and fmt("net_pnl", -1.5) == "-1.50"
    assert fmt("pnl_per_trade_ci", [1.0, 2.5]) == "1.00 .. 2.50"
    table = metrics_table({"hold": {"net_pnl": 0.0}, "agent": {"net_pnl": 2.0, "extra": 1}})
    assert '<th class="agent">agent</th>' in table and "<td>extra</td>" in table


def test_action_labels_with_passive_orders_name_the_posts_and_cancels():
    labels = action_labels((1, 3), passive_orders=True)
    assert labels[5:] == ["post bid 1", "post bid 3", "post ask 1", "post ask 3", "cancel bid",
                          "cancel ask"]


def test_the_resting_orders_metrics_follow_the_fees_where_a_policy_has_them():
    table = metrics_table({"hold": {"net_pnl": 0.0, "fees": 0.0, "trades": 0},
                           "agent": {"net_pnl": 2.0, "fees": 1.0, "maker_share": 0.25,
                                     "maker_fees": -0.5, "trades": 3}})
    rows = [r.split("</td>")[0] for r in table.split("<tr><td>")[1:]]
    assert rows[:4] == ["net_pnl", "fees", "maker_share", "maker_fees"]
    assert "<td>0.250</td>" not in table and '<td class="agent">0.250</td>' in table
    assert '<td class="">-</td>' in table  # hold has no maker share
