"""Neural models: the sequence encoders (Mamba2 with a chunked SSD scan, CfC) and their parts.

The public entry point is ``lobsurf.models.encoder`` (Encoder, EncoderConfig, EncoderOutput).
The modules here are PyTorch (the CPU path and the reference); ``lobsurf.models.kernels``
holds the Triton kernels that replace parts of them on CUDA.
"""
