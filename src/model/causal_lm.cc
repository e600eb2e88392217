#include "model/causal_lm.h"

#include "core/error.h"
#include "model/architectures.h"

namespace pagoda {

std::unique_ptr<CausalLm> build_causal_lm(const ModelConfig& config, WeightSource& weights,
                                          const TensorParallel& tp) {
  const Architecture& arch = find_architecture(config.architecture);
  if (arch.build == nullptr) {
    fail("{}: {} only runs as a drafter, beside a target model", config.source, arch.name);
  }
  check_tensor_parallel(config, tp.size);
  PAGODA_CHECK(tp.rank >= 0 && tp.rank < tp.size && (tp.size == 1 || tp.comm != nullptr),
               "rank {} of {} without a communicator", tp.rank, tp.size);
  weights.set_quantization(config.quantization);
  std::unique_ptr<CausalLm> model = arch.build(config, weights, tp);
  weights.finish();
  return model;
}

}  // namespace pagoda
