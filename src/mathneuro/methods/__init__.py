"""Stage 3, methods: which weights or neurons serve the skill, from cached statistics.

One file per built-in method (:mod:`~mathneuro.methods.mathneuro`, :mod:`~mathneuro.methods.wanda`,
:mod:`~mathneuro.methods.random`, :mod:`~mathneuro.methods.lape`,
:mod:`~mathneuro.methods.random_neurons`): its selection function, config dataclass and registration.
:mod:`~mathneuro.methods.spec` says what a method is, :mod:`~mathneuro.methods.registry` finds one by
name, :mod:`~mathneuro.methods.topk` holds the shared top-K helpers and
:mod:`~mathneuro.methods.selection` what every method returns.
"""

from mathneuro.methods.lape import (
    LAPE_RULES,
    LAPE_SHARES,
    LapeConfig,
    check_lape_share,
    lape_keep_count,
    lape_method,
    lape_min_top_k,
    lape_saturation_message,
    lape_saturation_top_k,
    lape_selection,
)
from mathneuro.methods.mathneuro import MathNeuroConfig, mathneuro_method, mathneuro_selection
from mathneuro.methods.random import (
    DEFAULT_REFERENCE,
    RandomConfig,
    random_method,
    random_selection,
    reference_config,
    weight_level_references,
)
from mathneuro.methods.random_neurons import (
    RandomNeuronsConfig,
    random_neuron_selection,
    random_neurons_method,
)
from mathneuro.methods.registry import METHOD_NAMES, METHODS, register_method, resolve_method
from mathneuro.methods.selection import Selection, SelectionFile
from mathneuro.methods.spec import LinearMethodConfig, MethodConfig, MethodInputs, MethodSpec
from mathneuro.methods.topk import (
    check_fraction,
    module_of,
    topk_count,
    topk_mask,
    topk_mask_rows,
    weight_scores,
)
from mathneuro.methods.wanda import WandaConfig, wanda_method, wanda_row_method, wanda_selection

__all__ = [
    "DEFAULT_REFERENCE", "LAPE_RULES", "LAPE_SHARES", "METHOD_NAMES", "METHODS", "LapeConfig", "LinearMethodConfig",
    "MathNeuroConfig", "MethodConfig", "MethodInputs", "MethodSpec", "RandomConfig", "RandomNeuronsConfig",
    "Selection", "SelectionFile", "WandaConfig", "check_fraction", "check_lape_share", "lape_keep_count",
    "lape_method", "lape_min_top_k", "lape_saturation_message", "lape_saturation_top_k", "lape_selection",
    "mathneuro_method", "mathneuro_selection", "module_of", "random_method", "random_neuron_selection",
    "random_neurons_method", "random_selection", "reference_config",
    "register_method", "resolve_method", "topk_count", "topk_mask", "topk_mask_rows", "wanda_method",
    "wanda_row_method", "wanda_selection", "weight_level_references", "weight_scores",
]
