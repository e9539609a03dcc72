"""Where the weights are: a Hub id, a local folder, a ``.gguf`` file (also inside a Hub repo) or ``embedded://``."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from mathneuro.models.embedded import EMBEDDED_SCHEME, embedded_gguf_path
from mathneuro.models.hub import hub_access

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


@dataclass(frozen=True)
class _Source:
    kind: str  # "gguf" or "pretrained"
    location: str  # gguf: the .gguf file; pretrained: a Hub id or a local folder


def _looks_local(text: str) -> bool:
    """True for strings that can only mean a path (so a missing one is an error, not a Hub id)."""
    if text.startswith(("/", "./", "../", "~", ".\\", "..\\")) or text in (".", ".."):
        return True
    if os.sep in text and text.count("/") > 1:
        return True
    return text.lower().endswith(".gguf") or not _HUB_ID.match(text)


def _gguf_in_folder(folder: Path, gguf_file: str | None) -> Path | None:
    if gguf_file:
        path = Path(gguf_file).expanduser()
        path = path if path.is_absolute() else folder / path
        if not path.is_file():
            raise ValueError(f"model.gguf_file: {path} does not exist")
        return path
    if (folder / "config.json").is_file():
        return None
    found = sorted(folder.glob("*.gguf"))
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise ValueError(f"model.gguf_file: {folder} holds several GGUF files ({names}); name one with model.gguf_file")
    raise ValueError(f"model.name_or_path: {folder} has neither a config.json nor a .gguf file")


def _resolve_source(name_or_path: str, gguf_file: str | None, cache_dir: str | None, revision: str | None) -> _Source:
    if not name_or_path or not str(name_or_path).strip():
        raise ValueError("model.name_or_path: empty; give a Hub id, a local folder, a .gguf file or embedded://smollm2-135m")
    text = str(name_or_path).strip()
    if text.startswith(EMBEDDED_SCHEME):
        return _Source("gguf", str(embedded_gguf_path(text[len(EMBEDDED_SCHEME):], cache_dir=cache_dir)))
    path = Path(text).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ValueError(f"model.name_or_path: {path} is a file but not a .gguf; give a folder or a .gguf file")
        return _Source("gguf", str(path))
    if path.is_dir():
        found = _gguf_in_folder(path, gguf_file)
        return _Source("gguf", str(found)) if found is not None else _Source("pretrained", str(path))
    if _looks_local(text):
        raise ValueError(f"model.name_or_path: local path {text!r} does not exist (resolved to {path.resolve()})")
    if gguf_file:  # a GGUF file inside a Hub repository
        from huggingface_hub import hf_hub_download

        try:
            local_only = hub_access(text, revision, filename=gguf_file)  # an unreachable Hub: one line, no retries
        except ValueError as exc:
            raise ValueError(f"model.name_or_path: cannot fetch {gguf_file!r} from Hub repo {text!r} "
                             f"({str(exc).split(': ', 1)[-1]})") from None
        try:
            return _Source("gguf", hf_hub_download(text, gguf_file, revision=revision, local_files_only=local_only))
        except Exception as exc:  # offline, missing repo or file: one message
            raise ValueError(f"model.name_or_path: cannot fetch {gguf_file!r} from Hub repo {text!r} ({exc})") from exc
    return _Source("pretrained", text)
