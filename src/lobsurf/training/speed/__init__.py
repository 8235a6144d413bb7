"""The step made fast: the learning step captured as one CUDA graph, and the networks and
step kernels compiled by Inductor (``train.cuda_graph``, ``train.compile``)."""
