"""The snapshot store (``store``), the ingest pipeline that fills it (``ingest``) and what a
store says about itself (``summary``).

The store's public names are re-exported here, so ``from lobsurf.data.store import Store``
keeps working. ``ingest`` is not imported here: it imports the readers, which import this
package.
"""

from lobsurf.data.store.store import (
    MANIFEST,
    STORE_FORMAT,
    STORE_VERSION,
    Instrument,
    Manifest,
    Segment,
    Store,
    StoreError,
    StoreWriter,
)

__all__ = [
    "MANIFEST", "STORE_FORMAT", "STORE_VERSION", "Instrument", "Manifest", "Segment",
    "Store", "StoreError", "StoreWriter",
]
