"""Measurements of the real training step (``lobsurf bench``): timing, phases, graphs."""
