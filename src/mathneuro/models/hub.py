"""Whether a Hub id can be loaded, asked before loading: an unreachable Hub costs one short wait and one line.

Left alone, ``huggingface_hub`` retries an unreachable Hub for about half a minute, printing each attempt,
before transformers says it could not connect. :func:`hub_access` instead asks once per process whether
the Hub answers (a TCP connection to its endpoint, or to the proxy, within a few seconds). When it does
not, or ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` is set, a model already in the local Hugging Face
cache is loaded from there (``local_files_only``) and any other is refused at once, naming the id.
"""

from __future__ import annotations

import functools
import os
import socket
import threading
from pathlib import Path
from urllib.parse import urlsplit

REACH_TIMEOUT = 5.0  # seconds the Hub (or the proxy) has to accept a connection
_TRUE = ("1", "true", "yes", "on")


def offline_requested() -> bool:
    """True when the user asked for no Hub traffic (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE``)."""
    return any(os.environ.get(name, "").strip().lower() in _TRUE for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_endpoint() -> str:
    """The Hub's address: ``$HF_ENDPOINT``, else huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def hub_cache() -> Path:
    """The Hugging Face cache of models: ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser() / "hub"


def _proxy(scheme: str) -> str | None:
    for name in (f"{scheme}_proxy", f"{scheme.upper()}_PROXY", "all_proxy", "ALL_PROXY"):
        if os.environ.get(name):
            return os.environ[name]
    return None


@functools.lru_cache(maxsize=8)
def unreachable(endpoint: str, timeout: float = REACH_TIMEOUT) -> str | None:
    """Why ``endpoint`` (or the proxy in front of it) takes no connection, or None when it does."""
    url = urlsplit(endpoint)
    target = urlsplit(_proxy(url.scheme or "https") or endpoint)
    host = target.hostname or ""
    port = target.port or (443 if (target.scheme or "https") == "https" else 80)
    outcome: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            outcome.append(None)
        except OSError as exc:
            outcome.append(exc.strerror or str(exc) or type(exc).__name__)

    worker = threading.Thread(target=connect, daemon=True)  # name resolution itself has no timeout
    worker.start()
    worker.join(timeout + 1.0)
    return outcome[0] if outcome else f"no answer from {host} within {timeout:g} s"


def in_cache(repo_id: str, revision: str | None = None, filename: str = "config.json") -> bool:
    """Whether ``filename`` of ``repo_id`` at ``revision`` lies in the local Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, filename, cache_dir=str(hub_cache()), revision=revision)
    except Exception:  # noqa: BLE001 - a malformed id or cache: not cached
        return False
    return isinstance(found, str)


def hub_access(repo_id: str, revision: str | None = None, filename: str = "config.json",
               key: str = "model.name_or_path") -> bool:
    """Whether to load ``repo_id`` from the local cache only (True) or through the Hub (False); a
    ValueError naming ``key`` when it can be neither (see the module docstring)."""
    if offline_requested():
        if in_cache(repo_id, revision, filename):
            return True
        why = "HF_HUB_OFFLINE is set"
    else:
        why = unreachable(hub_endpoint())
        if why is None:
            return False
        if in_cache(repo_id, revision, filename):
            return True
        why = f"the Hub ({hub_endpoint()}) cannot be reached: {why}"
    raise ValueError(f"{key}: Hub id {repo_id!r} is not in the local Hugging Face cache ({hub_cache()}) and "
                     f"{why}; download it where the Hub answers (`hf download {repo_id}`), or give a local "
                     "folder, a .gguf file or embedded://smollm2-135m")
