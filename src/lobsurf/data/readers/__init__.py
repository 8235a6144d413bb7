"""Market-data codecs: the DBN reader and writer, the MBO book builder, the LOBSTER reader.

Each module turns one external format into (or, for ``dbn_encode``, out of) the store's
``SnapshotChunk`` rows; none of them writes a store.
"""
