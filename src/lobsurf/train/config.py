"""The run's configuration: frozen dataclasses per part, composed into ``RunConfig``.

A run is configured by defaults, then a TOML file (``--config``), then ``--set
section.key=value`` overrides, in that order. ``run_config_from_dict`` checks every key and
type against the dataclass fields and names the key in its error (``unknown key
learner.lrr``, ``learner.lr: expected a float, got 'fast'``); range checks are the parts'
own ``__post_init__``. ``run_config_to_toml`` writes the resolved config into the run folder,
and reading it back gives an equal config. Settings that were removed (``RETIRED_SETTINGS``)
are dropped from a saved run's config when it is read back, and named with the reason when
a config file or ``--set`` gives them.
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import tomli_w

from lobsurf.agent.config import (C51_KERNELS, AuxConfig, C51Kernel, GateConfig, LearnerConfig,
                                  NetworkConfig, PolicyConfig, ReplayConfig, RewardConfig)
from lobsurf.data.labels import LabelConfig
from lobsurf.errors import UserError
from lobsurf.models.config import RETIRED_FIELDS, EncoderConfig
from lobsurf.models.features import FeatureConfig
from lobsurf.sim.config import SimConfig


#: Training's default fee per lot (currency): an ES-like exchange-and-broker fee, so a
#: default run learns net of a realistic cost (SimConfig alone defaults to no fee).
DEFAULT_FEE_PER_LOT = 1.0
#: Training's default decision interval (snapshots per step): the agent decides every 10th
#: snapshot and holds through the rows between. The edge of a top-of-book signal needs
#: holds of tens of snapshots; at one decision per snapshot a trade spans ~50 steps of
#: bootstrapping and the learner first learns only the entry cost (docs/log.md).
DEFAULT_STRIDE = 10

#: Settings older runs may have saved that no longer exist, and why (models.config's
#: RETIRED_FIELDS: how values were computed only, so a run saved with one is read without it).
RETIRED_SETTINGS: dict[str, str] = {
    f"encoder.{name}": why for name, why in RETIRED_FIELDS.items()}


@dataclass(frozen=True)
class DataConfig:
    """Which data a run trains on, and its time split."""

    store: str = ""
    """Snapshot store folder (lobsurf ingest); empty = the bundled default data set."""
    instrument_id: int = 0
    """Instrument to trade when the store holds several; 0 = the store's only instrument."""
    train_fraction: float = 0.8
    """Target share of rows before the train/held-out cut (the rest is for lobsurf eval RUN)."""
    split_at_segment: bool = True
    """Cut at the segment (session) boundary nearest the target share when there are several."""
    normalizer_rows: int = 100_000
    """Training rows sampled (at most) to fit the feature normaliser."""

    def __post_init__(self) -> None:
        if not 0.0 < self.train_fraction < 1.0:
            raise ValueError(f"train_fraction must be in (0, 1), got {self.train_fraction}")
        if self.normalizer_rows < 1:
            raise ValueError(f"normalizer_rows must be >= 1, got {self.normalizer_rows}")


@dataclass(frozen=True)
class TrainConfig:
    """Budget, seeds, device and bookkeeping of a run."""

    steps: int = 2400
    """Total training steps of the run (a resumed run continues up to this). The default
    finishes in about ten minutes on 2 CPU cores with the default model (~3-5 learning
    steps/s at B=64), about a minute on a GPU; it is enough for the default model to beat
    every baseline but the oracles on the bundled data's held-out session (1,200 steps
    were not: docs/log.md)."""
    envs: int = 64
    """B: environments stepped in lock-step (also the learner's batch unless set)."""
    seed: int = 0
    """Seeds parameter init, noise, acting and replay sampling (the simulator has sim.seed)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Torch device; auto = cuda when available, else cpu."""
    log_every: int = 100
    """Steps between metric records (each is one deliberate device-to-host copy)."""
    checkpoint_every: int = 1000
    """Steps between checkpoints (a final one is always written)."""
    keep_checkpoints: int = 3
    """Newest checkpoints kept in RUN/checkpoints."""
    background_checkpoints: bool = True
    """One process: write checkpoint files on a background thread, so the loop waits only
    for packing the state (device-side copies into pinned memory, no host sync; a
    synchronous write cost an H200 run at B = 16 about 75 ms every checkpoint, packing
    about 5 ms); a failed write stops the run at the next log interval."""
    defer_log_readout: bool = True
    """One process: a log step's device values (guard, metric sums, controllers) are copied
    without a host sync and read after the next step is launched, so the GPU does not wait
    for the record to be written (lobsurf.train.readout); off = read at the log step. The
    records are the same either way."""
    controller_ema_rate: float = 0.01
    """EMA rate of the action-histogram controllers (action entropy, hold fraction)."""
    tensorboard: bool = False
    """Also write every metrics record to RUN/tb as TensorBoard scalars (train/, control/,
    time/ tags; needs the tensorboard package: pip install -e '.[tensorboard]')."""
    init_from: str = ""
    """A lobsurf pretrain run (or checkpoint file) whose normaliser and encoder start the run."""
    max_rollbacks: int = 3
    """Divergence (NaN/Inf) rollbacks to the last good checkpoint before the run stops."""
    rollback_lr_factor: float = 0.5
    """Each rollback multiplies the learning rate by this."""
    check_params_every: int = 1000
    """Multi-process runs: steps between the debug check that every rank holds the same
    parameters and controllers (one checksum all-reduce); 0 = never."""
    cuda_graph: bool = True
    """On CUDA, one process: the learning step is captured once as a CUDA graph and
    replayed (lobsurf.train.cuda_graph); ignored on CPU and with several processes."""
    compile: Literal["auto", True, False] = "auto"
    """torch.compile (Inductor, static shapes, no graph breaks) of the online and target
    networks' embedding (features, normaliser, encoder) and heads and of the step's pure
    tensor functions (lobsurf.train.compile); on CUDA inside the graph. Costs about a
    minute of compilation at the first learning steps. "auto": on for a one-process CUDA
    run (3.9x the graphed eager step at B = 1024 on an H200), off on CPU, where the eager
    step is the reference and Inductor's C++ compile of every piece takes minutes."""
    compile_combo_kernels: bool = True
    """With train.compile on CUDA: Inductor's combo kernels (independent small kernels of
    one compiled piece launched as one kernel). H200, B = 16: 455 -> 313 graph nodes and
    902 -> 1,108 steps/s (benchmarks/RESULTS.md)."""
    compile_max_autotune: bool = False
    """With train.compile on CUDA: Inductor's GEMM autotuning (``max_autotune_gemm``: each
    matrix product of the compiled pieces timed against Triton templates, which can fuse
    the neighbouring element-wise ops into it). Adds minutes of compilation at start-up."""
    compile_inductor_options: tuple[str, ...] = ()
    """With train.compile on CUDA: further Inductor settings for the compiled pieces, each
    ``"name=value"`` (a torch._inductor.config name, dotted for its sub-sections; a Python
    literal of its type), e.g. ``["triton.enable_pdl=True"]``; applied after the two above,
    so they can override them. For measuring Inductor's own options (``lobsurf bench
    --inductor-option``); the H200 figures of those tried are in benchmarks/RESULTS.md."""
    overlap_target: bool = True
    """On CUDA: the target net's forward and the C51 target run on a second stream beside
    the online net's forward (parallel branches of the CUDA graph; the same kernels, so
    the same numbers: lobsurf.streams). Off: one stream, in order."""
    overlap_collect: bool = True
    """On CUDA with learner.sample_before_collect: the learner's losses and backward run
    on a stream of their own beside the collect (parallel branches of the CUDA graph;
    neither writes what the other reads: lobsurf.agent.step.learn_beside_collect)."""
    prioritize_learner: bool = True
    """On CUDA: the two side streams (the learner's forward and backward, the target net's
    forward) at the device's highest stream priority, the collect on the step's own stream
    at the default, so where both have work waiting the GPU runs the learner's first: the
    learner's chain is the step's critical path, and the collect only has to finish before
    the optimizer's update (lobsurf.streams.side_stream). The CUDA graph keeps the
    priorities. Scheduling only: the kernels and the numbers are the same. H200, bf16,
    compiled: B = 256 / 4 layers 730.8 -> 738.4 steps/s, B = 1024 / 2 layers 523.1 -> 533.7
    (benchmarks/RESULTS.md, thirtieth session)."""
    collect_beside_backward: bool = False
    """On CUDA with train.overlap_collect: the collect starts only once the learner's
    forwards (its own and the target net's, which the loss waits for) are done, so it runs
    beside the learner's backward, a chain of small kernels that leaves most SMs idle,
    instead of taking SMs from the two forwards on the step's critical path (an event the
    learner's stream records after its losses: ``TrainState.forwards_done``). A firm order
    where train.prioritize_learner is a preference. Scheduling only: the kernels and the
    numbers are the same. Off: no faster where timed (H200, B = 256 / 4 layers, bf16,
    compiled: 730.0 against 730.5 steps/s, 736.7 against 738.4 with the priority;
    benchmarks/RESULTS.md, thirtieth session)."""
    split_target: bool = False
    """The learner's target-net forward as two calls of B windows (s, then s') instead of
    one of 2B, side by side on two streams: on CUDA with train.overlap_target only (on one
    stream, and on CPU, one call: the split only reorders work). At B = 256 that forward is
    the longest chain before the losses (its 2B-window kernels take little longer than
    B-window ones: each is a few microseconds of a mostly idle GPU), so two B-window chains
    beside each other end sooner; the cost is a second chain of launches (33 graph nodes at
    4 layers) and one concatenation. The same values (each window's logits depend on that
    window alone; the products' rounding may differ with the row count). Timed on two H100s
    (bf16, compiled, B = 256 / 4 layers): on one 676.9 and 675.0 steps/s against 665.6 and
    667.1 without it (B = 1024 / 2 layers 389.8 against 387.8), on the other 672.8 against
    672.6: a gain of up to 1.5 %, no loss (benchmarks/RESULTS.md, thirty-first session).
    Off by default since it was timed on an H200, where it loses: at B = 256 / 4 layers
    733.2, 733.8 and 731.6 steps/s against 741.9, 744.2, 745.1 and 743.9 without it, at
    B = 1024 / 2 even (529.4 and 530.9 against 529.3; thirty-third session)."""
    draw_ahead: bool = True
    """With learner.sample_before_collect: each learning step draws the next one's replay
    indices at its end, beside its backward (once its collect has written and its
    priorities are in), so the next step's learner starts from that draw instead of from a
    chain of small kernels (a uniform, a cumulative sum over the replay's weights, a
    search: about 35 us on an H100 at B = 256, which the learner's forward and the target
    net's wait for). Nothing between the two writes what the draw reads, so the same
    indices and importance weights as drawing first (lobsurf.agent.step.learn_beside_collect;
    a checkpoint keeps the draw made ahead), except with train.shared_generator, where the
    draw takes other uniforms of the one stream. On by default since timed on an H100 (bf16,
    compiled, B = 256 / 4 layers, thirty-sixth session): 692.7 steps/s alone against 682.3
    and 681.2 without either option; with train.shared_generator 700.1, 701.8 and 702.8
    (B = 1024 / 2 layers 464.7 against 457.3). Not yet timed on an H200."""
    shared_generator: bool = True
    """On CUDA: the step's four kinds of draws (the noise, the acting samples, the replay
    sample, the simulator's resets) from one generator instead of one each. Each replay of
    a CUDA graph first sets two device scalars (seed, offset) of every generator registered
    with it, one kernel each, in turn, before the graph's first node: about 3.5 us apiece on
    an H100, 26 us a step with four generators and the default one. One generator, which
    also takes the default one's place while the graph is captured (the step never draws
    from the default: lobsurf.train.cuda_graph): 2 such kernels instead of 10. On by default
    since timed on an H100 (B = 256 / 4 layers, thirty-sixth session): 694.1 steps/s alone
    against 682.3 and 681.2 (with train.draw_ahead: see there). The draws are different
    numbers from the four-generator ones (each kind's stream now depends on the others'
    counts), still the same in an eager and a graphed run from one seed. CPU runs keep four
    generators."""
    feature_table: bool = True
    """The training book's per-snapshot features computed once when it is loaded (4 F bytes
    per snapshot, lobsurf.models.feature_table) and gathered by row in every forward of the
    step; false: computed from the book fields per window (the same values)."""
    flat_parameters: bool = True
    """The online network's parameters, gradients and Adam moments, and the target
    network's parameters, as one buffer each (lobsurf.agent.flat), so the gradient clip's
    norm is one reduction and Adam with the Polyak step one element-wise kernel on every
    device; false: per-tensor (multi-tensor) ops, with ``fused_adam`` on CUDA."""
    fused_adam: bool = True
    """Without ``flat_parameters``, on CUDA: Adam's update as one fused multi-tensor kernel
    (torch._fused_adam_) instead of nine; CPU keeps the multi-tensor reference
    (lobsurf.agent.optim)."""
    c51_kernel: C51Kernel = "auto"
    """The learner's C51 target side (the target net's softmaxes at s and s', the greedy
    action at s', the categorical projection) as one Triton kernel
    (lobsurf.agent.c51_triton): "auto" on CUDA, "torch" the PyTorch functions (compiled
    with train.compile; the CPU path), "triton" insists. The same numbers to fp32
    rounding; on the H200 the compiled functions were eight kernels and 34 us on the
    step's critical path at B = 256 / 4 layers (benchmarks/RESULTS.md, thirty-third
    session)."""
    precision: Literal["fp32", "bf16"] = "fp32"
    """Network forwards (acting, target, online) in fp32, or under bf16 autocast (CUDA and
    CPU); the SSD decay, softmaxes, the C51 projection and every loss stay fp32 and the
    parameters and Adam state stay fp32 (lobsurf.models.precision)."""

    def __post_init__(self) -> None:
        for name in ("steps", "envs", "log_every", "checkpoint_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be auto, cpu or cuda, got {self.device!r}")
        if not 0 < self.controller_ema_rate <= 1:
            raise ValueError(f"controller_ema_rate must be in (0, 1], got {self.controller_ema_rate}")
        if self.max_rollbacks < 0:
            raise ValueError(f"max_rollbacks must be >= 0, got {self.max_rollbacks}")
        if not 0 < self.rollback_lr_factor < 1:
            raise ValueError(f"rollback_lr_factor must be in (0, 1), got {self.rollback_lr_factor}")
        if self.check_params_every < 0:
            raise ValueError(f"check_params_every must be >= 0, got {self.check_params_every}")
        if self.c51_kernel not in C51_KERNELS:
            raise ValueError(f"c51_kernel must be one of {', '.join(C51_KERNELS)}, got "
                             f"{self.c51_kernel!r}")
        if self.compile not in ("auto", True, False):
            raise ValueError(f"compile must be auto, true or false, got {self.compile!r}")
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be fp32 or bf16, got {self.precision!r}")
        from lobsurf.train.compile import parse_inductor_option

        for text in self.compile_inductor_options:
            parse_inductor_option(text)


@dataclass(frozen=True)
class RunConfig:
    """Everything one training run needs."""

    data: DataConfig = field(default_factory=DataConfig)
    sim: SimConfig = field(default_factory=lambda: SimConfig(fee_per_lot=DEFAULT_FEE_PER_LOT,
                                                                 stride=DEFAULT_STRIDE))
    labels: LabelConfig = field(default_factory=LabelConfig)
    features: FeatureConfig = field(default_factory=FeatureConfig)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    gates: GateConfig = field(default_factory=GateConfig)
    aux: AuxConfig = field(default_factory=AuxConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        if self.gates.frd_horizon_index >= self.labels.num_horizons:
            raise ValueError(f"gates.frd_horizon_index {self.gates.frd_horizon_index} is not a "
                             f"horizon index (labels has {self.labels.num_horizons})")
        if self.learner.batch_size > self.replay.capacity:
            raise ValueError("learner.batch_size exceeds replay.capacity")
        if self.learner.sample_before_collect and self.train.envs >= self.replay.capacity:
            raise ValueError(f"train.envs ({self.train.envs}) must be below replay.capacity "
                             f"({self.replay.capacity}) with learner.sample_before_collect "
                             "(a sample leaves out the slots the next write fills)")
        if self.train.envs > self.replay.capacity:
            raise ValueError(f"train.envs ({self.train.envs}) exceeds replay.capacity "
                             f"({self.replay.capacity})")

    @property
    def learner_batch(self) -> int:
        """Transitions per learning step (0 in the config = B)."""
        return self.learner.batch_size or self.train.envs


def _convert(value: Any, hint: Any, key: str) -> Any:
    origin = typing.get_origin(hint)
    if origin is Literal:
        if value not in typing.get_args(hint):
            raise UserError(f"{key}: expected one of {list(typing.get_args(hint))}, got {value!r}")
        return value
    if origin in (types.UnionType, typing.Union):
        raise UserError(f"{key}: optional settings are not configurable")  # none exist today
    if origin is tuple:
        (item, _ellipsis) = typing.get_args(hint)
        if not isinstance(value, (list, tuple)):
            raise UserError(f"{key}: expected a list, got {value!r}")
        return tuple(_convert(v, item, f"{key}[{i}]") for i, v in enumerate(value))
    if hint is bool:
        if not isinstance(value, bool):
            raise UserError(f"{key}: expected true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"{key}: expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise UserError(f"{key}: expected a string, got {value!r}")
        return value
    raise UserError(f"{key}: unsupported setting type {hint}")


def _build(cls: type, values: dict[str, Any], prefix: str, base: Any = None) -> Any:
    """``base`` (default ``cls()``) with the given values replaced. A section starts from
    the run's own default of that section, not from its class's: ``--set sim.window=32``
    keeps the run's fee and stride (RunConfig's sim default), not SimConfig's."""
    base = cls() if base is None else base
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in values.items():
        dotted = f"{prefix}{key}"
        if dotted in RETIRED_SETTINGS:
            raise UserError(f"{dotted} no longer exists: it was {RETIRED_SETTINGS[dotted]}")
        if key not in names:
            raise UserError(f"unknown key {dotted} (known: {', '.join(sorted(names))})")
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                raise UserError(f"{dotted}: expected a table of settings, got {value!r}")
            kwargs[key] = _build(hint, value, f"{dotted}.", getattr(base, key))
        else:
            kwargs[key] = _convert(value, hint, dotted)
    try:
        return dataclasses.replace(base, **kwargs)
    except ValueError as exc:
        where = prefix.rstrip(".") or "config"
        raise UserError(f"invalid setting in [{where}]: {exc}") from exc


def run_config_from_dict(values: dict[str, Any]) -> RunConfig:
    """Checked RunConfig from nested plain values (a parsed TOML file)."""
    return _build(RunConfig, values, "")


def run_config_to_dict(cfg: RunConfig) -> dict[str, Any]:
    return asdict(cfg)


def run_config_to_toml(cfg: RunConfig) -> str:
    return tomli_w.dumps(run_config_to_dict(cfg))


def parse_override(text: str) -> tuple[list[str], Any]:
    """``section.key=value`` -> (["section", "key"], value); the value is read as a TOML
    value (``3e-4``, ``true``, ``[1, 2]``, ``"x"``) and taken as a bare string otherwise."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise UserError(f"--set {text!r}: expected section.key=value")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return key.strip().split("."), value


def merge_overrides(values: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """A copy of ``values`` with each ``--set`` override applied."""
    merged = _deep_copy(values)
    for text in overrides:
        path, value = parse_override(text)
        node = merged
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise UserError(f"--set {text!r}: {part} is a setting, not a section")
        node[path[-1]] = value
    return merged


def _deep_copy(values: dict[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, dict) else v for k, v in values.items()}


def load_toml(path: str) -> dict[str, Any]:
    """Parse a TOML config file; one clear error for a missing or malformed file."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise UserError(f"{path}: no such config file") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML: {exc}") from None


def resolve_run_config(config_file: str | None, overrides: list[str],
                       base: dict[str, Any] | None = None) -> RunConfig:
    """Defaults (or ``base``, e.g. a resumed run's config, less its ``RETIRED_SETTINGS``) <-
    TOML file <- --set overrides."""
    values = without_retired(base or {})
    if config_file:
        values = _merge(values, load_toml(config_file))
    return run_config_from_dict(merge_overrides(values, overrides))


def without_retired(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A copy of ``values`` (nested settings, e.g. a saved run's config) without the keys
    ``RETIRED_SETTINGS`` names."""
    out = {}
    for key, value in values.items():
        dotted = f"{prefix}{key}"
        if dotted in RETIRED_SETTINGS:
            continue
        out[key] = without_retired(value, f"{dotted}.") if isinstance(value, dict) else value
    return out


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = _deep_copy(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
