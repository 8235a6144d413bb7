"""lobsurf: GPU deep reinforcement learning for trading from limit-order-book data.

From Python: ``lobsurf.ingest``, ``lobsurf.train`` and ``lobsurf.evaluate`` (lobsurf.api),
imported on first use, so that ``import lobsurf`` (and ``lobsurf --help``) stays light.
"""

__version__ = "0.1.0"

#: the names of lobsurf.api offered here
_API = ("ingest", "train", "evaluate", "Run")


def __getattr__(name: str):
    if name in _API:
        from lobsurf import api

        return getattr(api, name)
    raise AttributeError(f"module 'lobsurf' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
