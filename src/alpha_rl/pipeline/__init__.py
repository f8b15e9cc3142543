"""The training pipeline, in five rooms, each importing only from the rooms before it:

- `report`: what a run and a sweep print and plot (the summary, the curves, the progress line,
  the sweep's last lines);
- `configure`: a run's config made a plan (the validated keys, the parts that own ISV slots, the
  scale, the memory check, the search objective);
- `step`: the step of DESIGN §9 (`trainer`, its `stages` as data) and the agents that step
  together (`lockstep`, `pack`), with the pack's helper pools (`workers`);
- `evaluation`: the held-out evaluation (`evaluate`, `probe`) and its money (`ledger`,
  `tearsheet`);
- `life`: a run's life around the step (`run`: log points, evaluations, audits, checkpoints,
  tracking; its owner, identity, checkpoints, stop signals and records).
"""
