#!/usr/bin/env python3
"""Build tiny random-weight Hugging Face checkpoints and reference outputs for pagoda's tests.

Usage:
    python3 tools/make_fixtures.py --out tests/fixtures [--only NAME ...] [--list] [--assisted]

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

An entry with "kind": "assistant" (the Gemma 4 drafter) follows its own path instead of 2-4 and 6:
see make_assistant_fixture.

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
# Mixture-of-experts fixtures (those with a "router_margin" rule): a prompt whose forward passes
# come within this of a routing tie (gap between the last chosen and the first unchosen expert
# score) is re-drawn like a greedy near-tie.
MIN_ROUTER_MARGIN = 1e-4
DEFAULT_DRAFT_STEPS = 4  # drafting steps recorded per prompt by an "assistant" fixture

# Files a fixture directory keeps; anything else save_pretrained writes is deleted.
KEEP_FILES = {"config.json", "generation_config.json", "model.safetensors", "reference.json",
              "assisted_reference.json"}

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

# ---------------------------------------------------------------------------------------------
# Architecture-specific rules used by the fixture table (looked up at run time, so they may use
# torch; they only run for the entries that name them).


def _build_with_eager_experts(config):
    """AutoModelForCausalLM.from_config with the plain per-expert loop for MoE layers."""
    kwargs = {"dtype": torch.float32, "attn_implementation": "eager"}
    try:
        model = transformers.AutoModelForCausalLM.from_config(config, experts_implementation="eager", **kwargs)
    except (TypeError, ValueError) as error:
        warn(f"experts_implementation='eager' not accepted ({error}); using the default")
        model = transformers.AutoModelForCausalLM.from_config(config, **kwargs)
    log(f"  experts implementation: {getattr(model.config, '_experts_implementation', None)!r}")
    return model


def _gemma4_param_init(name, param, noise, spec):
    # Gemma4TextRouter: `scale` (per hidden unit) and `per_expert_scale` multiply like norm weights;
    # the default 1-D rule would make them ~0. `proj` gets std 1, so that the router logits have a
    # std of about 1 (its input is RMS-normalised and scaled by hidden_size**-0.5) and the routing
    # is not a near-tie everywhere.
    if name.endswith("router.scale") or name.endswith("router.per_expert_scale"):
        return 1.0 + 0.1 * noise
    if name.endswith("router.proj.weight"):
        return noise * 1.0
    return None


def _gemma4_buffer_init(name, buffer, noise):
    # Gemma4TextDecoderLayer.layer_scalar (a persistent buffer, saved in the checkpoint) multiplies
    # the layer output; draw it around 1 so that an engine that ignores it fails.
    if name.endswith("layer_scalar"):
        return 1.0 + 0.1 * noise
    return None


def _mimo_param_init(name, param, noise, spec):
    # Attention sinks: one logit per head in the sliding layers; std 0.5 so that the heads differ.
    if name.endswith("self_attn.sinks"):
        return noise * 0.5
    return None


def _mimo_buffer_init(name, buffer, noise):
    # e_score_correction_bias: added to the sigmoid scores for expert choice only.
    if name.endswith("e_score_correction_bias"):
        return noise * 0.05
    return None


def _gemma4_router_margin(model, tracker):
    """Margin = gap between the k-th and (k+1)-th router probability (softmax, before top-k)."""
    handles = []
    for module in model.modules():
        if type(module).__name__ != "Gemma4TextRouter":
            continue
        k = int(module.config.top_k_experts)

        def hook(mod, inputs, output, k=k):
            probs = output[0].detach().to(torch.float64).reshape(-1, output[0].shape[-1])
            top = torch.topk(probs, k + 1, dim=-1).values
            tracker.update(float((top[:, k - 1] - top[:, k]).min()))

        handles.append(module.register_forward_hook(hook))
    return handles


def _mimo_router_margin(model, tracker):
    """Margins of both choices made by the group-limited router (sigmoid + correction bias)."""
    cfg = model.config
    groups, topk_group, top_k = cfg.n_group, cfg.topk_group, cfg.num_experts_per_tok
    handles = []
    for module in model.modules():
        if not type(module).__name__.endswith("TopkRouter") or not hasattr(module, "e_score_correction_bias"):
            continue

        def hook(router, inputs, output):
            logits = output[0] if isinstance(output, tuple) else output
            scores = logits.detach().to(torch.float64).sigmoid() + router.e_score_correction_bias.to(torch.float64)
            tokens, experts = scores.shape
            per_group = experts // groups
            group_scores = scores.view(tokens, groups, per_group).topk(2, dim=-1).values.sum(dim=-1)
            if topk_group < groups:
                top = group_scores.topk(topk_group + 1, dim=-1).values
                tracker.update(float((top[:, topk_group - 1] - top[:, topk_group]).min()))
            chosen = group_scores.topk(topk_group, dim=-1).indices
            mask = torch.zeros_like(group_scores).scatter_(1, chosen, 1.0).bool()
            mask = mask.unsqueeze(-1).expand(tokens, groups, per_group).reshape(tokens, experts)
            if top_k < topk_group * per_group:
                masked = scores.masked_fill(~mask, float("-inf"))
                top = masked.topk(top_k + 1, dim=-1).values
                tracker.update(float((top[:, top_k - 1] - top[:, top_k]).min()))

        handles.append(module.register_forward_hook(hook))
    return handles


# Shared by gemma4-tiny and the drafter matched to it (same head sizes and KV heads per type).
_GEMMA4_ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
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
#   buffer_init     (optional) callable(name, buffer, noise) -> tensor or None; re-initialises
#                   persistent buffers (those save_pretrained writes), from a generator of their own
#   norm_style      (optional) "scale" (RMSNorm computes x * w) or "offset" (x * (1 + w)); checked
#                   on the model's first RMSNorm with a weight, so that the init matches the convention
#   router_margin   (optional) callable(model, tracker) -> hook handles; the hooks report routing
#                   margins to the tracker (see MIN_ROUTER_MARGIN); recorded per prompt
#   fp8             (optional) {"block": [rows, cols]}: an FP8 checkpoint in the block-scaled layout
#                   (see quantize_fp8); the reference is the model on the dequantized weights
#   kind            (optional) "assistant": a Gemma 4 drafter; needs "target" (the name of the target
#                   fixture) and optionally "draft_steps"; see make_assistant_fixture
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
    {
        # Gemma 4 text model with every text-side feature of the small (E2B-like) checkpoints:
        # sliding/full layers with different head sizes, KV sharing for the last two layers,
        # per-layer inputs (PLE), K = V on full layers, double-wide MLPs on the shared layers,
        # final logit soft-capping.
        "name": "gemma4-tiny",
        "architecture": "Gemma4ForCausalLM",
        "config_class": "Gemma4TextConfig",
        "seed": 4,
        "config": {
            "vocab_size": 256,
            "hidden_size": 64,
            "intermediate_size": 32,
            "num_hidden_layers": 6,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "global_head_dim": 32,
            "num_global_key_value_heads": 2,
            "attention_k_eq_v": True,
            "layer_types": [
                "sliding_attention",
                "sliding_attention",
                "full_attention",
                "sliding_attention",
                "sliding_attention",
                "full_attention",
            ],
            "sliding_window": 6,
            "num_kv_shared_layers": 2,
            "use_double_wide_mlp": True,
            "hidden_size_per_layer_input": 8,
            "vocab_size_per_layer_input": 256,
            "enable_moe_block": False,
            "final_logit_softcapping": 30.0,
            "hidden_activation": "gelu_pytorch_tanh",
            "max_position_embeddings": 256,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
            "attention_bias": False,
            "rope_parameters": _GEMMA4_ROPE,
            "pad_token_id": 0,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
        "norm_style": "scale",
        "buffer_init": _gemma4_buffer_init,
        "size_budget_kb": 700,
    },
    {
        # Gemma 4 without KV sharing, K = V or PLE (like the large checkpoints), with the MoE block
        # that runs beside the dense MLP in every layer.
        "name": "gemma4-noshare-tiny",
        "architecture": "Gemma4ForCausalLM",
        "config_class": "Gemma4TextConfig",
        "seed": 5,
        "config": {
            "vocab_size": 256,
            "hidden_size": 64,
            "intermediate_size": 16,
            "num_hidden_layers": 4,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "global_head_dim": 32,
            "attention_k_eq_v": False,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            "sliding_window": 6,
            "num_kv_shared_layers": 0,
            "use_double_wide_mlp": False,
            "hidden_size_per_layer_input": 0,
            "vocab_size_per_layer_input": 256,
            "enable_moe_block": True,
            "num_experts": 4,
            "top_k_experts": 2,
            "moe_intermediate_size": 32,
            "final_logit_softcapping": 30.0,
            "hidden_activation": "gelu_pytorch_tanh",
            "max_position_embeddings": 256,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
            "attention_bias": False,
            "rope_parameters": _GEMMA4_ROPE,
            "pad_token_id": 0,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
        "build": _build_with_eager_experts,
        "norm_style": "scale",
        "param_init": _gemma4_param_init,
        "buffer_init": _gemma4_buffer_init,
        "router_margin": _gemma4_router_margin,
        "size_budget_kb": 700,
    },
    {
        # MiMo-V2-Flash: q/k head 24, v head 16, partial RoPE (8 of 24 dims), sliding layers with
        # twice the KV heads and per-head attention sinks, values scaled by 0.707, a dense first
        # layer, then sigmoid-routed MoE with group-limited top-k and a score-correction bias.
        "name": "mimo-tiny",
        "architecture": "MiMoV2FlashForCausalLM",
        "config_class": "MiMoV2FlashConfig",
        "seed": 7,
        "config": {
            "vocab_size": 256,
            "hidden_size": 64,
            "intermediate_size": 64,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "head_dim": 24,
            "v_head_dim": 16,
            "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
            "mlp_layer_types": ["dense", "sparse", "sparse", "sparse"],
            "sliding_window": 6,
            "attention_value_scale": 0.707,
            "moe_intermediate_size": 12,
            "n_routed_experts": 8,
            "num_experts_per_tok": 2,
            "n_group": 2,
            "topk_group": 1,
            "norm_topk_prob": True,
            "routed_scaling_factor": 1.0,
            "hidden_act": "silu",
            "max_position_embeddings": 256,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "rope_parameters": {
                "full_attention": {"rope_type": "default", "rope_theta": 5000000.0, "partial_rotary_factor": 0.334},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.334},
            },
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
        "build": _build_with_eager_experts,
        "norm_style": "scale",
        "param_init": _mimo_param_init,
        "buffer_init": _mimo_buffer_init,
        "router_margin": _mimo_router_margin,
        "size_budget_kb": 700,
    },
    {
        # Gemma 4 assistant (MTP drafter) for gemma4-tiny: every layer reads the target's shared KV
        # (no k/v projections of its own); its own hidden size (32) differs from the target's (64).
        "name": "gemma4-assistant-tiny",
        "kind": "assistant",
        "target": "gemma4-tiny",
        "architecture": "Gemma4AssistantForCausalLM",
        "config_class": "Gemma4AssistantConfig",
        "seed": 6,
        "draft_steps": DEFAULT_DRAFT_STEPS,
        "config": {
            "backbone_hidden_size": 64,
            "use_ordered_embeddings": False,
            "tie_word_embeddings": True,
            "text_config": {
                "vocab_size": 256,
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 1,
                "head_dim": 16,
                "global_head_dim": 32,
                "num_global_key_value_heads": 2,
                "attention_k_eq_v": True,
                "layer_types": ["sliding_attention", "full_attention"],
                "sliding_window": 6,
                "num_kv_shared_layers": 2,
                "use_double_wide_mlp": False,
                "hidden_size_per_layer_input": 0,
                "vocab_size_per_layer_input": 0,
                "enable_moe_block": False,
                "final_logit_softcapping": None,
                "hidden_activation": "gelu_pytorch_tanh",
                "max_position_embeddings": 256,
                "rms_norm_eps": 1e-6,
                "tie_word_embeddings": True,
                "attention_bias": False,
                "rope_parameters": _GEMMA4_ROPE,
                "pad_token_id": 0,
                "bos_token_id": 1,
                "eos_token_id": 2,
            },
        },
        "norm_style": "scale",
        "buffer_init": _gemma4_buffer_init,
        "size_budget_kb": 700,
    },
]


def _fp8_variant(base_name: str, name: str, seed: int, **config) -> dict:
    """An FP8 checkpoint (32 x 32 blocks) of a fixture's entry, with its own seed and config changes."""
    base = next(entry for entry in FIXTURES if entry["name"] == base_name)
    return {**base, "name": name, "seed": seed, "fp8": {"block": [32, 32]},
            "config": {**copy.deepcopy(base["config"]), **config}}


FIXTURES += [
    # MiMo-V2-Flash and DeepSeek ship 128 x 128 blocks; a 64-wide model needs smaller blocks to have
    # several per matrix.
    _fp8_variant("llama-tiny", "llama-fp8-tiny", 8),
    # FP8 attention, dense MLP and experts (16 wide, so every K is a multiple of 16 as the GPU kernel
    # reads it); the router stays f32.
    _fp8_variant("mimo-tiny", "mimo-fp8-tiny", 9, num_hidden_layers=3, layer_types=["full_attention", "sliding_attention", "full_attention"],
                 mlp_layer_types=["dense", "sparse", "sparse"], moe_intermediate_size=16),
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


def reinit_buffers(model, entry: dict) -> None:
    """Apply the entry's buffer_init rule to the persistent buffers (only for entries that have one)."""
    rule = entry.get("buffer_init")
    if rule is None:
        return
    persistent = set(model.state_dict().keys())
    generator = torch.Generator().manual_seed(1_000_003 * entry["seed"] + 11)
    changed = []
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name not in persistent:
                continue
            noise = torch.randn(tuple(buffer.shape), generator=generator, dtype=torch.float32)
            value = rule(name, buffer, noise)
            if value is not None:
                buffer.copy_(value.to(buffer.dtype))
                changed.append(name)
    log(f"  re-initialised {len(changed)} persistent buffers")


def check_norm_style(model, entry: dict) -> None:
    """Check that the model's RMSNorm scales by w ("scale") or by 1 + w ("offset"), as the entry says."""
    style = entry.get("norm_style")
    if style is None:
        return
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if "RMSNorm" in type(module).__name__ and isinstance(weight, torch.nn.Parameter) and weight.ndim == 1:
            break
    else:
        raise RuntimeError(f"{entry['name']}: no RMSNorm with a weight found to check norm_style")
    generator = torch.Generator().manual_seed(12345)
    x = torch.randn(3, weight.shape[0], generator=generator, dtype=torch.float32)
    with torch.no_grad():
        saved = weight.detach().clone()
        weight.zero_()
        out = module(x)
        weight.copy_(saved)
    got = "scale" if float(out.abs().max()) < 1e-6 else "offset"
    log(f"  norm style: {type(module).__name__} ({name}) computes {'x * w' if got == 'scale' else 'x * (1 + w)'}")
    if got != style:
        raise RuntimeError(f"{entry['name']}: norm_style is {style!r} but {type(module).__name__} is {got!r}")
    spec = dict(DEFAULT_INIT)
    spec.update(entry.get("init", {}))
    effective = spec["norm_center"] + (1.0 if style == "offset" else 0.0)
    if abs(effective - 1.0) > 1e-12:
        raise RuntimeError(f"{entry['name']}: norm weights would scale by {effective}, not about 1")


class RouterTracker:
    """Smallest routing margin reported by an entry's router hooks since the last reset."""

    def __init__(self):
        self.value = math.inf

    def reset(self) -> None:
        self.value = math.inf

    def update(self, margin: float) -> None:
        self.value = min(self.value, margin)


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
    if rope and all(isinstance(value, dict) for value in rope.values()):
        log_per_layer_type_rope(model, entry, rope)
        return
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


def log_per_layer_type_rope(model, entry: dict, rope: dict) -> None:
    """For rope_parameters keyed by layer type: log (and sanity-check) each type's inv_freq."""
    cfg = entry["config"]
    for layer_type, params in rope.items():
        inv_freq = None
        for module in model.modules():
            candidate = getattr(module, f"{layer_type}_inv_freq", None)
            if isinstance(candidate, torch.Tensor):
                inv_freq = candidate.detach().to(torch.float64).cpu()
                break
        if inv_freq is None:
            warn(f"{entry['name']}: no {layer_type}_inv_freq buffer found")
            continue
        nonzero = int((inv_freq != 0).sum())
        head_dim = cfg.get("head_dim")
        if layer_type == "full_attention" and cfg.get("global_head_dim"):
            head_dim = cfg["global_head_dim"]
        factor = params.get("partial_rotary_factor", 1.0)
        if params.get("rope_type") == "proportional":
            expected_len, expected_nonzero = head_dim // 2, int(factor * head_dim // 2)
        else:
            expected_len = expected_nonzero = int(head_dim * factor) // 2
        log(f"  rope {layer_type}: {params.get('rope_type')}, theta {params.get('rope_theta')}, "
            f"{inv_freq.numel()} frequencies, {nonzero} non-zero (head_dim {head_dim}, factor {factor})")
        if inv_freq.numel() != expected_len or nonzero != expected_nonzero:
            warn(f"{entry['name']}: {layer_type} inv_freq has {inv_freq.numel()} entries ({nonzero} non-zero), "
                 f"expected {expected_len} ({expected_nonzero} non-zero)")


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


def reference_for_index(model, entry: dict, index: int, length: int, router: RouterTracker | None = None) -> dict:
    vocab_size = entry["config"]["vocab_size"]
    for attempt in range(MAX_PROMPT_ATTEMPTS):
        seed = prompt_seed(entry, index, attempt)
        prompt = draw_prompt(vocab_size, length, seed)
        if router is not None:
            router.reset()
        reference = compute_prompt_reference(model, prompt)
        margin = reference["min_greedy_margin"]
        router_ok = True
        if router is not None:
            reference["min_router_margin"] = router.value
            router_ok = router.value >= MIN_ROUTER_MARGIN
        if margin >= MIN_MARGIN and router_ok:
            extra = f", min router margin {router.value:.4g}" if router is not None else ""
            log(f"  prompt {index}: {length} tokens, seed {seed}, min greedy margin {margin:.4g}{extra}")
            return {"prompt_seed": seed, **reference}
        if not router_ok:
            log(f"  prompt {index}: seed {seed} has a routing near-tie (margin {router.value:.3g}); re-drawing")
            continue
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


# ---------------------------------------------------------------------------------------------
# FP8 checkpoints
#
# The layout of DeepSeek-V3's and MiMo-V2-Flash's FP8 checkpoints: each quantized projection's
# "<module>.weight" is float8_e4m3fn, beside a float32 "<module>.weight_scale_inv" of
# [ceil(N / rows), ceil(K / cols)] block scales; the weight is value * scale, block by block.
# config.json carries quantization_config {quant_method "fp8", fmt "e4m3", activation_scheme
# "dynamic", weight_block_size [rows, cols], modules_to_not_convert [...]}.

FP8_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
FP8_MAX = 448.0


def fp8_quantize_block(weight, rows: int, cols: int):
    """(e4m3 values, f32 scales) of a 2-D weight: scale = block amax / 448 (1 for zeros)."""
    n, k = weight.shape
    scales = torch.ones((math.ceil(n / rows), math.ceil(k / cols)), dtype=torch.float32)
    values = torch.empty((n, k), dtype=torch.float8_e4m3fn)
    for i in range(scales.shape[0]):
        for j in range(scales.shape[1]):
            block = weight[i * rows:(i + 1) * rows, j * cols:(j + 1) * cols].to(torch.float32)
            amax = float(block.abs().max())
            scale = amax / FP8_MAX if amax > 0 else 1.0
            scales[i, j] = scale
            values[i * rows:(i + 1) * rows, j * cols:(j + 1) * cols] = (block / scale).to(torch.float8_e4m3fn)
    return values, scales


def fp8_dequantize(values, scales, rows: int, cols: int):
    expanded = scales.repeat_interleave(rows, 0)[: values.shape[0]].repeat_interleave(cols, 1)[:, : values.shape[1]]
    return values.to(torch.float32) * expanded


def quantize_fp8(model, entry: dict) -> dict:
    """Round every projection weight of the model to FP8 in place (its dequantized value), so the
    f32 model is the exact reference; returns {name: (values, scales)} to save."""
    rows, cols = entry["fp8"]["block"]
    quantized = {}
    for name, param in model.named_parameters():
        parts = name.split(".")
        if param.ndim != 2 or len(parts) < 2 or parts[-1] != "weight" or parts[-2] not in FP8_PROJECTIONS:
            continue
        values, scales = fp8_quantize_block(param.data, rows, cols)
        param.copy_(fp8_dequantize(values, scales, rows, cols))
        quantized[name] = (values, scales)
    if not quantized:
        raise RuntimeError(f"{entry['name']}: no projection weights to quantize")
    log(f"  FP8: {len(quantized)} projection weights in {rows} x {cols} blocks")
    return quantized


def write_fp8_checkpoint(model, directory: Path, quantized: dict, entry: dict) -> None:
    """Rewrite the saved f32 checkpoint in the FP8 layout and add quantization_config."""
    from safetensors.torch import load_file, save_file

    path = directory / "model.safetensors"
    tensors = load_file(str(path))
    for name, (values, scales) in quantized.items():
        if name not in tensors:
            raise RuntimeError(f"{entry['name']}: {name} is not in the saved checkpoint")
        if not torch.equal(tensors[name], fp8_dequantize(values, scales, *entry["fp8"]["block"])):
            raise RuntimeError(f"{entry['name']}: saved {name} is not the dequantized weight")
        tensors[name] = values.contiguous()
        tensors[name + "_scale_inv"] = scales.contiguous()
    save_file(tensors, str(path), metadata={"format": "pt"})
    linear = {n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    kept = sorted(n for n in linear if n + ".weight" not in quantized)
    config_path = directory / "config.json"
    config = json.loads(config_path.read_text())
    config["quantization_config"] = {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": list(entry["fp8"]["block"]),
        "modules_to_not_convert": kept,
    }
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    log(f"  wrote {len(quantized)} FP8 weights with block scales; unquantized linears: {kept}")


def fp8_path_logits(directory: Path, prompts: list, entry: dict):
    """transformers' own FP8 path (FP8 matmuls with dynamic activation scales) on the GPU: the
    last-position logits of each prompt, or None where it does not run."""
    if not torch.cuda.is_available():
        warn(f"{entry['name']}: no GPU; transformers' FP8 path not run")
        return None
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(str(directory), device_map="cuda")
        model.eval()
        linear = [type(m).__name__ for m in model.modules() if "FP8" in type(m).__name__]
        log(f"  transformers' FP8 path: {len(linear)} FP8 modules ({sorted(set(linear))})")
        out = []
        with torch.no_grad():
            for prompt in prompts:
                ids = torch.tensor([prompt], dtype=torch.long, device="cuda")
                out.append(model(input_ids=ids).logits[0, -1].float().cpu().tolist())
        return out
    except Exception as error:  # recorded as not run
        warn(f"{entry['name']}: transformers' FP8 path failed: {type(error).__name__}: {error}")
        return None


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
    _check_config_fields(saved, entry["config"], entry)
    log(f"  config.json: architectures {saved.get('architectures')}, dtype {saved.get('dtype', saved.get('torch_dtype'))!r}, "
        f"rope {saved.get('rope_parameters', saved.get('rope_scaling'))}")


def _check_config_fields(saved: dict, expected: dict, entry: dict, prefix: str = "") -> None:
    for key, value in expected.items():
        if isinstance(value, dict) and key != "rope_parameters" and isinstance(saved.get(key), dict):
            _check_config_fields(saved[key], value, entry, f"{prefix}{key}.")
            continue
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
            warn(f"{entry['name']}: config.json has no field {prefix}{key!r} (set to {value!r})")
        elif not _same_value(saved[key], value):
            warn(f"{entry['name']}: config.json {prefix}{key} is {saved[key]!r}, set {value!r}")


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
    if entry.get("kind") == "assistant":
        return make_assistant_fixture(entry, out_dir)
    name = entry["name"]
    log(f"== {name}")
    final_dir = out_dir / name
    work_dir = out_dir / f".{name}.tmp"
    if work_dir.exists():
        shutil.rmtree(work_dir)
    work_dir.mkdir(parents=True)

    with torch.no_grad():
        model = build_model(entry)
        check_norm_style(model, entry)
        reinit_parameters(model, entry)
        reinit_buffers(model, entry)
        check_tying(model, entry)
        check_rope_scaling_active(model, entry)
        num_params = sum(p.numel() for p in model.parameters())
        log(f"  {entry['architecture']}: {num_params:,} parameters")
        quantized = quantize_fp8(model, entry) if "fp8" in entry else None

        router = None
        if "router_margin" in entry:
            router = RouterTracker()
            handles = entry["router_margin"](model, router)
            if not handles:
                raise RuntimeError(f"{name}: router_margin installed no hooks")
            log(f"  routing margins tracked on {len(handles)} MoE layers")

        prompts = []
        generate_ok = True
        for index, length in enumerate(entry.get("prompt_lengths", DEFAULT_PROMPT_LENGTHS)):
            reference = reference_for_index(model, entry, index, length, router)
            if not generate_cross_check(model, reference["prompt_token_ids"], reference["greedy_token_ids"]):
                generate_ok = False
            prompts.append(reference)

        save_checkpoint(model, work_dir)
        check_safetensors(work_dir, entry)
        check_saved_config(work_dir, entry)
        check_reload(work_dir, model, [p["prompt_token_ids"] for p in prompts], entry)
        fp8_logits = None
        if quantized is not None:
            write_fp8_checkpoint(model, work_dir, quantized, entry)
            fp8_logits = fp8_path_logits(work_dir, [p["prompt_token_ids"] for p in prompts], entry)

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
    }
    if router is not None:
        reference["min_router_margin_threshold"] = MIN_ROUTER_MARGIN
    if quantized is not None:
        reference["fp8_block"] = list(entry["fp8"]["block"])
        reference["fp8_reference"] = "the float32 model on the dequantized FP8 weights"
    if fp8_logits is not None:
        for prompt, logits in zip(prompts, fp8_logits):
            prompt["transformers_fp8_last_logits"] = logits
    reference["prompts"] = prompts
    size = finish_fixture(entry, work_dir, final_dir, reference)

    return {
        "name": name,
        "params": num_params,
        "size": size,
        "min_margin": min(p["min_greedy_margin"] for p in prompts),
        "generate_ok": generate_ok,
        **({"min_router_margin": min(p["min_router_margin"] for p in prompts)} if router is not None else {}),
    }


def finish_fixture(entry: dict, work_dir: Path, final_dir: Path, reference: dict) -> int:
    """Write reference.json, report sizes and move the finished directory into place."""
    name = entry["name"]
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
    return size


# ---------------------------------------------------------------------------------------------
# Assistant (drafter) fixtures
#
# A Gemma 4 assistant drafts tokens for its target model (transformers'
# SinglePositionMultiTokenCandidateGenerator). After the target has run over the prompt (length L)
# and chosen its next token t0, one drafting step is
#
#     inputs_embeds = concat(target.embed_tokens(t0) [scaled by sqrt(hidden)], h)   # [1, 1, 2 * H]
#     drafter(inputs_embeds, position_ids=[[L]], shared_kv_states=target's, use_cache=False)
#
# where h is the target's hidden_states[-1] at the last prompt position and shared_kv_states holds,
# per layer type, the keys and values of the target's last non-shared layer of that type over the
# L prompt positions. Further steps feed the drafter's own argmax and its output last_hidden_state
# (post_projection, back in the target's width) with the same position and the same shared KV.


def find_entry(name: str) -> dict:
    for entry in FIXTURES:
        if entry["name"] == name:
            return entry
    raise RuntimeError(f"no fixture named {name!r}")


def build_target(target_entry: dict):
    """The target exactly as its own fixture builds it (same seed, same re-initialisation)."""
    model = build_model(target_entry)
    reinit_parameters(model, target_entry)
    reinit_buffers(model, target_entry)
    return model


def build_assistant(entry: dict):
    torch.manual_seed(entry["seed"])
    config = make_config(entry)
    cls = getattr(transformers, entry["architecture"], None)
    if cls is None:
        raise RuntimeError(f"{entry['name']}: transformers {transformers.__version__} has no {entry['architecture']}")
    model = cls._from_config(config, dtype=torch.float32, attn_implementation="eager")
    model = model.to("cpu")
    model.eval()
    attention = [m for m in model.modules() if type(m).__name__.endswith("Attention") and hasattr(m, "config")]
    if not attention:
        raise RuntimeError(f"{entry['name']}: no attention modules found")
    impls = {getattr(m.config, "_attn_implementation", None) for m in attention}
    if impls != {"eager"}:
        raise RuntimeError(f"{entry['name']}: attention implementations {impls}, expected eager")
    for pname, param in model.named_parameters():
        if param.dtype != torch.float32 or param.device.type != "cpu":
            raise RuntimeError(f"{entry['name']}: parameter {pname} is {param.dtype} on {param.device}")
    return model


def target_prefill(target, prompt: list) -> dict:
    """Run the target over the prompt; return t0, its margin, the last hidden state and the shared KV."""
    input_ids = torch.tensor([prompt], dtype=torch.long)
    output = target(input_ids=input_ids, use_cache=False, output_hidden_states=True, return_shared_kv_states=True)
    if output.shared_kv_states is None or output.hidden_states is None:
        raise RuntimeError("the target returned no shared_kv_states / hidden_states")
    last = output.logits[0, -1].to(torch.float64)
    best = torch.topk(last, 2)
    hidden_all = output.hidden_states[-1]
    # Is hidden_states[-1] the final-norm output (what lm_head sees)? Recompute the logits from it.
    relogits = target.lm_head(hidden_all)
    cap = getattr(target.config, "final_logit_softcapping", None)
    if cap is not None:
        relogits = torch.tanh(relogits / cap) * cap
    return {
        "token": int(best.indices[0]),
        "margin": float(best.values[0] - best.values[1]),
        "hidden": hidden_all[:, -1:, :],
        "hidden_first": hidden_all[:, :1, :],
        "shared": {k: (v[0], v[1]) for k, v in output.shared_kv_states.items()},
        "hidden_is_final": bool(torch.equal(relogits, output.logits)),
    }


def draft(target, drafter, prompt: list, prefill: dict, steps: int) -> list:
    """The drafting loop of SinglePositionMultiTokenCandidateGenerator, run by hand."""
    length = len(prompt)
    position_ids = torch.tensor([[length]], dtype=torch.long)
    attention_mask = torch.ones(1, length + 1, dtype=torch.long)
    embed = target.get_input_embeddings()
    last_token = torch.tensor([[prefill["token"]]], dtype=torch.long)
    last_hidden = prefill["hidden"]
    results = []
    for _ in range(steps):
        inputs_embeds = torch.cat([embed(last_token), last_hidden], dim=-1)
        output = drafter(
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            shared_kv_states=prefill["shared"],
            use_cache=False,
        )
        results.append({"inputs_embeds": inputs_embeds, "logits": output.logits[0, -1]})
        last_token = output.logits.argmax(dim=-1)
        last_hidden = output.last_hidden_state
    return results


def visible_kv(drafter, inputs_embeds, length: int, shared: dict):
    """Which target KV positions each layer type of the drafter attends to, as [first, last] ranges."""
    try:
        masks = drafter.create_attention_masks(
            drafter.pre_projection(inputs_embeds), torch.ones(1, length + 1, dtype=torch.long), shared
        )
    except Exception as error:  # informational only
        warn(f"could not build the drafter's attention masks: {type(error).__name__}: {error}")
        return None
    result = {}
    for layer_type, (keys, _) in shared.items():
        kv_len = keys.shape[-2]
        mask = masks.get(layer_type) if isinstance(masks, dict) else None
        if mask is None:
            visible = [True] * kv_len
        elif isinstance(mask, torch.Tensor):
            row = mask[0, 0, -1]
            visible = row.tolist() if row.dtype == torch.bool else (row > torch.finfo(row.dtype).min / 2).tolist()
        else:
            warn(f"drafter mask for {layer_type} is a {type(mask).__name__}; not decoded")
            return None
        ranges, start = [], None
        for index, flag in enumerate(visible + [False]):
            if flag and start is None:
                start = index
            elif not flag and start is not None:
                ranges.append([start, index - 1])
                start = None
        result[layer_type] = ranges
    return result


def assistant_reference_for_index(target, drafter, entry: dict, index: int, length: int, steps: int) -> tuple:
    vocab_size = entry["config"]["text_config"]["vocab_size"]
    for attempt in range(MAX_PROMPT_ATTEMPTS):
        seed = prompt_seed(entry, index, attempt)
        prompt = draw_prompt(vocab_size, length, seed)
        prefill = target_prefill(target, prompt)
        results = draft(target, drafter, prompt, prefill, steps)
        tokens, top_logits, top_logprobs, margins = [], [], [], []
        for step in results:
            logits = step["logits"].to(torch.float64)
            best = torch.topk(logits, 2)
            tokens.append(int(best.indices[0]))
            margins.append(float(best.values[0] - best.values[1]))
            values, indices = torch.topk(logits, TOP_K)
            top_logits.append([[int(i), float(v)] for i, v in zip(indices.tolist(), values.tolist())])
            top_logprobs.append(top_entries(torch.log_softmax(logits, dim=-1)))
        worst = min([prefill["margin"]] + margins)
        if worst >= MIN_MARGIN:
            log(f"  prompt {index}: {length} tokens, seed {seed}, target token {prefill['token']} "
                f"(margin {prefill['margin']:.4g}), drafts {tokens}, min drafter margin {min(margins):.4g}")
            record = {
                "prompt_seed": seed,
                "prompt_token_ids": list(prompt),
                "target_token_id": prefill["token"],
                "target_margin": prefill["margin"],
                "draft_position": length,
                "visible_kv": visible_kv(drafter, results[0]["inputs_embeds"], length, prefill["shared"]),
                "draft_token_ids": tokens,
                "draft_top_logits": top_logits,
                "draft_top_logprobs": top_logprobs,
                "draft_margins": margins,
                "min_draft_margin": min(margins),
            }
            return record, prefill, results
        log(f"  prompt {index}: seed {seed} has a near-tie (margin {worst:.3g}); re-drawing")
    raise RuntimeError(
        f"{entry['name']}: prompt {index} ({length} tokens) has a near-tie (< {MIN_MARGIN}) "
        f"for all {MAX_PROMPT_ATTEMPTS} seeds tried"
    )


def assistant_generate_cross_check(target, drafter, prompt: list, prefill: dict, results: list) -> bool:
    """generate(assistant_model=drafter) should make the same first drafter calls; warns, never fails.

    transformers 5.17 differs in one known way: in the first drafting round after the prefill,
    SinglePositionMultiTokenCandidateGenerator takes hidden_states[-1][:, n_last_matches] with
    n_last_matches = 0, i.e. the target's hidden state at prompt position 0 rather than at the last
    prompt position (later rounds index the verified block and get the right one). The reference
    uses the last prompt position; when generate() instead matches the position-0 variant, that is
    logged as this quirk, not as a failure.
    """
    calls = []
    original_forward = drafter.forward

    def recording_forward(*args, **kwargs):
        output = original_forward(*args, **kwargs)
        shared = kwargs.get("shared_kv_states") or {}
        calls.append({
            "position_ids": kwargs.get("position_ids"),
            "inputs_embeds": kwargs.get("inputs_embeds"),
            "logits": output.logits.detach().clone(),
            "kv_len": {k: int(v[0].shape[-2]) for k, v in shared.items()},
        })
        return output

    saved = target.generation_config
    drafter.forward = recording_forward
    try:
        generation_config = copy.deepcopy(saved)
        generation_config.eos_token_id = None
        target.generation_config = generation_config
        input_ids = torch.tensor([prompt], dtype=torch.long)
        output = target.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            assistant_model=drafter,
            do_sample=False,
            max_new_tokens=len(results) + 2,
            use_cache=True,
        )
    except Exception as error:  # a cross-check only
        warn(f"assisted generate() cross-check could not run: {type(error).__name__}: {error}")
        return False
    finally:
        del drafter.forward
        target.generation_config = saved
    if int(output[0, len(prompt)]) != prefill["token"]:
        warn(f"assisted generate() produced {int(output[0, len(prompt)])} after the prompt, expected {prefill['token']}")
        return False
    if len(calls) < len(results):
        warn(f"assisted generate() made {len(calls)} drafter calls in all, expected at least {len(results)}")
        return False

    def matches(expected: list, label: str) -> bool:
        same = True
        for step, (call, mine) in enumerate(zip(calls, expected)):
            positions = call["position_ids"].tolist() if call["position_ids"] is not None else None
            embeds_diff = float((call["inputs_embeds"][0, -1] - mine["inputs_embeds"][0, -1]).abs().max())
            logits_diff = float((call["logits"][0, -1] - mine["logits"]).abs().max())
            log(f"    generate() drafter call {step} vs {label}: position_ids {positions}, shared KV lengths "
                f"{call['kv_len']}, max |inputs_embeds diff| {embeds_diff:.3g}, max |logit diff| {logits_diff:.3g}")
            if positions != [[len(prompt)]] or embeds_diff > 1e-5 or logits_diff > 1e-4:
                same = False
        return same

    if matches(results, "reference"):
        return True
    quirk = draft(target, drafter, prompt, {**prefill, "hidden": prefill["hidden_first"]}, len(results))
    if matches(quirk, "position-0 hidden state"):
        log("    generate() drafted from the target's hidden state at prompt position 0 (known transformers "
            "quirk of the first drafting round); the reference uses the last prompt position")
        return True
    warn("assisted generate() does not draft what the reference loop drafts (see above)")
    return False


def compare_with_saved_target(target, out_dir: Path, target_name: str) -> None:
    path = out_dir / target_name / "model.safetensors"
    if not path.is_file():
        log(f"  {path} not found; target weights not compared with the saved fixture")
        return
    from safetensors.torch import load_file

    saved = load_file(str(path))
    state = target.state_dict()
    differ = [k for k, v in saved.items() if k not in state or not torch.equal(state[k], v)]
    if differ:
        warn(f"rebuilt target differs from {path} in {len(differ)} tensors, e.g. {differ[:3]}")
    else:
        log(f"  rebuilt target matches {path} ({len(saved)} tensors)")


def make_assistant_fixture(entry: dict, out_dir: Path) -> dict:
    name = entry["name"]
    log(f"== {name}")
    final_dir = out_dir / name
    work_dir = out_dir / f".{name}.tmp"
    if work_dir.exists():
        shutil.rmtree(work_dir)
    work_dir.mkdir(parents=True)
    steps = entry.get("draft_steps", DEFAULT_DRAFT_STEPS)

    with torch.no_grad():
        target_entry = find_entry(entry["target"])
        target = build_target(target_entry)
        compare_with_saved_target(target, out_dir, target_entry["name"])

        drafter = build_assistant(entry)
        check_norm_style(drafter, entry)
        reinit_parameters(drafter, entry)
        reinit_buffers(drafter, entry)
        try:
            check_tying(drafter, entry)
        except (AttributeError, NotImplementedError) as error:
            warn(f"{name}: tying not checked ({type(error).__name__}: {error})")
        check_rope_scaling_active(drafter, {**entry, "config": entry["config"]["text_config"]})
        num_params = sum(p.numel() for p in drafter.parameters())
        log(f"  {entry['architecture']}: {num_params:,} parameters")

        prompts, prefills, results_all = [], [], []
        generate_ok = True
        for index, length in enumerate(entry.get("prompt_lengths", DEFAULT_PROMPT_LENGTHS)):
            record, prefill, results = assistant_reference_for_index(target, drafter, entry, index, length, steps)
            if not assistant_generate_cross_check(target, drafter, record["prompt_token_ids"], prefill, results):
                generate_ok = False
            prompts.append(record)
            prefills.append(prefill)
            results_all.append(results)
        hidden_is_final = all(p["hidden_is_final"] for p in prefills)
        log(f"  target hidden_states[-1] is the final-norm output: {hidden_is_final}")

        save_checkpoint(drafter, work_dir)
        check_safetensors(work_dir, entry)
        check_saved_config(work_dir, entry)
        reloaded = getattr(transformers, entry["architecture"]).from_pretrained(
            str(work_dir), dtype=torch.float32, attn_implementation="eager"
        )
        reloaded = reloaded.to("cpu")
        reloaded.eval()
        worst = 0.0
        for record, prefill, results in zip(prompts, prefills, results_all):
            again = draft(target, reloaded, record["prompt_token_ids"], prefill, len(results))
            for a, b in zip(again, results):
                worst = max(worst, float((a["logits"] - b["logits"]).abs().max()))
        log(f"  reload check: max |logit difference| {worst:.3g}")
        if not worst <= RELOAD_TOLERANCE:
            raise RuntimeError(f"{name}: the saved checkpoint reloads to different logits (max diff {worst:.3g})")

    reference = {
        "fixture": name,
        "architecture": entry["architecture"],
        "target_fixture": target_entry["name"],
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "dtype": "float32",
        "seed": entry["seed"],
        "draft_steps": steps,
        "top_logprobs": TOP_K,
        "min_margin_threshold": MIN_MARGIN,
        "target_hidden_is_final_norm_output": hidden_is_final,
        "prompts": prompts,
    }
    size = finish_fixture(entry, work_dir, final_dir, reference)
    return {
        "name": name,
        "params": num_params,
        "size": size,
        "min_margin": min(min(p["target_margin"], p["min_draft_margin"]) for p in prompts),
        "generate_ok": generate_ok,
        "min_draft_margin": min(p["min_draft_margin"] for p in prompts),
    }


def print_summary(rows: list) -> None:
    header = f"{'fixture':20s} {'params':>9s} {'size KB':>8s} {'min margin':>11s}  generate()"
    log("")
    log(header)
    log("-" * len(header))
    for row in rows:
        log(f"{row['name']:20s} {row['params']:>9,} {row['size'] / 1024:>8.1f} {row['min_margin']:>11.4g}  "
            f"{'same' if row['generate_ok'] else 'DIFFERS (see warnings)'}")
    for row in rows:
        if "min_router_margin" in row:
            log(f"{row['name']}: min routing margin {row['min_router_margin']:.4g}")
        if "min_draft_margin" in row:
            log(f"{row['name']}: min drafter margin {row['min_draft_margin']:.4g}")


# Drafter pairs whose assisted generation (transformers' `generate(assistant_model=...)`, greedy,
# a constant 3 drafts a round) is recorded beside the target's reference, as
# assisted_reference.json, with --assisted. Greedy assisted generation must give the target's own
# greedy tokens; pagoda's speculative decoding is held to these files.
ASSISTED_PAIRS = [
    ("llama-tiny", "llama3-rope-tiny"),
    ("mimo-tiny", "qwen3-tiny"),
    ("gemma4-tiny", "gemma4-assistant-tiny"),
]
ASSISTED_DRAFTS = 3


def make_assisted_references(out_dir: Path) -> None:
    """Assisted generation of each ASSISTED_PAIRS pair on the target's reference prompts, from the
    committed checkpoints; a pair transformers cannot run is reported and skipped."""
    for target_name, drafter_name in ASSISTED_PAIRS:
        target_dir = out_dir / target_name
        reference = json.loads((target_dir / "reference.json").read_text())
        try:
            target = transformers.AutoModelForCausalLM.from_pretrained(
                target_dir, dtype=torch.float32, attn_implementation="eager")
            drafter = transformers.AutoModelForCausalLM.from_pretrained(
                out_dir / drafter_name, dtype=torch.float32, attn_implementation="eager")
        except Exception as error:  # noqa: BLE001 - any failure means "not supported here"
            warn(f"{target_name} + {drafter_name}: cannot load the pair: {error}")
            continue
        target.eval()
        drafter.eval()
        # Every token of the continuation, as the references have them: no end-of-sequence stop.
        for model in (target, drafter):
            model.generation_config.eos_token_id = None
            model.generation_config.pad_token_id = 0
            model.generation_config.num_assistant_tokens = ASSISTED_DRAFTS
            model.generation_config.num_assistant_tokens_schedule = "constant"
        prompts = []
        try:
            for prompt in reference["prompts"]:
                ids = torch.tensor([prompt["prompt_token_ids"]])
                with torch.no_grad():
                    out = target.generate(ids, assistant_model=drafter, do_sample=False,
                                          max_new_tokens=len(prompt["greedy_token_ids"]),
                                          attention_mask=torch.ones_like(ids))
                tokens = out[0, ids.shape[1]:].tolist()
                if tokens != prompt["greedy_token_ids"]:
                    warn(f"{target_name} + {drafter_name}: assisted tokens differ from greedy ones")
                prompts.append({"prompt_token_ids": prompt["prompt_token_ids"],
                                "assisted_greedy_token_ids": tokens})
        except Exception as error:  # noqa: BLE001
            warn(f"{target_name} + {drafter_name}: transformers cannot generate with the pair: {error}")
            continue
        path = target_dir / "assisted_reference.json"
        path.write_text(json.dumps({"drafter": drafter_name, "num_assistant_tokens": ASSISTED_DRAFTS,
                                    "transformers": transformers.__version__, "prompts": prompts},
                                   indent=1) + "\n")
        log(f"{path}: {len(prompts)} prompts")


def parse_args(argv: list) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="tests/fixtures", help="output directory (default: tests/fixtures)")
    parser.add_argument("--only", nargs="+", action="extend", metavar="NAME", default=None,
                        help="build only these fixtures")
    parser.add_argument("--list", action="store_true", help="list the fixtures and exit")
    parser.add_argument("--assisted", action="store_true",
                        help="only write the assisted-generation references of ASSISTED_PAIRS "
                             "from the committed checkpoints")
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
    if args.assisted:
        make_assisted_references(out_dir)
        return 0
    rows = [make_fixture(entry, out_dir) for entry in selected]
    print_summary(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
