"""The kill-criteria check (DESIGN §11, docs/verdicts.md): treatment runs paired with their
baselines along one variant axis and judged per treatment on the seed plan's five criteria
(criterion 5 on comparable data), with learning speed, areas and held-out aggregates reported
(`alpha-rl-kill-check`)."""
