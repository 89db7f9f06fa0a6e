"""Other tools' formats: export, import."""

from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile
from pathlib import Path

from ..errors import ZooError
from ..interop.hf import export_hf, import_hf
from ..interop.nanogpt import import_nanogpt
from ..interop.onnx import export_onnx
from ..interop.transformer_lens import export_transformer_lens
from ..loading.api import load
from ..storage.checkpoints import PACKED_REFUSAL
from ..storage.files import describe_os_error, give_usual_modes, make_folder
from ..training.progress import WorkProgress

try:  # the gguf extra; without it, the GGUF import and export alone refuse, saying how to install it
    from ..interop import gguf_export, gguf_import
except ImportError:
    gguf_export = gguf_import = None  # type: ignore[assignment]
NO_GGUF = "GGUF files need llama.cpp's gguf package: pip install 'zoo-lm[gguf]'"

_EXPORTERS = {
    "hf": export_hf,
    "transformer-lens": export_transformer_lens,
    "onnx": export_onnx,
}


def cmd_export(args) -> int:
    model = load(args.name, merge_adapter=True)  # another tool gets one plain network, the adapter folded in
    if any(hasattr(module, "packed_values") for module in model.network.modules()):
        raise ZooError(f"variant '{args.name}': {PACKED_REFUSAL}")
    if args.gguf_type is not None and args.format != "gguf":
        raise ZooError(f"--gguf-type is for --format gguf, not {args.format}")
    if args.format == "gguf" and gguf_export is None:
        raise ZooError(NO_GGUF)
    export = gguf_export.export_gguf if args.format == "gguf" else _EXPORTERS[args.format]
    options = {"tensor_type": args.gguf_type or "f16"} if args.format == "gguf" else {}
    written, checks = _written_whole(args.out, lambda folder: export(model, folder, **options))
    print(f"{model.name} -> {args.out} ({args.format}): {', '.join(sorted(p.name for p in written))}")
    print(
        f"  checked: logits on the first {checks['logit_tokens']} validation tokens within "
        f"{checks['max_logit_difference']:.1e} of the zoo's"
        + (
            f"; tokenizer ids identical on all {checks['tokenizer_ids_checked']:,} validation tokens"
            if "tokenizer_ids_checked" in checks
            else ""
        )
    )
    return 0


def _written_whole(out: Path, write):
    """``write(folder)`` into a fresh folder beside ``out``, moved into ``out`` only
    once it returned (the exporters check what they wrote against the zoo last):
    a failed or interrupted export leaves ``out`` as it was, with no partial files."""
    out = out.expanduser().absolute()
    if out.exists() and not out.is_dir():
        raise ZooError(f"{out}: --out names a file; give a folder")
    make_folder(out.parent, shown=out)
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    except OSError as exc:  # /proc, a read-only mount: the folder asked for, not the staging name, is the news
        raise ZooError(f"{out}: cannot write here: {describe_os_error(exc)}") from None
    try:
        try:
            written, checks = write(staging)
        except OSError as exc:
            raise _write_failure(out, staging, exc) from None
        except Exception as exc:  # safetensors' writer: "I/O error: No space left on device (os error 28)"
            code = re.search(r"\(os error (\d+)\)", str(exc))
            if code is None:
                raise
            raise _write_failure(out, staging, OSError(int(code.group(1)), str(exc)), remaining=None) from None
        give_usual_modes(staging)
        if not out.exists():
            staging.rename(out)  # the whole folder appears at once
        else:
            for path in sorted(staging.rglob("*")):
                if path.is_file():
                    target = out / path.relative_to(staging)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    path.replace(target)
        return [out / path.relative_to(staging) for path in written], checks
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write_failure(out: Path, staging: Path, exc: OSError, remaining: bool | None = True) -> ZooError:
    """One line for a write that failed part-way: the file being written (the newest in
    the staging folder, named as it would have been in ``out``; with ``remaining``
    None the writer removed it, and the files written before are listed) and why, a full disk
    said as such even where the writer reports only a short count (numpy's tofile:
    "1024 requested and 488 written")."""
    files = [path for path in staging.rglob("*") if path.is_file()]
    if exc.filename:
        shown, also = out / Path(exc.filename).name, ""
    elif remaining is None:  # the writer removed its own partial file: say what was written before it
        shown = out
        also = f" (written before it failed: {', '.join(sorted(p.name for p in files)) or 'nothing'})"
    else:
        newest = max(files, key=lambda path: path.stat().st_mtime_ns, default=None)
        shown, also = (out / newest.relative_to(staging) if newest is not None else out), ""
    try:
        full = os.statvfs(staging).f_bavail == 0
    except OSError:
        full = False
    if exc.errno in (errno.ENOSPC, errno.EDQUOT) or full:
        why = "the disk is full (No space left on device)"
    elif exc.errno == errno.EFBIG:
        why = "File too large: past the size a process may write here (ulimit -f)"
    else:
        why = describe_os_error(exc)
    return ZooError(f"{shown}: cannot write: {why}{also}; nothing was exported ({out} is as it was)")


def cmd_import(args) -> int:
    if args.name is None and args.source != "gguf":
        raise ZooError(f"zoo import {args.source} needs the new variant's name: --name NAME")
    if args.dequantize and args.source != "gguf":
        raise ZooError(f"--dequantize is for zoo import gguf; {args.source} weights are float already")
    if args.source == "gguf":
        if args.tokenizer is not None:
            raise ZooError("zoo import gguf reads the tokenizer inside the file; --tokenizer is for nanogpt and hf")
        if gguf_import is None:
            raise ZooError(NO_GGUF)
        shown = args.name or args.path.name
        progress = WorkProgress(f"import {shown}")  # on a terminal; half a minute for a 135M model
        try:
            card, registry = gguf_import.import_gguf(
                args.path, args.name, args.license, args.replace, args.dequantize, progress
            )
        finally:
            progress.close()
    elif args.source == "nanogpt":
        card, registry = import_nanogpt(
            args.path, args.name, args.tokenizer, args.license or "unspecified", args.replace
        )
    else:
        progress = WorkProgress(f"import {args.name}")  # on a terminal: reading a large folder takes a while
        try:
            card, registry = import_hf(args.path, args.name, args.tokenizer, args.license, args.replace, progress)
        finally:
            progress.close()

    source = os.fsencode(args.path).decode("utf-8", "backslashreplace")  # a name need not be UTF-8; the terminal is
    print(f"{card.name}: {card.parameters:,} parameters from {source} -> {registry.parent / card.checkpoint.path}")
    print(f"  card in {registry} (the user catalogue); try: zoo eval {card.name}")
    return 0


def cmd_quantize(args) -> int:
    try:
        from ..interop.gguf_quantize import quantize_variant
    except ImportError:
        raise ZooError(NO_GGUF) from None
    card, registry = quantize_variant(args.name, args.to, args.new_name, args.replace)
    checkpoint = registry.parent / "checkpoints" / f"{card.name}.safetensors"  # where add_user_variant wrote it
    print(f"{card.name}: {args.name} quantised to {args.to} -> {checkpoint}")
    print(f"  card in {registry} (the user catalogue); try: zoo sample {card.name}")
    return 0
