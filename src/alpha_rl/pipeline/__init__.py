"""The training pipeline: the step of DESIGN §9 (`trainer`) and the job around it (`run`: log
points, held-out evaluation, audit, checkpoints, tracking)."""
