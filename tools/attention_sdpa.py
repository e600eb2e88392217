"""PyTorch's scaled_dot_product_attention on the shapes of bench/attention_bench.cc, as a
side-by-side: bf16, 32 query / 8 KV heads, head size 128, one query token per sequence, with a
contiguous [batch, heads, context, head] KV (no pages), captured in a CUDA graph. Prints a markdown
table of the median time and the K/V bytes read over it, against the device-to-device copy
bandwidth measured here.

Usage (on a machine with a CUDA GPU and PyTorch): python3 tools/attention_sdpa.py
"""

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


if __name__ == "__main__":
    main()
