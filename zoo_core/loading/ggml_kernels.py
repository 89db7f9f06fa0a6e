"""The packed layers' matrix-vector kernel: kernels/ggml_matvec.c, compiled at first use.

Decoding one token multiplies every weight matrix by one vector: reading the
weights is the work. `dequantize_rows` then `F.linear` writes and reads a float32
copy of each matrix at every call (4 bytes per weight, more than float32
weights themselves); the C kernel reads each block once, rounds the activations
to 8-bit integers per block of 32 (as llama.cpp's Q8_0 does) and multiplies
integers by integers (AVX512-VNNI / AVX-VNNI byte dot products where the CPU has
them). Measured on this machine (docs/benchmarks.md, "quantized") against the
kernel it replaced, which widened the weights to float32 and kept the
activations unrounded: 1.5x to 2.8x faster on SmolLM2's and Gemma 3's shapes
(equal on Q4_K), so only the integer kernel is kept.

Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the K-quants Q4_K, Q5_K, Q6_K have a kernel; Q2_K and
Q3_K (rare in files) are dequantised.

The kernel is the project's own C file, compiled with the system's C compiler
(``cc``, -O3 -march=native -fopenmp) into ``$ZOO_CACHE/kernels/`` under its
source's sha256 (written to a temporary name and renamed: concurrent first uses
agree). Without a compiler, or where compiling fails, `matvec` is None and the
packed layers dequantise and call `F.linear`: the same values, slower.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import torch

from ..storage.locations import cache_dir

SOURCE = Path(__file__).with_name("kernels") / "ggml_matvec.c"
FLAGS = ["-O3", "-march=native", "-fassociative-math", "-fno-signed-zeros", "-fno-trapping-math", "-fopenmp"]
KERNEL_TYPES = frozenset({2, 3, 6, 7, 8, 12, 13, 14})  # ggml's Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K
# Up to 32 rows of input the kernel wins (SmolLM2's Q4_1 shapes, 1 thread: 241 against dequantise + BLAS's 66
# tokens per CPU-second at 16 rows, 258 against 120 at 32); a prompt read at once goes to BLAS.
MAX_TOKENS = 32


@lru_cache(maxsize=1)
def _library():
    if os.environ.get("ZOO_PACKED_KERNEL", "1") == "0":  # the benchmark's comparison, and a way out
        return None
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None or not SOURCE.exists():
        return None
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source + " ".join(FLAGS).encode()).hexdigest()[:16]
    built = cache_dir() / "kernels" / f"ggml_matvec-{digest}.so"
    try:
        if not built.exists():
            built.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=built.parent) as scratch:
                target = Path(scratch) / built.name
                subprocess.run(
                    [compiler, *FLAGS, "-shared", "-fPIC", "-o", str(target), str(SOURCE)],
                    check=True,
                    capture_output=True,
                    timeout=120,
                )
                os.replace(target, built)
        library = ctypes.CDLL(str(built))
    except (OSError, subprocess.SubprocessError):
        return None
    function = library.ggml_matvec
    function.restype = ctypes.c_int
    function.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    function.argtypes += [ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int]
    return function


def matvec(weight: torch.Tensor, code: int, x: torch.Tensor) -> torch.Tensor | None:
    """``x @ W.T`` for packed rows ``weight`` of ggml type ``code``; None where the
    kernel does not apply (no compiler, another type, many rows of input, a gradient)."""
    rows = x.reshape(-1, x.shape[-1])
    if code not in KERNEL_TYPES or rows.shape[0] > MAX_TOKENS or x.dtype != torch.float32 or x.device.type != "cpu":
        return None
    if torch.is_grad_enabled() and x.requires_grad:
        return None
    function = _library()
    if function is None:
        return None
    rows = rows.contiguous()
    weight = weight.contiguous()
    out = torch.empty(rows.shape[0], weight.shape[0], dtype=torch.float32)
    status = function(
        code,
        weight.data_ptr(),
        weight.shape[0],
        weight.shape[1],
        rows.data_ptr(),
        rows.shape[0],
        rows.shape[1],
        out.data_ptr(),
        torch.get_num_threads(),
    )
    return out.view(*x.shape[:-1], weight.shape[0]) if status == 0 else None
