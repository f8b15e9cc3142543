"""Building cubins with nvcc: the source plan, the manifest, freshness, the contract check."""
