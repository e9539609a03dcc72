"""mathneuro: find the weights of a language model that serve one skill, using forward passes only.

The pipeline, one package per stage: :mod:`mathneuro.data` → :mod:`mathneuro.statistics` →
:mod:`mathneuro.methods` → :mod:`mathneuro.edit` → :mod:`mathneuro.evaluation` →
:mod:`mathneuro.results` (what a point leaves behind) → :mod:`mathneuro.pipeline` (config, runner) →
:mod:`mathneuro.report` → :mod:`mathneuro.cli` (the commands); :mod:`mathneuro.models` and
:mod:`mathneuro.util` under them all.
"""

from mathneuro.util import lm_eval_plugin

__version__ = "0.2.0"  # the one place the version is written (pyproject reads it; CHANGELOG names it)

lm_eval_plugin.install()  # lm-eval's model "mathneuro-hf" (the decoding engine), registered without importing lm-eval
