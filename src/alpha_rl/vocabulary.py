"""The names of what a run records, in one place: the metric keys (MLflow's) that the trainer,
the evaluation and the probe write, and that the progress line, the summary, curves.png, the
tracking view, the kill check and a search's confirmation read, each importing it from here.
It imports nothing: every layer may use it."""

L_Q = "loss/l_q"  # the TD loss over the training batch
L_Q_REAL = "loss/l_q_real"  # ... over the batch's real rows (NaN: none)
GRAD_NORM = "loss/grad_norm"
PROBE = "eval/l_q_probe"  # the TD loss on the fixed held-out probe batch
PNL = "eval/pnl"  # held-out PnL of an evaluation, summed over its envs and steps
SHARPE = "eval/sharpe"
SHARPE_INTERVALS = "eval/sharpe_intervals"  # the intervals the held-out Sharpe is over
CAPTURE = "eval/capture_ratio"  # held-out realised / available move
TRADES = "eval/trades"
TRAIN_CAPTURE = "trade/capture_ratio"  # the training envs' (exploring) capture

HELD_OUT = (PNL, SHARPE, CAPTURE)  # the held-out figures of an evaluation
DECIDING = (L_Q, PROBE, PNL, SHARPE, CAPTURE)  # the runs view's columns, the kill check's inputs
