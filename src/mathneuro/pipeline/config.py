"""Structured configs: dataclasses that type-check every config group before any model loads.

Registered in Hydra's ConfigStore as the schema of ``conf/config.yaml`` and of each group
(``model``, ``task``, ``filter``, ``eval``, ``logger``); ``method`` is typed per method by
:func:`mathneuro.methods.registry.resolve_method` and ``intervention`` per intervention by
:func:`mathneuro.edit.interventions.registry.resolve_intervention`.
:func:`validate` checks values OmegaConf's types cannot (ranges, names) and raises
:class:`ConfigError` with one line naming the key and what is allowed; it returns the method and the
intervention it resolved (:class:`Plugins`), so that a point resolves each once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from mathneuro.data.datasets import DatasetConfig
from mathneuro.edit.interventions.registry import default_intervention_node, resolve_intervention
from mathneuro.edit.interventions.spec import InterventionSpec
from mathneuro.evaluation import EvalConfig
from mathneuro.evaluation.task_metrics import check_metric_key
from mathneuro.methods.registry import default_method_node, resolve_method
from mathneuro.methods.spec import MethodSpec
from mathneuro.methods.topk import check_fraction
from mathneuro.models.embedded import cache_root
from mathneuro.pipeline.errors import ConfigError

DTYPES = ("auto", "float32", "bfloat16", "float16")
LOGGERS = ("wandb", "none")
WANDB_MODES = ("offline", "online", "disabled")


if not OmegaConf.has_resolver("mathneuro_cache_root"):  # the one default cache root, also for load_model
    OmegaConf.register_new_resolver("mathneuro_cache_root", lambda: str(cache_root()))


@dataclass
class ModelConfig:
    name: str = MISSING  # short name used in results and W&B tags
    name_or_path: str = MISSING  # Hub id, local folder, .gguf file, or embedded://smollm2-135m
    gguf_file: Optional[str] = None
    revision: Optional[str] = None
    dtype: str = "auto"
    device: str = "auto"
    device_map: Optional[str] = None
    trust_remote_code: bool = False
    # The upstream checkpoint ties lm_head to the input embeddings (its config's tie_word_embeddings), though the
    # loaded copy (e.g. from a GGUF) may not: results then also give fractions of the upstream count. None: unknown.
    tied_embeddings_upstream: Optional[bool] = None


@dataclass
class InterventionSchema:
    """The schema of a scalar intervention's group file (``intervention_schema``); the ``intervention`` node
    itself is typed per intervention (its config dataclass, see mathneuro.edit.interventions)."""

    name: str = "prune"
    scalar: float = 0.0


@dataclass
class LoggerConfig:
    name: str = "wandb"
    project: str = "mathneuro"
    entity: Optional[str] = None
    mode: str = "offline"
    tags: list[str] = field(default_factory=list)
    log_report: bool = True
    init_timeout: float = 30.0  # seconds an online run may take to start; then the point logs offline
    # the W&B group of every point and the report; default: <experiment|sweep>-<date>_<time>
    group: Optional[str] = None
    # a template over the point's fields, e.g. "{method} K={K} s={scalar}"; default: short
    run_name: Optional[str] = None
    verbose: bool = False  # W&B's own banners and hints (off: mathneuro.log says where each run went)
    artifacts: bool = True  # log the selection (saving selection.safetensors), results and an exported model


@dataclass
class ObjectiveConfig:
    """What the runner returns to a sweeper: relative gain of ``metric`` after the edit, minus a
    penalty when ``constraint`` drops (relatively) by more than ``tolerance``."""

    metric: str = ""
    constraint: Optional[str] = None
    tolerance: float = 0.02


@dataclass
class ReportConfig:
    """The sweep report's paired verdicts (:mod:`mathneuro.report.inference`): an equivalence margin
    and named families of rows whose decisions are Holm-adjusted (``NAME[:key=value[|value][,...]]``)."""

    margin: Optional[float] = None
    families: list[str] = field(default_factory=list)


#: The grammar of one ``report.families`` entry (parsed by mathneuro.report.inference.parse_family).
FAMILY_SPEC = re.compile(r"^[\w.\-]+(:[\w./\-]+=[^,=]+(,[\w./\-]+=[^,=]+)*)?$")


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    task: DatasetConfig = field(default_factory=DatasetConfig)
    # the filter set; null where ``filters`` gives several (each ``filters`` option sets it to null)
    filter: Optional[DatasetConfig] = None
    # several filter sets in one point (``filters=[race,mmlu]``): their union is filtered out; replaces ``filter``
    filters: dict[str, DatasetConfig] = field(default_factory=dict)
    # The method's own settings (see mathneuro.methods.registry); typed per method by resolve_method.
    method: Any = field(default_factory=default_method_node)
    # The intervention's own settings (see mathneuro.edit.interventions); typed per intervention by
    # resolve_intervention.
    intervention: Any = field(default_factory=default_intervention_node)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    top_k: float = 0.05
    num_samples: int = 500
    bootstrap: bool = True
    seed: int = 0
    max_length: int = 512
    batch_size: int = 8
    save_selection: bool = False
    export_model: bool = False  # write the edited model to <run dir>/model/ (save_pretrained + card)
    baseline: bool = True
    resume: bool = True
    progress: bool = True
    # seconds between checkpoints of a statistics pass (mathneuro.statistics.checkpoint)
    checkpoint_every_s: float = 10.0
    # mathneuro.models.embedded.cache_root(): $MATHNEURO_CACHE, else ~/.cache/mathneuro
    cache_dir: str = "${mathneuro_cache_root:}"


@dataclass(frozen=True)
class Plugins:
    """A point's method and intervention as :func:`validate` resolved them: each one's spec and typed config."""

    method: MethodSpec
    method_cfg: Any
    intervention: InterventionSpec
    intervention_cfg: Any


def _allowed(key: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}: unknown value {value!r}; allowed: {', '.join(map(str, allowed))}")


def validate(cfg: Any) -> Plugins:
    """Check every value a type cannot; raise ConfigError naming the first bad key. Return the method and
    the intervention ``cfg`` names, resolved (each once)."""
    try:
        return _check(cfg)
    except ConfigError:
        raise
    except ValueError as exc:  # the library's own checks name the key too
        raise ConfigError(str(exc)) from None


def _check(cfg: Any) -> Plugins:
    check_fraction(cfg.top_k, "top_k")
    if cfg.num_samples < 1:
        raise ConfigError(f"num_samples: must be >= 1, got {cfg.num_samples}")
    if cfg.batch_size < 1:
        raise ConfigError(f"batch_size: must be >= 1, got {cfg.batch_size}")
    if not cfg.checkpoint_every_s >= 0:
        raise ConfigError(f"checkpoint_every_s: must be >= 0 seconds, got {cfg.checkpoint_every_s!r}")
    if cfg.max_length < 1:
        raise ConfigError(f"max_length: must be >= 1, got {cfg.max_length}")
    plugins = Plugins(*resolve_method(cfg.method), *resolve_intervention(cfg.intervention))
    _allowed("model.dtype", cfg.model.dtype, DTYPES)
    device = str(cfg.model.device)
    if not (device in ("auto", "cpu", "cuda", "mps") or device.startswith("cuda:")):
        raise ConfigError(f"model.device: unknown value {device!r}; allowed: auto, cpu, cuda, cuda:N, mps")
    _allowed("logger.name", cfg.logger.name, LOGGERS)
    _allowed("logger.mode", cfg.logger.mode, WANDB_MODES)
    if not cfg.logger.init_timeout > 0:
        raise ConfigError(f"logger.init_timeout: must be > 0 seconds, got {cfg.logger.init_timeout!r}")
    if cfg.logger.run_name:
        fields = ("model", "task", "filter", "method", "top_k", "K", "intervention", "scalar", "seed", "num_samples",
                  "reference", "share")
        try:
            str(cfg.logger.run_name).format(**{k: "" for k in fields})
        except (KeyError, IndexError, ValueError) as err:
            raise ConfigError(f"logger.run_name: {cfg.logger.run_name!r} names an unknown field ({err}); "
                              f"fields: {', '.join(fields)}") from None
    if cfg.report.margin is not None and not cfg.report.margin > 0:
        raise ConfigError(f"report.margin: must be > 0, got {cfg.report.margin}")
    for spec in cfg.report.families:
        if not FAMILY_SPEC.match(str(spec).strip()):
            raise ConfigError(f"report.families: {spec!r} is not NAME or NAME:key=value[|value][,key=value...]")
    cfg.task.validate("task")
    if cfg.filter is None and not cfg.filters:
        raise ConfigError("filter: no filter set; choose one (filter=race) or several (filters=[race,mmlu])")
    if cfg.filter is not None:
        cfg.filter.validate("filter")
    for name, dataset in (cfg.filters or {}).items():
        dataset.validate(f"filters.{name}")
    cfg.eval.validate()
    if not cfg.objective.tolerance >= 0:
        raise ConfigError(f"objective.tolerance: must be >= 0 (a relative drop), got {cfg.objective.tolerance!r}")
    for key in ("metric", "constraint"):  # a misnamed one would make every trial's objective NaN, or unconstrained
        if getattr(cfg.objective, key):
            check_metric_key(f"objective.{key}", str(getattr(cfg.objective, key)), cfg.eval)
    return plugins


#: Schemas of single groups, for a user's own group file (``defaults: [/model_schema@_here_, _self_]``).
GROUP_SCHEMAS = {"model_schema": ModelConfig, "dataset_schema": DatasetConfig,
                 "intervention_schema": InterventionSchema, "eval_schema": EvalConfig, "logger_schema": LoggerConfig}


def own_settings(node: Any, resolve: Any) -> Any:
    """A ``method`` / ``intervention`` node (a plain dict) cut to the keys of the plugin it names (``name``,
    ``_target_`` and its own settings): the schema carries every built-in's, so that a sweep across
    methods or interventions may set them, but only the chosen one's apply. ``resolve``: resolve_method
    or resolve_intervention; a node that does not resolve is returned as it is."""
    if not isinstance(node, dict):
        return node
    try:
        spec, _ = resolve(node)
    except Exception:  # noqa: BLE001 - a plugin that does not resolve: keep its node as given
        return node
    return settings_of(node, spec)


def settings_of(node: Any, spec: MethodSpec | InterventionSpec) -> Any:
    """A ``method`` / ``intervention`` node (a plain dict) cut to the keys of ``spec``, the plugin it names
    (``name``, ``_target_`` and its own settings); a node that is no dict is returned as it is."""
    if not isinstance(node, dict):
        return node
    own = set(spec.settings()) | {"name", "_target_"}
    return {k: v for k, v in node.items() if k in own}


def help_config(*, _root_: Any) -> str:
    """The config ``mathneuro --help`` lists (the ``${mathneuro_help_config:}`` of ``hydra.help.template``):
    the composed config without ``hydra``, its ``method`` and ``intervention`` nodes cut to the chosen
    method's and intervention's own settings (:func:`own_settings`) and without ``filter`` where
    ``filters`` replaces it; ``$`` doubled for the template that embeds it."""
    data = OmegaConf.to_container(_root_, resolve=False)
    data.pop("hydra", None)
    for key, resolve in (("method", resolve_method), ("intervention", resolve_intervention)):
        if isinstance(data.get(key), dict):
            try:
                resolved = OmegaConf.to_container(_root_[key], resolve=True)
            except Exception:  # noqa: BLE001 - an interpolation that does not resolve: list the node as it is
                continue
            kept = own_settings(resolved, resolve)
            data[key] = {k: v for k, v in data[key].items() if k in kept}
    if data.get("filters") and data.get("filter") is None:
        data.pop("filter", None)
    return OmegaConf.to_yaml(data).replace("$", "$$")


def register_configs() -> None:
    """Register the schema of the primary config (which types every group) and of each group in Hydra's
    ConfigStore. They sit at its root, not in the groups, so that ``mathneuro --help`` lists only the
    options a user picks from."""
    if not OmegaConf.has_resolver("mathneuro_help_config"):
        OmegaConf.register_new_resolver("mathneuro_help_config", help_config)
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    for name, node in GROUP_SCHEMAS.items():
        cs.store(name=name, node=node)
