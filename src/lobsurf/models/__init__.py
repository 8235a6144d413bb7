"""Neural models: the sequence encoders (Mamba2 with a chunked SSD scan, CfC) and their parts.

The public entry point is ``lobsurf.models.encoder`` (Encoder, EncoderConfig, EncoderOutput).
"""
