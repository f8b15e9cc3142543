"""A run's life around the step: the job, its owner and identity, checkpoints, stop signals,
the saver, its records and labels, and `run`, which drives it all."""
