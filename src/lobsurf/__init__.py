"""lobsurf: GPU deep reinforcement learning for trading from limit-order-book data."""

__version__ = "0.1.0"
