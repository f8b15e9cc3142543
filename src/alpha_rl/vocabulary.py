"""The names of what a run records, in one place: the metric keys (MLflow's) that the trainer,
the evaluation and the probe write, and that the progress line, the summary, curves.png, the
tracking view, the kill check and a search's confirmation read, each importing it from here.
It imports nothing: every layer may use it."""

L_Q = "loss/l_q"  # the TD loss over the training batch
L_Q_REAL = "loss/l_q_real"  # ... over the batch's real rows (NaN: none)
GRAD_NORM = "loss/grad_norm"
PROBE = "eval/l_q_probe"  # the TD loss on the fixed held-out probe batch
PNL = "eval/pnl"  # held-out PnL of an evaluation net of spread and fees, over its envs and steps
PNL_GROSS = "eval/pnl_gross"  # ... mid to mid, before costs (pipeline/evaluation/ledger.py: UNITS)
SHARPE = "eval/sharpe"
SHARPE_INTERVALS = "eval/sharpe_intervals"  # the intervals the held-out Sharpe is over
CAPTURE = "eval/capture_ratio"  # held-out realised / available move
TRADES = "eval/trades"
TRAIN_CAPTURE = "trade/capture_ratio"  # the training envs' (exploring) capture
L_Q_SYNTHETIC = "loss/l_q_synthetic"  # the TD loss over the batch's synthetic (HER) rows
L_AUX = "loss/l_aux"
EPSILON = "agent/epsilon"
TRAIN_PNL = "trade/pnl"  # the training envs' realised PnL in a log interval
TRAIN_TRADES = "trade/count"  # ... and the trades they closed in it
REPLAY_BETA = "replay/beta"
REPLAY_SIZE = "replay/size"
REPLAY_SYNTHETIC = "replay/synthetic_frac"  # synthetic share of the buffer
BATCH_SYNTHETIC = "replay/batch_synthetic_frac"  # ... of the last batch
AUX_ACCURACY = "aux/accuracy"
W_AUX_ALIGN = "reward/w_aux_align"  # w_6 as the β controller left it
AUX_SHARE = "reward/aux_share"  # c6's share of the reward magnitude (the controller's input)
PNL_SKEW = "eval/pnl_skew"  # of the held-out per-interval PnL (a search's Deflated Sharpe)
PNL_KURTOSIS = "eval/pnl_kurtosis"
# HER's totals so far (the trainer's hindsight block, each key under her/)
HER_INJECT_TOTAL = "her/inject_total"
HER_BACKWARD_TOTAL = "her/backward_total"
HER_FORWARD_CLOSES = "her/forward_closes_total"
HER_FORWARD_OVERWRITTEN = "her/forward_overwritten_total"
HER_FORWARD_EXPIRED = "her/forward_expired_total"

# the trivial policies every evaluation is read against, on its own windows
# (pipeline/evaluation/ledger.py)
BASELINES = ("flat", "buy_and_hold", "sell_and_hold", "random")


def eval_key(figure: str) -> str:
    """`eval/<figure>`: a held-out ledger figure of the agent (pnl_gross, cost_spread, ...)."""
    return f"eval/{figure}"


def baseline_key(policy: str, figure: str) -> str:
    """`eval/baseline/<policy>/<figure>`: the same figure of a trivial baseline."""
    return f"eval/baseline/{policy}/{figure}"


HELD_OUT = (PNL, SHARPE, CAPTURE)  # the held-out figures of an evaluation
DECIDING = (L_Q, PROBE, PNL, SHARPE, CAPTURE)  # the runs view's columns, the kill check's inputs

# --- ISV slot names (conf/*/ declare their places; alpha_rl.pipeline.configure.parts says who sets
# them) ---
SLOT_REWARD_WEIGHT = "reward_weight"  # w_c of the core components
SLOT_REWARD_SCALE = "reward_scale"
SLOT_OPP_COST_KAPPA = "opp_cost_kappa"
SLOT_INVENTORY_LAMBDA = "inventory_lambda"
SLOT_DRAWDOWN_RHO = "drawdown_rho"
SLOT_REWARD_EMA_ALPHA = "reward_ema_alpha"
SLOT_REWARD_COMPONENT_EMA = "reward_component_ema"
SLOT_REWARD_ABS_EMA = "reward_abs_ema"
SLOT_REWARD_MAG_RATIO = "reward_mag_ratio"
SLOT_W_AUX_ALIGN = "w_aux_align"  # w_6 of c6 aux_align (stride 7; the β controller steers it)
SLOT_REWARD_AUX_ALIGN_EMA = "reward_aux_align_ema"
SLOT_AUX_ALIGN_SCALE = "aux_align_scale"  # scale_β
SLOT_AUX_SHARE = "aux_share"
SLOT_HER_THRESHOLD = "her_threshold"
SLOT_HER_PRIORITY_BOOST = "her_priority_boost"
SLOT_HER_INJECT_COUNT = "her_inject_count"
SLOT_HER_FORWARD_LOOKAHEAD = "her_forward_lookahead"
SLOT_HER_FORWARD_INJECT_COUNT = "her_forward_inject_count"
SLOT_HER_BACKWARD = "her_backward"  # 1: her_inject pushes backward's synthetic transitions
SLOT_HER_FORWARD = "her_forward"  # 1: her_inject records the closes forward judges later
SLOT_PER_BETA = "per_beta"
SLOT_LOSS_Q = "loss_q"
SLOT_LOSS_AUX = "loss_aux"
SLOT_EPSILON = "epsilon"
SLOT_GRAD_NORM = "grad_norm"
SLOT_LOSS_Q_REAL = "loss_q_real"
SLOT_LOSS_Q_SYNTHETIC = "loss_q_synthetic"
SLOT_BATCH_SYNTHETIC = "batch_synthetic_frac"
SLOT_W_ALPHA_LONG = "w_alpha_long"
SLOT_W_ALPHA_SHORT = "w_alpha_short"
# the learner's numbers (alpha_rl.pipeline.configure.parts fills them from agent.*; its kernels,
# n-step's and HER's read them from the ISV, so runs that differ only in them share kernels and
# shapes)
SLOT_GAMMA = "gamma"
SLOT_HUBER_KAPPA = "huber_kappa"
SLOT_CUT_ON_DONE = "cut_on_done"  # 1: no bootstrapping past a trade close, 0: bootstrap
SLOT_ADAM = "adam"  # lr, beta1, beta2, eps, clip, tau, period (ADAM_NUMBERS)
SLOT_EPSILON_SCHEDULE = "epsilon_schedule"  # start, end, decay steps
SLOT_AUX_LR = "aux_lr"
SLOT_C51_SUPPORT = "c51_support"  # v_min, v_max
# the replay's numbers (replay.*): its kernels' and HER's
SLOT_PER_ALPHA = "per_alpha"
SLOT_PER_EPS = "per_eps"
SLOT_PER_BETA_SCHEDULE = "per_beta_schedule"  # beta0, the learner updates beta anneals over
# the environment's (env.*): the env step's and HER's
SLOT_ENV_COSTS = "env_costs"  # lot, lot x multiplier, fee per lot (ENV_COSTS)
SLOT_ENV_TRADING = "env_trading"  # decision interval, minimum holding steps (ENV_TRADING)
SLOT_PERCEPTION_SCALES = "perception_scales"  # 1 / pnl_scale_ticks, 1 / time_scale_steps
# α's (alpha.* with the learner's Adam settings: ALPHA_NUMBERS) and β's controller's (beta.*)
SLOT_ALPHA_ADAM = "alpha_adam"
SLOT_BETA_CONTROLLER = "beta_controller"  # gain, target share, w_max (CONTROLLER_NUMBERS)
