"""Checks that run before any model loads: paths exist and can be read or written, model files are whole.

A missing local model path, an unreadable folder, a cache or output directory that cannot be
written, or a truncated/damaged ``.gguf`` / ``.safetensors`` file each raise
:class:`~mathneuro.pipeline.config.ConfigError` with one line naming the key, the file and what is
wrong — instead of a ``struct.error`` or ``SafetensorError`` minutes into a run. The file
checks read only headers (the GGUF tensor table, the safetensors JSON header) and compare
the extent of the tensor data with the file size, so they take milliseconds.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from mathneuro.methods.registry import METHODS
from mathneuro.models.folder_check import folder_problem
from mathneuro.pipeline.errors import ConfigError

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_EMBEDDED = "embedded://"
MinTopK = Callable[[Mapping[str, Sequence[int]]], float]
_CHECKED: dict[tuple, None] = {}  # (path, size, mtime) of files already found whole in this process


def check_writable_dir(directory: str | os.PathLike, key: str) -> None:
    """Raise ConfigError naming ``key`` unless files can be created in ``directory`` (created if missing)."""
    directory = Path(directory).expanduser()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".write-test.")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"{key}: cannot write to directory {str(directory)!r} ({reason}); "
                          "give a writable directory") from None


def looks_like_path(text: str) -> bool:
    """True for strings that can only mean a local path (a missing one is an error, not a Hub id)."""
    if text.startswith(("/", "./", "../", "~", ".\\", "..\\")) or text in (".", ".."):
        return True
    if text.count("/") > 1 or text.lower().endswith((".gguf", ".safetensors")):
        return True
    return not _HUB_ID.match(text)


def check_model_source(name_or_path: str, gguf_file: str | None = None, key: str = "model.name_or_path",
                       trust_remote_code: bool = False) -> None:
    """Refuse a local model path that is missing, unreadable, holds a damaged model file, or is a folder
    transformers cannot load (:mod:`mathneuro.models.folder_check`: config, weights, tokenizer).

    Hub ids and ``embedded://`` names pass (they are resolved when the model loads).
    """
    text = str(name_or_path or "").strip()
    if not text or text.startswith(_EMBEDDED):
        return
    path = Path(text).expanduser()
    if not path.exists():
        if looks_like_path(text):
            raise ConfigError(f"{key}: local path {text!r} does not exist; give an existing folder, a .gguf file, "
                              "a Hub id (org/name) or embedded://smollm2-135m")
        return  # a Hub id
    if not os.access(path, os.R_OK) or (path.is_dir() and not os.access(path, os.X_OK)):
        raise ConfigError(f"{key}: {str(path)!r} exists but cannot be read (permission denied)")
    if path.is_file():
        check_model_file(path, key)
        return
    if gguf_file:
        named = Path(gguf_file).expanduser()
        named = named if named.is_absolute() else path / named
        if not named.is_file():
            raise ConfigError(f"model.gguf_file: {str(named)!r} does not exist")
        check_model_file(named, "model.gguf_file")
        return
    files = sorted(path.glob("*.safetensors")) + sorted(path.glob("*.gguf"))
    for file in files:
        check_model_file(file, key)
    if (path / "config.json").is_file() or not any(path.glob("*.gguf")):  # read by transformers, not as GGUF
        problem = folder_problem(path, trust_remote_code)
        if problem:
            raise ConfigError(f"{key}: model folder {str(path)!r} cannot be loaded: {problem}")


def check_model_file(path: str | os.PathLike, key: str = "model.name_or_path") -> None:
    """Raise ConfigError if the ``.gguf`` / ``.safetensors`` file at ``path`` is damaged or incomplete."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".gguf", ".safetensors"):
        return
    try:
        st = path.stat()
        seen = (str(path.resolve()), st.st_size, st.st_mtime_ns)
        if seen in _CHECKED:
            return
        problem = gguf_problem(path) if suffix == ".gguf" else safetensors_problem(path)
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {str(path)!r} ({exc.strerror or exc})") from None
    if problem:
        raise ConfigError(f"{key}: model file {str(path)!r} is damaged or incomplete ({problem}); "
                          "download or convert it again")
    _CHECKED[seen] = None


def safetensors_problem(path: str | os.PathLike) -> str | None:
    """What is wrong with a safetensors file (header, offsets, data length), or None if it is whole."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"{size} bytes, shorter than a header"
        (length,) = struct.unpack("<Q", head)
        if 8 + length > size:
            return f"header claims {length} bytes but the file has {size}"
        try:
            header = json.loads(f.read(length))
        except (ValueError, UnicodeDecodeError):
            return "the header is not valid JSON"
    if not isinstance(header, dict):
        return "the header is not a JSON object"
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            start, stop = (int(v) for v in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            return f"tensor {name!r} has no valid data_offsets"
        if not 0 <= start <= stop:
            return f"tensor {name!r} has invalid data_offsets"
        end = max(end, stop)
    if 8 + length + end > size:
        return f"tensor data needs {8 + length + end} bytes but the file has {size}"
    return None


_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


class _Reader:
    """Little-endian reads from a byte buffer; running past its end raises EOFError."""

    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, n: int) -> int:
        start = self.pos
        self.pos += n
        if self.pos > len(self.buf):
            raise EOFError
        return start

    def unpack(self, fmt: str):
        size = struct.calcsize("<" + fmt)
        return struct.unpack_from("<" + fmt, self.buf, self.take(size))[0]

    def string(self) -> bytes:
        n = self.unpack("Q")
        start = self.take(n)
        return bytes(self.buf[start:start + n])

    def skip_value(self, vtype: int) -> object:
        if vtype in _GGUF_SCALARS:
            return self.unpack(_GGUF_SCALARS[vtype])
        if vtype == _GGUF_STRING:
            return self.string()
        if vtype == _GGUF_ARRAY:
            itype, count = self.unpack("I"), self.unpack("Q")
            if itype in _GGUF_SCALARS:
                self.take(struct.calcsize("<" + _GGUF_SCALARS[itype]) * count)
            else:
                for _ in range(count):
                    self.skip_value(itype)
            return None
        raise ValueError(f"unknown metadata value type {vtype}")


def gguf_problem(path: str | os.PathLike) -> str | None:
    """What is wrong with a GGUF file (header, metadata, tensor table, data extent), or None if it is whole."""
    import mmap

    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    size = os.path.getsize(path)
    if size < 24:
        return f"{size} bytes, shorter than a GGUF header"
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        r = _Reader(buf)
        try:
            if bytes(buf[:4]) != b"GGUF":
                return "no GGUF magic number at the start"
            r.take(4)
            version = r.unpack("I")
            count_fmt = "I" if version == 1 else "Q"
            n_tensors, n_kv = r.unpack(count_fmt), r.unpack(count_fmt)
            alignment = 32
            for _ in range(n_kv):
                name = r.string()
                value = r.skip_value(r.unpack("I"))
                if name == b"general.alignment" and isinstance(value, int) and value > 0:
                    alignment = value
            tensors = []
            for _ in range(n_tensors):
                name = r.string().decode("utf-8", "replace")
                dims = [r.unpack("Q") for _ in range(r.unpack("I"))]
                ttype, offset = r.unpack("I"), r.unpack("Q")
                tensors.append((name, dims, ttype, offset))
        except EOFError:
            return f"the file ends inside its header ({size} bytes)"
        except (struct.error, ValueError) as exc:
            return f"unreadable header: {exc}"
    data_start = -(-r.pos // alignment) * alignment
    for name, dims, ttype, offset in tensors:
        try:
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ttype)]
        except (ValueError, KeyError):
            continue  # a type this gguf version does not know: cannot size it, do not refuse it
        numel = 1
        for d in dims:
            numel *= d
        end = data_start + offset + numel // block * type_size
        if end > size:
            return f"tensor {name!r} needs bytes up to {end} but the file has {size}"
    return None


# --------------------------------------------------------------------------- selections that edit nothing


def _round_up(value: float, digits: int = 3) -> float:
    """``value`` rounded up to ``digits`` significant digits (so the printed K still selects)."""
    if value <= 0:
        return value
    scale = 10 ** (math.floor(math.log10(value)) - digits + 1)
    out = math.ceil(value / scale - 1e-9) * scale
    out = float(f"{out:.{digits}g}")
    return out if out >= value else float(f"{out + scale:.{digits}g}")


def smallest_top_k(method: str | MinTopK, shapes: Mapping[str, Sequence[int]]) -> float:
    """The smallest top-K for which a method keeps at least one weight somewhere, by its spec's
    ``min_top_k`` rule over the target shapes (``method``: its name, or the rule itself), rounded up to
    3 significant digits."""
    if not shapes:
        raise ConfigError("method.targets: matches no linear layer of this model")
    rule = METHODS.get(method).min_top_k if isinstance(method, str) else method
    if rule is None:
        raise ValueError(f"method {method!r} has no min_top_k rule: its smallest top-K is found by bisection")
    return _round_up(rule(shapes))


def check_top_k(method: str, top_k: float, shapes: Mapping[str, Sequence[int]], min_top_k: MinTopK | None = None
                ) -> None:
    """Refuse (ConfigError on ``top_k``) a top-K that selects no weight of any target matrix."""
    floor = smallest_top_k(min_top_k or method, shapes)
    if top_k < floor:
        raise ConfigError(f"top_k: {top_k:g} selects no weight in this model with method={method}; "
                          f"the smallest top-K that selects something here is {floor:g}")


def smallest_selecting_top_k(count_at: Callable[[float], int], lo: float, steps: int = 40) -> float | None:
    """The smallest K in (lo, 1] with ``count_at(K) > 0`` for a method whose selection grows with K
    (bisection; ``count_at(lo)`` is 0), rounded up to 3 significant digits; None if K=1 selects nothing."""
    hi = 1.0
    if count_at(hi) == 0:
        return None
    for _ in range(steps):
        mid = (lo + hi) / 2
        if count_at(mid) > 0:
            hi = mid
        else:
            lo = mid
        if hi - lo <= hi * 1e-4:
            break
    return min(1.0, _round_up(hi))


def refuse_empty_selection(cfg, spec, count_at: Callable[[float], int], shapes: Mapping[str, Sequence[int]]) -> None:
    """Raise ConfigError on ``top_k`` for a selection that edits nothing, with the smallest top-K that
    selects something in this model (``count_at(K)`` = how many a top-K of K selects). Methods whose
    spec gives no ``min_top_k`` rule are bisected; the spec's ``empty_hint`` says what else to try."""
    method, top_k = cfg.method.name, cfg.top_k
    what = "neuron" if spec.unit == "neurons" else "weight"
    hint = f"; {spec.empty_hint}" if spec.empty_hint else ""
    if spec.min_top_k is None:  # a count that grows with K, whatever rule turns K into a count
        floor = smallest_selecting_top_k(count_at, top_k) if top_k < 1 else None
        if floor is None:
            raise ConfigError(f"top_k: method={method} selects no {what} of this model even at top_k=1{hint}")
        raise ConfigError(f"top_k: {top_k:g} selects no {what} in this model with method={method}; "
                          f"the smallest top-K that selects something here is {floor:g}")
    floor = smallest_top_k(spec.min_top_k, shapes)
    if top_k < floor:
        check_top_k(method, top_k, shapes, spec.min_top_k)
    raise ConfigError(f"top_k: {top_k:g} selects no {what} with method={method}; the smallest top-K that "
                      f"selects anything in this model is at least {floor:g}; try a larger top_k{hint}")
