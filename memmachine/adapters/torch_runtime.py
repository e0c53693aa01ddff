"""What the torch adapters share: importing torch and sentence-transformers on demand, and
choosing a device.

Nothing here is imported at module level: torch and sentence-transformers are loaded only
when a torch adapter starts, so ``import memmachine`` (and the default, torch-free install)
never touches them.
"""

from __future__ import annotations

from types import ModuleType

from memmachine.errors import ConfigurationError

__all__ = ["GPU_EXTRA_HINT", "choose_device", "import_torch_runtime"]

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
