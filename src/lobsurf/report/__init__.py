"""``lobsurf report RUN``: a self-contained HTML page of a training run (``build_report``)."""
