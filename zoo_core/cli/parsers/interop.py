"""The parsers of other tools' formats: export, import. Their handlers are in zoo_core/cli/interop.py."""

from __future__ import annotations

from pathlib import Path


def export_arguments(commands) -> None:
    p = commands.add_parser(
        "export", help="write a variant for Hugging Face transformers, ONNX Runtime, TransformerLens or llama.cpp"
    )
    p.add_argument("name", help="the variant to export")
    p.add_argument(
        "--format",
        choices=["hf", "onnx", "transformer-lens", "gguf"],
        required=True,
        help="hf: a folder AutoModelForCausalLM/AutoTokenizer load; onnx: model.onnx for onnxruntime; "
        "transformer-lens: config.json + model.safetensors for TransformerLens' HookedTransformer; "
        "gguf: NAME.gguf for llama.cpp (Llama and Qwen2 layouts)",
    )
    p.add_argument(
        "--gguf-type",
        choices=["f32", "f16", "q8_0"],
        default=None,
        help="gguf only: what the matrices are stored as (default f16; norms stay f32, "
        "and q8_0 keeps f16 for a matrix whose rows are not whole 32-value blocks)",
    )
    p.add_argument("--out", type=Path, required=True, help="folder to write (created if missing)")
    p.set_defaults(run="interop:cmd_export")


def import_arguments(commands) -> None:
    p = commands.add_parser("import", help="add a checkpoint trained elsewhere to the user catalogue ($ZOO_HOME)")
    p.add_argument(
        "source",
        choices=["nanogpt", "hf", "gguf"],
        help="nanogpt: a train.py ckpt.pt; hf: a GPT-2, Llama, Mistral, Qwen2, Qwen3 or GPT-NeoX folder; "
        "gguf: a llama.cpp .gguf file of a llama or qwen2 model",
    )
    p.add_argument(
        "path",
        type=Path,
        help="the checkpoint file (nanogpt), the model folder or ORG/NAME in the Hugging Face cache, offline (hf), "
        "or the .gguf file (gguf)",
    )
    p.add_argument(
        "--name",
        default=None,
        help="the new variant's name (lower case, digits, '-', '.'); required but for gguf, whose default "
        "is the file's general.name",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="import over your own variant of that name; its weights and card stay until the new ones are "
        "committed (default: refused, naming it)",
    )
    p.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        help="its tokenizer: a zoo character vocabulary .json, tiktoken ranks file or tokenizer.json "
        "(default: 65 tokens use the zoo's shakespeare characters; hf reads the folder's tokenizer)",
    )
    p.add_argument(
        "--license",
        default=None,
        help="the imported weights' license, recorded in the card (default: an hf folder's README.md "
        "model card's, a GGUF file's general.license, else unspecified; the zoo never assumes one)",
    )
    p.add_argument(
        "--dequantize",
        action="store_true",
        help="gguf: store every weight as float32 (for training and bitwise comparisons; default: quantised "
        "matrices keep the file's blocks, near the file's size)",
    )
    p.set_defaults(run="interop:cmd_import")


def quantize_arguments(commands) -> None:
    p = commands.add_parser(
        "quantize", help="save a float variant with its matrices in llama.cpp's quantised blocks, quantised once"
    )
    p.add_argument("name", help="the float variant to quantize")
    p.add_argument(
        "--to",
        choices=["q8_0", "q4_0", "q4_1", "q5_0", "q5_1"],
        required=True,
        help="the blocks' type (quantised by the gguf package; rows not whole 32-value blocks stay float32)",
    )
    p.add_argument("--name", dest="new_name", required=True, help="the new variant's name (in the user catalogue)")
    p.add_argument("--replace", action="store_true", help="over your own variant of that name")
    p.set_defaults(run="interop:cmd_quantize")
