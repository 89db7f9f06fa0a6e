"""Connections to other tools: export to Hugging Face transformers and ONNX,
import nanoGPT and GPT-2-layout checkpoints.

Each module imports its third-party library (transformers, onnx, onnxruntime)
only inside the functions that need it: they are optional extras
(``pip install 'zoo-lm[interop]'``), and the core never needs them.
"""
