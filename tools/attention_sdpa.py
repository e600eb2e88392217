"""PyTorch's scaled_dot_product_attention on the shapes of bench/attention_bench.cc, as a
side-by-side, bf16, 32 query / 8 KV heads, contiguous [batch, heads, tokens, head] K and V (no
pages):
- decode: head size 128, one query token per sequence, captured in a CUDA graph; a markdown table
  of the median time and the K/V bytes read over it, against the device-to-device copy bandwidth
  measured here;
- prefill: causal prompts of about 32k tokens a batch (attention_bench's prefill table) at heads
  of 128, 256 and 512, through each of SDPA's backends that takes the shape (FlashAttention-2 and
  cuDNN with K/V expanded to the query heads beforehand, untimed; the memory-efficient kernel with
  enable_gqa); a table of the median time and TFLOP/s counting the causal half, as
  attention_bench counts them.

Usage (on a machine with a CUDA GPU and PyTorch): python3 tools/attention_sdpa.py [prefill]
(`prefill`: the prefill table only)
"""

import sys

import torch
import torch.nn.functional as F

Q_HEADS, KV_HEADS, HEAD = 32, 8, 128


def median_ms(fn, runs=7, inner=20):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(3):
        fn(i)
    times = []
    for _ in range(runs):
        start.record()
        for i in range(inner):
            fn(i)
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop) / inner)
    return sorted(times)[len(times) // 2]


def graph_median_ms(fn, runs=7, inner=20):
    """median_ms of `inner` calls captured once into a CUDA graph and replayed, as
    bench/attention_bench.cc times ours."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(3):
            fn(i)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(inner):
            fn(i)
    return median_ms(lambda i: graph.replay(), runs=runs, inner=1) / inner


def copy_bandwidth():
    a = torch.empty(2 << 30, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
    b = torch.empty_like(a)
    ms = median_ms(lambda i: b.copy_(a), runs=5, inner=5)
    return 2 * a.numel() * a.element_size() / (ms * 1e-3)


def main():
    torch.manual_seed(0)
    if sys.argv[1:] == ["prefill"]:
        prefill_table()
        return
    copy = copy_bandwidth()
    print(f"device-to-device copy: {copy / 1e9:.0f} GB/s (read + write), torch {torch.__version__}")
    print()
    print("| batch | context | SDPA µs | % of copy |")
    print("|---:|---:|---:|---:|")
    for batch in (1, 16, 64, 256):
        for context in (512, 1024, 4096, 16384):
            kv_bytes = batch * KV_HEADS * context * HEAD * 2 * 2
            sets = max(1, min(8, (20 << 30) // kv_bytes))
            inputs = []
            for _ in range(sets):
                q = torch.empty(batch, Q_HEADS, 1, HEAD, dtype=torch.bfloat16, device="cuda")
                k = torch.empty(batch, KV_HEADS, context, HEAD, dtype=torch.bfloat16, device="cuda")
                v = torch.empty_like(k)
                for t in (q, k, v):
                    t.uniform_(-1, 1)
                inputs.append((q, k, v))

            def run(i):
                q, k, v = inputs[i % sets]
                F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

            ms = graph_median_ms(run)
            print(f"| {batch} | {context} | {ms * 1e3:.1f} | {100 * kv_bytes / (ms * 1e-3) / copy:.1f}% |")
            del inputs
            torch.cuda.empty_cache()
    prefill_table()


PREFILL_BATCHES = ((64, 512), (16, 2048), (4, 8192), (1, 32768))  # (prompts, tokens a prompt)


def prefill_table():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = (("FlashAttention-2", SDPBackend.FLASH_ATTENTION, True),
                ("cuDNN", SDPBackend.CUDNN_ATTENTION, True),
                ("memory-efficient", SDPBackend.EFFICIENT_ATTENTION, False))
    print()
    print("causal prefill, about 32k tokens a batch (µs, TFLOP/s counting the causal half):")
    print()
    print("| head | prompts | " + " | ".join(f"{name} µs | TFLOP/s" for name, _, _ in backends) + " |")
    print("|---:|---:|" + "---:|---:|" * len(backends))
    for head in (128, 256, 512):
        for batch, prompt in PREFILL_BATCHES:
            flops = 4.0 * batch * prompt * (prompt + 1) / 2 * Q_HEADS * head
            q = torch.empty(batch, Q_HEADS, prompt, head, dtype=torch.bfloat16, device="cuda")
            k = torch.empty(batch, KV_HEADS, prompt, head, dtype=torch.bfloat16, device="cuda")
            v = torch.empty_like(k)
            for t in (q, k, v):
                t.uniform_(-1, 1)
            expanded = (k.repeat_interleave(Q_HEADS // KV_HEADS, dim=1),
                        v.repeat_interleave(Q_HEADS // KV_HEADS, dim=1))
            cells = []
            for _, backend, expand in backends:
                kk, vv = expanded if expand else (k, v)
                try:
                    with sdpa_kernel(backend):
                        ms = median_ms(lambda i: F.scaled_dot_product_attention(
                            q, kk, vv, is_causal=True, enable_gqa=not expand), runs=5, inner=3)
                    cells.append(f"{ms * 1e3:.0f} | {flops / (ms * 1e-3) / 1e12:.0f}")
                except RuntimeError:  # the backend does not take the shape
                    cells.append("— | —")
            print(f"| {head} | {batch} × {prompt} | " + " | ".join(cells) + " |")
            del q, k, v, expanded
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
