"""Stage 3, methods: which weights or neurons serve the skill, from cached statistics.

:mod:`~mathneuro.methods.registry` finds methods by name (``register_method``, ``resolve_method``);
:mod:`~mathneuro.methods.selection` is what every method returns (``Selection``).
"""

from mathneuro.methods.builtin import (
    LapeConfig,
    MathNeuroConfig,
    RandomConfig,
    RandomNeuronsConfig,
    WandaConfig,
)
from mathneuro.methods.functions import (
    LAPE_RULES,
    LAPE_SHARES,
    LAPE_SIZED,
    METHODS,
    check_fraction,
    check_lape_share,
    lape_keep_count,
    lape_min_top_k,
    lape_saturation_message,
    lape_saturation_top_k,
    lape_selection,
    mathneuro_selection,
    module_of,
    random_neuron_selection,
    random_selection,
    topk_count,
    topk_mask,
    topk_mask_rows,
    wanda_selection,
    weight_scores,
)
from mathneuro.methods.registry import (
    LinearMethodConfig,
    MethodConfig,
    MethodInputs,
    MethodSpec,
    register_method,
    resolve_method,
)
from mathneuro.methods.selection import Selection, SelectionFile

__all__ = [
    "LAPE_RULES", "LAPE_SHARES", "LAPE_SIZED", "METHODS", "LapeConfig", "LinearMethodConfig", "MathNeuroConfig",
    "MethodConfig", "MethodInputs", "MethodSpec", "RandomConfig", "RandomNeuronsConfig", "Selection",
    "SelectionFile", "WandaConfig", "check_fraction", "check_lape_share", "lape_keep_count", "lape_min_top_k",
    "lape_saturation_message", "lape_saturation_top_k", "lape_selection", "mathneuro_selection", "module_of",
    "random_neuron_selection", "random_selection", "register_method", "resolve_method", "topk_count", "topk_mask",
    "topk_mask_rows", "wanda_selection", "weight_scores",
]
