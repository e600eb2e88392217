#include "model/causal_lm.h"

#include "core/error.h"
#include "model/arch/gemma4.h"
#include "model/arch/llama.h"
#include "model/arch/mimo_v2_flash.h"

namespace pagoda {

std::unique_ptr<CausalLm> build_causal_lm(const ModelConfig& config, WeightSource& weights) {
  std::unique_ptr<CausalLm> model;
  if (config.architecture == "LlamaForCausalLM") {
    model = build_llama(config, weights);
  } else if (config.architecture == "Qwen3ForCausalLM") {
    model = build_qwen3(config, weights);
  } else if (config.architecture == "Gemma4ForCausalLM" ||
             config.architecture == "Gemma4ForConditionalGeneration") {
    model = build_gemma4(config, weights);
  } else if (config.architecture == "MiMoV2FlashForCausalLM") {
    model = build_mimo_v2_flash(config, weights);
  } else {
    fail(
        "{}: running {} is not implemented yet; pagoda runs LlamaForCausalLM, "
        "Qwen3ForCausalLM, Gemma4ForCausalLM (text) and MiMoV2FlashForCausalLM",
        config.source, config.architecture);
  }
  weights.finish();
  return model;
}

}  // namespace pagoda
