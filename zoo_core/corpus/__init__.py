"""Text in, token batches out: named datasets, token streams, seeded batches,
fixed evaluation windows, and tokenizer training."""
