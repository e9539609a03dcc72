"""Devices and dtypes: ``model.device`` and ``model.dtype`` as torch objects, by the policy of
:mod:`mathneuro.models` (``auto`` = bfloat16 for GGUF, the checkpoint's dtype otherwise)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
ALLOWED_DTYPES = ("auto", *DTYPES)
ALLOWED_DEVICES = ("auto", "cpu", "cuda", "cuda:N", "mps")


def resolve_device(device: str | torch.device) -> torch.device:
    """Turn ``auto``/``cpu``/``cuda``/``cuda:N``/``mps`` into a torch.device (auto = cuda if available).

    Raises ValueError naming ``model.device`` for unknown values or an unavailable GPU.
    """
    if isinstance(device, torch.device):
        device = str(device)
    text = str(device).strip().lower()
    allowed = ", ".join(ALLOWED_DEVICES)
    if text == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    if text == "cpu":
        return torch.device("cpu")
    if text == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ValueError("model.device: 'mps' requested but Apple MPS is not available here; allowed: auto, cpu")
        return torch.device("mps")
    match = re.fullmatch(r"cuda(?::(\d+))?", text)
    if not match:
        raise ValueError(f"model.device: unknown device {device!r}; allowed: {allowed}")
    if not torch.cuda.is_available():
        raise ValueError(f"model.device: {device!r} requested but CUDA is not available here; allowed: auto, cpu")
    if match.group(1) is not None:
        index = int(match.group(1))
        count = torch.cuda.device_count()
        if index >= count:
            raise ValueError(f"model.device: {device!r} requested but only {count} CUDA device(s) exist")
        return torch.device("cuda", index)
    return torch.device("cuda")


def _as_torch_dtype(value: Any) -> torch.dtype | None:
    """A config's recorded dtype (torch.dtype or its name) as a torch.dtype, or None if unknown."""
    if isinstance(value, torch.dtype):
        return value
    if isinstance(value, str):
        return DTYPES.get(value.replace("torch.", ""))
    return None


def _check_dtype_name(dtype: str) -> str:
    text = str(dtype).strip().lower().replace("torch.", "")
    aliases = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32"}
    text = aliases.get(text, text)
    if text not in ALLOWED_DTYPES:
        raise ValueError(f"model.dtype: unknown dtype {dtype!r}; allowed: {', '.join(ALLOWED_DTYPES)}")
    return text


def resolve_dtype(
    dtype: str,
    device: str | torch.device,
    *,
    checkpoint_dtype: torch.dtype | str | None = None,
    gguf: bool = False,
) -> torch.dtype:
    """The torch dtype to load in: an explicit name as given, ``auto`` by the policy in the module docstring.

    ``checkpoint_dtype`` is the dtype the checkpoint's config records (if any); ``gguf`` marks a GGUF source.
    """
    name = _check_dtype_name(dtype)
    if name != "auto":
        return DTYPES[name]
    dev = resolve_device(device) if not isinstance(device, torch.device) else device
    accelerated = dev.type != "cpu"
    no_bf16 = dev.type == "cuda" and not torch.cuda.is_bf16_supported()
    low = torch.float16 if no_bf16 else torch.bfloat16
    if gguf:
        return low
    recorded = _as_torch_dtype(checkpoint_dtype)
    if recorded is not None:
        if recorded == torch.float16 and not accelerated:
            return torch.bfloat16
        return recorded
    return low if accelerated else torch.float32


_BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})  # x86 AVX512-BF16 / AMX; Arm "bf16" feature


def _cpuinfo_fields(cpuinfo: str | None = None) -> list[tuple[str, str]]:
    """``/proc/cpuinfo`` (or the text given) as (lower-case key, stripped value) pairs; empty where unreadable."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return []
    fields = []
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.append((key.strip().lower(), value.strip()))
    return fields


def _cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU's feature flags (x86 ``flags``, Arm ``Features``); empty where unknown."""
    flags: set[str] = set()
    for key, value in _cpuinfo_fields(cpuinfo):
        if key in ("flags", "features"):
            flags.update(value.split())
    return flags


def cpu_has_bf16(cpuinfo: str | None = None) -> bool | None:
    """Whether the CPU has bfloat16 arithmetic instructions, from ``/proc/cpuinfo`` (or the text given);
    None where that cannot be told (no such file, no flags line)."""
    flags = _cpu_flags(cpuinfo)
    return bool(flags & _BF16_CPU_FLAGS) if flags else None


def slow_dtype_warning(dtype: torch.dtype, device: torch.device, cpuinfo: str | None = None) -> str | None:
    """One line to warn with when ``dtype`` will be much slower than float32 on ``device``, else None.

    bfloat16 on a CPU without bf16 instructions is emulated: on an idle AVX2-only EPYC a 512-token
    Qwen-0.5B prefill at one thread took 40.2 s in bf16 against 6.9 s in float32.
    """
    if torch.device(device).type != "cpu" or dtype != torch.bfloat16 or cpu_has_bf16(cpuinfo) is not False:
        return None
    return ("model.dtype: bfloat16 on a CPU without bf16 instructions (no avx512_bf16 / amx_bf16): matrix "
            "products are emulated and run several times slower than float32 here; model.dtype=float32 is faster "
            "on this machine (and uses 2x the memory)")


#: The CPU features that pick the kernels of a float matrix product (bf16 tile / vector units, vector width):
#: two CPUs of one model name that differ in them round differently (AMX against AVX512-BF16 in bf16).
KERNEL_CPU_FLAGS = ("amx_bf16", "avx512_bf16", "avx512f", "avx2", "bf16", "sve")


def cpu_kernel_flags(cpuinfo: str | None = None) -> list[str]:
    """Which of :data:`KERNEL_CPU_FLAGS` this CPU has (``/proc/cpuinfo`` or the text given); empty where unknown."""
    flags = _cpu_flags(cpuinfo)
    return [f for f in KERNEL_CPU_FLAGS if f in flags]


def cpu_hardware() -> dict[str, Any]:
    """This CPU as :func:`describe_hardware` records it: ``device_name``, and ``cpu_flags`` where known."""
    flags = cpu_kernel_flags()  # one model name covers CPUs with and without bf16 units
    return {"device_name": cpu_name(), **({"cpu_flags": flags} if flags else {})}


def machine_kind(hardware: dict[str, Any] | None) -> str | None:
    """The kind of machine a record was computed on, for telling whether two records share float kernels:
    the device's name, with its CPU's kernel flags where recorded (``AMD EPYC (avx512_bf16+avx512f+avx2)``);
    None where nothing is recorded."""
    if not hardware:
        return None
    name = hardware.get("device_name") or hardware.get("device")
    if name is None:
        return None
    flags = hardware.get("cpu_flags")
    return f"{name} ({'+'.join(flags)})" if flags else str(name)


def cpu_name(cpuinfo: str | None = None) -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one), else the platform's word for it."""
    import platform

    for key, value in _cpuinfo_fields(cpuinfo):
        if key in ("model name", "hardware", "cpu model") and value:
            return value
    return platform.processor() or platform.machine() or "cpu"


def describe_hardware(model: torch.nn.Module) -> dict[str, Any]:
    """Where and how ``model`` runs: device, its name, dtype, torch threads (and CUDA's version and
    device count on a GPU). Recorded with every result: timings and float scores depend on them."""
    param = next(model.parameters())
    devices = sorted({str(p.device) for p in model.parameters()})
    out: dict[str, Any] = {"device": devices[0] if len(devices) == 1 else devices, "dtype": str(param.dtype)
                           .removeprefix("torch."), "threads": torch.get_num_threads()}
    if param.device.type == "cuda":
        out["device_name"] = torch.cuda.get_device_name(param.device)
        out["cuda"] = torch.version.cuda
        out["cuda_devices"] = torch.cuda.device_count()
    elif param.device.type == "cpu":
        out.update(cpu_hardware())
    else:
        out["device_name"] = param.device.type
    return out
