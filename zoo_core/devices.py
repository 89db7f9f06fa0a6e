"""Where a network runs and in which floating-point type.

`--device auto|cpu|cuda|cuda:N|mps` and `--dtype float32|bfloat16|float16` mean
the same on every command. ``auto`` picks CUDA, then Apple's MPS, then the CPU.
Asking for a device this machine lacks is a one-line error, never a silent
fallback: a run that was meant for a GPU must not quietly take a week on a CPU.

Training keeps float32 master weights and runs the forward pass under autocast
in the chosen dtype (float16 also needs a gradient scaler: its range is too
narrow for small gradients). Sampling and evaluation cast the network itself.
Checkpoints never depend on either: they are read on the CPU, verified, and
only then moved.
"""

from __future__ import annotations

import contextlib
import hashlib
import platform
from pathlib import Path

import torch

from .device_names import DEVICE_CHOICES, DEVICE_PATTERN, DTYPE_CHOICES
from .errors import ZooError


def resolve_device(spec: str | None = "auto"):
    """The ``torch.device`` for ``spec``; a ZooError if this machine lacks it."""
    spec = spec or "auto"
    if not DEVICE_PATTERN.match(spec):
        raise ZooError(f"'{spec}' is not a device; use {DEVICE_CHOICES}")
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("mps") if _mps_available() else torch.device("cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if spec == "mps":
        if not _mps_available():
            raise ZooError("--device mps: Apple's MPS is not available on this machine; use --device cpu or auto")
        return torch.device("mps")
    if not torch.cuda.is_available():
        why = "this torch is built without CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
        raise ZooError(f"--device {spec}: CUDA is not available ({why}); use --device cpu or auto")
    index = int(spec.partition(":")[2] or torch.cuda.current_device())
    if index >= torch.cuda.device_count():
        raise ZooError(f"--device {spec}: this machine has {torch.cuda.device_count()} CUDA device(s), numbered from 0")
    return torch.device("cuda", index)


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend and backend.is_available())


def resolve_dtype(name: str | None, device=None):
    """The ``torch.dtype`` called ``name`` (default float32), refused where ``device`` cannot compute in it."""
    name = name or "float32"
    if name not in DTYPE_CHOICES:
        raise ZooError(f"'{name}' is not a dtype; use {', '.join(DTYPE_CHOICES)}")
    dtype = getattr(torch, name)
    if device is not None and device.type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        raise ZooError(
            f"--dtype bfloat16: {torch.cuda.get_device_name(device)} has no bfloat16 support; use float16 or float32"
        )
    return dtype


def describe_device(device) -> str:
    """What a card records: the device type, and the GPU's model where there is one."""
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return device.type


def float_arithmetic() -> dict:
    """What decides the last bits of float32 results on this machine, beside the device and
    dtype (docs/determinism.md): torch's version (its kernels), its intra-op CPU threads (how
    each sum is split), the CPU instruction set its kernels dispatch to, the CPU's feature
    flags (the math libraries under torch pick kernels by them, finer than torch's instruction
    set) and the architecture. Weights are bit for bit reproducible only where all five match."""
    return {
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_flags": cpu_flags_digest(),
        "machine": platform.machine(),
    }


def cpu_flags_digest() -> str | None:
    """The first 16 hex digits of the sha256 of the CPU's sorted feature flags (Linux's
    /proc/cpuinfo), None where they cannot be read: two CPUs that torch calls AVX512
    alike can still add float32 numbers in other orders (gru-char's retraining did)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    flags = next((line.partition(":")[2].split() for line in lines if line.startswith("flags")), None)
    return hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()[:16] if flags else None


def dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def autocast(device, dtype):
    """Mixed precision for a training forward pass; nothing at all for float32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def gradient_scaler(device, dtype):
    """float16 gradients underflow without loss scaling; the scaler is a no-op otherwise."""
    return torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)


def place(network, device, dtype=None):
    """Move an already verified network to ``device`` and cast its parameters to
    ``dtype``, for inference. Buffers stay as they are: the sinusoid and RoPE
    frequency tables would lose the precision that large positions need, and
    the encodings already cast their output to the activations' dtype."""
    network.to(device)
    if dtype is not None:
        for parameter in network.parameters():
            parameter.data = parameter.data.to(dtype)
    return network


def model_device(network):
    """The device a network's parameters (or, lacking any, buffers) live on."""
    for tensor in network.parameters():
        return tensor.device
    for tensor in network.buffers():
        return tensor.device
    return torch.device("cpu")


class Placement:
    """Where and how one training process computes: its device, its autocast
    dtype, and its share of each batch. The trainer asks it at the few points
    that depend on that, and is otherwise the same loop everywhere;
    `zoo_core.training.distributed.DataParallelPlacement` is the several-process kind."""

    world_size = 1
    rank = 0

    def __init__(self, device=None, dtype=None):
        self.device = device if device is not None else torch.device("cpu")
        self.dtype = dtype if dtype is not None else torch.float32
        self.scaler = gradient_scaler(self.device, self.dtype)

    def prepare(self, network):
        """Move the (CPU-built, seeded) network to the device; return what to call forward on."""
        network.to(self.device)
        return network

    def to_device(self, tensor):
        return tensor.to(self.device, non_blocking=True)

    def local_batch(self, inputs, targets):
        """This process's share of the global batch, on its device."""
        return self.to_device(inputs), self.to_device(targets)

    def autocast(self):
        return autocast(self.device, self.dtype)

    def backward(self, loss) -> None:
        self.scaler.scale(loss).backward()

    def step(self, optimizer, parameters, grad_clip: float | None):
        """Take the optimizer step; return the gradients' total norm before clipping
        (a tensor: logged, never read here)."""
        self.scaler.unscale_(optimizer)  # measure and clip the true gradients, not the scaled ones
        if grad_clip is not None:
            norm = torch.nn.utils.clip_grad_norm_(parameters, grad_clip)
        else:
            grads = [p.grad for p in parameters if p.grad is not None]
            norm = (
                torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
                if grads
                else torch.zeros(())
            )
        self.scaler.step(optimizer)
        self.scaler.update()
        return norm

    def reported_loss(self, loss) -> float:
        """The batch's loss as the history records it (the whole batch's, over every process)."""
        return loss.item()

    def describe(self) -> dict:
        """What a trained card records about where it was trained."""
        return {
            "device": describe_device(self.device),
            "dtype": dtype_name(self.dtype),
            "world_size": self.world_size,
            **float_arithmetic(),
        }
