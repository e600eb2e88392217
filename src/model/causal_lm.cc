#include "model/causal_lm.h"

#include "core/error.h"
#include "model/architectures.h"

namespace pagoda {

std::unique_ptr<CausalLm> build_causal_lm(const ModelConfig& config, WeightSource& weights) {
  const Architecture& arch = find_architecture(config.architecture);
  if (arch.build == nullptr) {
    fail("{}: {} only runs as a drafter, beside a target model", config.source, arch.name);
  }
  std::unique_ptr<CausalLm> model = arch.build(config, weights);
  weights.finish();
  return model;
}

}  // namespace pagoda
