"""Files on disk: atomic writes, safetensors written from tensors' memory,
verified checkpoints, and where the user's things live."""
