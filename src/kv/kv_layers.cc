#include "kv/kv_layers.h"

#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.h"

namespace pagoda {
namespace {

constexpr const char* kDraftPrefix = "draft.";

// Refuses a layer its backend's kernels cannot compute, naming the layer and the limit.
void check_backend_supports(const KvLayer& layer, DType kv_dtype) {
  const AttentionSupport& support = layer.backend->support();
  const AttentionFeatures& features = support.features;
  const LayerAttentionConfig& attention = layer.attention;
  const std::string& backend = layer.backend->name();
  if (attention.kind == AttentionKind::kSliding && !features.sliding_window) {
    fail("layer {} uses sliding-window attention, which attention backend '{}' does not support",
         layer.name, layer.backend->name());
  }
  if (attention.head_size_k != attention.head_size_v && !features.split_kv_head_sizes) {
    fail("layer {} has K head size {} and V head size {}; attention backend '{}' needs them equal",
         layer.name, attention.head_size_k, attention.head_size_v, layer.backend->name());
  }
  if (attention.kv_source != KvSource::kOwn && !features.cache_only_queries) {
    fail("layer {} reads another layer's KV cache, which attention backend '{}' does not support",
         layer.name, layer.backend->name());
  }
  const std::pair<int64_t, int64_t> sizes{attention.head_size_k, attention.head_size_v};
  if (!support.head_sizes.empty() && std::find(support.head_sizes.begin(), support.head_sizes.end(),
                                               sizes) == support.head_sizes.end()) {
    std::vector<std::string> known;
    for (const auto& [k, v] : support.head_sizes)
      known.push_back(k == v ? std::to_string(k) : fmt::format("{}/{}", k, v));
    fail("layer {} has K/V head sizes {}/{}; attention backend '{}' takes head sizes {}",
         layer.name, sizes.first, sizes.second, backend, fmt::join(known, ", "));
  }
  const int64_t q_per_kv = attention.num_q_heads / attention.num_kv_heads;
  if (support.max_q_per_kv > 0 && q_per_kv > support.max_q_per_kv) {
    fail("layer {} has {} query heads per KV head; attention backend '{}' takes at most {}",
         layer.name, q_per_kv, backend, support.max_q_per_kv);
  }
  if (!support.cache_dtypes.empty() &&
      std::find(support.cache_dtypes.begin(), support.cache_dtypes.end(), kv_dtype) ==
          support.cache_dtypes.end()) {
    std::vector<std::string_view> known;
    for (DType dtype : support.cache_dtypes)
      known.push_back(dtype_name(dtype));
    fail("layer {}: attention backend '{}' keeps its KV cache in {}, not {}", layer.name, backend,
         fmt::join(known, " or "), dtype_name(kv_dtype));
  }
  const int64_t multiple = support.row_bytes_multiple;
  for (const int64_t head_size : {attention.head_size_k, attention.head_size_v}) {
    if (multiple > 0 && head_size * dtype_size(kv_dtype) % multiple != 0) {
      fail(
          "layer {}: attention backend '{}' copies K/V rows in pieces of {} bytes; a row of {} {} "
          "elements is {} bytes",
          layer.name, backend, multiple, head_size, dtype_name(kv_dtype),
          head_size * dtype_size(kv_dtype));
    }
  }
}

KvSpec owner_spec(const KvLayer& layer, const KvLayerOptions& options, DType dtype) {
  const LayerAttentionConfig& attention = layer.attention;
  const KvPageShape page{.block_size = options.block_size,
                         .num_kv_heads = attention.num_kv_heads,
                         .head_size_k = attention.head_size_k,
                         .head_size_v = attention.head_size_v,
                         .dtype = dtype};
  return KvSpec{.kind = attention.kind,
                .sliding_window = attention.sliding_window,
                .page = page,
                .indexes_kv_by_block_stride = layer.backend->indexes_kv_by_block_stride(page)};
}

// The index of the target's last KV-owning layer of `kind`, or -1.
int64_t last_owner_of_kind(const std::vector<KvLayer>& layers, AttentionKind kind) {
  for (int64_t i = static_cast<int64_t>(layers.size()) - 1; i >= 0; --i) {
    const KvLayer& layer = layers[i];
    if (!layer.is_drafter() && layer.attention.kv_source == KvSource::kOwn &&
        layer.attention.kind == kind) {
      return i;
    }
  }
  return -1;
}

// Checks that `layer` can read `source`'s cache: same kind, a window no wider than what the source
// keeps, K and V head sizes equal, and whole query heads per source KV head.
void check_compatible_source(const KvLayer& layer, const KvLayer& source) {
  const LayerAttentionConfig& a = layer.attention;
  const LayerAttentionConfig& s = source.attention;
  if (a.kind != s.kind) {
    fail(
        "layer {} ({}) reads KV from {}, which is a {} layer; a layer can only share the cache of "
        "a layer of the same attention kind",
        layer.name, attention_kind_name(a.kind), source.name, attention_kind_name(s.kind));
  }
  if (a.kind == AttentionKind::kSliding && a.sliding_window > s.sliding_window) {
    fail("layer {} has a sliding window of {} tokens but reads KV from {}, which keeps only {}",
         layer.name, a.sliding_window, source.name, s.sliding_window);
  }
  if (a.head_size_k != s.head_size_k || a.head_size_v != s.head_size_v) {
    fail("layer {} (K/V head sizes {}/{}) reads KV from {} (K/V head sizes {}/{}); they must match",
         layer.name, a.head_size_k, a.head_size_v, source.name, s.head_size_k, s.head_size_v);
  }
  if (a.num_q_heads % s.num_kv_heads != 0) {
    fail("layer {} has {} query heads, not a multiple of the {} KV heads of {}, whose KV it reads",
         layer.name, a.num_q_heads, s.num_kv_heads, source.name);
  }
}

void append_model(std::vector<KvLayer>& layers, const ModelConfig& model, ModelRole role,
                  const AttentionBackend* backend, const KvLayerOptions& options) {
  const int64_t base = static_cast<int64_t>(layers.size());
  const int64_t count = static_cast<int64_t>(model.layers.size());
  for (int64_t i = 0; i < count; ++i) {
    KvLayer layer;
    layer.attention = model.layers[i];
    layer.role = role;
    layer.name = (layer.is_drafter() ? kDraftPrefix : "") + layer.attention.name;
    layer.backend = backend;
    DType dtype = layer.is_drafter() ? options.draft_dtype.value_or(options.dtype) : options.dtype;
    if (!layer.is_drafter() && options.skips.covers(i, layer.attention.kind)) {
      dtype = options.skip_dtype;
    }

    int64_t source = -1;
    switch (layer.attention.kv_source) {
      case KvSource::kOwn:
        check_backend_supports(layer, dtype);
        layer.spec = owner_spec(layer, options, dtype);
        layers.push_back(std::move(layer));
        continue;
      case KvSource::kEarlierLayer: {
        const int64_t local = layer.attention.kv_source_layer;
        if (local < 0 || local >= count) {
          fail("layer {} reads KV from layer index {}, which does not exist ({} has {} layers)",
               layer.name, local, model.source, count);
        }
        if (local >= i) {
          fail("layer {} reads KV from {}, which is not an earlier layer", layer.name,
               (layer.is_drafter() ? kDraftPrefix : "") + model.layers[local].name);
        }
        source = base + local;
        break;
      }
      case KvSource::kTargetLastOfKind:
        if (!layer.is_drafter()) {
          fail(
              "{} ({}) only runs as a drafter: its layers read a target model's KV cache; pass it "
              "as the draft model of a target",
              model.source, model.architecture);
        }
        source = last_owner_of_kind(layers, layer.attention.kind);
        if (source < 0) {
          fail(
              "drafter layer {} ({}) reads the target's last {} layer that owns KV, and the target "
              "has none",
              layer.name, attention_kind_name(layer.attention.kind),
              attention_kind_name(layer.attention.kind));
        }
        break;
    }
    while (!layers[source].owns_kv())
      source = layers[source].source;
    check_backend_supports(layer, layers[source].spec->page.dtype);  // it reads the source's pages
    check_compatible_source(layer, layers[source]);
    layer.source = source;
    layers.push_back(std::move(layer));
  }
}

}  // namespace

bool KvDtypeSkips::covers(int64_t index, AttentionKind kind) const {
  return (sliding_window && kind == AttentionKind::kSliding) ||
         std::find(layers.begin(), layers.end(), index) != layers.end();
}

std::vector<KvLayer> build_kv_layers(const ModelConfig& target, const ModelConfig* drafter,
                                     const KvLayerOptions& options) {
  PAGODA_CHECK(options.backend != nullptr, "build_kv_layers needs an attention backend");
  if (options.block_size < 1 || options.block_size > kMaxBlockSize) {
    fail("block size is {}; it must be in [1, {}]", options.block_size, kMaxBlockSize);
  }
  std::vector<KvLayer> layers;
  append_model(layers, target, ModelRole::kTarget, options.backend, options);
  if (drafter != nullptr) {
    append_model(layers, *drafter, ModelRole::kDrafter,
                 options.draft_backend != nullptr ? options.draft_backend : options.backend,
                 options);
  }
  // A drafter layer that reads the target's sliding cache queries one position past the cached
  // tokens and sees its window + 1 of them: two tokens further back than the target's next query.
  // Sliding caches of that spec keep them (the spec's window bounds which blocks are freed; each
  // layer's attention masks with its own).
  for (const KvLayer& reader : layers) {
    if (reader.attention.kv_source != KvSource::kTargetLastOfKind ||
        reader.attention.kind != AttentionKind::kSliding) {
      continue;
    }
    const KvSpec source_spec = *layers[reader.source].spec;
    const int64_t reach = reader.attention.sliding_window + 2;
    if (reach <= source_spec.sliding_window) continue;
    for (KvLayer& owner : layers) {
      if (owner.owns_kv() && *owner.spec == source_spec) owner.spec->sliding_window = reach;
    }
  }
  bool any_owner = false;
  for (const KvLayer& layer : layers)
    any_owner = any_owner || layer.owns_kv();
  if (!any_owner)
    fail("{}: no attention layer owns KV, so there is nothing to cache", target.source);
  return layers;
}

}  // namespace pagoda
