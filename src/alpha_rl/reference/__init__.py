"""NumPy oracles: one module per `cuda/<stem>.cu`, same kernel names and argument order."""
