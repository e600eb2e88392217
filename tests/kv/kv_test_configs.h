// Small model configs built in code for the KV tests.
#pragma once

#include <string>
#include <vector>

#include "attention/cpu/cpu_backend.h"
#include "kv/kv_layers.h"
#include "model/model_config.h"

namespace pagoda::testing {

inline LayerAttentionConfig full_layer(int64_t kv_heads, int64_t head_k, int64_t head_v = 0) {
  return {.kind = AttentionKind::kFull,
          .num_q_heads = 2 * kv_heads,
          .num_kv_heads = kv_heads,
          .head_size_k = head_k,
          .head_size_v = head_v == 0 ? head_k : head_v};
}

inline LayerAttentionConfig sliding_layer(int64_t kv_heads, int64_t head_k, int64_t window) {
  LayerAttentionConfig layer = full_layer(kv_heads, head_k);
  layer.kind = AttentionKind::kSliding;
  layer.sliding_window = window;
  return layer;
}

inline LayerAttentionConfig sharing(LayerAttentionConfig layer, int64_t source) {
  layer.kv_source = KvSource::kEarlierLayer;
  layer.kv_source_layer = source;
  return layer;
}

inline LayerAttentionConfig reading_target(LayerAttentionConfig layer) {
  layer.kv_source = KvSource::kTargetLastOfKind;
  return layer;
}

// A model whose layers are named model.layers.<i>.self_attn.
inline ModelConfig model_of(std::vector<LayerAttentionConfig> layers,
                            const std::string& source = "test/config.json") {
  ModelConfig model;
  model.source = source;
  model.architecture = "TestForCausalLM";
  model.max_position_embeddings = 4096;
  for (size_t i = 0; i < layers.size(); ++i) {
    layers[i].name = "model.layers." + std::to_string(i) + ".self_attn";
  }
  model.layers = std::move(layers);
  return model;
}

inline std::vector<KvLayer> kv_layers(const ModelConfig& target,
                                      const ModelConfig* drafter = nullptr,
                                      const AttentionBackend* draft_backend = nullptr,
                                      DType dtype = DType::kBF16) {
  return build_kv_layers(target, drafter,
                         {.block_size = 16,
                          .dtype = dtype,
                          .backend = &cpu_attention_backend(),
                          .draft_backend = draft_backend});
}

// Expects `call` to throw Error with every fragment in its message.
template <typename Call>
void expect_error(Call&& call, const std::vector<std::string>& fragments) {
  try {
    call();
    ADD_FAILURE() << "expected an error";
  } catch (const Error& error) {
    for (const std::string& fragment : fragments) {
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos)
          << "'" << error.what() << "' lacks '" << fragment << "'";
    }
  }
}

// A backend that cannot index pages by block stride (layers dim outermost).
class LayersOutermostBackend final : public AttentionBackend {
 public:
  std::string name() const override { return "layers-outermost"; }
  const AttentionSupport& support() const override {
    static const AttentionSupport support{.features = {.sliding_window = true,
                                                       .split_kv_head_sizes = true,
                                                       .cache_only_queries = true}};
    return support;
  }
  DeviceType device_type() const override { return DeviceType::kCpu; }
  std::unique_ptr<AttentionPlan> make_plan(const AttentionGroup&) const override {
    fail("a layout-only backend runs nothing");
  }
  std::vector<int> kv_cache_stride_order(const KvPageShape& page, LayersDim layers) const override {
    std::vector<int> order(paged_kv_shape(1, page, layers).size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = static_cast<int>(i);
    return order;
  }
};

}  // namespace pagoda::testing
