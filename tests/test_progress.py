"""Training progress: a running loss without start-up bias, and an ETA that a
slow first step (evaluation, warm-up) does not throw off."""

from __future__ import annotations

import io
import re

import pytest

from zoo_core.training import progress as progress_module
from zoo_core.training.progress import RunningAverage, TrainingProgress


def test_running_average_has_no_start_up_bias():
    average = RunningAverage()
    assert average.get() is None
    for _ in range(3):
        average.add(4.0)
    assert average.get() == pytest.approx(4.0)  # a plain EMA would say 1.08
    for _ in range(200):
        average.add(2.0)
    assert average.get() == pytest.approx(2.0)


def test_eta_holds_still_after_a_slow_first_step(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: clock[0])
    log = io.StringIO()
    bar = TrainingProgress("tiny", 200, stream=log, eval_every=100, log_every=10, interactive=False)
    update_seconds, etas = 0.0, {}
    for step in range(1, 201):
        evaluated = step == 1 or step % 100 == 0
        # Every update takes 0.1 s; step 1 also pays 20 s of warm-up and evaluation, later evaluations 3 s.
        clock[0] += 0.1 + (20.0 if step == 1 else 3.0 if evaluated else 0.0)
        update_seconds += 0.1
        losses = {"train": 5.0, "validation": 5.1} if evaluated else None
        bar.update(step, update_seconds, step * 256, losses, batch_loss=5.0 - step / 100)
        etas[step] = bar.eta_seconds(step)
    # Until an evaluation after step 1 is measured the ETA counts the updates
    # alone (step 1's time is warm-up as much as evaluation); then both.
    assert etas[10] == pytest.approx(190 * 0.1, rel=0.05)  # not hours because step 1 took 20 s
    for step in (50, 99):
        assert etas[step] == pytest.approx((200 - step) * 0.1, rel=0.05)
    for step in (101, 150, 199):
        assert etas[step] == pytest.approx((200 - step) * 0.1 + 3.0, rel=0.05)  # the last evaluation still to come
    assert etas[200] == 0
    lines = log.getvalue().splitlines()
    assert len(lines) == 21  # every 10 steps, plus step 1
    assert re.search(r"step  50/200  loss 4\.\d{4}  [\d,]+ tok/s  ETA 0m1\ds", lines[5])
    assert "eval: train 5.0000 val 5.1000" in lines[0] and "eval: train" in lines[10]


def test_the_last_step_of_a_short_run_has_nothing_left(monkeypatch):
    # A LoRA run of 4 steps evaluates at steps 1 and 4 (eval_every 500 is past its end):
    # its last line once read "step 4/4 ... ETA 0m31s", the cost of an evaluation already done.
    clock = [0.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: clock[0])
    log = io.StringIO()
    bar = TrainingProgress("lora", 4, stream=log, eval_every=500, log_every=1, interactive=False)
    for step in range(1, 5):
        evaluated = step in (1, 4)
        clock[0] += 1.0 + (30.0 if evaluated else 0.0)
        bar.update(step, float(step), step * 64, {"train": 2.0, "validation": 2.1} if evaluated else None, batch_loss=2.0)
    assert bar.eta_seconds(3) == pytest.approx(1.0 + 30.0, rel=0.05)  # one step and the last evaluation to come
    assert bar.eta_seconds(4) == 0
    last = log.getvalue().splitlines()[-1]
    assert last.startswith("lora: step 4/4") and last.endswith(f"ETA {progress_module.format_duration(0)}")
