"""The DQN learner (DESIGN §7), in pieces:

- `layout`: the network's flat parameter layout, its initial values, views and gemm choice;
- `network`: `QNetwork`, the forward and backward passes over `MlpOps` (kernels or oracles);
- `config`: `AgentConfig` and `AlphaConfig`, the typed settings;
- `state`: `LearnerState`, the arrays a resume needs; `batch`: the update's `Batch`, `Slots`;
- `head`: `QHead` / `C51Head`, Q from the network's outputs and the loss (`HEADS`: every head);
- `pieces`: a learner variant's name from its pieces (dqn_c51, rainbow), for the kill check;
- `noise`: `Noiseless` / `NoisyLayers`, how acting explores and which weights run;
- `alpha`: `NoBias` / `AlphaBias`, α's learned bias on the directional Q-values;
- `learner`: `Learner`, which composes them; `policy`: `GreedyPolicy`, `aux_calls`,
  `called_right`.
"""

from alpha_rl.agent.alpha import AlphaBias, AlphaState, NoBias, make_bias
from alpha_rl.agent.batch import Batch, Slots
from alpha_rl.agent.config import AgentConfig, AlphaConfig
from alpha_rl.agent.head import C51Head, QHead, make_head
from alpha_rl.agent.layout import (
    ACTIONS,
    MAX_SPLITS,
    SPLIT_ROWS,
    WIDE_MIN_BLOCKS,
    WIDE_MIN_K,
    Layer,
    NetLayout,
    gemm_kind,
    init_params,
    init_sigma,
    layer_views,
    noise_units,
)
from alpha_rl.agent.learner import Learner, LearnerKernels
from alpha_rl.agent.network import Activations, MlpOps, QNetwork
from alpha_rl.agent.noise import Noiseless, NoisyLayers
from alpha_rl.agent.policy import GreedyPolicy, aux_calls, called_right
from alpha_rl.agent.state import LearnerState

__all__ = [
    "ACTIONS",
    "MAX_SPLITS",
    "SPLIT_ROWS",
    "WIDE_MIN_BLOCKS",
    "WIDE_MIN_K",
    "Activations",
    "AgentConfig",
    "AlphaBias",
    "AlphaConfig",
    "AlphaState",
    "Batch",
    "C51Head",
    "GreedyPolicy",
    "Layer",
    "Learner",
    "LearnerKernels",
    "LearnerState",
    "MlpOps",
    "NetLayout",
    "NoBias",
    "Noiseless",
    "NoisyLayers",
    "QHead",
    "QNetwork",
    "Slots",
    "aux_calls",
    "called_right",
    "gemm_kind",
    "init_params",
    "init_sigma",
    "layer_views",
    "make_bias",
    "make_head",
    "noise_units",
]
