"""Looking inside a loaded variant through its hook points (zoo_core.plugin_api.hook_points).

One module per view, each usable from Python and behind `zoo inspect`:
`logit_lens` (the next-token prediction read from each layer's residual stream),
`ablation` (the change in validation loss when attention heads are zeroed or
mean-ablated) and `patching` (activation patching of the residual stream between
a clean and a corrupted prompt). `stream` holds what they share: where a
network's residual stream is and how to read logits from it.
"""
