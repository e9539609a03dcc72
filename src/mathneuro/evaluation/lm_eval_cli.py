"""lm-eval's own command line, with mathneuro's backend ``mathneuro-hf`` registered::

    python -m mathneuro.evaluation.lm_eval_cli run --model mathneuro-hf \\
        --model_args pretrained=HuggingFaceTB/SmolLM2-135M,dtype=float32 --tasks gsm8k_cot --batch_size 8

Every argument is lm-eval's (``lm_eval --help``). The stock ``lm_eval`` command cannot find the backend by
itself: no lm-eval release (0.4.8 to 0.4.13, 0.5.0.dev1, main of August 2026) discovers model backends through
package entry points, so a backend is known only once the package that registers it is imported (here,
``mathneuro``, on which :mod:`mathneuro.util.lm_eval_plugin` registers it).
"""

from __future__ import annotations

import mathneuro  # noqa: F401  registers mathneuro-hf with lm-eval


def main() -> None:
    """Run lm-eval's command line (``sys.argv``) with ``mathneuro-hf`` available."""
    from lm_eval.__main__ import cli_evaluate

    cli_evaluate()


if __name__ == "__main__":
    main()
