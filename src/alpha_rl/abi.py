"""The compile-time constants of cuda/ that Python uses, written once.

Each is defined in cuda/<stem>.cu and exported by its cubin as `alpha_rl_const_<NAME>`
(ALPHA_RL_EXPORT in cuda/common.cuh); the contract test (alpha_rl.build.contract) compares every
exported constant of every cubin with this table, so the launchers and oracles, which take their
values from here, cannot drift from the kernels.
"""

# cuda/reward_layout.cuh and cuda/env.cuh, exported by every stem that includes them
REWARD_LAYOUT = {"RC_CORE": 6, "RC_AUX_ALIGN": 6}
ENV_ACTIONS = {"ACTION_FLAT": 0, "ACTION_LONG": 1, "ACTION_SHORT": 2, "ACTIONS": 3}
# cuda/rng.cuh's RNG_STREAM_<NAME> ids, one stream of draws per use (defines the cubins do not
# export: the RNG tests draw each stream on the device and compare)
RNG_STREAMS = {"TEST": 0, "ACT": 1, "PER": 2, "MARKET": 3, "INIT": 4, "ENV": 5, "PARAMS": 6,
               "PROBE": 7, "NOISE": 8, "BASELINE": 9}  # fmt: skip

CONSTANTS: dict[str, dict[str, int]] = {
    "dqn": {
        "DQN_BLOCK": 1024, "DQN_MAX_BATCH": 4096, "DQN_AUX_ROWS": 64,
        "DQN_ADAM_STEP": 0, "DQN_ACT_STEP": 1, "DQN_ACT_DONE": 2, "DQN_AUX_DONE": 3,
        "DQN_COUNTERS": 4,
    },
    "her": {
        "HER_RING": 512, "HER_BLOCK": 256, "HER_STEP": 0, "HER_BACKWARD_TOTAL": 1,
        "HER_FORWARD_TOTAL": 2, "HER_TRACK_DONE": 3, "HER_LAUNCH_TOTAL": 4, "HER_RING_TOTAL": 5,
        "HER_RING_TAIL": 6, "HER_RING_WAITING": 7, "HER_FORWARD_JUDGED": 8,
        "HER_FORWARD_EXPIRED": 9, "HER_FORWARD_ENDED": 10, "HER_FORWARD_OVERWRITTEN": 11,
        "HER_COUNTERS": 12, **ENV_ACTIONS,
    },
    "per": {
        "PER_FANOUT": 1024, "PER_PUSH_BLOCK": 256, "PER_REDUCE_BLOCK": 256,
        "PER_SAMPLE_BLOCK": 256, "PER_UPDATE_BLOCK": 1024, "PER_MAX_BATCH": 4096,
        "PER_HEAD": 0, "PER_TAG": 1, "PER_TICKET": 2, "PER_SAMPLE_EPOCH": 3,
        "PER_SAMPLE_DONE": 4, "PER_STATUS": 5, "PER_STATE_WORDS": 8,
        "PER_STATUS_EMPTY_SAMPLE": 1,
    },
    "mlp": {
        "MLP_BK": 32, "MLP_THREADS": 256, "MLP_TILE": 32, "MLP_WIDE_TILE": 64, "MLP_HUGE_TILE": 128,
        "MLP_TC_TILE": 128, "MLP_TC_WIDE_TILE": 64, "MLP_TC_SMALL_TILE": 32,
        "MLP_TC_SMEM": 110592, "MLP_TC_WIDE_SMEM": 55296, "MLP_TC_SMALL_SMEM": 30720,
        "MLP_TC_THREADS": 256, "MLP_TC_SMALL_THREADS": 128, "MLP_SPLITK_BG_COLS": 8,
        "MLP_ROWS_MAX_N": 8, "MLP_ROWS_WARPS": 8, "MLP_BG_COLS": 32, "MLP_BG_LANES": 32,
    },
    "perception": {
        "PERCEPTION_MAX_FEATURES": 32, "PERCEPTION_EXTRA_FEATURES": 7, "PERCEPTION_ENVS": 32,
        "PERCEPTION_THREADS": 256,
    },
    "reward": {
        **REWARD_LAYOUT, "REWARD_BLOCK": 256, "REWARD_ROWS": 512, "DECOMP_ROWS": 3,
        "DECOMP_LEAD": 4,
    },
    "experience": {**REWARD_LAYOUT, **ENV_ACTIONS},
    "nstep": {"NSTEP_BLOCK": 256},
    "noisy": {"NOISY_ROLE_ACT": 0, "NOISY_ROLE_ONLINE": 1, "NOISY_ROLES": 3},
    "aux": {"AUX_BLOCK": 256, **ENV_ACTIONS},
    "c51": {"C51_BLOCK": 256, "C51_MAX_ATOMS": 128, "C51_PROJECT_BLOCK": 256},
}  # fmt: skip

DQN, HER, PER, MLP, PERCEPTION, REWARD = (
    CONSTANTS[s] for s in ("dqn", "her", "per", "mlp", "perception", "reward")
)
