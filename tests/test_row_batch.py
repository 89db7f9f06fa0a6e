"""Rows of different lengths decoded together (plugins/models/row_batch.py) give each
row the logits of the model's own cached forward for that row alone, across the
layouts the built-in blocks take, while rows join and leave."""

from __future__ import annotations

import pytest
import torch

from zoo_core.plugin_api.manager import get_plugins
from zoo_plugins.models.transformer import TransformerLanguageModel

from .test_decoding import LAYOUTS, VOCAB, WINDOW


def _model(**layout) -> TransformerLanguageModel:
    torch.manual_seed(0)
    return TransformerLanguageModel(VOCAB, WINDOW, 16, 2, 2, components=get_plugins().components, **layout).eval()


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: "-".join(str(v) for v in layout.values()))
@torch.inference_mode()
def test_each_row_gets_its_own_cached_logits(layout):
    model = _model(**layout)
    generator = torch.Generator().manual_seed(1)
    prompts = {row: torch.randint(VOCAB, (1, length), generator=generator) for row, length in enumerate([1, 4, 7])}
    fed = {row: torch.randint(VOCAB, (WINDOW,), generator=generator).tolist() for row in prompts}
    alone = {}
    for row, prompt in prompts.items():
        cache = model.make_cache()
        model(prompt, cache=cache)
        steps = WINDOW - prompt.shape[1]
        alone[row] = torch.cat([model(torch.tensor([[t]]), cache=cache)[0][0] for t in fed[row][:steps]])
    batch = model.make_row_batch(4)
    got: dict[int, list] = {row: [] for row in prompts}
    for row in (0, 1):  # row 2 joins later, as a request would
        cache = model.make_cache()
        model(prompts[row], cache=cache)
        assert batch.accepts(model, cache)
        batch.add(row, cache)
    for step in range(WINDOW):
        if step == 2:
            cache = model.make_cache()
            model(prompts[2], cache=cache)
            batch.add(2, cache)
        for row in [r for r in batch.rows if not batch.room(r)]:
            batch.remove(row)  # its window is full
        if not batch.rows:
            break
        logits = batch.step([fed[row][len(got[row])] for row in batch.rows])
        for row, row_logits in zip(list(batch.rows), logits):
            got[row].append(row_logits)
    for row in prompts:
        assert len(got[row]) == len(alone[row])
        torch.testing.assert_close(torch.stack(got[row]), alone[row], rtol=1e-5, atol=1e-5)
