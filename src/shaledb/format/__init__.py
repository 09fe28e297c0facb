"""Pure codecs for every persisted format: bytes in, bytes out, no I/O.

Nothing here imports the engine; decoders treat input as untrusted and raise
``CorruptionError`` on any damage.
"""
