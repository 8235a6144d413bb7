"""Validation during training and the model choice it feeds: which policy a run trades
(RUN/chosen.pt, RUN/chosen.json)."""
