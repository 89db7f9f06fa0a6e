"""Scoring and looking inside variants: eval, compare, attention, inspect."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from ..errors import ZooError
from ..evaluation.compare import compare_variants
from ..evaluation.plots import attention_grid_png, grid_png, text_panels_png
from ..evaluation.scoring import evaluate_language_model, record_bits_per_byte, recordable_registry
from ..inspection import ablation
from ..inspection.experts import expert_counts
from ..inspection.logit_lens import logit_lens
from ..inspection.patching import patch_residual
from ..inspection.roles import format_role_report, task_ablation, verify_roles
from ..loading.api import get_variant, load
from ..plugin_api.protocols import SelfEvaluating, implements
from ..storage.files import atomic_write_bytes
from ..training.progress import WorkProgress
from ..web.svg import heatmap
from .bounds import check_for_variant
from .options import load_on_threads, sampling_settings
from .tables import render_table


def cmd_eval(args) -> int:
    data = args.data
    if args.record:  # refused before any scoring: a card in an installed package is never rewritten
        if data is not None or args.text_chars is not None or args.context is not None:
            raise ZooError("--record writes the card's own measurement: drop --data, --text-chars and --context")
        recordable_registry(get_variant(args.name))
    model = load_on_threads(args)
    if implements(model.network, SelfEvaluating):
        report = model.network.evaluate(model.tokenizer)
    else:
        progress = WorkProgress(model.name, enabled=not args.json)
        try:
            report = evaluate_language_model(
                model,
                windows=args.windows,
                data=data,
                text_chars=args.text_chars,
                progress=progress,
                context=args.context,
            )
        finally:
            progress.close()
        if args.record:
            print(f"recorded bits per byte in {record_bits_per_byte(model, report)}", file=sys.stderr)
    if args.json:
        print(json.dumps({"name": model.name, **report}, indent=2))
    else:
        print(f"{model.name}:")
        for key, value in report.items():
            label = key.replace("_", " ")
            if key.endswith("_total") and isinstance(report.get(key.removesuffix("_total")), list):
                continue  # printed with its list
            if isinstance(value, list):
                # A capped list says how many there are in all, not how many it shows.
                count = report.get(f"{key}_total", len(value))
                capped = f" (first {len(value)} shown)" if count > len(value) else ""
                print(f"  {label}: {count or 'none'}{capped}")
                for item in value:
                    print(f"    {item}")
            else:
                print(f"  {label}: {value:.4f}" if isinstance(value, float) else f"  {label}: {value}")
    return 0


def cmd_compare(args) -> int:
    # Checked here to name the flags (--max-new-tokens, --seed); the API names its arguments.
    sampling_settings(args)
    for name in args.names:
        check_for_variant(args, get_variant(name).card)
    progress = WorkProgress("compare", enabled=not args.json)
    try:
        report = compare_variants(
            args.names,
            args.windows,
            args.seed,
            args.prompt,
            args.max_new_tokens,
            args.data,
            device=args.device,
            dtype=args.dtype,
            bits_per_byte=args.bits_per_byte,
            text_chars=args.text_chars,
            context=args.context,
            progress=progress,
        )
    finally:
        progress.close()
    in_bits = report["unit"] == "bits per byte"
    if args.out:
        score = "bits_per_byte" if in_bits else "validation_loss"
        panels = [(f"{m['name']}  ({score.replace('_', ' ')} {m[score]:.4f})", m["sample"]) for m in report["models"]]
        text_panels_png(panels, f"same prompt, temperature 1, sampling seed {report['seed']}", args.out)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    if in_bits:
        _print_bits_comparison(report)
    else:
        _print_loss_comparison(report)
    return 0


def _parameters(measured: dict) -> str:
    """An adapter variant's own parameters, its base's beside them (`parameter_counts`)."""
    base = measured.get("base_parameters")
    return f"{measured['parameters']:,}" + (f" (+{base:,} base)" if base is not None else "")


def _print_bits_comparison(report: dict) -> None:
    print(f"{report['reason']}.\nscored text: {report['text']} of {report['dataset']}, identical for every model")
    print(f"method: {report['method']}")
    if report.get("sizing"):
        print(f"({report['sizing']})")
    rows = [
        [
            m["name"],
            m["tokenizer"],
            _parameters(m),
            f"{m['tokens']:,}",
            f"{m['nats_per_token']:.4f}",
            f"{m['bits_per_character']:.4f}",
            f"{m['bits_per_byte']:.4f}",
            f"{m['bits_per_byte_delta']:+.4f}",
        ]
        for m in report["models"]
    ]
    print(
        render_table(
            ["name", "tokenizer", "parameters", "tokens", "nats/token", "bits/char", "bits/byte", "Δ bits/byte"],
            rows,
            right={2, 3, 4, 5, 6, 7},
        )
    )
    print("context:")
    for model in report["models"]:
        print(f"  {model['name']}: {model['context']}")
    print(f"\nsamples: same prompt, temperature 1, sampling seed {report['seed']}")
    for model in report["models"]:
        print(f"\n--- {model['name']} ---\n{model['sample']}")


def _print_loss_comparison(report: dict) -> None:
    print(
        f"{report['windows']} windows of {report['context']} tokens per split of {report['dataset']}, seed {report['seed']}; "
        f"losses in {report['unit']}, deltas against {report['baseline']}"
    )
    if report.get("sizing"):
        print(f"({report['sizing']}; --windows and --context ask for more)")
    rows = [
        [
            m["name"],
            _parameters(m),
            f"{m['train_loss']:.4f}",
            f"{m['train_delta']:+.4f}",
            f"{m['validation_loss']:.4f}",
            f"{m['validation_delta']:+.4f}",
        ]
        for m in report["models"]
    ]
    print(
        render_table(
            ["name", "parameters", "train", "Δ train", "validation", "Δ validation"], rows, right={1, 2, 3, 4, 5}
        )
    )
    print(f"\nsamples: same prompt, temperature 1, sampling seed {report['seed']}")
    for model in report["models"]:
        print(f"\n--- {model['name']} ---\n{model['sample']}")


def cmd_attention(args) -> int:
    model = load(args.name, device=args.device, dtype=args.dtype)
    ids = model.encode_prompt(args.prompt)
    if len(ids) > model.card.context_length:
        raise ZooError(
            f"the prompt is {len(ids)} tokens; '{args.name}' attends over at most {model.card.context_length}"
        )
    with torch.no_grad():
        maps = model.network.attention_maps(torch.tensor([ids], device=model.device))
    if not maps:
        raise ZooError(f"'{args.name}' ({model.card.architecture}) has no attention to show")
    labels = [model.tokenizer.decode([i]).replace("\n", "\\n") for i in ids]
    if isinstance(maps, dict):  # named heads (the puzzle)
        panels = [[(name, m.squeeze(0).float().cpu().numpy()) for name, m in maps.items()]]
    else:
        panels = [
            [(f"layer {layer + 1}, head {head + 1}", m[0, head].float().cpu().numpy()) for head in range(m.shape[1])]
            for layer, m in enumerate(maps)
        ]
    if args.out:
        attention_grid_png(panels, labels, f"{args.name}: {args.prompt!r}", args.out)
        print(f"{sum(len(row) for row in panels)} attention maps over {len(ids)} tokens written to {args.out}")
        return 0
    for row in panels:
        for title, matrix in row:
            print(f"{title}  (rows attend to columns)")
            print(
                render_table(
                    ["", *labels],
                    [[label, *(f"{v:.2f}" for v in values)] for label, values in zip(labels, matrix)],
                    right=set(range(1, len(labels) + 1)),
                )
            )
            print()
    return 0


def _check_inspect_arguments(args) -> None:
    if not (args.logit_lens or args.ablate or args.patch or args.verify_roles or args.routing):
        raise ZooError(
            "choose a view: --logit-lens, --ablate LAYER.HEAD[,...] or --patch --corrupt TEXT "
            "(or, for a mixture of experts, --routing; for a network that states its heads' roles, --verify-roles)"
        )
    if (args.logit_lens or args.patch) and not args.prompt:
        raise ZooError("--logit-lens and --patch need --prompt TEXT")
    if args.routing and not args.prompt:
        raise ZooError("--routing needs --prompt TEXT")
    if args.patch and not args.corrupt:
        raise ZooError("--patch needs --corrupt TEXT, the prompt to patch the --prompt run into")
    if args.corrupt and not args.patch:
        raise ZooError("--corrupt is the corrupted prompt of --patch; add --patch")
    if args.out is not None:
        if args.logit_lens == args.patch:
            raise ZooError("--out draws one picture: ask for --logit-lens or --patch, not both or neither")
        if args.out.suffix.lower() not in (".svg", ".png"):
            raise ZooError(f"--out {args.out}: write a .svg or a .png")


def cmd_inspect(args) -> int:
    _check_inspect_arguments(args)
    groups = None
    if args.ablate and args.ablate.strip() != "each":
        groups = [ablation.parse_heads(args.ablate)]
    check_for_variant(args, get_variant(args.name).card)
    model = load(args.name, device=args.device, dtype=args.dtype)
    report: dict = {"name": model.name}
    progress = WorkProgress(model.name, enabled=not args.json)
    try:
        _inspect_views(args, model, groups, report, progress)
    finally:
        progress.close()
    if args.out is not None:
        _draw(report, args.out)
    # A role check that does not hold fails the command, as a failing test does.
    status = 0 if report.get("roles", {"holds": True})["holds"] else 1
    if args.json:
        print(json.dumps(report, indent=2))
        return status
    for view, show in (
        ("logit_lens", _show_logit_lens),
        ("patching", _show_patching),
        ("routing", _show_experts),
        ("ablation", _show_ablation),
        ("answer_ablation", _show_answer_ablation),
    ):
        if view in report:
            show(report[view])
    if "roles" in report:
        print("\n".join(format_role_report(report["roles"], model.name)))
    if args.out is not None:
        print(f"written to {args.out}")
    return status


def _inspect_views(args, model, groups, report: dict, progress: WorkProgress) -> None:
    """The views asked for, into ``report``; the long ones (patching, ablation) shown on ``progress``."""
    if args.logit_lens:
        report["logit_lens"] = logit_lens(model, args.prompt).to_dict()
    if args.patch:
        report["patching"] = patch_residual(model, args.prompt, args.corrupt, progress=progress).to_dict()
    if args.routing:
        report["routing"] = expert_counts(model, args.prompt).to_dict()
    if args.ablate:
        answers = task_ablation(model, groups)  # a task network (the puzzle): answers, not a loss
        if answers is not None:
            if args.ablation != "zero":
                raise ZooError(f"'{model.name}' is ablated by zeroing heads only; drop --ablation {args.ablation}")
            report["answer_ablation"] = answers
        else:
            groups = groups if groups is not None else ablation.every_head(model)
            report["ablation"] = ablation.ablate_heads(
                model, groups, args.ablation, args.windows, args.context, progress=progress
            ).to_dict()
    if args.verify_roles:
        report["roles"] = verify_roles(model)


def _show_logit_lens(lens: dict) -> None:
    print("logit lens: the top next token read from each layer's residual stream (its probability)")
    rows = [
        [layer, *(f"{token} ({p:.2f})" for token, p in zip(predictions, probabilities)), _loss(loss)]
        for layer, predictions, probabilities, loss in zip(
            lens["layers"], lens["predictions"], lens["probabilities"], lens["prompt_loss"]
        )
    ]
    print(render_table(["", *lens["tokens"], "prompt loss"], rows, right={len(lens["tokens"]) + 1}))
    print()


def _show_experts(experts: dict) -> None:
    tokens = len(experts["tokens"])
    print(f"experts: how many of the prompt's {tokens} tokens each layer's router sent to each expert")
    width = max(map(len, experts["counts"]))
    rows = [[f"layer {layer}", *counts] for layer, counts in zip(experts["layers"], experts["counts"])]
    print(render_table(["", *(f"expert {e}" for e in range(width))], rows, right=set(range(1, width + 1))))
    print()


def _loss(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def _show_patching(patching: dict) -> None:
    columns = [c if c == k else f"{c}/{k}" for c, k in zip(patching["clean_tokens"], patching["corrupted_tokens"])]
    print(
        f"activation patching: answer '{patching['answer']}' against '{patching['wrong']}'; logit difference "
        f"{patching['clean_difference']:.3f} clean, {patching['corrupted_difference']:.3f} corrupted"
    )
    print("fraction recovered by patching the clean residual stream in at one layer and position (clean/corrupted):")
    rows = [
        [layer, *(_fraction(value) for value in row)] for layer, row in zip(patching["layers"], patching["recovered"])
    ]
    print(render_table(["", *columns], rows, right=set(range(1, len(columns) + 1))))
    print()


def _fraction(value: float) -> str:
    text = f"{value:.2f}"
    return "0.00" if text == "-0.00" else text  # a rounding's sign says nothing


def _show_ablation(report: dict) -> None:
    print(
        f"head ablation ({report['method']}): validation loss on {report['windows']} windows of {report['context']} "
        f"tokens of {report['dataset']}; intact {report['loss']:.4f}"
    )
    if report.get("sizing"):
        print(f"({report['sizing']}; --windows and --context ask for more)")
    rows = [[",".join(a["heads"]), f"{a['loss']:.4f}", f"{a['delta']:+.4f}"] for a in report["ablations"]]
    print(render_table(["heads removed", "loss", "Δ loss"], rows, right={1, 2}))
    print()


def _show_answer_ablation(report: dict) -> None:
    print(f"head ablation ({report['method']}): answers changed among the {report['sentences']} well-formed sentences")
    rows = [[",".join(a["heads"]), "; ".join(a["titles"]), str(a["changed"])] for a in report["ablations"]]
    print(render_table(["heads removed", "heads", "answers changed"], rows, right={2}))
    for entry in report["ablations"]:
        for example in entry["examples"][:1]:
            print(f"  {','.join(entry['heads'])}: {example['sentence']} {example['answer']} -> {example['ablated']}")
    print()


def _draw(report: dict, out: Path) -> None:
    if "logit_lens" in report:
        lens = report["logit_lens"]
        matrix, rows, columns = lens["probabilities"], lens["layers"], lens["tokens"]
        title = f"{report['name']}: logit lens (colour: probability of the top token)"
        text, label = lens["predictions"], "probability of the top token"
    else:
        patching = report["patching"]
        matrix, rows, columns = patching["recovered"], patching["layers"], patching["clean_tokens"]
        title = f"{report['name']}: patching, fraction of the logit difference recovered"
        text, label = None, "fraction recovered"
    if out.suffix.lower() == ".png":
        grid_png(matrix, rows, columns, title, out, cell_text=text, value_label=label)
    else:
        atomic_write_bytes(out, heatmap(matrix, rows, columns, title, cell_text=text).encode("utf-8"))
