"""The memory a run allocates, estimated from its plan before anything is, and refused when the
machine cannot hold it.

`estimate(plan, isv_size)` adds up, part by part, the arrays the run's objects allocate on the
backend, from the shapes their constructors use: the replay (replay.py), the learner's networks
with Adam's moments, the target and the gradient (agent/), the learner's activation and batch
buffers, the n-step rings (nstep.py), HER's state and forward ring (hindsight.py), the training,
evaluation and probe environments (env.py, pipeline/evaluation/evaluate.py,
pipeline/evaluation/probe.py) and the ISV. A test builds a run and compares the estimate with the
bytes its backend allocated. On the numpy backend the host also holds, for a moment, what the
parameter initialisation and the kernels' NumPy oracles compute along the way (`transient`: the
largest of their peaks, from per-element figures a test measures); on the cuda backend the host
holds the initialisation's peak. Not counted, as the run is checked before the
market is built: the market's series and the books each environment uploads (4 float32 [T, L]
sides: tens of MB for 200,000 ticks), nor the CUDA context, a CUDA graph or a checkpoint's host
copies.

`check_memory(plan, isv_size)` compares the estimate with what is free where the run will
allocate: psutil's available host memory for the numpy backend, and for the cuda backend the
device's free memory (asked of the driver lazily: alpha_rl.backend.cuda.free_device_memory) and
the host's for the initialisation. A run that does not fit is refused (ConfigError) naming the
figure in GiB, what is available and the key to change.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import psutil

from alpha_rl.agent import ACTIONS, MAX_SPLITS, SPLIT_ROWS, AgentConfig, NetLayout
from alpha_rl.agent.head import head_class
from alpha_rl.env import OUT_F32, OUT_I32, OUT_U8, STATE_F32, STATE_I32, STATS, EnvConfig
from alpha_rl.errors import ConfigError
from alpha_rl.hindsight import HerConfig, array_sizes
from alpha_rl.kernels import dqn, mlp, per
from alpha_rl.kernels.per import STATE_WORDS, tree_layout
from alpha_rl.kernels.reward import DECOMP_ROWS, block_sums, blocks, decomp_cols
from alpha_rl.replay import ReplayConfig

if TYPE_CHECKING:
    from alpha_rl.pipeline.configure.plan import Plan

GIB = 2**30
F32, I32, U8, U64 = 4, 4, 1, 8  # bytes per element
# host bytes the parameter initialisation and the NumPy oracles hold for a moment on top of the
# run's arrays; tests/pipeline/test_memory.py measures each with tracemalloc (the figure in
# brackets) and a whole run's peak, and holds these above them
INIT_BYTES_PER_PARAM = 80  # init_params: Philox words over P indices, float64 uniforms (76)
ADAM_BYTES_PER_PARAM = 24  # dqn_adam's float32 temporaries (20)
SAMPLE_BYTES_PER_ROW = 1_200  # per_sample's scans per batch row (900 to 1,100) ...
SAMPLE_BYTES_PER_NODE = 8_192  # ... and the children and lane sums of each node it visits (7,700)
REBUILD_BYTES_PER_LEAF = 16  # per_tree_reduce's level sums (11.7)
ENV_BYTES_PER_ENV = 256  # env step, perception, reward diagnostics, HER, push per env (185)
ENV_BYTES_PER_FEATURE = 16  # ... and per feature of h_t per env (12)
# a layer's product (portable.matmul: the float64 product and the scratch it keeps, the check's
# blocks), bias, ReLU and mask per row and unit (20); a weight gradient's split-K products per
# weight of the layer (their float64 stack and its scratch, 36)
GEMM_BYTES_PER_VALUE = 24
HEAD_BYTES_PER_LOGIT = 28  # a head of atoms' softmaxes and projection per row and logit (21)
STEP_BYTES = 65_536  # an env step's and an evaluation's small arrays, whatever their sizes
GEMM_BYTES_PER_WEIGHT = 40


@dataclass(frozen=True)
class Estimate:
    """Bytes by part: `arrays` on the backend; `peaks`, what the host holds for a moment on top
    of them (the parameters' initialisation on either backend, the NumPy oracles' on numpy)."""

    arrays: dict[str, int]
    peaks: dict[str, int]

    @property
    def device(self) -> int:
        """Bytes the backend's arrays take."""
        return sum(self.arrays.values())

    @property
    def init(self) -> int:
        """The host's peak while the parameters are initialised."""
        return self.peaks["initialisation"]

    @property
    def transient(self) -> int:
        """The host's largest peak on the numpy backend."""
        return max(self.peaks.values())

    @property
    def host_numpy(self) -> int:
        """Bytes the host needs on the numpy backend: the arrays and the largest peak."""
        return self.device + self.transient

    def host_parts(self) -> dict[str, int]:
        """The arrays and the largest peak, by name, for the numpy backend."""
        name = max(self.peaks, key=lambda k: self.peaks[k])
        return self.arrays | {f"peak of the {name}": self.transient}


def gib(size: int) -> str:
    """Bytes as GiB with 3 significant figures."""
    return f"{size / GIB:.3g} GiB"


def env_bytes(cfg: EnvConfig, num_envs: int, rc_stride: int) -> int:
    """Environment's arrays for `num_envs` envs (its book upload aside), its seed among them."""
    n, p = num_envs, cfg.perception
    size = (len(STATE_I32) + len(OUT_I32)) * n * I32
    size += (len(STATE_F32) + len(OUT_F32) + len(STATS)) * n * F32 + len(OUT_U8) * n * U8
    size += n * rc_stride * F32 + DECOMP_ROWS * decomp_cols(rc_stride) * F32
    size += len(p.horizons) * I32
    if p.projection:
        size += (p.features * p.hidden_dim + p.hidden_dim) * F32
    return size + blocks(n) * block_sums(rc_stride) * F32 + U64 + U64


def replay_bytes(cfg: ReplayConfig, obs_dim: int, max_push: int, discounts: bool) -> int:
    """Replay's arrays: storage, leaves, the sum and max trees, counters, the batch, its seed."""
    N, M = cfg.capacity, cfg.batch_size
    layout, tree = tree_layout(N)
    size = 2 * N * obs_dim * F32 + N * (I32 + 2 * F32 + U8 + F32) + 2 * tree * F32 + F32
    size += STATE_WORDS * U64 + -(-max_push // per.PUSH_BLOCK) * U64 + M * (I32 + 2 * F32)
    return size + (N * F32 if discounts else 0) + layout.nbytes + U64


def net_buffers(layout: NetLayout, rows: int) -> int:
    """QNetwork.buffers(rows): activations and their gradients per layer, the dueling
    combination, the split-K scratch of the weight gradients and its counters (one uint32 per
    output tile of the biggest weight)."""
    widths = sum(ly.n_out for ly in layout.layers)
    splits = max(1, min(MAX_SPLITS, rows // SPLIT_ROWS))
    biggest = max(ly.n_in * ly.n_out for ly in layout.layers)
    counters = max(mlp.tiles(ly.n_out, ly.n_in) for ly in layout.layers)
    size = 2 * rows * widths + (rows * layout.outputs if layout.dueling else 0)
    return (size + (splits * biggest + counters if splits > 1 else 0)) * F32


def net_layout(agent: AgentConfig, obs_dim: int) -> NetLayout:
    """The learner's network layout (its head's outputs per action)."""
    atoms = head_class(agent).atoms_of(agent)
    return NetLayout.build(obs_dim, agent.hidden, ACTIONS, agent.dueling, atoms)


def network_bytes(agent: AgentConfig, layout: NetLayout, obs_dim: int, alpha: bool) -> int:
    """Learner's parameters: theta, target, Adam's m and v and the gradient (noisy: mu and sigma
    each, and the composed weights), counters, the aux head, w_α's state, the learner's seed (and
    the noise's)."""
    P = layout.size
    n = 2 * P if agent.noisy else P
    size = 5 * n * F32 + dqn.COUNTERS * U64 + F32 + (obs_dim + 1) * F32 + U64
    if agent.noisy:
        size += 2 * P * I32 + 4 * P * F32 + U64  # unit_in, unit_out; act, learn (2P), noise
    return size + (4 * ACTIONS * F32 if alpha else 0)


def learner_buffer_bytes(agent: AgentConfig, layout: NetLayout, obs_dim: int, num_envs: int,
                         batch: int, alpha: bool) -> int:  # fmt: skip
    """Learner's buffers: acting over the envs, the update's forward of 2 x batch rows and the
    target's of batch rows, the gathered batch and its scratch."""
    B, M, H, head = num_envs, batch, obs_dim, head_class(agent)
    size = net_buffers(layout, B) + net_buffers(layout, 2 * M) + net_buffers(layout, M)
    size += head.q_elements(B) * F32 + 2 * M * H * F32
    size += M * (I32 + 2 * F32 + U8 + F32) + M * layout.outputs * F32
    size += M * F32 if agent.n_step > 1 else 0
    size += sum(n * np.dtype(dt).itemsize for n, dt in head.scratch(agent, M).values())
    size += 2 * M * F32 if alpha else 0
    return size + B * (I32 + F32) + -(-B // dqn.AUX_ROWS) * (H + 3) * F32


def nstep_bytes(num_envs: int, obs_dim: int, n: int) -> int:
    """nstep.allocate: the n-step rings and the staged transitions (none with n = 1)."""
    if n == 1:
        return 0
    B, H = num_envs, obs_dim
    state = n * B * H * F32 + n * B * (I32 + F32) + 3 * B * I32
    return state + B * n * U8 + 2 * B * n * H * F32 + B * n * (I32 + 3 * F32)


def her_bytes(cfg: HerConfig | None, num_envs: int, obs_dim: int) -> int:
    """Hindsight's per-env state and counters, and with forward HER the ring of closed trades."""
    if cfg is None:
        return 0
    sizes = array_sizes(cfg, num_envs, obs_dim).values()
    return sum(n * np.dtype(dt).itemsize for n, dt in sizes)


def evaluation_bytes(plan: Plan, layout: NetLayout, obs_dim: int, isv_size: int) -> int:
    """The evaluation's environments, greedy policy and observation, its per-step records, trade
    windows and start cursors, the probe's environment and observations, and ProbeLoss's inputs,
    buffers and copy of the ISV (pipeline/evaluation/evaluate.py, probe.py)."""
    ev, agent, stride = plan.eval, plan.agent, plan.reward.stride
    E, n, H = ev.num_envs, ev.probe.size, obs_dim
    q = head_class(agent).q_elements  # elements of the head's Q buffer for `rows` rows
    policy = net_buffers(layout, E) + q(E) * F32 + E * (I32 + F32) + dqn.COUNTERS * U64
    policy += E * H * F32
    probe_env = env_bytes(plan.env, ev.probe.envs, stride) + 2 * ev.probe.envs * H * F32
    loss = 2 * n * H * F32 + n * (I32 + 3 * F32) + net_buffers(layout, 2 * n)
    loss += net_buffers(layout, n) + (q(2 * n) + q(n)) * F32 + n * F32 + n * ACTIONS * F32
    loss += isv_size * F32
    windows = -(-ev.steps // ev.sharpe_window)
    records = ev.steps * E * (I32 + 3 * F32) + windows * E * len(STATS) * F32 + E * I32
    return env_bytes(plan.env, E, stride) + policy + probe_env + loss + records


def estimate(plan: Plan, isv_size: int) -> Estimate:
    """The run's allocations by part (the books aside: see the module docstring)."""
    env, agent, H = plan.env, plan.agent, plan.env.perception.dim
    B, alpha = env.num_envs, plan.alpha is not None
    layout = net_layout(agent, H)
    arrays = {
        "replay": replay_bytes(plan.replay, H, plan.max_push, agent.n_step > 1),
        "networks": network_bytes(agent, layout, H, alpha),
        "learner buffers": learner_buffer_bytes(agent, layout, H, B, plan.replay.batch_size, alpha),
        "n-step rings": nstep_bytes(B, H, agent.n_step),
        "HER": her_bytes(plan.her, B, H),
        "environments": env_bytes(env, B, plan.reward.stride) + 2 * B * H * F32 + isv_size * F32,
        "evaluation": evaluation_bytes(plan, layout, H, isv_size),
    }
    return Estimate(arrays, peaks(plan, layout, H))


def peaks(plan: Plan, layout: NetLayout, obs_dim: int) -> dict[str, int]:
    """The host's peaks above the arrays: the parameters' initialisation, and the NumPy oracles
    of Adam's step, a batch's sampling, the tree's rebuild, the env kernels with a forward over
    the most rows at once, and the largest layer's weight gradient (the constants above)."""
    agent, ev, rp = plan.agent, plan.eval, plan.replay
    params = layout.size * (2 if agent.noisy else 1)
    envs = max(plan.env.num_envs, ev.num_envs, ev.probe.envs)
    rows = max(plan.env.num_envs, 2 * rp.batch_size, ev.num_envs, 2 * ev.probe.size)
    width = max(max(ly.n_in, ly.n_out) for ly in layout.layers)
    step = envs * (ENV_BYTES_PER_ENV + ENV_BYTES_PER_FEATURE * obs_dim)
    weights = max(ly.n_in * ly.n_out for ly in layout.layers)
    # a head of several atoms an action (C51) works its softmaxes over every logit
    logits = layout.layers[-1].n_out if head_class(agent).atoms_of(agent) > 1 else 0
    return {
        "initialisation": INIT_BYTES_PER_PARAM * layout.size,
        "Adam step": ADAM_BYTES_PER_PARAM * params,
        "batch sampling": SAMPLE_BYTES_PER_ROW * rp.batch_size
        + SAMPLE_BYTES_PER_NODE * min(rp.batch_size, -(-rp.capacity // per.FANOUT)),
        "tree rebuild": REBUILD_BYTES_PER_LEAF * rp.capacity,
        "env step": STEP_BYTES
        + step
        + rows * (GEMM_BYTES_PER_VALUE * width + HEAD_BYTES_PER_LOGIT * logits),
        "weight gradient": GEMM_BYTES_PER_WEIGHT * weights,
    }


def host_available() -> int:
    """Bytes of host memory available to a new allocation: psutil's available memory, capped by
    the room left under this process's cgroup memory limit (a SLURM job's --mem, a container's)."""
    available = int(psutil.virtual_memory().available)
    room = cgroup_room()
    return available if room is None else min(available, room)


def cgroup_room(proc: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
                ) -> int | None:  # fmt: skip
    """Bytes this process's cgroups still let it allocate (the least, over its cgroup and the
    ones above it, of limit - usage; cgroup v2 memory.max / memory.current, v1
    memory.limit_in_bytes / memory.usage_in_bytes), None where no limit is set or readable."""
    try:
        lines = proc.read_text().splitlines()
    except OSError:
        return None
    rooms = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: the unified hierarchy
            rooms += _rooms(root, path, "memory.max", "memory.current")
        elif "memory" in controllers.split(","):  # v1
            rooms += _rooms(root / "memory", path, "memory.limit_in_bytes",
                            "memory.usage_in_bytes")  # fmt: skip
    return min(rooms) if rooms else None


def _rooms(base: Path, path: str, limit_file: str, usage_file: str) -> list[int]:
    """limit - usage of each cgroup from `path` up to `base` that has a numeric limit (a path
    that is not mounted here, inside a container, reads as `base` itself)."""
    rooms = []
    here = base / path.lstrip("/")
    if not here.is_dir():
        here = base
    while True:
        try:
            limit = (here / limit_file).read_text().strip()
            usage = int((here / usage_file).read_text().strip())
        except (OSError, ValueError):
            limit = "max"
            usage = 0
        if limit.isdigit() and int(limit) < 2**60:  # v1 writes "no limit" as ~2^63
            rooms.append(max(int(limit) - usage, 0))
        if here == base or base not in here.parents:
            return rooms
        here = here.parent


def backend_of(plan: Plan) -> str:
    """Where the run will allocate, as far as it is known before the backend opens: "numpy", or
    "cuda" (backend=cuda, or backend=auto where pycuda finds a device)."""
    name = plan.backend.name
    if name != "auto":
        return name
    if importlib.util.find_spec("pycuda") is None:
        return "numpy"
    from alpha_rl.backend.select import probe_gpu

    return "cuda" if probe_gpu(plan.backend.device).usable else "numpy"


def check_memory(plan: Plan, isv_size: int) -> Estimate:
    """The run's estimate, refused (ConfigError) when it exceeds what is free where the run
    allocates; see the module docstring."""
    est = estimate(plan, isv_size)
    if backend_of(plan) == "cuda":
        from alpha_rl.backend.cuda import free_device_memory

        device = plan.backend.device
        _refuse(plan, est.arrays, free_device_memory(device), f"CUDA device {device}'s memory")
        _refuse(plan, {"initialisation": est.init}, host_available(),
                "host memory to initialise the parameters")  # fmt: skip
    else:
        _refuse(plan, est.host_parts(), host_available(), "host memory (numpy backend)")
    return est


def keys_to_lower(plan: Plan, part: str) -> str:
    """The settings that size `part` of the estimate, with their values."""
    rp, agent, ev, B = plan.replay, plan.agent, plan.eval, plan.env.num_envs
    hidden = f"agent.hidden={list(agent.hidden)}"
    return {
        "replay": f"replay.capacity_log2={rp.capacity_log2}",
        "networks": hidden,
        "initialisation": hidden,
        "peak of the initialisation": hidden,
        "peak of the Adam step": hidden,
        "peak of the weight gradient": hidden,
        "peak of the batch sampling": f"replay.batch_size={rp.batch_size}",
        "peak of the tree rebuild": f"replay.capacity_log2={rp.capacity_log2}",
        "peak of the env step": f"env.num_envs={B}, eval.num_envs={ev.num_envs} or {hidden}",
        "learner buffers": f"replay.batch_size={rp.batch_size}, env.num_envs={B} or {hidden}",
        "n-step rings": f"agent.n_step={agent.n_step} or env.num_envs={B}",
        "HER": _her_keys(plan),
        "environments": f"env.num_envs={B}",
        "evaluation": f"eval.num_envs={ev.num_envs}, eval.steps={ev.steps} or "
        f"eval.probe.size={ev.probe.size}",
    }[part]


def _her_keys(plan: Plan) -> str:
    """What sizes HER's part: the envs, and with forward HER its ring (auto: B x (lookahead + 1)
    rounded up to a power of two)."""
    her, B = plan.her, plan.env.num_envs
    if her is None or not her.forward:
        return f"env.num_envs={B}"
    if her.ring_auto:
        return (f"her.lookahead={her.lookahead} or env.num_envs={B} (her.closed_ring=auto: "
                f"{her.closed_ring} slots), or a fixed her.closed_ring below it")  # fmt: skip
    return f"her.closed_ring={her.closed_ring} or env.num_envs={B}"


def _refuse(plan: Plan, parts: dict[str, int], free: int, what: str) -> None:
    """ConfigError when the parts' sum exceeds `free` bytes, naming the largest parts and the
    keys of the largest."""
    need = sum(parts.values())
    if need <= free:
        return
    ranked = sorted(parts.items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{name} {gib(size)}" for name, size in ranked[:3] if size)
    raise ConfigError(
        f"the run needs about {gib(need)} of {what} ({shown}), but {gib(free)} is available; "
        f"lower {keys_to_lower(plan, ranked[0][0])}"
    )
