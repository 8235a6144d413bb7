"""The text output of ``lobsurf eval``: one row per metric, one column per policy
(docs/metrics.md defines the metrics; ``--json`` prints the same values)."""

from __future__ import annotations

#: metrics shown as fractions (three decimals) rather than money
FRACTIONS = ("win_rate", "hold_fraction", "turnover", "sharpe_per_trade", "sharpe_per_day",
             "capture", "capture_bayes", "capture_passive", "maker_share", "fill_rate")


def cell(key: str, value) -> str:
    """One metric's value as the table shows it ("-": undefined)."""
    if value is None:
        return "-"
    if isinstance(value, list):
        return f"{value[0]:,.2f}..{value[1]:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    if key in FRACTIONS:
        return f"{value:.3f}"
    return f"{value:,.2f}"


def print_table(result: dict) -> None:
    """What was swept, then one row per metric, one column per policy, then what the
    ceilings do not cover (``settings.ceiling_note``, with passive orders)."""
    names = list(result["policies"])
    split, settings = result["split"], result["settings"]
    if split["mode"] == "random":
        print(f"{settings['store']}: random cursors, {settings['num_envs']} envs x "
              f"{settings['steps_per_env']} steps = {settings['steps']:,} steps")
    else:
        where = (f", cut at row {split['cut_row']:,} (train fraction {split['train_fraction']:g})"
                 if split["mode"] == "heldout" else "")
        stride = settings["sim"]["stride"]
        per = "one per row" if stride == 1 else f"one every {stride} rows"
        passive = ", passive orders on" if settings["sim"].get("passive_orders") else ""
        print(f"{settings['store']}: {split['mode']} sweep of {split['rows']:,} rows in "
              f"{split['ranges']} range(s){where}: {settings['steps']:,} steps ({per}) "
              f"on {settings['num_envs']} envs, up to {settings['steps_per_env']:,} each"
              f"{passive}")
    metrics = list(next(iter(result["policies"].values())))
    cells = {(k, n): cell(k, result["policies"][n][k]) for k in metrics for n in names}
    width = max(len(c) for c in [*cells.values(), *names]) + 2
    print(f"{'':<20}" + "".join(f"{n:>{width}}" for n in names))
    for key in metrics:
        print(f"{key:<20}" + "".join(f"{cells[key, n]:>{width}}" for n in names))
    if settings.get("ceiling_note"):
        print(f"note: {settings['ceiling_note']}")
