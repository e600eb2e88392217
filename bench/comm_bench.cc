// All-reduce micro-benchmark over NCCL: one rank per GPU of this machine (or the first N given as
// the argument), each on its own thread as the engine runs GPU ranks. For bf16 messages of 8 KB to
// 256 MB it reports the median time of an all-reduce on the ranks' engine streams, eager and
// replayed from a CUDA graph (as decode steps run them), with NCCL's two bandwidth figures:
// algorithm bandwidth (bytes / time) and bus bandwidth (algorithm bandwidth × 2(n − 1)/n, what each
// link carries in a ring, comparable with the link's rate). The sizes a decode step all-reduces
// (hidden size × batch rows in bf16: 8 KB for one row of Llama-3-8B) are the latency end.
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "bench/cuda_timing.h"
#include "core/cuda/context.h"
#include "core/error.h"
#include "parallel/nccl_communicator.h"

namespace pagoda {
namespace {

struct Row {
  int64_t bytes;
  double eager_ms;
  double graph_ms;
};

std::string size_text(int64_t bytes) {
  if (bytes >= (int64_t{1} << 20)) return fmt::format("{} MB", bytes >> 20);
  return fmt::format("{} KB", bytes >> 10);
}

void run(int world) {
  PAGODA_CHECK(nccl_available_in_build(), "comm_bench needs a build with NCCL");
  const int gpus = cuda_device_count();
  PAGODA_CHECK(world >= 1 && world <= gpus, "{} ranks on a machine with {} GPUs", world, gpus);
  std::vector<int> devices(world);
  for (int d = 0; d < world; ++d)
    devices[d] = d;
  std::vector<int64_t> sizes;
  for (int64_t bytes = 8 << 10; bytes <= (int64_t{256} << 20); bytes *= 2)
    sizes.push_back(bytes);
  std::vector<Row> rows(sizes.size());
  std::mutex mutex;
  run_nccl_ranks(devices, [&](Communicator& comm) {
    const Tensor buffer =
        Tensor::empty({sizes.back() / 2}, DType::kBF16, Device::cuda(devices[comm.rank()]));
    for (size_t i = 0; i < sizes.size(); ++i) {
      const Tensor x = buffer.narrow(0, 0, sizes[i] / 2);
      // About 64 MB of traffic a timing; every rank runs the same counts, so they meet.
      const int inner = static_cast<int>(std::clamp<int64_t>((64 << 20) / sizes[i], 1, 200));
      const double eager = bench::median_ms(7, inner, [&](int) { comm.all_reduce(x); });
      const double graph = bench::graph_median_ms(7, inner, [&](int) { comm.all_reduce(x); });
      if (comm.rank() == 0) {
        const std::lock_guard lock(mutex);
        rows[i] = {sizes[i], eager, graph};
      }
    }
  });
  const double bus_factor = world > 1 ? 2.0 * (world - 1) / world : 1.0;
  fmt::print("all-reduce, bf16, {} rank(s) over NCCL (GPUs 0 to {})\n\n", world, world - 1);
  fmt::print(
      "| message | eager µs | graph µs | algbw GB/s (graph) | busbw GB/s (graph) |\n"
      "|---:|---:|---:|---:|---:|\n");
  for (const Row& row : rows) {
    const double algbw = row.bytes / (row.graph_ms * 1e-3) / 1e9;
    fmt::print("| {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} |\n", size_text(row.bytes),
               1e3 * row.eager_ms, 1e3 * row.graph_ms, algbw, algbw * bus_factor);
  }
}

}  // namespace
}  // namespace pagoda

int main(int argc, char** argv) {
  try {
    int world = pagoda::cuda_device_count();
    if (argc > 1) world = std::atoi(argv[1]);
    pagoda::run(world);
  } catch (const std::exception& error) {
    fmt::print(stderr, "comm_bench: {}\n", error.what());
    return 1;
  }
  return 0;
}
