"""Write docs/experiments.md from the studies' results.json files.

    .venv/bin/python experiments/report.py runs/experiments/depth-1-2 runs/experiments/positions ...

For each study: the command, final losses per arm (mean over seeds and the seed
range), paired validation differences per seed against the first arm, the
cross-evaluation table when there is one, and the loss curves (copied beside
the document).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from statistics import mean

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _final(run, split):
    return run["history"][-1][split]


def study_section(folder: Path) -> list[str]:
    report = json.loads((folder / "results.json").read_text())
    config = report["config"]
    arms = list(dict.fromkeys(run["arm"] for run in report["runs"]))
    runs = {(run["arm"], run["seed"]): run for run in report["runs"]}
    seeds = config["seeds"]
    lines = [
        f"## {report['study']}: {report['description']}",
        "",
        f"`zoo experiment {report['study']}` — seeds {', '.join(map(str, seeds))}; {config['steps']:,} AdamW updates "
        f"(lr {config['learning_rate']}, weight decay {config['weight_decay']}); {config['tokens_per_update']} target tokens "
        f"per update, identical for every arm; losses in {config['loss_unit']} on the same {config['eval_targets']} "
        f"target tokens per split, each predicted from the arm's full context. Source sha256 `{report['source_sha256'][:12]}`.",
        "",
        "| arm | parameters | train | validation | validation seed range | update seconds |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for arm in arms:
        arm_runs = [runs[(arm, seed)] for seed in seeds]
        validation = [_final(r, "validation") for r in arm_runs]
        lines.append(
            f"| {arm} | {arm_runs[0]['parameters']:,} | {mean(_final(r, 'train') for r in arm_runs):.4f} | "
            f"{mean(validation):.4f} | {min(validation):.4f}–{max(validation):.4f} | "
            f"{mean(r['update_seconds'] for r in arm_runs):.0f} |"
        )
    base = arms[0]
    lines += ["", f"Paired validation differences against `{base}` (negative: lower loss than it):", "",
              "| seed | " + " | ".join(f"{arm} − {base}" for arm in arms[1:]) + " |",
              "|---|" + "---:|" * (len(arms) - 1)]
    for seed in seeds:
        cells = [f"{_final(runs[(arm, seed)], 'validation') - _final(runs[(base, seed)], 'validation'):+.4f}" for arm in arms[1:]]
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    if len(arms) > 2:
        lines += ["", "Consecutive arms, paired by seed:", "", "| seed | " + " | ".join(f"{b} − {a}" for a, b in zip(arms[1:], arms[2:])) + " |",
                  "|---|" + "---:|" * (len(arms) - 2)]
        for seed in seeds:
            cells = [f"{_final(runs[(b, seed)], 'validation') - _final(runs[(a, seed)], 'validation'):+.4f}" for a, b in zip(arms[1:], arms[2:])]
            lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    if "cross_evaluation" in report["runs"][0]:
        contexts = [str(c) for c in config["contexts"]]
        lines += ["", "Cross-evaluation, validation loss (mean over seeds): rows are trained contexts, columns the history given "
                  "(positions restart at zero when cropped):", "",
                  "| trained on | " + " | ".join(contexts) + " |", "|---|" + "---:|" * len(contexts)]
        for arm in arms:
            cells = []
            for context in contexts:
                values = [runs[(arm, seed)]["cross_evaluation"].get(context, {}).get("validation") for seed in seeds]
                cells.append(f"{mean(values):.4f}" if None not in values else "—")
            lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    picture = DOCS / "experiments" / f"{report['study']}-loss.png"
    picture.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(folder / "loss.png", picture)
    first_seed = seeds[0]
    lines += ["", f"![loss curves]({picture.relative_to(DOCS).as_posix()})", "",
              f"Samples at the last milestone, seed {first_seed}, same prompt and sampling seed {config['sample_seed']}:", ""]
    lines.append(f"Prompt: `{config['prompt_text']!r}`")
    lines.append("")
    for arm in arms:
        sample = runs[(arm, first_seed)]["samples"][str(config["steps"])]
        lines += [f"**{arm}**", "", "```", sample.strip(), "```", ""]
    return lines


def main(folders: list[str]) -> None:
    lines = [
        "# Experiments of seed 000",
        "",
        "Measured with `zoo experiment` on this project's CPU machine (one thread per study). Tables show means over "
        "three paired seeds and the full seed range, not confidence intervals; samples are qualitative.",
        "",
    ]
    for folder in folders:
        lines += study_section(Path(folder))
    (DOCS / "experiments.md").write_text("\n".join(lines).rstrip() + "\n")
    print(f"wrote {DOCS / 'experiments.md'}")


if __name__ == "__main__":
    main(sys.argv[1:])
