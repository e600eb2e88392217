// From model configs to the attention layers the KV cache serves: each layer either owns a KV
// spec or reads the cache of an earlier owning layer (KV sharing).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "attention/backend.h"
#include "kv/kv_spec.h"
#include "model/model_config.h"

namespace pagoda {

enum class ModelRole { kTarget, kDrafter };

struct KvLayer {
  std::string name;  // target layers as in the config; drafter layers prefixed "draft."
  LayerAttentionConfig attention;
  ModelRole role = ModelRole::kTarget;
  const AttentionBackend* backend = nullptr;  // the backend that reads this layer's cache
  std::optional<KvSpec> spec;                 // set when the layer owns KV
  int64_t source = -1;  // for a sharing layer: index of the owning layer whose cache it reads

  bool owns_kv() const { return spec.has_value(); }
  bool is_drafter() const { return role == ModelRole::kDrafter; }
};

constexpr int64_t kMaxBlockSize = 65536;  // tokens

// Target layers that own KV and keep another dtype than the cache's (vLLM's
// --kv-cache-dtype-skip-layers: a model's own dtype beside an fp8 cache): every sliding-window
// layer where `sliding_window`, and the layers of these indices. A layer that reads an earlier
// layer's KV reads it in its source's dtype.
struct KvDtypeSkips {
  bool sliding_window = false;
  std::vector<int64_t> layers;

  bool empty() const { return !sliding_window && layers.empty(); }
  // Whether the target layer of index `index` and attention `kind` is skipped.
  bool covers(int64_t index, AttentionKind kind) const;
};

struct KvLayerOptions {
  int64_t block_size = 16;  // tokens per block before page-size unification
  DType dtype = DType::kBF16;
  std::optional<DType> draft_dtype;  // the drafter's layers'; default: dtype
  KvDtypeSkips skips;                // target layers kept in skip_dtype
  DType skip_dtype = DType::kBF16;
  const AttentionBackend* backend = nullptr;        // reads the target's layers
  const AttentionBackend* draft_backend = nullptr;  // reads the drafter's layers; default: backend
};

// Target layers, then drafter layers, with specs for owners and sharing resolved. Throws Error when
// a sharing layer's source is missing, not earlier, of another kind or of an incompatible shape
// (naming both layers), or when a model that needs a target has none.
std::vector<KvLayer> build_kv_layers(const ModelConfig& target, const ModelConfig* drafter,
                                     const KvLayerOptions& options);

}  // namespace pagoda
