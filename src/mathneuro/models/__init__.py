"""Load a causal LM and its tokenizer from a Hub id, a local folder, a ``.gguf`` file or ``embedded://``.

Everything downstream (statistics, selection, interventions) needs plain floating-point
``nn.Linear`` weights, so GGUF files are always dequantised. Dequantising takes 15-80 s, so a
GGUF is converted once into a plain safetensors folder in the mathneuro cache and that folder
is loaded from then on (a few seconds).

dtype policy (``dtype="auto"``):
  * GGUF sources: bfloat16 (float16 on a CUDA device without bfloat16). The weights are 4-8-bit
    grids anyway, and bfloat16 matmuls are 2-6x faster than float32 on CPU.
  * other checkpoints: the dtype their config records; float16 checkpoints load as bfloat16 on
    CPU (float16 CPU kernels are slow or missing); with no recorded dtype, float32 on CPU and
    bfloat16 on a GPU (float16 on a CUDA device without bfloat16).

Modules: :mod:`~mathneuro.models.devices` (device and dtype policy), :mod:`~mathneuro.models.sources`
(what a ``name_or_path`` means), :mod:`~mathneuro.models.gguf` (the conversion cache),
:mod:`~mathneuro.models.loading` (:func:`load_model`), :mod:`~mathneuro.models.identity`
(:func:`model_identity`).
"""

from mathneuro.models.devices import ALLOWED_DEVICES, ALLOWED_DTYPES, DTYPES, resolve_device, resolve_dtype
from mathneuro.models.identity import model_identity, weights_fingerprint
from mathneuro.models.loading import load_model

__all__ = [
    "ALLOWED_DEVICES", "ALLOWED_DTYPES", "DTYPES", "load_model", "model_identity", "resolve_device", "resolve_dtype",
    "weights_fingerprint",
]
