"""A study's table (`results.csv`, or `zoo experiment --table PATH`): one row per arm.

Each arm's bits per byte over the whole validation text are the mean over the
study's seeds with a 95% Student t interval; the difference against the first
arm is taken seed by seed (the arms of a seed share their batches and starting
values), and its interval is the t interval of those paired differences, much
narrower than the arms' own intervals suggest when seeds move every arm alike.
Costs are the arm's updates only: CPU seconds of the process (a shared
machine's other programs do not inflate them as they do the wall clock) and
wall-clock seconds, with tokens per second of each.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from statistics import NormalDist, mean, stdev

from ..errors import ZooError
from ..storage.files import atomic_write_text, make_folder

COLUMNS = (
    "variant",
    "parameters",
    "seeds",
    "steps",
    "tokens",
    "bits_per_byte",
    "bits_per_byte_ci95",
    "bits_per_byte_delta",
    "bits_per_byte_delta_ci95",
    "bits_per_character",
    "train_cpu_seconds",
    "tokens_per_cpu_second",
    "train_seconds",
    "tokens_per_second",
)

# Student t's 97.5% quantiles for 1 to 10 degrees of freedom (any statistics table);
# beyond, the Cornish-Fisher expansion around the normal quantile agrees with them to 0.0002.
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def t_975(freedom: int) -> float:
    if freedom <= len(T_975):
        return T_975[freedom - 1]
    z = NormalDist().inv_cdf(0.975)
    return (
        z
        + (z**3 + z) / (4 * freedom)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * freedom**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * freedom**3)
    )


def interval(values: list[float]) -> float | None:
    """Half the width of the 95% t interval of the mean; None for a single value."""
    if len(values) < 2:
        return None
    return t_975(len(values) - 1) * stdev(values) / math.sqrt(len(values))


def arm_rows(report: dict) -> list[dict]:
    """The table's rows from a study's results.json (its text scored: `score_text`)."""
    runs = report["runs"]
    if any("validation_bits_per_byte" not in run for run in runs):
        raise ZooError(f"study '{report['study']}' did not score the validation text: give --score-text")
    arms = list(dict.fromkeys(run["arm"] for run in runs))
    by_arm = {arm: {run["seed"]: run for run in runs if run["arm"] == arm} for arm in arms}
    first = by_arm[arms[0]]
    rows = []
    for arm in arms:
        seeds = by_arm[arm]
        bits = [run["validation_bits_per_byte"] for run in seeds.values()]
        deltas = [
            run["validation_bits_per_byte"] - first[seed]["validation_bits_per_byte"] for seed, run in seeds.items()
        ]
        tokens = mean(run["tokens"] for run in seeds.values())
        cpu = mean(run["cpu_seconds"] for run in seeds.values())
        wall = mean(run["update_seconds"] for run in seeds.values())
        rows.append(
            {
                "variant": arm,
                "parameters": next(iter(seeds.values()))["parameters"],
                "seeds": len(seeds),
                "steps": report["config"]["steps"],
                "tokens": round(tokens),
                "bits_per_byte": mean(bits),
                "bits_per_byte_ci95": interval(bits),
                "bits_per_byte_delta": mean(deltas),
                "bits_per_byte_delta_ci95": None if arm == arms[0] else interval(deltas),
                "bits_per_character": mean(run["validation_bits_per_character"] for run in seeds.values()),
                "train_cpu_seconds": cpu,
                "tokens_per_cpu_second": tokens / cpu if cpu else None,
                "train_seconds": wall,
                "tokens_per_second": tokens / wall if wall else None,
            }
        )
    return rows


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 100 else f"{value:.1f}"
    return str(value)


def write_table(rows: list[dict], path: Path) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow([_cell(row[column]) for column in COLUMNS])
    make_folder(path.parent)
    atomic_write_text(path, buffer.getvalue())
