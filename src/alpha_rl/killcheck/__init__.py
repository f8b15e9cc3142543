"""The kill-criteria check (DESIGN §11): HER runs paired with their baselines and judged on the
seed plan's five criteria, with the promised speed-up reported (`alpha-rl-kill-check`)."""
