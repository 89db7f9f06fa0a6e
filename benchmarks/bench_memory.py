"""Memory while training saves its state: copies of weights and optimizer state.

A fresh process builds gpt-char's network (10.8 M parameters) and its
AdamW state (one small step), then writes the resumable training state as
`zoo train` does every `--checkpoint-every` steps: with the zoo's writer
(`zoo_core.storage.tensor_files`), then, for reference, with `safetensors.torch.save`. The
growth of the process's peak resident memory during the write, divided by the
bytes of weights + optimizer moments, is how many extra copies the write held.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from benchmarks.common import ROOT

VARIANT = "gpt-char"

_WRITER = textwrap.dedent("""
    import json, sys, tempfile
    from pathlib import Path
    import torch
    import zoo_core
    from zoo_core.corpus.batches import BatchSampler
    from zoo_core.training.loop import TrainingResult, _snapshot, make_optimizer, seeded_network
    from zoo_core.training.state import write_training_state

    variant = zoo_core.get_variant(sys.argv[1])
    network = seeded_network(lambda: zoo_core.build_network(variant), 0)
    optimizer = make_optimizer(network, variant.card.recipe)
    ids = torch.zeros(1, 8, dtype=torch.long)
    network(ids, ids)[1].backward()  # one small step: the optimizer's moments exist, activations stay small
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    state = _snapshot(1, network, optimizer, BatchSampler(torch.arange(100), 8, 1, 0), TrainingResult(steps=1))
    state_bytes = sum(t.numel() * t.element_size() for t in network.state_dict().values())
    state_bytes += sum(v.numel() * v.element_size() for entry in optimizer.state.values() for v in entry.values()
                       if torch.is_tensor(v) and v.dim() > 0)

    def peak():  # this process's own high-water mark (ru_maxrss would keep the forking parent's across exec)
        return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")) * 1024

    def write_and_measure():
        before = peak()
        with tempfile.TemporaryDirectory() as folder:
            write_training_state(Path(folder) / "state.safetensors", state, {"benchmark": True})
        return peak() - before

    # The zoo's writer first: the peak is a high-water mark, so the library's write,
    # second, still shows all it adds above the same peak.
    zoo = write_and_measure()
    import zoo_core.storage.tensor_files as tensor_files
    tensor_files._DTYPES = {}  # every dtype "unknown": safetensors' save writes, as the zoo did before
    library = write_and_measure()
    print(json.dumps({"state_bytes": state_bytes, "zoo": zoo, "library": library}))
""")


def run() -> dict:
    done = subprocess.run([sys.executable, "-c", _WRITER, VARIANT], capture_output=True, text=True, check=True, cwd=ROOT)
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    result = {"variant": VARIANT, "state_mb": measured["state_bytes"] / 2**20}
    for writer in ("zoo", "library"):
        result[writer] = {"peak_growth_mb": measured[writer] / 2**20, "extra_copies": measured[writer] / measured["state_bytes"]}
    return result


if __name__ == "__main__":
    print(run())
