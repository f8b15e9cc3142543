"""A variant study run in stages of seeds until each treatment is decided (alpha-rl-study)."""
