"""The run's configuration: frozen dataclasses per part, composed into ``RunConfig``.

A run is configured by defaults, then a TOML file (``--config``), then ``--set
section.key=value`` overrides, in that order. ``run_config_from_dict`` checks every key and
type against the dataclass fields and names the key in its error (``unknown key
learner.lrr``, ``learner.lr: expected a float, got 'fast'``); range checks are the parts'
own ``__post_init__``. ``run_config_to_toml`` writes the resolved config into the run folder,
and reading it back gives an equal config. Settings that were removed (``RETIRED_SETTINGS``)
are dropped from a saved run's config when it is read back, and named with the reason when
a config file or ``--set`` gives them. The fees (``sim.fee_per_lot``, ``sim.fee_bps``) are
None until given: the store's recorded fee or a default applies (``lobsurf.sim.fees``), and
``lobsurf train`` writes the fee it resolved into the run folder's config.
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import tomli_w

from lobsurf.agent.config import (AuxConfig, GateConfig, LearnerConfig, NetworkConfig,
                                  PolicyConfig, ReplayConfig, RewardConfig)
from lobsurf.data.labels import LabelConfig
from lobsurf.errors import UserError
from lobsurf.models.config import RETIRED_FIELDS, EncoderConfig
from lobsurf.models.features import FeatureConfig
from lobsurf.pretrain.config import TOP_OF_BOOK_LEVELS
from lobsurf.sim.config import SimConfig


#: Training's default decision interval (snapshots per step): the agent decides every 10th
#: snapshot and holds through the rows between. The edge of a top-of-book signal needs
#: holds of tens of snapshots; at one decision per snapshot a trade spans ~50 steps of
#: bootstrapping and the learner first learns only the entry cost (docs/log.md).
DEFAULT_STRIDE = 10

#: why each removed speed switch went: its winner is always on, its loser's code is gone
#: (benchmarks/RESULTS.md, Defaults decided by measurement)
_SPEED = "a speed switch whose alternative lost its timing; the winner always runs"
#: Settings older runs may have saved that no longer exist, and why. Each chose only how the
#: same values were computed, so a run saved with one is read without it; a config file or
#: ``--set`` that gives one is refused with the reason.
RETIRED_SETTINGS: dict[str, str] = {
    **{f"encoder.{name}": why for name, why in RETIRED_FIELDS.items()},
    **{f"train.{name}": _SPEED for name in (
        "background_checkpoints", "defer_log_readout", "compile_combo_kernels",
        "compile_max_autotune", "compile_inductor_options", "overlap_target",
        "overlap_collect", "prioritize_learner", "collect_beside_backward", "split_target",
        "draw_ahead", "shared_generator", "feature_table", "flat_parameters", "fused_adam")},
    "train.c51_kernel": "the C51 target's Triton kernel, now under train.kernels",
    "train.check_params_every": "the interval of multi-process runs' identity check, which "
    "now runs before every checkpoint",
    "learner.sample_before_collect": "the learner always samples before the collect "
    "writes (the order that lets it run beside the collect; lobsurf.agent.step)"}
#: Settings that moved: a saved run's value is read at the new place; a config file or
#: ``--set`` that gives the old name is refused with the new one.
MOVED_SETTINGS: dict[str, str] = {"train.controller_ema_rate": "policy.action_ema_rate"}


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
    validation_fraction: float = 0.2
    """Share of the rows before the held-out purge kept at their end as a purged validation
    slice, on which the policy is chosen (lobsurf.training.selection.validate); the simulator trains on
    the rows before it. 0 = no validation (lobsurf eval trades the last checkpoint). A fifth
    leaves most rows to learn from and, on the bundled data, thousands of decisions to
    choose on (0.6 of a session)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.train_fraction < 1.0:
            raise ValueError(f"train_fraction must be in (0, 1), got {self.train_fraction}")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ValueError(f"validation_fraction must be in [0, 1), got "
                             f"{self.validation_fraction}")
        if self.normalizer_rows < 1:
            raise ValueError(f"normalizer_rows must be >= 1, got {self.normalizer_rows}")


@dataclass(frozen=True)
class TrainConfig:
    """Budget, seeds, device, bookkeeping and how the step runs."""

    steps: int = 2400
    """Total training steps of the run (a resumed run continues up to this). The default
    finishes in about ten minutes on 2 CPU cores with the default model, a few minutes on
    a GPU with validation (benchmarks/RESULTS.md, "Proof of learning")."""
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
    """Newest checkpoints kept in RUN/checkpoints (the chosen policy is kept apart)."""
    tensorboard: bool = False
    """Also write every metrics record to RUN/tb as TensorBoard scalars (train/, control/,
    time/ tags; needs the tensorboard package: pip install -e '.[tensorboard]')."""
    init_from: str = ""
    """A lobsurf pretrain run (or checkpoint file) whose normaliser and encoder start the run."""
    max_rollbacks: int = 3
    """Divergence (NaN/Inf) rollbacks to the last good checkpoint before the run stops."""
    rollback_lr_factor: float = 0.5
    """Each rollback multiplies the learning rate by this."""
    precision: Literal["fp32", "bf16"] = "fp32"
    """Network forwards in fp32, or under bf16 autocast (CUDA and CPU); the SSD decay,
    softmaxes, the C51 projection and every loss stay fp32 and the parameters and Adam state
    stay fp32 (lobsurf.models.precision)."""
    cuda_graph: bool = True
    """On CUDA, one process: the learning step is captured once as a CUDA graph and
    replayed (lobsurf.training.speed.cuda_graph); ignored on CPU and with several processes."""
    compile: Literal["auto", True, False] = "auto"
    """torch.compile (Inductor, static shapes, no graph breaks) of the networks and of the
    step's pure tensor functions (lobsurf.training.speed.compile); on CUDA inside the graph. Costs
    about a minute of compilation at the first learning steps. "auto": on for a one-process
    CUDA run, off on CPU, where the eager step is the reference and Inductor's C++ compile
    of every piece takes minutes (benchmarks/RESULTS.md, Defaults decided by measurement)."""
    kernels: bool = True
    """On CUDA, the hand-written Triton kernels (the encoder's one-chunk SSD scan and causal
    conv, the C51 target side) where they apply; false: the PyTorch functions everywhere,
    as on CPU, which the kernels are tested against (to rule a kernel out when a result
    looks wrong)."""
    reference: bool = False
    """Train with the readable reference step (lobsurf.agent.reference) instead of the
    production one: the same algorithm, and on CPU from one seed the same numbers, written
    plainly; eager, one process, no CUDA graph or compile, and slower. For reading, changing
    and checking the algorithm."""
    validate_every: int = 500
    """Steps between validations (and always at the last step): the greedy agent swept over
    the validation slice, the best checkpoint kept (lobsurf.training.selection.validate). The default
    run of 2,400 steps validates 5 times."""
    patience: int = 0
    """Stop after this many validations in a row without a new best (0 = never). The best
    checkpoint is kept either way, so stopping only saves compute; off by default, as the
    validation result of a few thousand decisions can stall for a while as learning goes on."""
    min_validation_trades: int = 30
    """Validation trades a checkpoint needs in each half of the validation slice, the one
    that chooses and the one that confirms (lobsurf.training.selection.choice): an interval of a mean
    over fewer trades is too coarse to trust (30: the usual sample size at which the mean's
    sampling distribution is near normal)."""
    false_edge_rate: float = 0.025
    """The chance that a run on a market with no edge chooses a checkpoint over hold, over
    all its validations: the one-sided level of the single t test that confirms the
    checkpoint chosen on the other half of the slice (0.025: the lower end of a 95 %
    interval above 0). Lower is stricter and needs a larger edge to find one."""

    def __post_init__(self) -> None:
        for name in ("steps", "envs", "log_every", "checkpoint_every", "keep_checkpoints",
                     "validate_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be auto, cpu or cuda, got {self.device!r}")
        if self.max_rollbacks < 0:
            raise ValueError(f"max_rollbacks must be >= 0, got {self.max_rollbacks}")
        if not 0 < self.rollback_lr_factor < 1:
            raise ValueError(f"rollback_lr_factor must be in (0, 1), got {self.rollback_lr_factor}")
        if self.compile not in ("auto", True, False):
            raise ValueError(f"compile must be auto, true or false, got {self.compile!r}")
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be fp32 or bf16, got {self.precision!r}")
        if self.patience < 0:
            raise ValueError(f"patience must be >= 0, got {self.patience}")
        if not 0 < self.false_edge_rate < 0.5:
            raise ValueError(f"false_edge_rate must be in (0, 0.5), got {self.false_edge_rate}")
        if self.min_validation_trades < 2:
            raise ValueError(f"min_validation_trades must be >= 2 (an interval needs two "
                             f"trades), got {self.min_validation_trades}")


@dataclass(frozen=True)
class RunConfig:
    """Everything one training run needs."""

    data: DataConfig = field(default_factory=DataConfig)
    # fees not given (None): the store's recorded fee, else a default that scales with the
    # instrument (lobsurf.sim.fees); SimConfig alone defaults to no fee
    sim: SimConfig = field(default_factory=lambda: SimConfig(fee_per_lot=None, fee_bps=None,
                                                             stride=DEFAULT_STRIDE))
    labels: LabelConfig = field(default_factory=LabelConfig)
    features: FeatureConfig = field(default_factory=lambda: FeatureConfig(
        book_levels=TOP_OF_BOOK_LEVELS, ofi_levels=TOP_OF_BOOK_LEVELS))
    """Per-snapshot features; by default those of the top of the book only, as pretraining.
    The deeper levels' sizes persist between refreshes, so their values name the stretch of
    the session a row lies in: with them the agent memorises its training rows (docs/log.md,
    2026-12-06: a greedy sweep profits on its training rows and loses held out on a market
    with no edge); a run can still ask for more levels."""
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
        if self.train.envs >= self.replay.capacity:
            raise ValueError(f"train.envs ({self.train.envs}) must be below replay.capacity "
                             f"({self.replay.capacity}): the learner's sample leaves out the "
                             "slots the next write fills")
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
        # ``X | None``: TOML has no null, so None is only ever a key left out
        given = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(given) != 1:
            raise UserError(f"{key}: unsupported setting type {hint}")
        return _convert(value, given[0], key)
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
        if dotted in MOVED_SETTINGS:
            raise UserError(f"{dotted} is now {MOVED_SETTINGS[dotted]}")
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
    """The config as TOML; a setting left at None (not given) is left out, as TOML has no
    null and reading the file back leaves it None again."""
    return tomli_w.dumps(_without_none(run_config_to_dict(cfg)))


def _without_none(values: dict[str, Any]) -> dict[str, Any]:
    return {k: _without_none(v) if isinstance(v, dict) else v for k, v in values.items()
            if v is not None}


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
    """Defaults (or ``base``, e.g. a resumed run's config, less its ``RETIRED_SETTINGS`` and
    with its ``MOVED_SETTINGS`` moved) <- TOML file <- --set overrides."""
    values = without_retired(moved(base or {}))
    if config_file:
        values = _merge(values, load_toml(config_file))
    return run_config_from_dict(merge_overrides(values, overrides))


def moved(values: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``values`` (a saved run's nested settings) with every ``MOVED_SETTINGS``
    key at its new place (a value already there wins)."""
    out = _deep_copy(values)
    for old, new in MOVED_SETTINGS.items():
        *old_path, old_key = old.split(".")
        node = out
        for part in old_path:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or old_key not in node:
            continue
        value = node.pop(old_key)
        *new_path, new_key = new.split(".")
        target = out
        for part in new_path:
            target = target.setdefault(part, {})
        target.setdefault(new_key, value)
    return out


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
