// The architecture table, and the dense-decoder weight estimate its rows use.
#include "model/architectures.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/safetensors.h"

namespace pagoda {
namespace {

const std::string kFixtures = std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/";

TEST(ArchitecturesTest, EveryRowIsComplete) {
  for (const Architecture& arch : architectures()) {
    EXPECT_EQ(&find_architecture(arch.name), &arch);
    EXPECT_NE(arch.read_layers, nullptr) << arch.name;
    EXPECT_NE(arch.estimate_weights, nullptr) << arch.name;
    // Only a drafter that reads a target's cache has no builder of its own.
    EXPECT_EQ(arch.build == nullptr, std::string_view(arch.name) == "Gemma4AssistantForCausalLM");
  }
  try {
    find_architecture("BertModel");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("'BertModel'"), std::string::npos) << message;
    for (const Architecture& arch : architectures())
      EXPECT_NE(message.find(arch.name), std::string::npos) << message;
  }
}

TEST(ArchitecturesTest, ADrafterOnlyArchitectureIsNotBuiltAlone) {
  const ModelConfig assistant = load_model_config(kFixtures + "gemma4-assistant-tiny");
  WeightSource weights = WeightSource::dummy(DType::kF32, 1);
  EXPECT_THROW(build_causal_lm(assistant, weights), Error);
}

int64_t checkpoint_params(const std::string& fixture) {
  return Checkpoint::open(kFixtures + fixture).total_bytes() / 4;  // float32 fixtures
}

TEST(WeightEstimateTest, MatchesDenseCheckpoints) {
  // Llama has no weights outside the estimate's list, untied or tied.
  for (const char* fixture : {"llama-tiny", "llama3-rope-tiny"}) {
    const WeightEstimate estimate =
        estimate_decoder_weights(load_model_config(kFixtures + fixture));
    EXPECT_EQ(estimate.params, checkpoint_params(fixture)) << fixture;
  }
  // Gemma 4 (KV sharing, K = V, double-wide MLP, per-layer inputs) adds per-head q/k norms and
  // layer scalars, which the estimate leaves out.
  const ModelConfig gemma = load_model_config(kFixtures + "gemma4-tiny");
  const int64_t actual = checkpoint_params("gemma4-tiny");
  EXPECT_LE(estimate_decoder_weights(gemma).params, actual);
  EXPECT_GE(estimate_decoder_weights(gemma).params, actual * 99 / 100);
}

// MiMo's sparse layers hold every expert in place of the dense MLP and stream the top k; the
// estimate leaves out the attention sinks and the routers' correction biases.
TEST(WeightEstimateTest, CountsEveryExpertOfMoeLayers) {
  const ModelConfig mimo = load_model_config(kFixtures + "mimo-tiny");
  const int64_t actual = checkpoint_params("mimo-tiny");
  const WeightEstimate estimate = estimate_decoder_weights(mimo);
  EXPECT_LE(estimate.params, actual);
  EXPECT_GE(estimate.params, actual * 99 / 100) << estimate.params << " of " << actual;
  // Three sparse layers of 8 experts (3 x 64 x 12 each), of which a token streams 2; the embedding
  // table is looked up, not streamed.
  EXPECT_EQ(estimate.params - estimate.streamed_params,
            int64_t{3} * (8 - 2) * 3 * 64 * 12 + mimo.vocab_size * mimo.hidden_size);
}

// MiMo-V2-Flash is published as 309 B parameters in all, 15 B of them active a token.
TEST(WeightEstimateTest, MiMoV2Flash) {
  const WeightEstimate estimate = estimate_decoder_weights(
      load_model_config(std::string(PAGODA_SOURCE_DIR) + "/examples/configs/mimo-v2-flash"));
  EXPECT_NEAR(static_cast<double>(estimate.params), 309e9, 309e9 * 0.01);
  EXPECT_NEAR(static_cast<double>(estimate.streamed_params), 15e9, 15e9 * 0.1);
}

TEST(WeightEstimateTest, Llama3EightB) {
  const WeightEstimate estimate = estimate_decoder_weights(
      load_model_config(std::string(PAGODA_SOURCE_DIR) + "/bench/configs/llama-3-8b"));
  EXPECT_EQ(estimate.params, int64_t{8'030'261'248});  // as published for Meta-Llama-3-8B
  EXPECT_EQ(estimate.streamed_params, estimate.params - int64_t{128256} * 4096);  // no embedding
}

}  // namespace
}  // namespace pagoda
