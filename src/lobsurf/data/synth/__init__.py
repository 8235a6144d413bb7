"""The seeded synthetic MBP-10 market: its parameters (``config``), the generator and its
files (``synth``), the book model (``synth_book``) and its vectorised processes
(``synth_processes``).

The generator's public names are re-exported here, so ``from lobsurf.data.synth import
SynthConfig`` keeps working.
"""

from lobsurf.data.synth.synth import (
    SynthConfig,
    day_file_name,
    generate_day,
    generate_day_with_events,
    generate_day_with_trades,
    mid_ticks,
    session_date,
    session_open_ns,
    session_range_ns,
    synth_ingest_config,
    synth_instrument,
    top_imbalance,
    write_synth,
    write_synth_store,
)

__all__ = [
    "SynthConfig", "day_file_name", "generate_day", "generate_day_with_events",
    "generate_day_with_trades", "mid_ticks",
    "session_date", "session_open_ns", "session_range_ns", "synth_ingest_config",
    "synth_instrument",
    "top_imbalance", "write_synth", "write_synth_store",
]
