"""Kernel launchers: one module per `cuda/<stem>.cu`; the only place that drives PyCUDA."""
