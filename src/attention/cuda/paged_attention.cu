// The host side of paged attention: kernel choice, split counts, argument checks and launches of
// the kernel in attention_kernel.cuh, and the kernel that writes prefill tokens' K/V rows.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string_view>
#include <type_traits>

#include "attention/cuda/attention_kernel.cuh"
#include "attention/cuda/device_metadata.h"
#include "attention/cuda/paged_attention.h"
#include "attention/cuda/prefill_wgmma.cuh"
#include "core/cuda/context.h"
#include "core/cuda/launch.h"

namespace pagoda::cuda {
namespace {

using namespace attention;

constexpr int kDefaultChunk = 64;  // keys per shared-memory stage (32 for 512-wide heads' prefill)
// Wide decode CTAs: 16 warps over chunks of 128 keys (see with_kernel).
constexpr int kWideChunk = 128;
// A split count chosen for a step leaves each part at least this many keys. A graph's count is
// chosen for the longest sequence the model allows; a shorter sequence uses at most one part per
// chunk (see the kernel), which measured faster than fewer, longer parts at batch 1.
constexpr int kMinKeysPerSplit = 256;

// Writes each real token's K and V rows to the cache (of T) at its slot; slot -1 is skipped.
template <typename T>
__global__ void write_kv_kernel(const bf16* key, int64_t key_token_stride, int64_t key_head_stride,
                                const bf16* value, int64_t value_token_stride,
                                int64_t value_head_stride, PagedTensor k_cache, PagedTensor v_cache,
                                const int64_t* slot_mapping, int num_heads, int head_size_k,
                                int head_size_v, int block_size, float k_inverse, float v_inverse) {
  start_after_prior_kernels();
  const int token = blockIdx.x;
  const int64_t slot = slot_mapping[token];
  if (slot < 0) return;
  const int64_t block = slot / block_size;
  const int offset = static_cast<int>(slot % block_size);
  const int pieces_k = head_size_k / 8;
  const int pieces_v = head_size_v / 8;
  for (int i = threadIdx.x; i < num_heads * (pieces_k + pieces_v); i += blockDim.x) {
    const bool is_key = i < num_heads * pieces_k;
    const int j = is_key ? i : i - num_heads * pieces_k;
    const int pieces = is_key ? pieces_k : pieces_v;
    const int head = j / pieces;
    const int piece = j % pieces;
    const PagedTensor& cache = is_key ? k_cache : v_cache;
    const bf16* src = is_key ? key + token * key_token_stride + head * key_head_stride
                             : value + token * value_token_stride + head * value_head_stride;
    T* dst = static_cast<T*>(cache.base) + block * cache.block_stride +
             offset * cache.token_stride + head * cache.head_stride;
    store_piece(dst + piece * 8, *reinterpret_cast<const uint4*>(src + piece * 8),
                is_key ? k_inverse : v_inverse);
  }
}

PagedTensor paged_view(const Tensor& view) {
  // view: [num_blocks, block_size, num_kv_heads, head_size], unit inner stride. The kernel keeps
  // offsets inside a page in 32 bits.
  const int64_t last_in_page =
      (view.size(1) - 1) * view.stride(1) + (view.size(2) - 1) * view.stride(2) + view.size(3);
  PAGODA_CHECK(last_in_page < (int64_t{1} << 31), "a KV page of {} elements is too large",
               last_in_page);
  return {view.raw_data(), view.stride(0), view.stride(1), view.stride(2)};
}

// Whether every row of `t` starts 16-byte aligned, its elements contiguous.
bool aligned_16(const Tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.raw_data()) % 16 != 0) return false;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) {
    if (t.stride(d) * dtype_size(t.dtype()) % 16 != 0) return false;
  }
  return t.stride(t.dim() - 1) == 1;
}

// The driver's tensor-map encoder, found through the runtime (so nothing links the driver
// library itself); null where the driver has none.
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeTiled tensor_map_encoder() {
  static const EncodeTiled encoder = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return EncodeTiled{nullptr};
    }
    return reinterpret_cast<EncodeTiled>(function);
  }();
  return encoder;
}

// Describes `view` ([blocks, block_size, heads, head_size] bf16, any strides of whole 16-byte
// multiples) as PageMaps says: dimensions 64 columns, head_size / 64 parts, then tokens and heads
// in the order of their strides, then blocks; boxes of kBoxKeys tokens of one head, whole rows,
// swizzled in 128-byte parts. False where the driver refuses it.
bool encode_page_map(EncodeTiled encode, const Tensor& view, bool heads_inner, CUtensorMap& map) {
  const int inner = heads_inner ? 2 : 1;
  const int outer = heads_inner ? 1 : 2;
  const auto size = [&](int d) { return static_cast<cuuint64_t>(view.size(d)); };
  const auto bytes = [&](int d) { return static_cast<cuuint64_t>(view.stride(d)) * 2; };
  const cuuint64_t dims[5] = {64, size(3) / 64, size(inner), size(outer), size(0)};
  const cuuint64_t strides[4] = {128, bytes(inner), bytes(outer), bytes(0)};
  const auto parts = static_cast<cuuint32_t>(size(3) / 64);
  const cuuint32_t box[5] = {64, parts, heads_inner ? 1u : kBoxKeys, heads_inner ? kBoxKeys : 1u,
                             1};
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  return encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 5, view.raw_data(), dims, strides, box,
                element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// For measuring one way of filling decode stages against the other inside whole steps:
// PAGODA_DECODE_TMA=0 keeps the cp.async copies wherever tensor copies could run.
bool decode_tma_allowed() {
  static const bool allowed = env_switch("PAGODA_DECODE_TMA");
  return allowed;
}

// The tensor maps of a bf16 cache's pages for the tensor-copied decode CTAs, where they run: an
// sm_90 device, K and V heads both 128 wide (the shape measured), pages of a multiple of kBoxKeys
// tokens, and the driver taking both maps. Otherwise none, and the decode CTAs copy with cp.async.
std::optional<PageMaps> decode_page_maps(const KvCacheView& cache, int64_t dk, int64_t dv,
                                         int64_t block_size) {
  if (!has_warpgroup_mma() || !decode_tma_allowed() || cache.key.dtype() != DType::kBF16 ||
      dk != 128 || dv != 128 || block_size % kBoxKeys != 0) {
    return std::nullopt;
  }
  const EncodeTiled encode = tensor_map_encoder();
  if (encode == nullptr) return std::nullopt;
  const bool heads_inner = cache.key.stride(2) < cache.key.stride(1);
  if (heads_inner != (cache.value.stride(2) < cache.value.stride(1))) return std::nullopt;
  PageMaps maps{};
  maps.heads_inner = heads_inner ? 1 : 0;
  if (!encode_page_map(encode, cache.key, heads_inner, maps.k) ||
      !encode_page_map(encode, cache.value, heads_inner, maps.v)) {
    return std::nullopt;
  }
  return maps;
}

// Calls body(std::type_identity<T>{}) with T the element type of a cache of `dtype`.
template <typename Body>
void with_cache_type(DType dtype, Body&& body) {
  if (dtype == DType::kF8E4M3) return body(std::type_identity<e4m3>{});
  return body(std::type_identity<bf16>{});
}

// The attention kernels' grids (cta_place.h): x the tiles of every KV head, z the sequences (at
// most 65535).
dim3 attention_grid(int64_t tiles, int64_t kv_heads, int64_t num_seqs) {
  PAGODA_CHECK(num_seqs >= 1 && num_seqs <= 65535,
               "{} sequences in one attention launch; at most 65535", num_seqs);
  PAGODA_CHECK(tiles * kv_heads <= std::numeric_limits<int32_t>::max(),
               "{} tiles of {} KV heads in one attention launch", tiles, kv_heads);
  return dim3(static_cast<unsigned>(tiles * kv_heads), 1, static_cast<unsigned>(num_seqs));
}

template <typename T, int kDk, int kDv, int kRowTiles, int kStages, int kChunk = kDefaultChunk,
          int kWarpTiles = 1, bool kTma = false>
struct Kernel {
  using S = Shape<T, kDk, kDv, kRowTiles, kStages, kChunk, kWarpTiles, kTma>;
  static_assert(S::kSmemBytes <= 227 * 1024, "the kernel's shared memory exceeds sm_90's");
  static constexpr int kSliceWidth = kDv;
  static constexpr auto kFunction =
      attention_kernel<T, kDk, kDv, kRowTiles, kStages, kChunk, kWarpTiles, kTma>;

  // Raises the kernel's shared-memory limit, once.
  static void prepare() {
    static const bool prepared = [] {
      PAGODA_CUDA_CHECK(cudaFuncSetAttribute(kFunction, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             S::kSmemBytes));
      PAGODA_CUDA_CHECK(cudaFuncSetAttribute(kFunction,
                                             cudaFuncAttributePreferredSharedMemoryCarveout,
                                             cudaSharedmemCarveoutMaxShared));
      return true;
    }();
    (void)prepared;
  }

  // `maps`: the pages as tensors, which kTma kernels copy from (see decode_page_maps).
  static void launch(const Args& args, int num_seqs, int row_tiles, const PageMaps& maps = {}) {
    PAGODA_CHECK(args.dv_slices * kSliceWidth == args.dv_total, "V of {} in slices of {}",
                 args.dv_total, kSliceWidth);
    // CTAs of one key group write their rows from registers, which a split result cannot.
    PAGODA_CHECK(S::kKeyGroups > 1 || args.num_splits == 1, "prefill CTAs cannot split KV");
    PAGODA_CHECK(
        !kTma ||
            (args.block_size % kBoxKeys == 0 && args.head_size_k == kDk && args.dv_slices == 1),
        "tensor-copied decode CTAs need whole heads in pages of a multiple of {} tokens", kBoxKeys);
    prepare();
    const dim3 grid = attention_grid(int64_t{row_tiles} * args.num_splits * args.dv_slices,
                                     args.num_kv_heads, num_seqs);
    cuda::launch(kFunction, grid, S::kThreads, S::kSmemBytes, stream(), args, maps);
  }
};

// The warpgroup prefill kernels (prefill_wgmma.cuh), launched as Kernel is.
template <int kChunk, int kStages, bool kProducer = false>
struct WarpgroupKernel {
  using S = WarpgroupShape<kChunk, kStages, kProducer>;
  static_assert(S::kSmemBytes <= 227 * 1024, "the kernel's shared memory exceeds sm_90's");
  // Only the one kernel instantiated.
  static constexpr auto kFunction = [] {
    if constexpr (kProducer) {
      return prefill_wgmma_producer_kernel<kChunk, kStages>;
    } else {
      return prefill_wgmma_kernel<kChunk, kStages>;
    }
  }();

  static void launch(const Args& args, int num_seqs, int row_tiles) {
    PAGODA_CHECK(args.dv_slices == 1 && args.num_splits == 1 && args.head_size_k == S::kD &&
                     args.dv_total == S::kD,
                 "the warpgroup prefill kernel takes whole 128-wide heads, unsplit");
    static const bool prepared = [] {
      PAGODA_CUDA_CHECK(cudaFuncSetAttribute(kFunction, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             S::kSmemBytes));
      return true;
    }();
    (void)prepared;
    const dim3 grid = attention_grid(row_tiles, args.num_kv_heads, num_seqs);
    cuda::launch(kFunction, grid, S::kThreads, S::kSmemBytes, stream(), args);
  }
};

// The warpgroup kernels' instantiations: chunks of 64 keys, five stages; with a producer
// warpgroup, chunks of 128 keys, three stages (as many as fit).
using PrefillWarpgroups = WarpgroupKernel<64, 5>;
using PrefillWarpgroupsWithProducer = WarpgroupKernel<128, 3, true>;

// Calls body(Kernel<...>{}) for the instantiation of these head sizes. `wide` asks for decode
// CTAs of 16 warps over 128-key chunks, in place of 8 warps over 64 keys: each CTA walks half as
// many chunks, which pays where each multiprocessor holds one CTA anyway (batch-1 decode:
// Llama-3-8B steps 4.69 -> 4.50 ms). Where a multiprocessor holds two narrow CTAs but only one
// wide one, the narrow ones are faster. Heads up to 128 wide only: three wide stages of wider
// heads do not fit.
template <typename T, int kRowTiles, int kStages, typename Body>
void with_kernel(int64_t dk, int64_t dv, bool wide, Body&& body, bool tma = false) {
  if constexpr (kRowTiles == 1 && std::is_same_v<T, bf16>) {
    // Narrow decode CTAs whose stages tensor copies fill (decode_page_maps says where they may
    // run).
    if (tma && !wide && dk == 128 && dv == 128) {
      return body(Kernel<T, 128, 128, 1, kStages, kDefaultChunk, 1, true>{});
    }
  }
  if constexpr (kRowTiles == 1) {
    if (wide && dk == dv) {
      if (dk == 16) return body(Kernel<T, 16, 16, 1, kStages, kWideChunk>{});
      if (dk == 32) return body(Kernel<T, 32, 32, 1, kStages, kWideChunk>{});
      if (dk == 64) return body(Kernel<T, 64, 64, 1, kStages, kWideChunk>{});
      if (dk == 128) return body(Kernel<T, 128, 128, 1, kStages, kWideChunk>{});
    }
  }
  if (dk == 16 && dv == 16) return body(Kernel<T, 16, 16, kRowTiles, kStages>{});
  if constexpr (std::is_same_v<T, bf16>) {
    // K padded; 24 e4m3 elements are no whole number of 16-byte pieces (paged_attention refuses).
    if (dk == 24 && dv == 16) return body(Kernel<T, 32, 16, kRowTiles, kStages>{});
  }
  if (dk == 32 && dv == 32) return body(Kernel<T, 32, 32, kRowTiles, kStages>{});
  if (dk == 64 && dv == 64) return body(Kernel<T, 64, 64, kRowTiles, kStages>{});
  if (dk == 128 && dv == 128) return body(Kernel<T, 128, 128, kRowTiles, kStages>{});
  if (dk == 256 && dv == 256) return body(Kernel<T, 256, 256, kRowTiles, kStages>{});
  if (dk == 192 && dv == 128) return body(Kernel<T, 192, 128, kRowTiles, kStages>{});
  // 512-wide heads (Gemma 4's full layers): V in two slices of 256, two stages, and chunks of 32
  // keys for prefill, to fit shared memory.
  if (dk == 512 && dv == 512) {
    return body(Kernel < T, 512, 256, kRowTiles, 2, kRowTiles == 1 ? 64 : 32 > {});
  }
  fail("CUDA attention has no kernel for head sizes K {} / V {}", dk, dv);
}

// Calls body(Kernel<...>{}) for prefill CTAs of shape `ctas` at these head sizes, which must
// exist (prefill_ctas_available); k4Warps16Rows covers every head.
template <typename T, int kStages, typename Body>
void with_prefill_kernel(int64_t dk, int64_t dv, PrefillCtas ctas, Body&& body) {
  constexpr DType kCacheType = std::is_same_v<T, e4m3> ? DType::kF8E4M3 : DType::kBF16;
  PAGODA_CHECK(prefill_ctas_available(ctas, dk, dv, kCacheType),
               "CUDA attention has no such prefill CTAs for head sizes K {} / V {} and {} pages "
               "here",
               dk, dv, dtype_name(kCacheType));
  if constexpr (std::is_same_v<T, bf16>) {
    if (ctas == PrefillCtas::k2Warpgroups) return body(PrefillWarpgroups{});
    if (ctas == PrefillCtas::k3Warpgroups) return body(PrefillWarpgroupsWithProducer{});
  }
  if (ctas == PrefillCtas::k8Warps16Rows) {
    if (dk == 128) return body(Kernel<T, 128, 128, 8, kStages>{});
    return body(Kernel<T, 256, 256, 8, kStages>{});
  }
  if (ctas == PrefillCtas::k4Warps32Rows) {
    return body(Kernel<T, 128, 128, 8, kStages, kDefaultChunk, 2>{});
  }
  with_kernel<T, 4, kStages>(dk, dv, false, body);
}

// Decode: one row tile; a third stage keeps two chunks in flight while one is used.
constexpr int kDecodeStages = 3;
constexpr int kPrefillStages = 2;

// Whether the decode CTAs of `pairs` (sequence, KV head) pairs are wide: when each multiprocessor
// holds at most one of them.
bool wide_decode(int64_t pairs) {
  return pairs <= multiprocessor_count();
}

// KV splits per decoding (sequence, KV head): when there are fewer pairs than half the
// multiprocessors, enough splits to give half of them a CTA each, each split at least
// kMinKeysPerSplit keys long. Aiming at every multiprocessor measured faster for a lone kernel at
// batch 1 and 16k keys (H100: 29.8 against 33.1 us) but slower in the model's steps, where under
// dependent launch the next kernel's CTAs start on multiprocessors that attention leaves free
// (Llama-3-8B shape, batch 1, H100: decode step at 4k tokens 6.10 -> 5.83 ms, a 5-row verify at
// 512 tokens 6.45 -> 6.06 ms; docs/performance.md). Filling every resident slot (two CTAs a
// multiprocessor) measured slower still: the split merge costs more than the second CTA gains.
int64_t choose_decode_splits(int64_t pairs, int64_t max_seq_len) {
  const int64_t by_length = std::max<int64_t>(1, max_seq_len / kMinKeysPerSplit);
  return std::clamp<int64_t>(std::min(multiprocessor_count() / 2 / pairs, by_length), 1,
                             kMaxDecodeSplits);
}

// The measured best prefill CTAs at these head sizes and cache type, for long prompts.
PrefillCtas default_prefill_ctas(int64_t head_size_k, int64_t head_size_v, DType cache_dtype) {
  if (prefill_ctas_available(PrefillCtas::k2Warpgroups, head_size_k, head_size_v, cache_dtype)) {
    return PrefillCtas::k2Warpgroups;
  }
  if (head_size_k == 128 && head_size_v == 128) return PrefillCtas::k4Warps32Rows;
  if (head_size_k == 256 && head_size_v == 256) return PrefillCtas::k8Warps16Rows;
  return PrefillCtas::k4Warps16Rows;
}

}  // namespace

// Measured on an H200 (attention_bench's prefill table, docs/performance.md): 128-row CTAs beat
// 64-row ones at both heads, 4 warps of 32 rows at 128 (2-7%), 8 warps of 16 rows at 256 (1.6x:
// 64-row CTAs of 256-wide heads leave one CTA of 4 warps per multiprocessor).
bool prefill_ctas_available(PrefillCtas ctas, int64_t head_size_k, int64_t head_size_v,
                            DType cache_dtype) {
  // 128-row CTAs of wider heads do not fit; 4 x 32 rows of a 256-wide head hold too many
  // accumulators.
  switch (ctas) {
    case PrefillCtas::k8Warps16Rows:
      return head_size_k == head_size_v && (head_size_k == 128 || head_size_k == 256);
    case PrefillCtas::k4Warps32Rows:
      return head_size_k == 128 && head_size_v == 128;
    case PrefillCtas::k2Warpgroups:
    case PrefillCtas::k3Warpgroups:
      return head_size_k == 128 && head_size_v == 128 && cache_dtype == DType::kBF16 &&
             has_warpgroup_mma();
    default:
      return true;
  }
}

std::string_view prefill_ctas_name(PrefillCtas ctas) {
  switch (ctas) {
    case PrefillCtas::kDefault:
      return "auto";
    case PrefillCtas::k4Warps16Rows:
      return "4x16";
    case PrefillCtas::k8Warps16Rows:
      return "8x16";
    case PrefillCtas::k4Warps32Rows:
      return "4x32";
    case PrefillCtas::k2Warpgroups:
      return "wgmma";
    case PrefillCtas::k3Warpgroups:
      return "wgmma+p";
  }
  return "?";
}

PrefillCtas prefill_ctas_for(int64_t head_size_k, int64_t head_size_v, DType cache_dtype,
                             int64_t seqs, int64_t kv_heads, int64_t max_rows, int64_t max_keys) {
  const PrefillCtas ctas = default_prefill_ctas(head_size_k, head_size_v, cache_dtype);
  if (ctas != PrefillCtas::k2Warpgroups) return ctas;
  // The warpgroup CTAs cost more to start and finish than the 4 x 32 ones and gain over each
  // chunk of keys they walk; the producer warpgroup's CTAs more so. So the choice counts keys: a
  // chunk of a long prompt walks its cached tokens too. Measured on an H100 with the CTAs placed
  // as cta_place.h does (docs/performance.md), the producer's CTAs against the two-warpgroup ones:
  // 0.89x the time on 16 prompts of 2048 tokens, 0.87-0.92x on 1 and 4 of 8k, 0.86x on 8 chunks
  // of 2048 after 14k cached, 0.97x end to end on a lone 8k prompt; against the 4 x 32 CTAs on 64
  // prompts of 512 (many waves), 1.10x, where the two-warpgroup ones took 1.02x. On a lone
  // 512-token prompt (one wave) the two-warpgroup CTAs took 0.94x the 4 x 32 ones' time.
  constexpr int64_t kLongKeys = 2048;
  constexpr int64_t kRows = PrefillWarpgroups::S::kRows;
  if (max_keys >= kLongKeys) return PrefillCtas::k3Warpgroups;
  const int64_t row_ctas = (max_rows + kRows - 1) / kRows;
  const bool one_wave = seqs * kv_heads * row_ctas <= multiprocessor_count();
  return one_wave ? ctas : PrefillCtas::k4Warps32Rows;
}

int64_t decode_splits_for(int64_t head_size_k, int64_t head_size_v, int64_t pairs,
                          int64_t max_seq_len) {
  with_kernel<bf16, 1, kDecodeStages>(head_size_k, head_size_v, false,
                                      [](auto) {});  // known sizes only
  return choose_decode_splits(pairs, max_seq_len);
}

void paged_attention(const AttentionLayerParams& params, const Tensor& query, const Tensor& key,
                     const Tensor& value, const KvCacheView& cache, DeviceMetadata& plan,
                     const Tensor& output) {
  const int64_t hq = params.num_q_heads;
  const int64_t hkv = params.num_kv_heads;
  const int64_t dk = params.head_size_k;
  const int64_t dv = params.head_size_v;
  PAGODA_CHECK(key.defined() == value.defined(), "key and value must both be given or absent");
  PAGODA_CHECK(
      hq % hkv == 0 && hq / hkv <= kMaxQueriesPerKvHead &&
          std::find(kHeadSizes.begin(), kHeadSizes.end(), std::pair{dk, dv}) != kHeadSizes.end(),
      "CUDA attention: {} query / {} KV heads of sizes {} / {}", hq, hkv, dk, dv);
  const DType cache_dtype = cache.key.dtype();
  PAGODA_CHECK(query.dtype() == DType::kBF16 && output.dtype() == DType::kBF16 &&
                   (cache_dtype == DType::kBF16 || cache_dtype == DType::kF8E4M3) &&
                   cache.value.dtype() == cache_dtype,
               "CUDA attention needs bf16 queries and output, and a bf16 or e4m3 cache");
  PAGODA_CHECK(dk * dtype_size(cache_dtype) % kRowBytesMultiple == 0 &&
                   dv * dtype_size(cache_dtype) % kRowBytesMultiple == 0,
               "CUDA attention copies K/V rows in {}-byte pieces: rows of {} / {} {} elements "
               "are not",
               kRowBytesMultiple, dk, dv, dtype_name(cache_dtype));
  PAGODA_CHECK(query.dim() == 3 && query.size(1) == hq && query.size(2) == dk && aligned_16(query),
               "query {} must be [T, {}, {}] with 16-byte aligned rows", query.shape(), hq, dk);
  PAGODA_CHECK(output.is_contiguous() && output.size(1) == hq * dv, "output {}", output.shape());
  PAGODA_CHECK(cache.key.size(1) == plan.block_size() && cache.key.size(2) == hkv &&
                   cache.key.size(3) == dk && cache.value.size(3) == dv && aligned_16(cache.key) &&
                   aligned_16(cache.value),
               "cache view {} / {} does not match the layer", cache.key.shape(),
               cache.value.shape());
  const int64_t tokens = plan.num_actual_tokens();
  if (tokens == 0) return;
  const PagedTensor k_cache = paged_view(cache.key);
  const PagedTensor v_cache = paged_view(cache.value);
  if (key.defined()) {
    PAGODA_CHECK(aligned_16(key) && aligned_16(value) && key.size(1) == hkv && key.size(2) == dk &&
                     value.size(2) == dv,
                 "key {} / value {} for the cache", key.shape(), value.shape());
  }
  Args args{};
  args.q = reinterpret_cast<const bf16*>(query.raw_data());
  args.q_token_stride = query.stride(0);
  args.q_head_stride = query.stride(1);
  args.k = k_cache;
  args.v = v_cache;
  args.out = reinterpret_cast<bf16*>(output.raw_data());
  args.out_token_stride = output.stride(0);
  args.sinks = params.sinks;
  args.lse = params.lse;
  const float k_scale = cache_scale(cache_dtype, params.k_scale);
  const float v_scale = cache_scale(cache_dtype, params.v_scale);
  PAGODA_CHECK(std::isfinite(k_scale) && k_scale > 0.0f && std::isfinite(v_scale) && v_scale > 0.0f,
               "KV cache scales {} / {} must be finite and positive", k_scale, v_scale);
  args.scale = params.scale * k_scale;
  args.k_inverse = 1.0f / k_scale;
  args.v_inverse = 1.0f / v_scale;
  args.out_scale = v_scale;
  args.softcap = params.logit_softcap;
  args.window = static_cast<int>(params.sliding_window);
  args.num_kv_heads = static_cast<int>(hkv);
  args.group = static_cast<int>(hq / hkv);
  args.head_size_k = static_cast<int>(dk);
  args.dv_total = static_cast<int>(dv);
  with_kernel<bf16, 1, kDecodeStages>(dk, dv, false, [&](auto kernel) {
    args.dv_slices = static_cast<int>(dv / kernel.kSliceWidth);
  });
  args.block_size = static_cast<int>(plan.block_size());
  args.block_divisor = FastDivisor(args.block_size);
  args.query_start = plan.query_start();
  args.seq_lens = plan.seq_lens();
  args.block_table = plan.block_table();
  args.block_table_stride = plan.block_table_stride();
  args.context_rank = static_cast<int>(plan.context().rank);
  args.context_size = static_cast<int>(plan.context().size);
  args.context_interleave = static_cast<int>(plan.context().interleave);

  // Decodes: sequences of up to kMaxDecodeQueryLen query rows (a token and its drafts), each
  // (token, head) pair a row, in row tiles of 16, when the query group fits in one. A one-token
  // decode writes its K/V in the decode kernel itself; a kernel before it writes the others'.
  const int64_t decodes = args.group <= 16 ? plan.num_decode_seqs() : 0;
  const int64_t decode_rows = std::max<int64_t>(plan.max_decode_query_len(), 1) * args.group;
  const int64_t decode_row_tiles = (decode_rows + 15) / 16;
  const int64_t written_in_kernel = plan.max_decode_query_len() <= 1 ? decodes : 0;
  with_cache_type(cache_dtype, [&](auto type) {
    using T = typename decltype(type)::type;
    if (key.defined() && tokens > written_in_kernel) {
      const int64_t first = written_in_kernel;
      launch(write_kv_kernel<T>, static_cast<unsigned>(tokens - first), 128, 0, stream(),
             reinterpret_cast<const bf16*>(key.raw_data()) + first * key.stride(0), key.stride(0),
             key.stride(1),
             reinterpret_cast<const bf16*>(value.raw_data()) + first * value.stride(0),
             value.stride(0), value.stride(1), k_cache, v_cache, plan.slot_mapping() + first,
             static_cast<int>(hkv), static_cast<int>(dk), static_cast<int>(dv),
             static_cast<int>(plan.block_size()), args.k_inverse, args.v_inverse);
    }
    if (decodes > 0) {
      Args d = args;
      d.seq_offset = 0;
      const int64_t ctas = decodes * hkv * decode_row_tiles;
      const int64_t longest =
          plan.graph_max_seq_len > 0 ? plan.graph_max_seq_len : plan.max_seq_len();
      d.num_splits = static_cast<int>(
          plan.fixed_decode_splits > 0
              ? plan.fixed_decode_splits
              : decode_splits_for(dk, dv, ctas,
                                  (longest + args.context_size - 1) / args.context_size));
      PAGODA_CHECK(d.num_splits >= 1 && d.num_splits <= kMaxDecodeSplits,
                   "{} decode splits; at most {}", d.num_splits, kMaxDecodeSplits);
      if (key.defined() && written_in_kernel > 0) {
        d.new_k = reinterpret_cast<const bf16*>(key.raw_data());
        d.new_k_token_stride = key.stride(0);
        d.new_k_head_stride = key.stride(1);
        d.new_v = reinterpret_cast<const bf16*>(value.raw_data());
        d.new_v_token_stride = value.stride(0);
        d.new_v_head_stride = value.stride(1);
        d.slot_mapping = plan.slot_mapping();
      }
      if (d.num_splits > 1) {
        d.partials = plan.partials(ctas * d.num_splits * 16 * (dv + d.dv_slices));
        d.counters = plan.counters(ctas * d.dv_slices);
      }
      // Tensor copies fill narrow CTAs only. Against cp.async on an H100 they took 0.96-0.99x
      // the time at batch 64 and 256 (many waves of narrow CTAs, two a multiprocessor), but
      // 1.12-1.17x at batch 1 and 1.04-1.07x at batch 16 with 512-1k keys (wide CTAs, one a
      // multiprocessor); docs/performance.md.
      const bool wide = wide_decode(ctas);
      const std::optional<PageMaps> maps =
          wide ? std::nullopt : decode_page_maps(cache, dk, dv, plan.block_size());
      with_kernel<T, 1, kDecodeStages>(
          dk, dv, wide,
          [&](auto kernel) {
            kernel.launch(d, static_cast<int>(decodes), static_cast<int>(decode_row_tiles),
                          maps.value_or(PageMaps{}));
          },
          maps.has_value());
    }
    const int64_t rest = plan.num_seqs() - decodes;
    if (rest > 0) {
      Args p = args;
      p.seq_offset = static_cast<int>(decodes);
      p.num_splits = 1;
      const int64_t max_query = std::max<int64_t>(plan.max_prefill_query_len(), 1);
      const auto launch_prefill = [&](auto kernel) {
        constexpr int64_t kRows = decltype(kernel)::S::kRows;
        kernel.launch(p, static_cast<int>(rest),
                      static_cast<int>((max_query * args.group + kRows - 1) / kRows));
      };
      const PrefillCtas ctas =
          plan.prefill_ctas == PrefillCtas::kDefault
              ? prefill_ctas_for(
                    dk, dv, cache_dtype, rest, hkv, max_query * args.group,
                    (plan.max_prefill_seq_len() + plan.context().size - 1) / plan.context().size)
              : plan.prefill_ctas;
      with_prefill_kernel<T, kPrefillStages>(dk, dv, ctas, launch_prefill);
    }
  });
}

}  // namespace pagoda::cuda
