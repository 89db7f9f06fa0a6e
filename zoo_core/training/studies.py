"""`zoo experiment`: paired-seed studies in the manner of seed 000.

For each seed every arm is built, then any parameter whose name and shape it
shares with an earlier arm is copied from it, so shared components (token
embedding, vocabulary head, overlapping block prefixes) start from identical
values while remaining separate parameters. The arms then train in lockstep:
each update draws one batch of `tokens_per_update` target tokens and every arm
sees exactly those tokens, cut into sequences of its own context.

Evaluation scores the same target tokens for every arm (a fixed set per split),
each predicted from up to the arm's context of preceding history, so losses
are comparable across contexts. At milestones each arm is checkpointed and
continues one prompt with one sampling seed. The result is `results.json`
(config, per-run histories, parameters, update time, source hash) and
`loss.png` (mean and seed range per arm). A study that scores the text
(`score_text`) also scores each arm's last weights over the whole validation
text in bits per byte and per character, as `zoo eval` does, and writes
`results.csv` (zoo_core.training.study_table).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import sys
import time
import tomllib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch.nn import functional as F

from ..catalogue.cards import Recipe
from ..catalogue.registry import Variant
from ..corpus.batches import Corpus, windows_at
from ..devices import Placement, model_device, resolve_device, resolve_dtype
from ..errors import ZooError
from ..evaluation.bits import network_bits_per_byte, validation_text
from ..evaluation.plots import _figure_class, _save, text_panels_png
from ..inference.sampling import sample_tokens
from ..inference.settings import SamplingSettings
from ..loading.api import build_network, catalogue, load_tokenizer
from ..loading.texts import variant_text
from ..plugin_api.manager import get_plugins
from ..seeding import seeded_generator
from ..storage.checkpoints import save_checkpoint
from ..storage.files import atomic_write_text, make_folder
from .loop import TrainingRun, make_optimizer, train_together
from .progress import TrainingProgress
from .run_log import RunDescription, open_run_log, parse_log_targets, prepare_run_logs
from .step import training_step  # noqa: F401 - the update every arm takes, in TrainingRun: one function

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# Package data (an installed zoo has no top level); experiments/studies.toml links here.
STUDIES_FILE = Path(__file__).resolve().parent / "studies.toml"


@dataclass
class StudyConfig:
    name: str
    arms: list[str]
    description: str = ""
    seeds: list[int] = field(default_factory=lambda: [42, 43, 44])
    steps: int = 10_000
    milestones: list[int] = field(default_factory=lambda: [1000, 2500, 5000, 10_000])
    tokens_per_update: int = 256
    learning_rate: float = 1e-3
    weight_decay: float = 0.01
    eval_every: int = 500
    eval_targets: int = 1024
    cross_evaluate: bool = False
    prompt: str | None = None
    sample_seed: int = 123
    sample_tokens: int = 100
    # Score each arm's last weights over the whole validation text in bits per byte (zoo eval's
    # method) and write results.csv: a fairer final number than the curve's sampled targets.
    score_text: bool = False

    def recipe(self, seed: int) -> Recipe:
        return Recipe(
            learning_rate=self.learning_rate,
            weight_decay=self.weight_decay,
            steps=self.steps,
            seed=seed,
            eval_every=self.eval_every,
        )


def load_study(name: str, path: Path = STUDIES_FILE) -> StudyConfig:
    try:
        studies = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ZooError(f"{path}: cannot read studies: {exc}") from None
    if name not in studies:
        raise ZooError(f"unknown study '{name}' (known: {', '.join(studies)}); or name the arms with --arms")
    try:
        return StudyConfig(name=name, **studies[name])
    except TypeError as exc:
        raise ZooError(f"{path}: study '{name}': {exc}") from None


@dataclass
class Arm:
    label: str
    variant: Variant
    context: int


def _arms(names: list[str], plugins) -> list[Arm]:
    found = catalogue(plugins)
    arms = []
    for name in names:
        variant_name, _, context = name.partition("@")
        variant = found.get(variant_name)
        kind = variant.card.training_recipe().kind  # an imported variant has no recipe: refused
        if kind != "trained":
            raise ZooError(f"arm '{name}' is {kind}; a study trains its arms")
        if context:
            if not context.isdigit() or int(context) < 1:
                raise ZooError(f"arm '{name}': the context after '@' must be a positive number")
            card = variant.card.model_copy(update={"context_length": int(context)})
            variant = type(variant)(card=card, source=variant.source, plugin=variant.plugin)
        arms.append(Arm(name, variant, variant.card.context_length))
    if len({str(a.variant.tokenizer_path) for a in arms}) > 1:
        raise ZooError("the arms of a study must share one tokenizer")
    return arms


def source_hash() -> str:
    """A hash of the zoo's own code, so a result can be matched to the code that made it."""
    digest = hashlib.sha256()
    # plugins/ in a checkout, zoo_plugins/ when installed from the wheel
    built_in = [*PROJECT_ROOT.glob("plugins/**/*.py"), *PROJECT_ROOT.glob("zoo_plugins/**/*.py")]
    for path in sorted([*PROJECT_ROOT.glob("zoo_core/*.py"), *built_in]):
        digest.update(path.relative_to(PROJECT_ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _targets(tokens: torch.Tensor, count: int, longest: int, seed: int) -> torch.Tensor:
    """Positions of the tokens every arm is scored on; each has `longest` tokens of history."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(longest, len(tokens), (count,), generator=generator)


@torch.no_grad()
def last_token_loss(model, tokens: torch.Tensor, targets: torch.Tensor, history: int, batch: int = 128) -> float:
    """Mean loss of predicting tokens[t] from the `history` tokens before it."""
    device = model_device(model)
    was_training = model.training
    model.eval()
    total = 0.0
    try:
        for i in range(0, len(targets), batch):
            ends = targets[i : i + batch]
            index = ends[:, None] - history + torch.arange(history)[None, :]
            logits, _ = model(tokens[index].to(device))
            total += F.cross_entropy(logits[:, -1, :].float(), tokens[ends].to(device), reduction="sum").item()
    finally:
        model.train(was_training)
    return total / len(targets)


def _share_initial_values(networks: list[torch.nn.Module]) -> None:
    seen: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for network in networks:
            for name, parameter in network.named_parameters():
                if name in seen and seen[name].shape == parameter.shape:
                    parameter.copy_(seen[name])
                else:
                    seen.setdefault(name, parameter.detach().clone())


CURVE_POINTS = 20
LOGS = "logs"  # the runs' logs, in the study's output folder


def curve_eval_every(steps: int, eval_every: int) -> int:
    """An evaluation interval that draws a curve at any length of run: the
    study's, or shorter when that would leave fewer than ~20 points (a
    200-step run at the default 500 would be scored at steps 1 and 200 only)."""
    return max(1, min(eval_every, steps // CURVE_POINTS))


class StudyProgress:
    """One progress display for a whole study, named after it: every seed's
    steps count towards one total, so the ETA covers the study and a log gets
    about twenty lines, not a bar (and an evaluation line) per seed. The curve's
    evaluations are left in the average step time: they recur every few steps."""

    def __init__(self, study: StudyConfig, arms: int, enabled: bool = True):
        self.study, self.arms = study, arms
        self.display = TrainingProgress(f"experiment {study.name}", study.steps * len(study.seeds), enabled=enabled)
        self.started = time.perf_counter()

    def seed_started(self, seed: int) -> None:
        done = self.study.seeds.index(seed)
        if self.display.enabled:
            self.display.message(f"experiment {self.study.name}: seed {seed} ({done + 1} of {len(self.study.seeds)})")

    def step(self, seed: int, step: int, loss: float) -> None:
        done = self.study.seeds.index(seed) * self.study.steps + step
        tokens = done * self.study.tokens_per_update * self.arms
        self.display.update(done, time.perf_counter() - self.started, tokens, batch_loss=loss)

    def close(self) -> None:
        self.display.close()


def run_study(
    study: StudyConfig,
    out: Path,
    data: Path | str | None = None,
    show_progress: bool = True,
    device: str | None = None,
    dtype: str | None = None,
    jobs: int = 1,
    log_to: tuple[str, ...] = (),
) -> dict:
    """Train every arm for every seed and write results.json, loss.png and
    samples.png into ``out``. ``jobs`` above 1 runs that many seeds at once, each
    in its own process; the results are the same as one after the other.

    Each arm of each seed is a run of its own in the logs (`open_run_log`):
    ``out/logs/ARM-seedN.log.jsonl`` always, and the logs ``log_to`` names,
    tagged with the study and the seed."""
    if jobs < 1:
        raise ZooError(f"--jobs must be at least 1, not {jobs}")
    parse_log_targets(log_to)  # a mistake in them is refused before anything trains
    _figure_class()  # loss.png and samples.png need the plots extra: refused before anything trains, not after
    target = resolve_device(device)
    placement = (str(target), str(resolve_dtype(dtype, target)).removeprefix("torch."))
    if any(m > study.steps for m in study.milestones):
        study.milestones = [m for m in study.milestones if m <= study.steps]
    if study.steps not in study.milestones:
        study.milestones.append(study.steps)
    plugins = get_plugins()
    arms = _arms(study.arms, plugins)
    longest = max(arm.context for arm in arms)
    if study.tokens_per_update % longest:
        raise ZooError(
            f"tokens_per_update ({study.tokens_per_update}) must be a multiple of the longest context ({longest})"
        )
    first = arms[0].variant
    tokenizer = load_tokenizer(first, plugins)
    text = variant_text(first, data).text
    corpus = Corpus.from_text(text, tokenizer, first.card.train_fraction)
    targets = {
        split: _targets(corpus.split(split), study.eval_targets, longest, seed=1234)
        for split in ("train", "validation")
    }
    prompt_ids = (
        tokenizer.encode(study.prompt) if study.prompt else corpus.train[: min(a.context for a in arms)].tolist()
    )
    make_folder(out)
    prepare_run_logs(log_to, out / LOGS, study.name)
    if jobs == 1 or len(study.seeds) == 1:
        runs = _run_seeds(
            study, arms, corpus, targets, prompt_ids, tokenizer, out, plugins, placement, show_progress, log_to
        )
    else:
        runs = _run_seeds_in_processes(study, corpus, targets, prompt_ids, out, placement, jobs, show_progress, log_to)
    if study.score_text:
        validation, before = validation_text(text, first.card.train_fraction)
        _score_validation_text(study, arms, runs, validation, before, tokenizer, out, plugins)
    report = _report(study, arms, placement, tokenizer.decode(prompt_ids), runs)
    atomic_write_text(out / "results.json", json.dumps(report, indent=1) + "\n")
    plot_losses(report, out / "loss.png")
    plot_samples(report, out / "samples.png")
    return report


def _score_validation_text(study, arms, runs, validation: str, before: str, tokenizer, out: Path, plugins) -> None:
    """Each run's last checkpoint scored over the whole validation text, into its entry."""
    by_label = {arm.label: arm for arm in arms}
    for run in runs:
        arm = by_label[run["arm"]]
        network = build_network(arm.variant, plugins)
        path = out / "checkpoints" / f"{_run_stem(arm, run['seed'])}-step{study.steps}.safetensors"
        network.load_state_dict(load_file(path))
        scores = network_bits_per_byte(network, tokenizer, arm.context, validation, before)
        run["validation_bits_per_byte"] = scores["bits_per_byte"]
        run["validation_bits_per_character"] = scores["bits_per_character"]


def _run_seeds(study, arms, corpus, targets, prompt_ids, tokenizer, out, plugins, placement, show_progress, log_to):
    """Every seed's runs in this process, one seed after the other, under one progress display."""
    runs = []
    progress = StudyProgress(study, len(arms), enabled=show_progress)
    try:
        for seed in study.seeds:
            runs.extend(
                _run_seed(
                    study, arms, corpus, targets, prompt_ids, tokenizer, seed, out, plugins, progress, placement, log_to
                )
            )
    finally:
        progress.close()
    return runs


def _report(study: StudyConfig, arms: list[Arm], placement, prompt_text: str, runs: list[dict]) -> dict:
    """results.json: the study, its configuration, the code's hash and every run."""
    return {
        "study": study.name,
        "description": study.description,
        "config": {
            **{k: v for k, v in study.__dict__.items() if k != "name"},
            "contexts": sorted({arm.context for arm in arms}),
            "device": placement[0],
            "dtype": placement[1],
            "prompt_text": prompt_text,
            "loss_unit": f"nats per {arms[0].variant.card.tokenizer.kind} token",
        },
        "source_sha256": source_hash(),
        "runs": runs,
    }


def _run_seeds_in_processes(
    study, corpus, targets, prompt_ids, out, placement, jobs, show_progress, log_to=()
) -> list[dict]:
    """One process per seed (at most ``jobs`` at a time), results in seed order.
    Each process starts fresh (spawn: no state forked from this one) and computes
    with this process's thread count, so its arithmetic is a sequential run's."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(jobs, len(study.seeds)), mp_context=context) as pool:
        futures = [
            pool.submit(
                _seed_job, study, corpus, targets, prompt_ids, seed, out, placement, torch.get_num_threads(), log_to
            )
            for seed in study.seeds
        ]
        runs = []
        for done, (seed, future) in enumerate(zip(study.seeds, futures), 1):
            runs.extend(future.result())
            if show_progress:
                print(f"{study.name}: seed {seed} done ({done}/{len(study.seeds)})", file=sys.stderr, flush=True)
    return runs


def _seed_job(study, corpus, targets, prompt_ids, seed, out, placement, threads, log_to=()) -> list[dict]:
    torch.set_num_threads(threads)
    plugins = get_plugins()
    arms = _arms(study.arms, plugins)
    tokenizer = load_tokenizer(arms[0].variant, plugins)
    return _run_seed(study, arms, corpus, targets, prompt_ids, tokenizer, seed, out, plugins, None, placement, log_to)


def _run_seed(
    study,
    arms,
    corpus,
    targets,
    prompt_ids,
    tokenizer,
    seed,
    out,
    plugins,
    progress,
    placement=("cpu", "float32"),
    log_to=(),
):
    with contextlib.ExitStack() as logs:  # every arm's logs closed, however the seed's runs end
        run_logs = [
            logs.enter_context(
                open_run_log(log_to, out / LOGS, _run_stem(arm, seed), _run_description(study, arm, seed))
            )
            for arm in arms
        ]
        return _train_seed(
            study, arms, corpus, targets, prompt_ids, tokenizer, seed, out, plugins, progress, placement, run_logs
        )


def _run_stem(arm: Arm, seed: int) -> str:
    return f"{arm.label.replace('@', '-ctx')}-seed{seed}"


def _run_description(study: StudyConfig, arm: Arm, seed: int) -> RunDescription:
    recipe = study.recipe(seed).model_dump(exclude_none=True)
    recipe.update(
        context=arm.context,
        tokens_per_update=study.tokens_per_update,
        eval_every=study.eval_every,
        eval_targets=study.eval_targets,
    )
    tags: dict[str, str | int] = {
        "study": study.name,
        "seed": seed,
        "arm": arm.label,
        "variant": arm.variant.name,
        "dataset": recipe["data"],
    }
    return RunDescription(name=_run_stem(arm, seed), experiment=study.name, recipe=recipe, tags=tags)


def _train_seed(study, arms, corpus, targets, prompt_ids, tokenizer, seed, out, plugins, progress, placement, run_logs):
    """One seed's runs of the training loop, one per arm, in lockstep from shared initial values."""
    device, dtype = torch.device(placement[0]), getattr(torch, placement[1])
    networks = []
    for arm in arms:
        torch.manual_seed(seed)
        networks.append(build_network(arm.variant, plugins))
    _share_initial_values(networks)
    recipe = study.recipe(seed)
    longest = max(arm.context for arm in arms)
    runs = []
    for arm, network, run_log in zip(arms, networks, run_logs):
        where = Placement(device, dtype)  # one gradient scaler per network
        where.prepare(network)
        runs.append(
            TrainingRun(
                network,
                make_optimizer(network, recipe),
                recipe,
                where,
                batches=StudyBatches(corpus.train, study.tokens_per_update, longest, arm.context, seed, device),
                evaluate=_last_token_evaluation(network, corpus, targets, arm.context),
                run_log=run_log,
            )
        )
    milestones = Milestones(study, arms, runs, prompt_ids, tokenizer, seed, out, device)
    if progress is not None:
        progress.seed_started(seed)

    def after_step(step: int) -> bool:
        milestones.reached(step)
        if progress is not None:
            progress.step(seed, step, runs[-1].loss.item())
        return False

    train_together(runs, 1, after_step)
    return [
        _report_run(study, arms, arm, seed, run, corpus, targets, milestones, i)
        for i, (arm, run) in enumerate(zip(arms, runs))
    ]


class StudyBatches:
    """An arm's batches: each update ``tokens_per_update`` target tokens in
    windows of the longest context, drawn by a generator seeded with the seed,
    cut into sequences of the arm's own context. Every arm's generator draws
    alike, so every arm sees exactly the same tokens."""

    def __init__(self, tokens: torch.Tensor, tokens_per_update: int, longest: int, context: int, seed: int, device):
        self.tokens, self.longest, self.context, self.device = tokens, longest, context, device
        self.count = tokens_per_update // longest
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(len(self.tokens) - self.longest, (self.count,), generator=self.generator)
        inputs, outputs = windows_at(self.tokens, starts, self.longest)
        inputs, outputs = inputs.to(self.device), outputs.to(self.device)
        return inputs.reshape(-1, self.context), outputs.reshape(-1, self.context)


def _last_token_evaluation(network, corpus: Corpus, targets: dict, context: int):
    """A study's evaluation: the same target tokens for every arm, each from the arm's context of history."""

    def evaluate(step: int, last: bool) -> dict:
        return {split: last_token_loss(network, corpus.split(split), targets[split], context) for split in targets}

    return evaluate


class Milestones:
    """At each milestone, every arm's checkpoint and its continuation of the
    prompt (the same prompt, sampling settings and seed for every arm)."""

    def __init__(self, study, arms, runs, prompt_ids, tokenizer, seed, out, device):
        self.study, self.arms, self.runs, self.seed, self.out = study, arms, runs, seed, out
        self.prompt_ids, self.tokenizer, self.device = prompt_ids, tokenizer, device
        self.sampling = SamplingSettings(max_new_tokens=study.sample_tokens, seed=study.sample_seed)
        self.checkpoints: list[Path | None] = [None for _ in arms]  # each arm's last milestone
        self.checkpoint_sha: list[str | None] = [None for _ in arms]
        self.samples: list[dict] = [{} for _ in arms]

    def reached(self, step: int) -> None:
        if step not in self.study.milestones:
            return
        for i, (arm, run) in enumerate(zip(self.arms, self.runs)):
            path = self.out / "checkpoints" / f"{_run_stem(arm, self.seed)}-step{step}.safetensors"
            self.checkpoints[i] = path
            self.checkpoint_sha[i] = save_checkpoint(
                path, run.network.state_dict(), {"arm": arm.label, "seed": self.seed, "step": step}
            )
            ids = torch.tensor([self.prompt_ids], device=self.device)
            generated = sample_tokens(run.network, ids, self.sampling, seeded_generator(self.sampling.seed))
            self.samples[i][str(step)] = self.tokenizer.decode(generated[0, len(self.prompt_ids) :].tolist())


def _report_run(study, arms, arm, seed, run, corpus, targets, milestones, i) -> dict:
    """An arm's entry in results.json (cross-evaluated where the study asks), its log ended."""
    network, history = run.network, run.result.history
    report = {
        "arm": arm.label,
        "seed": seed,
        "context": arm.context,
        "parameters": sum(p.numel() for p in network.parameters()),
        "update_seconds": round(run.result.update_seconds, 2),
        "cpu_seconds": round(run.result.cpu_seconds, 2),
        "tokens": run.result.tokens_seen,
        "history": history,
        "samples": milestones.samples[i],
    }
    if study.cross_evaluate:
        report["cross_evaluation"] = {
            str(context): {
                split: last_token_loss(network, corpus.split(split), targets[split], context) for split in targets
            }
            for context in sorted({a.context for a in arms})
            if context <= arm.context
        }
    final = history[-1]
    checkpoint = milestones.checkpoints[i]
    run.run_log.log_end(
        {
            "train_loss": final["train"],
            "validation_loss": final["validation"],
            "update_seconds": report["update_seconds"],
        },
        checkpoint=checkpoint,
        sha256=milestones.checkpoint_sha[i],
        files=[path for path in (checkpoint,) if path is not None],
    )
    return report


def plot_losses(report: dict, path: Path) -> None:
    """Validation (and train) loss per arm: the mean over seeds, shaded between the best and worst seed."""
    Figure = _figure_class()
    figure = Figure(figsize=(11, 4.5), layout="constrained")
    figure.suptitle(f"{report['study']}: {report['description']}", fontsize=10)
    arms = list(dict.fromkeys(run["arm"] for run in report["runs"]))
    for axes, split in zip(figure.subplots(1, 2), ("train", "validation")):
        for arm in arms:
            runs = [run for run in report["runs"] if run["arm"] == arm]
            steps = [h["step"] for h in runs[0]["history"]]
            values = torch.tensor([[h[split] for h in run["history"]] for run in runs])
            mean = values.mean(0)
            (line,) = axes.plot(steps, mean, label=arm)
            axes.fill_between(steps, values.min(0).values, values.max(0).values, color=line.get_color(), alpha=0.2)
        axes.set_title(f"{split} loss ({report['config']['loss_unit']}), mean and seed range", fontsize=9)
        axes.set_xlabel("update")
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
    _save(figure, path)


def plot_samples(report: dict, path: Path) -> None:
    """The first seed's samples at the last milestone, one panel per arm."""
    seed, last = report["config"]["seeds"][0], str(report["config"]["steps"])
    runs = [run for run in report["runs"] if run["seed"] == seed]
    panels = [
        (f"{run['arm']}  (validation {run['history'][-1]['validation']:.4f})", run["samples"][last]) for run in runs
    ]
    title = f"{report['study']}: seed {seed}, update {last}, sampling seed {report['config']['sample_seed']}"
    text_panels_png(panels, title, path)
