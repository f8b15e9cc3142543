"""The compile-time constants of cuda/ that Python uses, written once.

Each is defined in cuda/<stem>.cu and exported by its cubin as `alpha_rl_const_<NAME>`
(ALPHA_RL_EXPORT in cuda/common.cuh); the contract test (alpha_rl.build.contract) compares every
exported constant of every cubin with this table, so the launchers and oracles, which take their
values from here, cannot drift from the kernels.
"""

CONSTANTS: dict[str, dict[str, int]] = {
    "dqn": {
        "DQN_BLOCK": 1024, "DQN_MAX_BATCH": 4096, "DQN_AUX_ROWS": 64,
        "DQN_ADAM_STEP": 0, "DQN_ACT_STEP": 1, "DQN_ACT_DONE": 2, "DQN_AUX_DONE": 3,
    },
    "her": {
        "HER_RING": 512, "HER_BLOCK": 256, "HER_STEP": 0, "HER_BACKWARD_TOTAL": 1,
        "HER_FORWARD_TOTAL": 2, "HER_LAUNCH_TOTAL": 4, "HER_RING_TOTAL": 5,
    },
    "per": {
        "PER_FANOUT": 1024, "PER_PUSH_BLOCK": 256, "PER_REDUCE_BLOCK": 256,
        "PER_SAMPLE_BLOCK": 256, "PER_UPDATE_BLOCK": 1024, "PER_MAX_BATCH": 4096,
        "PER_HEAD": 0, "PER_TAG": 1, "PER_TICKET": 2, "PER_SAMPLE_EPOCH": 3,
        "PER_SAMPLE_DONE": 4, "PER_STATUS": 5, "PER_STATE_WORDS": 8,
        "PER_STATUS_EMPTY_SAMPLE": 1,
    },
    "mlp": {"MLP_BK": 32, "MLP_ROWS_MAX_N": 8, "MLP_ROWS_WARPS": 8},
}  # fmt: skip

DQN, HER, PER, MLP = (CONSTANTS[s] for s in ("dqn", "her", "per", "mlp"))
