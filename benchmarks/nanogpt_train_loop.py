"""nanoGPT's train.py loop, emulated for the wall-time benchmark (run as a script).

nanoGPT's train.py is not available here, so this follows its loop step by step
for the shakespeare_char recipe on CPU, with the real model.py: data from
prepare.py's uint16 .bin files through np.memmap in `get_batch`, the model and
`configure_optimizers(..., "cpu")`, `estimate_loss` over `eval_iters` batches per
split at iteration 0 and every `eval_interval`, warm-up + cosine `get_lr`,
gradient clipping, a loss read-back every `log_interval`, and a checkpoint
(model + optimizer) whenever validation improves after iteration 0. As in
train.py the loop runs iterations 0..max_iters, evaluating before the update.

    python benchmarks/nanogpt_train_loop.py DATA_DIR OUT_DIR MAX_ITERS EVAL_INTERVAL MODEL_PY [EVAL_ITERS]

EVAL_ITERS defaults to 20, the README's CPU setting (20 batches of 12 = 240
windows per split); the benchmark also runs it with the zoo recipe's windows.
"""

import importlib.util
import math
import os
import sys

import numpy as np
import torch


def main(data_dir, out_dir, max_iters, eval_interval, model_path, eval_iters=20):
    spec = importlib.util.spec_from_file_location("nanogpt_model", model_path)
    model_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model_module)
    # config/train_shakespeare_char.py with its CPU overrides (README)
    log_interval, batch_size, block_size = 10, 12, 64
    n_layer, n_head, n_embd, dropout, bias = 4, 4, 128, 0.0, False
    learning_rate, min_lr, warmup_iters, lr_decay_iters = 1e-3, 1e-4, 100, 2000
    weight_decay, beta1, beta2, grad_clip = 1e-1, 0.9, 0.99, 1.0
    torch.manual_seed(1337)

    def get_batch(split):
        data = np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - block_size, (batch_size,))
        x = torch.stack([torch.from_numpy((data[i : i + block_size]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i + 1 : i + 1 + block_size]).astype(np.int64)) for i in ix])
        return x, y

    vocab_size = int(open(os.path.join(data_dir, "vocab_size")).read())
    config = model_module.GPTConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size,
                                    bias=bias, vocab_size=vocab_size, dropout=dropout)
    model = model_module.GPT(config)
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), "cpu")

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ["train", "val"]:
            losses = torch.zeros(eval_iters)
            for k in range(eval_iters):
                X, Y = get_batch(split)
                logits, loss = model(X, Y)
                losses[k] = loss.item()
            out[split] = losses.mean()
        model.train()
        return out

    def get_lr(it):
        if it < warmup_iters:
            return learning_rate * (it + 1) / (warmup_iters + 1)
        if it > lr_decay_iters:
            return min_lr
        decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
        coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
        return min_lr + coeff * (learning_rate - min_lr)

    X, Y = get_batch("train")
    iter_num, best_val_loss = 0, 1e9
    while True:
        lr = get_lr(iter_num)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if iter_num % eval_interval == 0:
            losses = estimate_loss()
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            if losses["val"] < best_val_loss:
                best_val_loss = losses["val"]
                if iter_num > 0:
                    checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iter_num": iter_num,
                                  "best_val_loss": best_val_loss}
                    torch.save(checkpoint, os.path.join(out_dir, "ckpt.pt"))
        logits, loss = model(X, Y)
        X, Y = get_batch("train")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if iter_num % log_interval == 0:
            loss.item()  # nanoGPT reads the loss here, a synchronisation its timing includes
        iter_num += 1
        if iter_num > max_iters:
            break


if __name__ == "__main__":
    data_dir, out_dir, max_iters, eval_interval, model_path = sys.argv[1:6]
    main(data_dir, out_dir, int(max_iters), int(eval_interval), model_path, *(int(a) for a in sys.argv[6:7]))
