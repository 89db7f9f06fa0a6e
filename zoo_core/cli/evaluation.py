"""Scoring and looking inside variants: eval, compare, attention."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import ZooError
from .options import device_options, format_table, load_on_threads


def eval_arguments(commands) -> None:
    p = commands.add_parser("eval", help="measure a variant: validation loss and perplexity (or its task score)")
    p.add_argument("name", help="the variant (see `zoo list`)")
    p.add_argument("--windows", type=int, default=None, help="evaluation windows per split (default: the recipe's)")
    p.add_argument(
        "--data",
        metavar="NAME|PATH",
        help="evaluate on this registered dataset's or text file's validation split (default: the recipe's corpus)",
    )
    p.add_argument(
        "--dataset",
        metavar="NAME",
        help="evaluate on this registered dataset's validation split (`zoo datasets`) (default: the recipe's corpus)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    device_options(p, "evaluate", threads=True)
    p.add_argument(
        "--text-chars",
        type=int,
        default=None,
        metavar="N",
        help="bits per byte on the first N characters of the validation split (default: all of it)",
    )
    p.add_argument(
        "--record",
        action="store_true",
        help="write validation bits per byte and per character into the variant's card (its registry file)",
    )
    p.set_defaults(run=cmd_eval)


def cmd_eval(args) -> int:
    from ..evaluation.scoring import evaluate_language_model

    if args.data is not None and args.dataset is not None:
        raise ZooError("give --data PATH or --dataset NAME, not both")
    data = args.dataset if args.dataset is not None else args.data
    if args.record:  # refused before any scoring: a card in an installed package is never rewritten
        from ..api import get_variant
        from ..evaluation.scoring import recordable_registry

        if data is not None or args.text_chars is not None:
            raise ZooError("--record writes the card's own measurement: drop --data, --dataset and --text-chars")
        recordable_registry(get_variant(args.name))
    model = load_on_threads(args)
    if hasattr(model.network, "evaluate"):
        report = model.network.evaluate(model.tokenizer)
    else:
        from ..training.progress import WorkProgress

        progress = WorkProgress(model.name, enabled=not args.json)
        try:
            report = evaluate_language_model(
                model, windows=args.windows, data=data, text_chars=args.text_chars, progress=progress
            )
        finally:
            progress.close()
        if args.record:
            from ..evaluation.scoring import record_bits_per_byte

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


def compare_arguments(commands) -> None:
    p = commands.add_parser("compare", help="score variants on the same windows; deltas and same-seed samples")
    p.add_argument("names", nargs="+", metavar="NAME", help="the variants to compare; the first is the baseline")
    p.add_argument("--windows", type=int, default=320, help="windows per split")
    p.add_argument("--seed", type=int, default=42, help="chooses the windows and the sampling draws")
    p.add_argument("--prompt", help="the samples' prompt (default: the start of the training text)")
    p.add_argument("--max-new-tokens", type=int, default=100, help="tokens drawn per sample")
    p.add_argument("--data", type=Path, help="score on this text file (default: the recipe's corpus)")
    p.add_argument(
        "--dataset",
        metavar="NAME",
        help="score on this registered dataset (`zoo datasets`); needed when the variants were trained on different text",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--out", type=Path, help="also write the samples side by side as a PNG (default: none)")
    device_options(p, "score and sample")
    p.add_argument(
        "--bits-per-byte",
        action="store_true",
        help="score in bits per byte on the validation text (automatic when the tokenizers differ)",
    )
    p.add_argument(
        "--text-chars",
        type=int,
        default=None,
        metavar="N",
        help="bits per byte: score the first N characters of the validation split (default: all of it)",
    )
    p.set_defaults(run=cmd_compare)


def cmd_compare(args) -> int:
    from ..evaluation.compare import compare_variants
    from .options import sampling_settings

    # Checked here to name the flags (--max-new-tokens, --seed); the API names its arguments.
    sampling_settings(args)
    if args.windows < 1:
        raise ZooError(f"--windows must be at least 1, not {args.windows}")
    if args.data is not None and args.dataset is not None:
        raise ZooError("give --data PATH or --dataset NAME, not both")
    override = args.dataset if args.dataset is not None else args.data
    report = compare_variants(
        args.names,
        args.windows,
        args.seed,
        args.prompt,
        args.max_new_tokens,
        override,
        device=args.device,
        dtype=args.dtype,
        bits_per_byte=args.bits_per_byte,
        text_chars=args.text_chars,
    )
    in_bits = report["unit"] == "bits per byte"
    if args.out:
        from ..evaluation.plots import text_panels_png

        score = "bits_per_byte" if in_bits else "validation_loss"
        panels = [(f"{m['name']}  ({score.replace('_', ' ')} {m[score]:.4f})", m["sample"]) for m in report["models"]]
        text_panels_png(panels, f"same prompt, temperature 1, sampling seed {report['seed']}", args.out)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    if in_bits:
        print(f"{report['reason']}.\nscored text: {report['text']} of {report['dataset']}, identical for every model")
        print(f"method: {report['method']}")
        rows = [
            [
                m["name"],
                m["tokenizer"],
                f"{m['parameters']:,}",
                f"{m['tokens']:,}",
                f"{m['nats_per_token']:.4f}",
                f"{m['bits_per_character']:.4f}",
                f"{m['bits_per_byte']:.4f}",
                f"{m['bits_per_byte_delta']:+.4f}",
            ]
            for m in report["models"]
        ]
        print(
            format_table(
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
        return 0
    print(
        f"{report['windows']} windows of {report['context']} tokens per split of {report['dataset']}, seed {report['seed']}; "
        f"losses in {report['unit']}, deltas against {report['baseline']}"
    )
    rows = [
        [
            m["name"],
            f"{m['parameters']:,}",
            f"{m['train_loss']:.4f}",
            f"{m['train_delta']:+.4f}",
            f"{m['validation_loss']:.4f}",
            f"{m['validation_delta']:+.4f}",
        ]
        for m in report["models"]
    ]
    print(
        format_table(
            ["name", "parameters", "train", "Δ train", "validation", "Δ validation"], rows, right={1, 2, 3, 4, 5}
        )
    )
    print(f"\nsamples: same prompt, temperature 1, sampling seed {report['seed']}")
    for model in report["models"]:
        print(f"\n--- {model['name']} ---\n{model['sample']}")
    return 0


def attention_arguments(commands) -> None:
    p = commands.add_parser("attention", help="attention maps per layer and head for a prompt")
    p.add_argument("name", help="the variant (see `zoo list`)")
    p.add_argument("--prompt", required=True, help="the text whose attention to show")
    p.add_argument("--out", type=Path, help="write a PNG instead of printing the maps (default: print)")
    device_options(p, "compute the maps")
    p.set_defaults(run=cmd_attention)


def cmd_attention(args) -> int:
    import torch

    from ..api import load
    from ..evaluation.plots import attention_grid_png

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
                format_table(
                    ["", *labels],
                    [[label, *(f"{v:.2f}" for v in values)] for label, values in zip(labels, matrix)],
                    right=set(range(1, len(labels) + 1)),
                )
            )
            print()
    return 0
