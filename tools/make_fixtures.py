#!/usr/bin/env python3
"""Build tiny random-weight Hugging Face checkpoints and reference outputs for pagoda's tests.

Usage:
    python3 tools/make_fixtures.py --out tests/fixtures [--only NAME ...] [--list]

For every fixture in FIXTURES this script
  1. builds the model with transformers (`AutoModelForCausalLM.from_config`, float32, CPU,
     attn_implementation="eager"), seeded with torch.manual_seed(fixture seed);
  2. re-initialises every parameter from a seeded normal with a large std, so that the output
     distributions are peaked rather than near-uniform;
  3. draws prompts of fixed lengths from a seeded generator and computes, with plain forward passes
     (no KV cache, no sampling), the prompt log-probabilities and a 24-token greedy continuation;
     a prompt whose greedy steps come within MIN_MARGIN of a tie is re-drawn with the next seed;
  4. cross-checks the greedy tokens against `model.generate(use_cache=True)` (warning only);
  5. saves the checkpoint with `save_pretrained` (one float32 `model.safetensors` + `config.json`),
     reloads it with `from_pretrained` and checks that the logits are unchanged;
  6. writes `reference.json` beside the checkpoint (format in tests/fixtures/README.md).

Needs torch, transformers (v5) and safetensors; no network access (HF_HUB_OFFLINE is set).
To add an architecture, add an entry to FIXTURES (see the comment above it).
"""

from __future__ import annotations

import argparse
import copy
import inspect
import json
import math
import os
import shutil
import sys
from pathlib import Path

# Everything runs offline; set before transformers is imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Imported lazily in main() so that --help and --list work without them.
torch = None
transformers = None

GREEDY_NEW_TOKENS = 24
TOP_K = 5
MIN_MARGIN = 1e-3  # smallest allowed top-1 minus top-2 logit gap at any greedy step
MAX_PROMPT_ATTEMPTS = 32  # re-draws per prompt before giving up
RELOAD_TOLERANCE = 1e-5  # max |logit difference| between the in-memory and the reloaded model
DEFAULT_SIZE_BUDGET_KB = 600
DEFAULT_PROMPT_LENGTHS = [1, 5, 17, 40]

# Files a fixture directory keeps; anything else save_pretrained writes is deleted.
KEEP_FILES = {"config.json", "generation_config.json", "model.safetensors", "reference.json"}

# Parameter re-initialisation (see default_param_value):
#   matrices (ndim >= 2)                         ~ N(0, matrix_std^2)
#   embed_tokens / lm_head matrices              ~ N(0, embed_std^2)  (larger: peaked logits)
#   1-D weights of modules whose name has "norm" ~ norm_center + norm_jitter * N(0, 1)
#   other 1-D parameters (biases)                ~ N(0, bias_std^2)
# With hidden 64 and embed_std 0.3 the final logits have a std of about 0.3 * sqrt(64) = 2.4.
# Architectures whose norms scale by (1 + weight), such as Gemma, should set norm_center 0.0.
DEFAULT_INIT = {
    "matrix_std": 0.15,
    "embed_std": 0.3,
    "norm_center": 1.0,
    "norm_jitter": 0.1,
    "bias_std": 0.02,
}

# The fixture table. Each entry:
#   name            directory name under --out
#   architecture    expected model class name (checked; written to reference.json)
#   config_class    name of the transformers config class (looked up lazily, so entries for classes
#                   the installed transformers lacks only fail when selected)
#   config          keyword arguments for config_class (transformers v5 spelling: RoPE settings go
#                   in `rope_parameters`, including `rope_theta`; not `rope_scaling`/`rope_theta`)
#   seed            torch.manual_seed for the fixture; also seeds weights and prompts
#   prompt_lengths  (optional) prompt lengths, default DEFAULT_PROMPT_LENGTHS
#   init            (optional) overrides for DEFAULT_INIT
#   param_init      (optional) callable(name, param, noise, spec) -> tensor or None; return a value
#                   for parameters that need a special rule, None to use the default rule
#   build           (optional) callable(config) -> model, replacing AutoModelForCausalLM.from_config
#                   (e.g. for remote-code architectures); must give a float32 CPU model with eager
#                   attention
#   size_budget_kb  (optional) warn when the directory is larger, default DEFAULT_SIZE_BUDGET_KB
FIXTURES = [
    {
        "name": "llama-tiny",
        "architecture": "LlamaForCausalLM",
        "config_class": "LlamaConfig",
        "seed": 1,
        "config": {
            "vocab_size": 256,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "hidden_act": "silu",
            "max_position_embeddings": 256,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "mlp_bias": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
    },
    {
        "name": "llama3-rope-tiny",
        "architecture": "LlamaForCausalLM",
        "config_class": "LlamaConfig",
        "seed": 2,
        "config": {
            "vocab_size": 256,
            "hidden_size": 64,
            "intermediate_size": 96,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            # head_dim != hidden_size / num_attention_heads (= 16): q_proj is 64 -> 128.
            "head_dim": 32,
            "hidden_act": "silu",
            "max_position_embeddings": 256,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": True,
            "attention_bias": False,
            "mlp_bias": False,
            # original_max_position_embeddings is small so that the scaling changes most
            # frequencies of a 32-wide head: wavelengths above 32 are divided by 8, those between
            # 8 and 32 are interpolated.
            "rope_parameters": {
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,
            },
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
    },
    {
        "name": "qwen3-tiny",
        "architecture": "Qwen3ForCausalLM",
        "config_class": "Qwen3Config",
        "seed": 3,
        "config": {
            "vocab_size": 256,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "hidden_act": "silu",
            "max_position_embeddings": 256,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
            "attention_bias": False,
            "use_sliding_window": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
    },
]


def log(message: str) -> None:
    print(message, flush=True)


def warn(message: str) -> None:
    print(f"WARNING: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Model construction and initialisation


def make_config(entry: dict):
    config_cls = getattr(transformers, entry["config_class"], None)
    if config_cls is None:
        raise RuntimeError(
            f"{entry['name']}: transformers {transformers.__version__} has no {entry['config_class']}"
        )
    return config_cls(**copy.deepcopy(entry["config"]))


def build_model(entry: dict):
    torch.manual_seed(entry["seed"])
    config = make_config(entry)
    if "build" in entry:
        model = entry["build"](config)
    else:
        model = transformers.AutoModelForCausalLM.from_config(
            config, dtype=torch.float32, attn_implementation="eager"
        )
    model = model.to("cpu")
    model.eval()

    name = entry["name"]
    if type(model).__name__ != entry["architecture"]:
        raise RuntimeError(f"{name}: built {type(model).__name__}, expected {entry['architecture']}")
    attn = getattr(model.config, "_attn_implementation", None)
    if attn != "eager":
        raise RuntimeError(f"{name}: attention implementation is {attn!r}, expected 'eager'")
    for pname, param in model.named_parameters():
        if param.dtype != torch.float32 or param.device.type != "cpu":
            raise RuntimeError(f"{name}: parameter {pname} is {param.dtype} on {param.device}")
    return model


def default_param_value(name: str, param, noise, spec: dict):
    module_name = name.rsplit(".", 1)[0] if "." in name else ""
    last_module = module_name.rsplit(".", 1)[-1]
    if param.ndim >= 2:
        is_embedding = last_module in ("embed_tokens", "lm_head") or "embed" in last_module
        return noise * (spec["embed_std"] if is_embedding else spec["matrix_std"])
    if "norm" in last_module:
        return spec["norm_center"] + spec["norm_jitter"] * noise
    return noise * spec["bias_std"]


def reinit_parameters(model, entry: dict) -> None:
    spec = dict(DEFAULT_INIT)
    spec.update(entry.get("init", {}))
    custom = entry.get("param_init")
    generator = torch.Generator().manual_seed(1_000_003 * entry["seed"] + 7)
    with torch.no_grad():
        # named_parameters() lists a tied parameter once, so tied weights stay tied.
        for name, param in model.named_parameters():
            # Always draw the noise, so that a custom rule does not shift the others' values.
            noise = torch.randn(tuple(param.shape), generator=generator, dtype=torch.float32)
            value = custom(name, param, noise, spec) if custom is not None else None
            if value is None:
                value = default_param_value(name, param, noise, spec)
            param.copy_(value)


def check_tying(model, entry: dict) -> None:
    tied = bool(entry["config"].get("tie_word_embeddings", False))
    input_weight = model.get_input_embeddings().weight
    output_weight = model.get_output_embeddings().weight
    shared = input_weight.data_ptr() == output_weight.data_ptr()
    if tied and not shared:
        raise RuntimeError(f"{entry['name']}: tie_word_embeddings is set but lm_head is not tied")
    if not tied and shared:
        raise RuntimeError(f"{entry['name']}: lm_head shares the embedding but tying is off")


def check_rope_scaling_active(model, entry: dict) -> None:
    """For a scaled RoPE type, check that the model's inv_freq differs from plain RoPE."""
    rope = entry["config"].get("rope_parameters") or {}
    if rope.get("rope_type", "default") == "default":
        return
    inv_freq = None
    for module in model.modules():
        if isinstance(getattr(module, "inv_freq", None), torch.Tensor):
            inv_freq = module.inv_freq
            break
    if inv_freq is None:
        warn(f"{entry['name']}: no rotary module with inv_freq found; RoPE scaling not checked")
        return
    cfg = entry["config"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    dim = int(head_dim * rope.get("partial_rotary_factor", 1.0))
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float64) / dim
    plain = 1.0 / (rope["rope_theta"] ** exponents)
    got = inv_freq.detach().to(torch.float64).cpu()
    if got.shape != plain.shape:
        raise RuntimeError(f"{entry['name']}: inv_freq has shape {tuple(got.shape)}, expected {tuple(plain.shape)}")
    changed = int((~torch.isclose(got, plain, rtol=1e-4, atol=0.0)).sum())
    log(f"  rope {rope['rope_type']}: {changed} of {got.numel()} frequencies differ from plain RoPE")
    if changed == 0:
        raise RuntimeError(f"{entry['name']}: RoPE scaling '{rope['rope_type']}' changed no frequency")


# ---------------------------------------------------------------------------------------------
# Reference computation


def forward_logits(model, token_ids: list):
    """Float32 logits [len(token_ids), vocab] from one full forward pass without a KV cache."""
    input_ids = torch.tensor([token_ids], dtype=torch.long)
    output = model(input_ids=input_ids, use_cache=False)
    logits = output.logits
    if logits.dtype != torch.float32:
        raise RuntimeError(f"logits are {logits.dtype}, expected float32")
    if tuple(logits.shape[:2]) != (1, len(token_ids)):
        raise RuntimeError(f"logits have shape {tuple(logits.shape)} for {len(token_ids)} tokens")
    return logits[0]


def log_softmax64(logits):
    """Log-softmax taken in float64 of float32 logits."""
    return torch.log_softmax(logits.to(torch.float64), dim=-1)


def top_entries(logprobs_row) -> list:
    values, indices = torch.topk(logprobs_row, TOP_K)
    return [[int(i), float(v)] for i, v in zip(indices.tolist(), values.tolist())]


def compute_prompt_reference(model, prompt: list) -> dict:
    logprobs = log_softmax64(forward_logits(model, prompt))
    prompt_logprobs = [None] + [float(logprobs[i - 1, prompt[i]]) for i in range(1, len(prompt))]
    top_last = top_entries(logprobs[-1])

    sequence = list(prompt)
    tokens, token_logprobs, step_tops, margins = [], [], [], []
    for _ in range(GREEDY_NEW_TOKENS):
        last = forward_logits(model, sequence)[-1].to(torch.float64)
        best = torch.topk(last, 2)
        token = int(best.indices[0])
        margins.append(float(best.values[0] - best.values[1]))
        step_logprobs = torch.log_softmax(last, dim=-1)
        tops = top_entries(step_logprobs)
        if tops[0][0] != token:
            raise RuntimeError("greedy token is not the top log-probability")
        tokens.append(token)
        token_logprobs.append(float(step_logprobs[token]))
        step_tops.append(tops)
        sequence.append(token)

    return {
        "prompt_token_ids": list(prompt),
        "prompt_logprobs": prompt_logprobs,
        "prompt_top_logprobs_last": top_last,
        "greedy_token_ids": tokens,
        "greedy_logprobs": token_logprobs,
        "greedy_top_logprobs": step_tops,
        "min_greedy_margin": min(margins),
    }


def prompt_seed(entry: dict, index: int, attempt: int) -> int:
    return 100_000 * entry["seed"] + 1_000 * index + attempt


def draw_prompt(vocab_size: int, length: int, seed: int) -> list:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (length,), generator=generator, dtype=torch.long).tolist()


def reference_for_index(model, entry: dict, index: int, length: int) -> dict:
    vocab_size = entry["config"]["vocab_size"]
    for attempt in range(MAX_PROMPT_ATTEMPTS):
        seed = prompt_seed(entry, index, attempt)
        prompt = draw_prompt(vocab_size, length, seed)
        reference = compute_prompt_reference(model, prompt)
        margin = reference["min_greedy_margin"]
        if margin >= MIN_MARGIN:
            log(f"  prompt {index}: {length} tokens, seed {seed}, min greedy margin {margin:.4g}")
            return {"prompt_seed": seed, **reference}
        log(f"  prompt {index}: seed {seed} has a near-tie (margin {margin:.3g}); re-drawing")
    raise RuntimeError(
        f"{entry['name']}: prompt {index} ({length} tokens) has a greedy near-tie "
        f"(< {MIN_MARGIN}) for all {MAX_PROMPT_ATTEMPTS} seeds tried"
    )


def generate_cross_check(model, prompt: list, expected: list) -> bool:
    """Greedy generate() with the KV cache must give the same tokens; warns, never fails."""
    saved = model.generation_config
    try:
        generation_config = copy.deepcopy(saved)
        # The reference continuation ignores EOS; keep generate() from stopping at it.
        generation_config.eos_token_id = None
        model.generation_config = generation_config
        input_ids = torch.tensor([prompt], dtype=torch.long)
        output = model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            do_sample=False,
            max_new_tokens=GREEDY_NEW_TOKENS,
            use_cache=True,
        )
        got = output[0, len(prompt):].tolist()
    except Exception as error:  # a cross-check only
        warn(f"generate() cross-check could not run: {type(error).__name__}: {error}")
        return False
    finally:
        model.generation_config = saved
    if got != expected:
        first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
        warn(
            f"generate(use_cache=True) differs from the manual greedy loop at step {first}: "
            f"got {got}, expected {expected}"
        )
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Saving and checking the checkpoint


def save_checkpoint(model, directory: Path) -> None:
    kwargs = {}
    # transformers v5 always writes safetensors; older versions take safe_serialization.
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        kwargs["safe_serialization"] = True
    model.save_pretrained(str(directory), **kwargs)
    if not (directory / "config.json").is_file():
        warn("save_pretrained wrote no config.json; writing it with config.save_pretrained")
        model.config.save_pretrained(str(directory))
        if not (directory / "config.json").is_file():
            raise RuntimeError(f"no config.json in {directory}")
    if not (directory / "model.safetensors").is_file():
        found = sorted(p.name for p in directory.iterdir())
        raise RuntimeError(f"save_pretrained wrote no single model.safetensors in {directory}: {found}")
    for path in sorted(directory.iterdir()):
        if path.name in KEEP_FILES and path.is_file():
            continue
        log(f"  removing {path.name} (not needed)")
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def check_safetensors(directory: Path, entry: dict) -> None:
    from safetensors import safe_open

    names = []
    with safe_open(str(directory / "model.safetensors"), framework="pt") as handle:
        for key in handle.keys():
            tensor = handle.get_tensor(key)
            if tensor.dtype != torch.float32:
                raise RuntimeError(f"{entry['name']}: tensor {key} is saved as {tensor.dtype}")
            names.append(key)
    tied = bool(entry["config"].get("tie_word_embeddings", False))
    has_lm_head = "lm_head.weight" in names
    log(f"  model.safetensors: {len(names)} float32 tensors, lm_head.weight "
        f"{'present' if has_lm_head else 'absent'} (tie_word_embeddings={tied})")
    if not tied and not has_lm_head:
        raise RuntimeError(f"{entry['name']}: untied model saved without lm_head.weight")


def _same_value(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0)
    return a == b


def check_saved_config(directory: Path, entry: dict) -> None:
    """Warn where config.json does not carry a requested field as given (e.g. a renamed field)."""
    saved = json.loads((directory / "config.json").read_text())
    for key, value in entry["config"].items():
        if key == "rope_parameters":
            saved_rope = saved.get("rope_parameters") or saved.get("rope_scaling")
            if not isinstance(saved_rope, dict):
                warn(f"{entry['name']}: config.json has no rope_parameters/rope_scaling object")
                continue
            for rope_key, rope_value in value.items():
                if rope_key not in saved_rope and rope_key == "rope_theta" and "rope_theta" in saved:
                    saved_value = saved["rope_theta"]
                else:
                    saved_value = saved_rope.get(rope_key)
                if not _same_value(saved_value, rope_value):
                    warn(f"{entry['name']}: config.json rope {rope_key} is {saved_value!r}, set {rope_value!r}")
        elif key not in saved:
            warn(f"{entry['name']}: config.json has no field {key!r} (set to {value!r})")
        elif not _same_value(saved[key], value):
            warn(f"{entry['name']}: config.json {key} is {saved[key]!r}, set {value!r}")
    log(f"  config.json: architectures {saved.get('architectures')}, dtype {saved.get('dtype', saved.get('torch_dtype'))!r}, "
        f"rope {saved.get('rope_parameters', saved.get('rope_scaling'))}")


def check_reload(directory: Path, model, prompts: list, entry: dict) -> None:
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(
        str(directory), dtype=torch.float32, attn_implementation="eager"
    )
    reloaded = reloaded.to("cpu")
    reloaded.eval()
    worst = 0.0
    for prompt in prompts:
        a = forward_logits(model, prompt)
        b = forward_logits(reloaded, prompt)
        worst = max(worst, float((a - b).abs().max()))
    log(f"  reload check: max |logit difference| {worst:.3g}")
    if not worst <= RELOAD_TOLERANCE:
        raise RuntimeError(
            f"{entry['name']}: the saved checkpoint reloads to different logits (max diff {worst:.3g})"
        )


# ---------------------------------------------------------------------------------------------
# Output


def dump_reference(reference: dict) -> str:
    """JSON with one line per field (lists kept on one line); floats use Python's repr."""
    lines = ["{"]
    for key, value in reference.items():
        if key == "prompts":
            continue
        lines.append(f"  {json.dumps(key)}: {json.dumps(value, allow_nan=False)},")
    lines.append('  "prompts": [')
    prompts = reference["prompts"]
    for index, prompt in enumerate(prompts):
        lines.append("    {")
        items = list(prompt.items())
        for position, (key, value) in enumerate(items):
            comma = "," if position + 1 < len(items) else ""
            lines.append(f"      {json.dumps(key)}: {json.dumps(value, allow_nan=False)}{comma}")
        lines.append("    }" + ("," if index + 1 < len(prompts) else ""))
    lines.append("  ]")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    if json.loads(text) != reference:
        raise RuntimeError("reference.json does not read back to the computed reference")
    return text


def directory_size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file())


def looks_like_fixture_dir(directory: Path) -> bool:
    entries = list(directory.iterdir())
    return not entries or (directory / "reference.json").exists() or (directory / "config.json").exists()


# ---------------------------------------------------------------------------------------------
# Driver


def make_fixture(entry: dict, out_dir: Path) -> dict:
    name = entry["name"]
    log(f"== {name}")
    final_dir = out_dir / name
    work_dir = out_dir / f".{name}.tmp"
    if work_dir.exists():
        shutil.rmtree(work_dir)
    work_dir.mkdir(parents=True)

    with torch.no_grad():
        model = build_model(entry)
        reinit_parameters(model, entry)
        check_tying(model, entry)
        check_rope_scaling_active(model, entry)
        num_params = sum(p.numel() for p in model.parameters())
        log(f"  {entry['architecture']}: {num_params:,} parameters")

        prompts = []
        generate_ok = True
        for index, length in enumerate(entry.get("prompt_lengths", DEFAULT_PROMPT_LENGTHS)):
            reference = reference_for_index(model, entry, index, length)
            if not generate_cross_check(model, reference["prompt_token_ids"], reference["greedy_token_ids"]):
                generate_ok = False
            prompts.append(reference)

        save_checkpoint(model, work_dir)
        check_safetensors(work_dir, entry)
        check_saved_config(work_dir, entry)
        check_reload(work_dir, model, [p["prompt_token_ids"] for p in prompts], entry)

    reference = {
        "fixture": name,
        "architecture": entry["architecture"],
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "dtype": "float32",
        "seed": entry["seed"],
        "greedy_new_tokens": GREEDY_NEW_TOKENS,
        "top_logprobs": TOP_K,
        "min_margin_threshold": MIN_MARGIN,
        "prompts": prompts,
    }
    (work_dir / "reference.json").write_text(dump_reference(reference))

    size = directory_size(work_dir)
    for path in sorted(work_dir.iterdir()):
        log(f"  {path.name:24s} {path.stat().st_size:>9,} bytes")
    budget_kb = entry.get("size_budget_kb", DEFAULT_SIZE_BUDGET_KB)
    if size > budget_kb * 1024:
        warn(f"{name}: fixture directory is {size / 1024:.0f} KB, over its {budget_kb} KB budget")

    if final_dir.exists():
        if not final_dir.is_dir() or not looks_like_fixture_dir(final_dir):
            raise RuntimeError(f"{final_dir} exists and does not look like a fixture directory; not replacing it")
        shutil.rmtree(final_dir)
    work_dir.rename(final_dir)
    log(f"  wrote {final_dir}")

    return {
        "name": name,
        "params": num_params,
        "size": size,
        "min_margin": min(p["min_greedy_margin"] for p in prompts),
        "generate_ok": generate_ok,
    }


def print_summary(rows: list) -> None:
    header = f"{'fixture':20s} {'params':>9s} {'size KB':>8s} {'min margin':>11s}  generate()"
    log("")
    log(header)
    log("-" * len(header))
    for row in rows:
        log(f"{row['name']:20s} {row['params']:>9,} {row['size'] / 1024:>8.1f} {row['min_margin']:>11.4g}  "
            f"{'same' if row['generate_ok'] else 'DIFFERS (see warnings)'}")


def parse_args(argv: list) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="tests/fixtures", help="output directory (default: tests/fixtures)")
    parser.add_argument("--only", nargs="+", action="extend", metavar="NAME", default=None,
                        help="build only these fixtures")
    parser.add_argument("--list", action="store_true", help="list the fixtures and exit")
    return parser.parse_args(argv)


def main(argv: list) -> int:
    args = parse_args(argv)
    names = [entry["name"] for entry in FIXTURES]
    if len(set(names)) != len(names):
        raise RuntimeError("fixture names are not unique")
    if args.list:
        for entry in FIXTURES:
            log(f"{entry['name']:20s} {entry['architecture']}")
        return 0
    selected = FIXTURES
    if args.only:
        unknown = [n for n in args.only if n not in names]
        if unknown:
            log(f"unknown fixture(s): {', '.join(unknown)}; known: {', '.join(names)}")
            return 2
        selected = [entry for entry in FIXTURES if entry["name"] in args.only]

    global torch, transformers
    import torch as _torch
    import transformers as _transformers

    torch = _torch
    transformers = _transformers
    torch.set_num_threads(1)  # fixed reduction order, so reruns give the same bits
    log(f"transformers {transformers.__version__}, torch {torch.__version__}")

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = [make_fixture(entry, out_dir) for entry in selected]
    print_summary(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
