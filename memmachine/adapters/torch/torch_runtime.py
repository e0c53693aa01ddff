"""What the torch adapters share: importing torch and sentence-transformers on demand, and
choosing a device.

Nothing here is imported at module level: torch and sentence-transformers are loaded only
when a torch adapter starts, so ``import memmachine`` (and the default, torch-free install)
never touches them.
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

from memmachine.errors import ConfigurationError

__all__ = [
    "GPU_EXTRA_HINT",
    "choose_device",
    "device_report",
    "import_torch_runtime",
    "log_device",
]

logger = logging.getLogger(__name__)

#: How to get the runtime, for every message that reports it missing.
GPU_EXTRA_HINT = (
    "install the gpu extra: uv sync --extra gpu in a checkout, or pip install "
    "'memmachine-core[gpu]' --find-links <the wheels> (README, Install)"
)


def import_torch_runtime(what: str) -> tuple[ModuleType, ModuleType]:
    """``(torch, sentence_transformers)``; ``ConfigurationError`` naming ``what`` and the
    ``gpu`` extra when they are not installed or cannot be loaded. Blocking (slow the first
    time): call it from a worker thread."""
    try:
        import sentence_transformers
        import torch
    except ImportError as exc:
        raise ConfigurationError(
            f"{what} needs torch and sentence-transformers, which are not installed "
            f"({exc}): {GPU_EXTRA_HINT}"
        ) from None
    except Exception as exc:  # a broken install: missing CUDA libraries and the like
        raise ConfigurationError(
            f"{what} cannot load torch/sentence-transformers ({type(exc).__name__}: {exc})"
        ) from None
    return torch, sentence_transformers


def choose_device(torch: ModuleType, device: str | None, *, setting: str) -> str:
    """``device`` as given, or ``"cuda"`` when a CUDA device is available, else ``"cpu"``.
    A CUDA device asked for on a machine without one is a ``ConfigurationError`` naming
    ``setting``."""
    cuda = bool(torch.cuda.is_available())
    if device is None or not device.strip():
        return "cuda" if cuda else "cpu"
    device = device.strip()
    if device.startswith("cuda") and not cuda:
        raise ConfigurationError(
            f"{setting}={device}, but torch sees no CUDA device "
            f"(torch {torch.__version__}, CUDA {torch.version.cuda or 'not built in'})"
        )
    return device


def device_report(
    what: str,
    device: str,
    *,
    torch_version: str,
    cuda_build: str | None,
    cuda_available: bool,
    gpu_name: str | None = None,
) -> tuple[int, str]:
    """The log level and the line that says on which device ``what`` really runs.

    A torch built for CUDA that sees no GPU (none given to the container, or a driver too
    old for its CUDA) running on the CPU is a WARNING: that is the silent slowdown to see.
    """
    if device.startswith("cuda"):
        name = f"{gpu_name}, " if gpu_name else ""
        return logging.INFO, (
            f"{what} runs on {device} ({name}torch {torch_version}, CUDA {cuda_build})"
        )
    if cuda_build and not cuda_available:
        return logging.WARNING, (
            f"{what} runs on the CPU: torch {torch_version} is built for CUDA {cuda_build} "
            "but sees no usable GPU (no GPU given to the process, or a driver too old for "
            f"CUDA {cuda_build})"
        )
    built = f"built for CUDA {cuda_build}" if cuda_build else "built without CUDA"
    return logging.INFO, f"{what} runs on {device} (torch {torch_version}, {built})"


def log_device(torch: ModuleType, what: str, model: Any, chosen: str) -> str:
    """Log where ``model`` (a loaded sentence-transformers model) really is, and return
    that device: the model's own ``device`` (``cuda:0``...), else ``chosen``."""
    device = str(getattr(model, "device", None) or chosen)
    cuda_available = bool(torch.cuda.is_available())
    gpu_name = None
    if device.startswith("cuda") and cuda_available:
        try:
            gpu_name = str(torch.cuda.get_device_name(torch.device(device)))
        except Exception:  # a name is only decoration
            gpu_name = None
    level, line = device_report(
        what,
        device,
        torch_version=str(torch.__version__),
        cuda_build=torch.version.cuda,
        cuda_available=cuda_available,
        gpu_name=gpu_name,
    )
    logger.log(level, line)
    return device
