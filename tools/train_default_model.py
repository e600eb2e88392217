#!/usr/bin/env python3
"""Train pagoda's embedded default model: a small Gemma 4 text model on the King James Bible, and a
Gemma 4 assistant (multi-token-prediction drafter) that reads its KV cache.

Usage, on a machine with a GPU, PyTorch, transformers 5 and tokenizers:
    bible "gen1:1-rev22:21" > kjv.txt          # Debian's bible-kjv package
    python3 tools/train_default_model.py --corpus kjv.txt --out OUT_DIR

It writes, under OUT_DIR:
    kjv-gemma4/            the target: config.json, model.safetensors (bf16), tokenizer.json,
                           tokenizer_config.json, generation_config.json
    kjv-gemma4-assistant/  the drafter: config.json, model.safetensors (bf16)
    reference.json         transformers' prompt log-probabilities and greedy tokens of the saved
                           target, for pagoda's parity test (format of tests/fixtures/README.md)
    assistant_reference.json  the drafter's first drafting steps on a few prompts
    report.json            data split, sizes, validation perplexity, acceptance, timings

Steps, all seeded:
  1. The text is split into verses (one per line, without references); a few whole books are held
     out for validation (VALIDATION_BOOKS).
  2. A byte-level BPE tokenizer (vocabulary VOCAB_SIZE) is trained on the training books with the
     `tokenizers` library and saved through transformers' PreTrainedTokenizerFast.
  3. The target (TARGET_CONFIG: sliding and full layers with a larger full-layer head, a window
     shorter than typical prompts, the last layers KV-shared) is trained on windows that start at a
     verse, after a <bos>, as prompts do. The checkpoint with the best validation loss is kept.
  4. The drafter is trained the way transformers' assisted generation runs it
     (SinglePositionMultiTokenCandidateGenerator): after the target has seen positions < L and
     picked token x[L], drafting step k feeds concat(target embedding of its input token, hidden
     state) at position L over the target's shared KV of positions < L, and predicts x[L+k+1]. Step
     0's hidden state is the target's at L-1; later steps use the drafter's own output. All L of a
     window train at once, with masks equal to those the drafter builds for one query (checked).
  5. Acceptance is measured with transformers' own assisted generate() at 4 draft tokens.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures  # noqa: E402

make_fixtures.torch = torch
make_fixtures.transformers = transformers

SEED = 20261130
VALIDATION_BOOKS = ["Ruth", "Jonah", "Titus", "Philemon", "Jude", "3 John"]
VOCAB_SIZE = 4096
SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>"]  # ids 0..3, Gemma's order for pad/eos/bos
WINDOW = 256  # tokens per training window, after the <bos>
TARGET_STEPS = 1000
TARGET_BATCH = 64
TARGET_LR = 2e-3
DRAFTER_STEPS = 1500
DRAFTER_BATCH = 32
DRAFTER_LR = 2e-3
DRAFT_TOKENS = 4  # drafting steps trained and used at generation
EVAL_EVERY = 100

_ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
}
_S, _F = "sliding_attention", "full_attention"

TARGET_CONFIG = {
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "global_head_dim": 128,
    "attention_k_eq_v": False,
    "layer_types": [_S, _S, _S, _F, _S, _S, _S, _F],
    "sliding_window": 32,
    "num_kv_shared_layers": 2,
    "use_double_wide_mlp": False,
    "hidden_size_per_layer_input": 0,
    "vocab_size_per_layer_input": VOCAB_SIZE,
    "enable_moe_block": False,
    "final_logit_softcapping": 30.0,
    "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "attention_bias": False,
    "rope_parameters": _ROPE,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "bos_token_id": 2,
}

DRAFTER_CONFIG = {
    "backbone_hidden_size": TARGET_CONFIG["hidden_size"],
    "use_ordered_embeddings": False,
    "tie_word_embeddings": True,
    "text_config": {
        **{k: TARGET_CONFIG[k] for k in ("vocab_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                                         "global_head_dim", "attention_k_eq_v", "sliding_window", "rope_parameters",
                                         "max_position_embeddings", "rms_norm_eps", "pad_token_id", "eos_token_id",
                                         "bos_token_id")},
        "hidden_size": 128,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "layer_types": [_S, _F],
        "num_kv_shared_layers": 2,
        "use_double_wide_mlp": False,
        "hidden_size_per_layer_input": 0,
        "vocab_size_per_layer_input": 0,
        "enable_moe_block": False,
        "final_logit_softcapping": None,
        "hidden_activation": "gelu_pytorch_tanh",
        "tie_word_embeddings": True,
        "attention_bias": False,
    },
}


def log(message: str) -> None:
    print(message, flush=True)


# --- 1. corpus -----------------------------------------------------------------------------------

def read_books(path: Path) -> dict[str, list[str]]:
    """Book name -> verses, from `bible`'s output: a "Book N" header line between blank lines, then
    verses that start with their number and may wrap onto further lines."""
    lines = path.read_text(encoding="utf-8").splitlines()
    books: dict[str, list[str]] = {}
    book = None
    for i, line in enumerate(lines):
        blank_around = (i == 0 or not lines[i - 1].strip()) and (i + 1 < len(lines) and not lines[i + 1].strip())
        header = re.fullmatch(r"(\S.*?) (\d+)", line)
        if header and blank_around:
            book = header.group(1)
            books.setdefault(book, [])
            continue
        verse = re.fullmatch(r"\s+\d+ (.*)", line)
        if verse:
            books[book].append(verse.group(1).strip())
        elif line.strip() and book is not None and books[book]:
            books[book][-1] += " " + line.strip()
    if len(books) != 66:
        raise RuntimeError(f"expected 66 books, found {len(books)}")
    return books


# --- 2. tokenizer --------------------------------------------------------------------------------

def train_tokenizer(verses: list[str], out_dir: Path):
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator((v + "\n" for v in verses), trainer)
    bos = tokenizer.token_to_id("<bos>")
    tokenizer.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                             special_tokens=[("<bos>", bos)])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<bos>", eos_token="<eos>",
                                                pad_token="<pad>", unk_token="<unk>")
    fast.save_pretrained(str(out_dir))
    for index, token in enumerate(SPECIAL_TOKENS):
        if fast.convert_tokens_to_ids(token) != index:
            raise RuntimeError(f"{token} has id {fast.convert_tokens_to_ids(token)}, expected {index}")
    return fast


def encode_verses(tokenizer, verses: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """One token stream of the verses (each ending in a newline) and the stream offsets where verses
    start."""
    encoded = tokenizer(
        [v + "\n" for v in verses], add_special_tokens=False
    )["input_ids"]
    starts, stream = [], []
    for ids in encoded:
        starts.append(len(stream))
        stream.extend(ids)
    return torch.tensor(stream, dtype=torch.long), torch.tensor(starts, dtype=torch.long)


def windows(stream, starts, count: int, generator, bos: int):
    """`count` windows of <bos> + WINDOW tokens, each starting at a random verse. [count, WINDOW + 1]"""
    usable = starts[starts + WINDOW <= len(stream)]
    picks = usable[torch.randint(len(usable), (count,), generator=generator)]
    rows = torch.stack([stream[p:p + WINDOW] for p in picks.tolist()])
    return torch.cat([torch.full((count, 1), bos, dtype=torch.long), rows], dim=1)


def validation_windows(stream, starts, bos: int):
    """Every validation verse start, stepping by about a window: the fixed validation set."""
    rows, next_start = [], 0
    for p in starts.tolist():
        if p >= next_start and p + WINDOW <= len(stream):
            rows.append(torch.cat([torch.tensor([bos]), stream[p:p + WINDOW]]))
            next_start = p + WINDOW
    return torch.stack(rows)


# --- 3. target -----------------------------------------------------------------------------------

def cosine_lr(step: int, total: int, peak: float, warmup: int = 100) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def lm_loss(model, batch):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(input_ids=batch[:, :-1], use_cache=False).logits
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))


@torch.no_grad()
def evaluate(model, rows) -> float:
    model.eval()
    total, count = 0.0, 0
    for chunk in rows.split(64):
        chunk = chunk.cuda()
        total += lm_loss(model, chunk).item() * chunk.shape[0]
        count += chunk.shape[0]
    model.train()
    return total / count


def train_target(train, val_rows, bos: int, report: dict):
    torch.manual_seed(SEED)
    config = transformers.Gemma4TextConfig(**TARGET_CONFIG)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").cuda()
    model.train()
    report["target_parameters"] = sum(p.numel() for p in model.parameters())
    log(f"target: {report['target_parameters'] / 1e6:.2f} M parameters")
    optimizer = torch.optim.AdamW(model.parameters(), lr=TARGET_LR, betas=(0.9, 0.95), weight_decay=0.1)
    generator = torch.Generator().manual_seed(SEED)
    best, best_state, history = float("inf"), None, []
    start = time.time()
    for step in range(TARGET_STEPS):
        for group in optimizer.param_groups:
            group["lr"] = cosine_lr(step, TARGET_STEPS, TARGET_LR)
        batch = windows(*train, TARGET_BATCH, generator, bos).cuda()
        loss = lm_loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if (step + 1) % EVAL_EVERY == 0 or step + 1 == TARGET_STEPS:
            val = evaluate(model, val_rows)
            history.append({"step": step + 1, "train_loss": loss.item(), "val_loss": val, "val_ppl": math.exp(val)})
            log(f"  step {step + 1}: train loss {loss.item():.3f}, validation loss {val:.3f} "
                f"(perplexity {math.exp(val):.2f}), {time.time() - start:.0f} s")
            if val < best:
                best, best_state = val, {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.load_state_dict(best_state)
    model.eval()
    report["target_training"] = {"steps": TARGET_STEPS, "batch": TARGET_BATCH, "window": WINDOW + 1,
                                 "seconds": round(time.time() - start, 1), "history": history,
                                 "best_val_loss": best, "best_val_ppl": math.exp(best)}
    return model


# --- 4. drafter ----------------------------------------------------------------------------------

def drafter_sliding_reach(drafter, device) -> int:
    """How many of the most recent target positions the drafter's sliding layers see, read from the
    masks it builds for a single query (as in generation)."""
    length = 4 * TARGET_CONFIG["sliding_window"]
    heads, dim = TARGET_CONFIG["num_key_value_heads"], TARGET_CONFIG["head_dim"]
    shared = {t: (torch.zeros(1, heads, length, dim, device=device),) * 2 for t in (_S, _F)}
    embeds = torch.zeros(1, 1, DRAFTER_CONFIG["text_config"]["hidden_size"], device=device)
    masks = drafter.create_attention_masks(embeds, torch.ones(1, length + 1, dtype=torch.long, device=device), shared)
    reach = {}
    for layer_type, mask in masks.items():
        if mask is None:
            reach[layer_type] = length
            continue
        row = mask[0, 0, -1]
        visible = row if row.dtype == torch.bool else row > torch.finfo(row.dtype).min / 2
        positions = visible.nonzero().flatten().tolist()
        if positions != list(range(length - len(positions), length)):
            raise RuntimeError(f"drafter {layer_type} mask is not a run up to the last position: {positions}")
        reach[layer_type] = len(positions)
    if reach[_F] != length:
        raise RuntimeError(f"drafter full-attention layers see {reach[_F]} of {length} positions")
    return reach[_S]


def drafter_masks(queries: torch.Tensor, kv_length: int, sliding_reach: int, dtype) -> dict:
    """Additive masks for queries at positions `queries` [Q] over target KV [kv_length]: position L sees
    the KV of positions < L, the sliding layers only the last `sliding_reach` of them. [1, 1, Q, kv]"""
    kv = torch.arange(kv_length, device=queries.device)
    seen = kv[None, :] < queries[:, None]
    near = kv[None, :] >= queries[:, None] - sliding_reach
    low = torch.finfo(dtype).min
    to_additive = lambda allowed: torch.where(allowed, 0.0, low).to(dtype)[None, None]
    return {_F: to_additive(seen), _S: to_additive(seen & near)}


def drafter_steps(target, drafter, batch, sliding_reach: int, dtype):
    """Logits of every drafting step for all positions L of the window at once: a list over steps of
    [B, Q, vocab] with their targets [B, Q]."""
    ids = batch[:, :-1]
    with torch.no_grad():
        out = target(input_ids=ids, use_cache=False, output_hidden_states=True, return_shared_kv_states=True)
        hidden = out.hidden_states[-1]
        shared = {k: (v[0], v[1]) for k, v in out.shared_kv_states.items()}
    length = ids.shape[1]
    queries = torch.arange(1, length - DRAFT_TOKENS, device=ids.device)  # L: has x[L-1]'s state and x[L+K]
    masks = drafter_masks(queries, length, sliding_reach, dtype)
    positions = queries[None, :].expand(ids.shape[0], -1)
    embed = target.get_input_embeddings()
    state = hidden[:, queries - 1]
    results = []
    for k in range(DRAFT_TOKENS):
        tokens = batch[:, queries + k]
        inputs = drafter.pre_projection(torch.cat([embed(tokens), state], dim=-1))
        out = drafter.model(inputs_embeds=inputs, attention_mask=masks, position_ids=positions,
                            shared_kv_states=shared, use_cache=False)
        results.append((drafter.lm_head(out.last_hidden_state), batch[:, queries + k + 1]))
        state = drafter.post_projection(out.last_hidden_state)
    return results


@torch.no_grad()
def check_drafter_masks(target, drafter, row, sliding_reach: int) -> float:
    """The batched drafting steps equal drafter.forward called the way generation calls it, at a few
    positions (float32). Returns the largest logit difference; raises above 1e-3."""
    torch.backends.cuda.matmul.allow_tf32 = False  # full float32, so only the masks could differ
    batch = row[None].cuda()
    batched = drafter_steps(target, drafter, batch, sliding_reach, torch.float32)
    ids = batch[:, :-1]
    out = target(input_ids=ids, use_cache=False, output_hidden_states=True, return_shared_kv_states=True)
    embed = target.get_input_embeddings()
    worst = 0.0
    for L in (1, 5, TARGET_CONFIG["sliding_window"] + 3, ids.shape[1] - DRAFT_TOKENS - 1):
        shared = {k: (v[0][:, :, :L], v[1][:, :, :L]) for k, v in out.shared_kv_states.items()}
        state, token = out.hidden_states[-1][:, L - 1:L], batch[:, L:L + 1]
        for k in range(DRAFT_TOKENS):
            step = drafter(inputs_embeds=torch.cat([embed(token), state], dim=-1),
                           attention_mask=torch.ones(1, L + 1, dtype=torch.long, device=batch.device),
                           position_ids=torch.tensor([[L]], device=batch.device), shared_kv_states=shared,
                           use_cache=False)
            difference = (step.logits[0, 0] - batched[k][0][0, L - 1]).abs().max().item()
            worst = max(worst, difference)
            token, state = batch[:, L + k + 1:L + k + 2], step.last_hidden_state
    torch.backends.cuda.matmul.allow_tf32 = True
    if worst > 1e-3:
        raise RuntimeError(f"batched drafting differs from drafter.forward by {worst}")
    return worst


def train_drafter(target, train, val_rows, bos: int, report: dict):
    torch.manual_seed(SEED + 1)
    config = transformers.Gemma4AssistantConfig(**DRAFTER_CONFIG)
    drafter = transformers.Gemma4AssistantForCausalLM._from_config(config, attn_implementation="eager").cuda()
    report["drafter_parameters"] = sum(p.numel() for p in drafter.parameters())
    log(f"drafter: {report['drafter_parameters'] / 1e6:.2f} M parameters")
    target = target.float().eval()
    for p in target.parameters():
        p.requires_grad_(False)
    sliding_reach = drafter_sliding_reach(drafter, "cuda")
    report["drafter_sliding_reach"] = sliding_reach
    report["drafter_mask_check"] = check_drafter_masks(target, drafter, val_rows[0], sliding_reach)
    log(f"  drafter sliding layers see the last {sliding_reach} positions; batched masks match "
        f"drafter.forward within {report['drafter_mask_check']:.2e}")
    drafter.train()
    optimizer = torch.optim.AdamW(drafter.parameters(), lr=DRAFTER_LR, betas=(0.9, 0.95), weight_decay=0.1)
    generator = torch.Generator().manual_seed(SEED + 1)
    start, history = time.time(), []
    for step in range(DRAFTER_STEPS):
        for group in optimizer.param_groups:
            group["lr"] = cosine_lr(step, DRAFTER_STEPS, DRAFTER_LR)
        batch = windows(*train, DRAFTER_BATCH, generator, bos).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            results = drafter_steps(target, drafter, batch, sliding_reach, torch.float32)
        losses = [torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), wanted.flatten())
                  for logits, wanted in results]
        loss = sum(losses) / len(losses)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        optimizer.step()
        if (step + 1) % EVAL_EVERY == 0 or step + 1 == DRAFTER_STEPS:
            history.append({"step": step + 1, "losses": [round(l.item(), 4) for l in losses]})
            log(f"  step {step + 1}: per-step losses {[round(l.item(), 3) for l in losses]}, "
                f"{time.time() - start:.0f} s")
    drafter.eval()
    report["drafter_training"] = {"steps": DRAFTER_STEPS, "batch": DRAFTER_BATCH,
                                  "seconds": round(time.time() - start, 1), "history": history}
    return drafter


# --- 5. acceptance -------------------------------------------------------------------------------

@torch.no_grad()
def measure_acceptance(target, drafter, prompts: list[list[int]], report: dict) -> None:
    """transformers' assisted generate() at DRAFT_TOKENS drafts: accepted drafts per verification
    step, from the number of target forward passes; also checks the output equals plain greedy."""
    drafter.generation_config.num_assistant_tokens = DRAFT_TOKENS
    drafter.generation_config.num_assistant_tokens_schedule = "constant"
    calls = {"n": 0}
    original = target.forward

    def counting_forward(*args, **kwargs):
        calls["n"] += 1
        return original(*args, **kwargs)

    new_tokens, verify_steps, identical = 0, 0, 0
    for prompt in prompts:
        input_ids = torch.tensor([prompt], device="cuda")
        plain = target.generate(input_ids=input_ids, do_sample=False, max_new_tokens=64, eos_token_id=None)
        target.forward = counting_forward
        calls["n"] = 0
        try:
            assisted = target.generate(input_ids=input_ids, assistant_model=drafter, do_sample=False,
                                       max_new_tokens=64, eos_token_id=None)
        finally:
            target.forward = original
        produced = assisted.shape[1] - len(prompt)
        # The first target pass is the prefill (one token); each later pass verifies a drafted block.
        new_tokens += produced - 1
        verify_steps += calls["n"] - 1
        identical += int(torch.equal(plain, assisted))
    tokens_per_step = new_tokens / verify_steps
    report["acceptance"] = {
        "prompts": len(prompts), "draft_tokens": DRAFT_TOKENS, "max_new_tokens": 64,
        "tokens_per_verification_step": tokens_per_step,
        "mean_accepted_drafts_per_step": tokens_per_step - 1,
        "outputs_identical_to_greedy": f"{identical} of {len(prompts)}",
    }
    log(f"acceptance: {tokens_per_step - 1:.2f} of {DRAFT_TOKENS} drafts accepted per step "
        f"({tokens_per_step:.2f} tokens per target pass); greedy-identical {identical}/{len(prompts)}")


# --- 6. saving and references -----------------------------------------------------------------------

def save(model, directory: Path) -> None:
    model.to(torch.bfloat16).save_pretrained(str(directory))
    for path in directory.iterdir():
        if path.is_dir():
            shutil.rmtree(path)


def reference_prompts(tokenizer, val_verses: list[str]) -> list[dict]:
    """Prompts from held-out verses, one longer than the sliding window, each with its text."""
    chosen = []
    for words in (3, 12, 40):
        for verse in val_verses:
            text = " ".join(verse.split()[:words])
            if len(verse.split()) >= words and text not in [c["text"] for c in chosen]:
                chosen.append({"text": text, "ids": tokenizer(text)["input_ids"]})
                break
    return chosen


def write_references(model_dir: Path, drafter_dir: Path, tokenizer, val_verses, out_dir: Path, report) -> None:
    """transformers' numbers for the saved (bf16) checkpoints, computed in float32 on the CPU."""
    torch.set_num_threads(1)
    target = transformers.AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32,
                                                               attn_implementation="eager").eval()
    prompts = []
    for prompt in reference_prompts(tokenizer, val_verses):
        reference = make_fixtures.compute_prompt_reference(target, prompt["ids"])
        if reference["min_greedy_margin"] < make_fixtures.MIN_MARGIN:
            log(f"  prompt {prompt['text']!r} has a near-tie; skipped")
            continue
        prompts.append({"text": prompt["text"], **reference})
    report["reference_prompts"] = [p["text"] for p in prompts]
    reference = {"model": model_dir.name, "transformers_version": transformers.__version__,
                 "torch_version": torch.__version__, "dtype": "float32 (bf16 weights)",
                 "greedy_new_tokens": make_fixtures.GREEDY_NEW_TOKENS, "prompts": prompts}
    (out_dir / "reference.json").write_text(make_fixtures.dump_reference(reference))
    drafter = transformers.Gemma4AssistantForCausalLM.from_pretrained(
        str(drafter_dir), dtype=torch.float32, attn_implementation="eager").eval()
    drafts = []
    for prompt in prompts:
        prefill = make_fixtures.target_prefill(target, prompt["prompt_token_ids"])
        steps = make_fixtures.draft(target, drafter, prompt["prompt_token_ids"], prefill, DRAFT_TOKENS)
        drafts.append({
            "prompt_token_ids": prompt["prompt_token_ids"],
            "target_token_id": prefill["token"],
            "draft_position": len(prompt["prompt_token_ids"]),
            "draft_token_ids": [int(s["logits"].argmax()) for s in steps],
            "draft_top_logits": [[[int(i), float(v)] for v, i in zip(*torch.topk(s["logits"].double(), 5))]
                                 for s in steps],
        })
    (out_dir / "assistant_reference.json").write_text(
        make_fixtures.dump_reference({"model": drafter_dir.name, "target": model_dir.name, "prompts": drafts}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", required=True, type=Path, help="the output of bible \"gen1:1-rev22:21\"")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--quick", action="store_true", help="a few steps of everything: a smoke test")
    args = parser.parse_args()
    global TARGET_STEPS, DRAFTER_STEPS, EVAL_EVERY
    if args.quick:
        TARGET_STEPS, DRAFTER_STEPS, EVAL_EVERY = 20, 20, 10
    torch.manual_seed(SEED)
    torch.backends.cuda.matmul.allow_tf32 = True
    report = {"seed": SEED, "transformers": transformers.__version__, "torch": torch.__version__,
              "gpu": torch.cuda.get_device_name(0)}
    started = time.time()

    books = read_books(args.corpus)
    train_verses = [v for b, vs in books.items() if b not in VALIDATION_BOOKS for v in vs]
    val_verses = [v for b in VALIDATION_BOOKS for v in books[b]]
    report["data"] = {"validation_books": VALIDATION_BOOKS, "train_verses": len(train_verses),
                      "validation_verses": len(val_verses)}

    model_dir, drafter_dir = args.out / "kjv-gemma4", args.out / "kjv-gemma4-assistant"
    for directory in (model_dir, drafter_dir):
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
    tokenizer = train_tokenizer(train_verses, model_dir)
    bos = tokenizer.bos_token_id
    train = encode_verses(tokenizer, train_verses)
    val_stream, val_starts = encode_verses(tokenizer, val_verses)
    val_rows = validation_windows(val_stream, val_starts, bos)
    report["data"].update({"train_tokens": len(train[0]), "validation_tokens": len(val_stream),
                           "validation_windows": len(val_rows)})
    log(f"data: {len(train[0])} training tokens, {len(val_stream)} validation tokens")

    target = train_target(train, val_rows, bos, report)
    drafter = train_drafter(target, train, val_rows, bos, report)
    torch.backends.cuda.matmul.allow_tf32 = False  # plain and assisted greedy compared exactly
    count = 4 if args.quick else 48
    acceptance_prompts = [row[:17].tolist() for row in val_rows[:: max(1, len(val_rows) // count)]][:count]
    measure_acceptance(target, drafter, acceptance_prompts, report)

    save(target, model_dir)
    save(drafter, drafter_dir)
    report["sizes_bytes"] = {d.name: sum(p.stat().st_size for p in d.iterdir()) for d in (model_dir, drafter_dir)}
    write_references(model_dir, drafter_dir, tokenizer, val_verses, args.out, report)
    report["seconds"] = round(time.time() - started, 1)
    (args.out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    log(json.dumps({k: v for k, v in report.items() if k not in ("target_training", "drafter_training")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
