"""mathneuro's lm-eval model backend, ``mathneuro-hf``, put into lm-eval's model registry on ``import mathneuro``.

``import mathneuro`` stays light: it imports neither lm-eval nor torch. :func:`install` registers the
backend at once when lm-eval's registry is already imported, else it waits on ``sys.meta_path`` for
the first import of ``lm_eval.api.registry`` and registers right after that module has run. Either
way the registry holds a lazy ``"module:class"`` entry, so the backend's own module (torch,
transformers) is imported only when someone asks lm-eval for ``mathneuro-hf``.

lm-eval's registry imports its own backends (``lm_eval.models``) only while it is empty; an entry of
ours would keep it from doing so, so :func:`register` imports them first (a table of names, cheap).

Lazy entries need lm-eval's ``Registry`` (0.4.10 and later). With 0.4.8 and 0.4.9, whose registry is a
plain dict of classes, the backend registers itself when its module is imported
(``import mathneuro.evaluation.decoding.backend``).
"""

from __future__ import annotations

import importlib.abc
import logging
import sys
from types import ModuleType
from typing import Any

log = logging.getLogger("mathneuro")

BACKEND = "mathneuro-hf"  # lm-eval's name of the backend (``--model mathneuro-hf``)
BACKEND_CLASS = "mathneuro.evaluation.decoding.backend:MathneuroHFLM"  # where it lives (imported on first use)
REGISTRY_MODULE = "lm_eval.api.registry"


def register() -> bool:
    """Put ``mathneuro-hf`` into lm-eval's model registry (a lazy entry); True when it is there afterwards."""
    import lm_eval.models  # noqa: F401  lm-eval's own backends first (its registry imports them only while empty)
    from lm_eval.api import registry

    models = getattr(registry, "model_registry", None)
    if models is None or not hasattr(models, "register"):  # lm-eval < 0.4.10: the backend's module registers itself
        return BACKEND in getattr(registry, "MODEL_REGISTRY", {})
    if BACKEND in models:
        return True
    try:
        models.register(BACKEND, target=BACKEND_CLASS)
    except (TypeError, ValueError) as exc:  # a frozen registry, or the name taken by another backend
        log.warning("lm-eval backend %s not registered: %s", BACKEND, exc)
        return False
    return True


def _register_quietly() -> None:
    try:
        register()
    except Exception as exc:  # noqa: BLE001 - a broken lm-eval must break neither ``import mathneuro`` nor lm-eval
        log.warning("lm-eval backend %s not registered: %s", BACKEND, exc)


class _ThenRegister(importlib.abc.Loader):
    """The loader of ``lm_eval.api.registry``, which registers the backend after the module has run."""

    def __init__(self, loader: Any, finder: _RegistryWatch) -> None:
        self.loader, self.finder = loader, finder

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.finder.remove()
        _register_quietly()

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ... of the wrapped loader
        return getattr(self.loader, name)


class _RegistryWatch(importlib.abc.MetaPathFinder):
    """Finds ``lm_eval.api.registry`` with the finders after it and hands out its spec with :class:`_ThenRegister`."""

    def find_spec(self, fullname: str, path=None, target=None):
        if fullname != REGISTRY_MODULE:
            return None
        for finder in list(sys.meta_path):
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _ThenRegister(spec.loader, self)
                return spec
        return None

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def install() -> None:
    """Register now if lm-eval's registry is imported, else on its first import (once per process)."""
    if REGISTRY_MODULE in sys.modules:
        _register_quietly()
        return
    if not any(isinstance(f, _RegistryWatch) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegistryWatch())


__all__ = ["BACKEND", "BACKEND_CLASS", "install", "register"]
