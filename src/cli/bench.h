// `pagoda bench`: the latency and throughput of one fixed batch (B prompts of I random tokens, O
// generated tokens each) through the engine, as vLLM's benchmark_latency measures them.
#pragma once

namespace CLI {
class App;  // CLI11
}  // namespace CLI

namespace pagoda {

void add_bench_command(CLI::App& app);

}  // namespace pagoda
