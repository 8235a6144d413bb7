"""Supervised pretraining of the encoder and auxiliary heads on book labels."""
