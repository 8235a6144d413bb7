"""The report's HTML: one self-contained page (figures embedded as base64 PNG, inline CSS,
no script, no network), so it opens offline and from a copied folder.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

#: metrics of the held-out table, in order (docs/metrics.md); others follow
TABLE_METRICS = ("net_pnl", "capture", "capture_bayes", "gross_pnl", "fees", "trades", "win_rate",
                 "pnl_per_trade", "pnl_per_trade_ci", "sharpe_per_trade", "sharpe_per_day",
                 "max_drawdown", "hold_fraction", "turnover", "avg_holding_steps",
                 "unfilled_lots", "steps", "days")
#: metrics shown as shares with three decimals
RATIO_METRICS = ("capture", "capture_bayes", "win_rate", "hold_fraction", "turnover",
                 "sharpe_per_trade", "sharpe_per_day")

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; }
table { border-collapse: collapse; font-size: .85em; margin: .5em 0 1em; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: right; white-space: nowrap; }
td.text { white-space: normal; text-align: left; }
th:first-child, td:first-child { text-align: left; }
thead th { background: #f3f3f3; } td.agent, th.agent { background: #fff8dc; }
img { max-width: 100%; border: 1px solid #eee; margin: .4em 0; }
pre { background: #f7f7f7; padding: .8em; font-size: .8em; overflow-x: auto; }
.note { color: #8a5a00; } .caption { color: #555; font-size: .9em; }
"""


def fmt(key: str, value: Any) -> str:
    """One table cell (None → '-', intervals as lo .. hi)."""
    if value is None:
        return "-"
    if isinstance(value, list):
        return " .. ".join(fmt(key, v) for v in value)
    if isinstance(value, (bool, str)):
        return html.escape(str(value))
    if isinstance(value, int):
        return f"{value:,}"
    if key in RATIO_METRICS:
        return f"{value:.3f}"
    return f"{value:,.2f}"


def image(path: Path, alt: str, caption: str = "") -> str:
    """An <img> with the PNG embedded (data URI) and an optional caption."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    cap = f'<p class="caption">{html.escape(caption)}</p>' if caption else ""
    return (f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}" '
            f'data-file="{html.escape(path.name)}">{cap}')


def metrics_table(policies: dict[str, dict[str, Any]], table_id: str = "heldout-metrics") -> str:
    """Metrics as rows, policies as columns (the agent's column highlighted)."""
    names = list(policies)
    keys = [k for k in TABLE_METRICS if any(k in policies[n] for n in names)]
    keys += list(dict.fromkeys(k for n in names for k in policies[n] if k not in keys))
    head = "".join(f'<th class="{"agent" if n == "agent" else ""}">{html.escape(n)}</th>'
                   for n in names)
    body = "".join(
        f"<tr><td>{html.escape(k)}</td>" + "".join(
            f'<td class="{"agent" if n == "agent" else ""}">{fmt(k, policies[n].get(k))}</td>'
            for n in names) + "</tr>" for k in keys)
    return (f'<table id="{table_id}"><thead><tr><th>metric</th>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>")


def key_value_table(items: dict[str, Any], table_id: str) -> str:
    rows = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{fmt(k, v)}</td></tr>"
                   for k, v in items.items() if not isinstance(v, dict))
    return f'<table id="{table_id}"><tbody>{rows}</tbody></table>'


#: metrics of the walk-forward table (spread over folds)
SPREAD_METRICS = ("net_pnl", "capture", "trades", "win_rate", "pnl_per_trade",
                  "sharpe_per_trade", "max_drawdown", "hold_fraction")


def spread_table(spread: dict[str, dict[str, dict[str, float | None]]]) -> str:
    """Walk-forward spread: metrics as rows, policies as columns, each cell
    'mean ± sd' over 'min .. max' across folds."""
    names = list(spread)
    head = "".join(f'<th class="{"agent" if n == "agent" else ""}">{html.escape(n)}</th>'
                   for n in names)
    rows = []
    for key in SPREAD_METRICS:
        if not any(key in spread[n] for n in names):
            continue
        cells = []
        for n in names:
            s = spread[n].get(key) or {}
            cell = (f"{fmt(key, s.get('mean'))} ± {fmt(key, s.get('sd'))}<br>"
                    f"<small>{fmt(key, s.get('min'))} .. {fmt(key, s.get('max'))}</small>")
            cells.append(f'<td class="{"agent" if n == "agent" else ""}">{cell}</td>')
        rows.append(f"<tr><td>{html.escape(key)}</td>{''.join(cells)}</tr>")
    return (f'<table id="walk-forward-spread"><thead><tr><th>metric</th>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


def section(title: str, *parts: str) -> str:
    return f"<section><h2>{html.escape(title)}</h2>{''.join(parts)}</section>"


def paragraph(text: str, cls: str = "") -> str:
    klass = f' class="{cls}"' if cls else ""
    return f"<p{klass}>{html.escape(text)}</p>"


def page(title: str, sections: list[str]) -> str:
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>"
            f"<h1>{html.escape(title)}</h1>{''.join(sections)}</body></html>\n")
