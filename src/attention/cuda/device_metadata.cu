#include <algorithm>
#include <atomic>
#include <cstring>

#include "attention/cuda/device_metadata.h"
#include "core/cuda/context.h"

namespace pagoda::cuda {
namespace {

std::atomic<int64_t> reallocations{0};

int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace

// One pinned staging area and one device area with the same layout:
//   [query_start: max_seqs + 1][seq_lens: max_seqs] int32, then slot_mapping: max_tokens int64,
//   then block_table: max_seqs * max_blocks_per_seq int32.
struct DeviceMetadata::Buffers {
  std::byte* host = nullptr;
  std::byte* device = nullptr;
  int64_t slot_offset = 0;
  int64_t table_offset = 0;
  int64_t bytes = 0;
  cudaEvent_t uploaded = nullptr;
  float* partials = nullptr;
  int64_t partial_floats = 0;
  int32_t* counters = nullptr;
  int64_t counter_count = 0;

  ~Buffers() {
    cudaFreeHost(host);
    cudaFree(device);
    cudaFree(partials);
    cudaFree(counters);
    if (uploaded != nullptr) cudaEventDestroy(uploaded);
  }
};

DeviceMetadata::DeviceMetadata(int64_t max_seqs, int64_t max_tokens, int64_t max_blocks_per_seq,
                               int64_t block_size)
    : buffers_(std::make_unique<Buffers>()),
      max_seqs_(max_seqs),
      max_tokens_(max_tokens),
      max_blocks_per_seq_(max_blocks_per_seq),
      block_size_(block_size) {
  PAGODA_CHECK(max_seqs > 0 && max_tokens > 0 && max_blocks_per_seq > 0 && block_size > 0,
               "attention plan sizes");
  Buffers& b = *buffers_;
  b.slot_offset = round_up((2 * max_seqs + 1) * 4, 16);
  b.table_offset = round_up(b.slot_offset + max_tokens * 8, 16);
  b.bytes = b.table_offset + max_seqs * max_blocks_per_seq * 4;
  PAGODA_CUDA_CHECK(cudaMallocHost(&b.host, b.bytes));
  PAGODA_CUDA_CHECK(cudaMalloc(&b.device, b.bytes));
  PAGODA_CUDA_CHECK(cudaMemset(b.device, 0, b.bytes));
  PAGODA_CUDA_CHECK(cudaEventCreateWithFlags(&b.uploaded, cudaEventDisableTiming));
}

DeviceMetadata::~DeviceMetadata() = default;

void DeviceMetadata::update(const AttentionMetadata& metadata, int64_t padding_seqs) {
  const int64_t real_seqs = metadata.num_seqs();
  const int64_t real_tokens = metadata.num_actual_tokens;
  // Padding sequences have the decodes' query length, which a padded step keeps uniform.
  const int64_t padding_len = metadata.decode_query_len();
  PAGODA_CHECK(padding_seqs == 0 || (metadata.num_decode_seqs == real_seqs &&
                                     metadata.num_decode_tokens == real_seqs * padding_len),
               "only a decode-only step with one query length is padded");
  const int64_t seqs = real_seqs + padding_seqs;
  const int64_t tokens = real_tokens + padding_seqs * padding_len;
  if (seqs > max_seqs_ || tokens > max_tokens_) {
    fail("a step of {} sequences and {} tokens exceeds the attention plan's {} and {}", seqs,
         tokens, max_seqs_, max_tokens_);
  }
  Buffers& b = *buffers_;
  // The previous step's copy must have left the staging area before it is rewritten.
  PAGODA_CUDA_CHECK(cudaEventSynchronize(b.uploaded));
  auto* query_start = reinterpret_cast<int32_t*>(b.host);
  int32_t* seq_lens = query_start + max_seqs_ + 1;
  auto* slots = reinterpret_cast<int64_t*>(b.host + b.slot_offset);
  auto* table = reinterpret_cast<int32_t*>(b.host + b.table_offset);

  num_seqs_ = seqs;
  num_actual_tokens_ = tokens;
  num_decode_seqs_ = metadata.num_decode_seqs;
  max_decode_query_len_ = 0;
  max_prefill_query_len_ = 0;
  max_prefill_seq_len_ = 0;
  max_seq_len_ = 0;
  context_ = metadata.context;
  // A block id covers block_size tokens of each of the context's ranks.
  const int64_t block_tokens = block_size_ * context_.size;
  int64_t max_blocks = 1;
  for (int64_t s = 0; s < real_seqs; ++s) {
    const int64_t query_len = metadata.query_start[s + 1] - metadata.query_start[s];
    if (s < metadata.num_decode_seqs) {
      // A read-only query (the assistant's) may attend over exactly as many keys as it has rows.
      PAGODA_CHECK(query_len <= kMaxDecodeQueryLen && query_len <= metadata.seq_lens[s],
                   "decoding sequence {} has {} queries over {} tokens", s, query_len,
                   metadata.seq_lens[s]);
      max_decode_query_len_ = std::max(max_decode_query_len_, query_len);
    } else {
      max_prefill_query_len_ = std::max(max_prefill_query_len_, query_len);
      max_prefill_seq_len_ = std::max(max_prefill_seq_len_, metadata.seq_lens[s]);
    }
    max_seq_len_ = std::max(max_seq_len_, metadata.seq_lens[s]);
    max_blocks = std::max(max_blocks, (metadata.seq_lens[s] + block_tokens - 1) / block_tokens);
  }
  // Padding sequences: padding_len queries each over as many keys in the null block, written
  // nowhere.
  const int64_t padding_blocks = (padding_len + block_size_ - 1) / block_size_;
  if (padding_seqs > 0) max_blocks = std::max(max_blocks, padding_blocks);
  if (max_blocks > max_blocks_per_seq_) {
    fail("a sequence of {} tokens needs {} blocks; the attention plan holds {}", max_seq_len_,
         max_blocks, max_blocks_per_seq_);
  }
  for (int64_t s = 0; s <= real_seqs; ++s)
    query_start[s] = static_cast<int32_t>(metadata.query_start[s]);
  for (int64_t s = 0; s < real_seqs; ++s) {
    seq_lens[s] = static_cast<int32_t>(metadata.seq_lens[s]);
    const int64_t blocks = (metadata.seq_lens[s] + block_tokens - 1) / block_tokens;
    std::memcpy(table + s * max_blocks_per_seq_, metadata.blocks_of(s), blocks * 4);
  }
  std::memcpy(slots, metadata.slot_mapping.data(), real_tokens * 8);
  for (int64_t s = real_seqs; s < seqs; ++s) {
    query_start[s + 1] = static_cast<int32_t>(query_start[s] + padding_len);
    seq_lens[s] = static_cast<int32_t>(padding_len);
    std::fill_n(table + s * max_blocks_per_seq_, padding_blocks, 0);
  }
  std::fill_n(slots + real_tokens, padding_seqs * padding_len, int64_t{-1});
  num_decode_seqs_ += padding_seqs;
  if (padding_seqs > 0) {
    max_decode_query_len_ = std::max(max_decode_query_len_, padding_len);
    max_seq_len_ = std::max(max_seq_len_, padding_len);
  }

  const cudaStream_t s = stream();
  PAGODA_CUDA_CHECK(
      cudaMemcpyAsync(b.device, b.host, b.slot_offset + tokens * 8, cudaMemcpyHostToDevice, s));
  if (seqs > 0) {
    const size_t pitch = max_blocks_per_seq_ * 4;
    PAGODA_CUDA_CHECK(cudaMemcpy2DAsync(b.device + b.table_offset, pitch, b.host + b.table_offset,
                                        pitch, max_blocks * 4, seqs, cudaMemcpyHostToDevice, s));
  }
  PAGODA_CUDA_CHECK(cudaEventRecord(b.uploaded, s));
}

int64_t DeviceMetadata::scratch_generation() {
  return reallocations.load();
}

const int32_t* DeviceMetadata::query_start() const {
  return reinterpret_cast<const int32_t*>(buffers_->device);
}

const int32_t* DeviceMetadata::seq_lens() const {
  return query_start() + max_seqs_ + 1;
}

const int64_t* DeviceMetadata::slot_mapping() const {
  return reinterpret_cast<const int64_t*>(buffers_->device + buffers_->slot_offset);
}

const int32_t* DeviceMetadata::block_table() const {
  return reinterpret_cast<const int32_t*>(buffers_->device + buffers_->table_offset);
}

float* DeviceMetadata::partials(int64_t floats) {
  Buffers& b = *buffers_;
  if (floats > b.partial_floats) {
    PAGODA_CHECK(!stream_is_capturing(), "attention scratch must be sized before graph capture");
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream()));
    cudaFree(b.partials);
    b.partials = nullptr;
    ++reallocations;
    floats *= 2;  // room to grow, so graphs captured over the scratch stay valid longer
    PAGODA_CUDA_CHECK(cudaMalloc(&b.partials, floats * sizeof(float)));
    b.partial_floats = floats;
  }
  return b.partials;
}

int32_t* DeviceMetadata::counters(int64_t count) {
  Buffers& b = *buffers_;
  if (count > b.counter_count) {
    PAGODA_CHECK(!stream_is_capturing(), "attention scratch must be sized before graph capture");
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream()));
    cudaFree(b.counters);
    b.counters = nullptr;
    ++reallocations;
    count *= 2;
    PAGODA_CUDA_CHECK(cudaMalloc(&b.counters, count * sizeof(int32_t)));
    // Kernels leave every counter at zero when they finish.
    PAGODA_CUDA_CHECK(cudaMemset(b.counters, 0, count * sizeof(int32_t)));
    b.counter_count = count;
  }
  return b.counters;
}

}  // namespace pagoda::cuda
