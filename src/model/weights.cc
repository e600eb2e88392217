#include "model/weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"
#include "core/units.h"
#include "ops/cpu/ops.h"

namespace pagoda {
namespace {

constexpr int64_t kProgressThresholdBytes = int64_t{1} << 30;

uint64_t hash_name(const std::string& name, uint64_t seed) {
  uint64_t hash = 1469598103934665603ull ^ seed;  // FNV-1a
  for (unsigned char c : name)
    hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

// splitmix64's output for a state.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Dummy weights are uniform in [-bound, bound). Element i of a tensor is draw i % kChunk of
// chunk i / kChunk's splitmix64 stream, seeded by the name: any element can be computed on its
// own, so a slice gets the values of that part of the whole tensor, and the values do not depend
// on the number of threads.
constexpr int64_t kChunk = 1 << 16;

float dummy_value(uint64_t base, int64_t i) {
  constexpr float kBound = 0.02f;
  constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;
  const uint64_t state = base + static_cast<uint64_t>(i / kChunk) * 0x632be59bd9b4e019ull +
                         static_cast<uint64_t>(i % kChunk + 1) * kGamma;
  const float unit = static_cast<float>(mix(state) >> 40) * 0x1p-24f;
  return (2.0f * unit - 1.0f) * kBound;
}

// Fills `tensor` (contiguous) with the dummy values of elements `index(e)` of the whole tensor.
template <typename T, typename Index, typename Convert>
void fill_uniform(T* data, int64_t numel, uint64_t base, Index index, Convert convert) {
  ThreadPool::global().parallel_for(
      (numel + kChunk - 1) / kChunk, [&](int64_t first, int64_t last) {
        for (int64_t e = first * kChunk; e < std::min(numel, last * kChunk); ++e)
          data[e] = convert(dummy_value(base, index(e)));
      });
}

// `tensor` is `slice` of a tensor of `shape` (the whole of it when slice.length is 0).
void fill_dummy(const Tensor& tensor, const std::string& name, uint64_t seed, const Shape& shape,
                const WeightSlice& slice) {
  const uint64_t base = hash_name(name, seed);
  int64_t inner = 1;
  for (size_t d = slice.dim + 1; d < shape.size(); ++d)
    inner *= shape[d];
  const int64_t part = slice.length * inner;  // elements of the slice per outer index
  const int64_t whole = shape.empty() ? 1 : shape[slice.dim] * inner;
  const auto index = [&](int64_t e) {
    return part == 0 ? e : e / part * whole + slice.begin * inner + e % part;
  };
  switch (tensor.dtype()) {
    case DType::kF32:
      fill_uniform(tensor.data<float>(), tensor.numel(), base, index, [](float v) { return v; });
      break;
    case DType::kF16:
      fill_uniform(tensor.data<uint16_t>(), tensor.numel(), base, index, f32_to_f16);
      break;
    case DType::kBF16:
      fill_uniform(tensor.data<uint16_t>(), tensor.numel(), base, index, f32_to_bf16);
      break;
    default:
      PAGODA_CHECK(false, "dummy weights must be floating");
  }
}

// Error naming `name` for a slice (other than none: length 0) outside `shape`.
void check_slice(const std::string& name, const Shape& shape, const WeightSlice& slice) {
  if (slice.length != 0 &&
      (slice.dim < 0 || slice.dim >= static_cast<int64_t>(shape.size()) || slice.begin < 0 ||
       slice.length < 0 || slice.begin + slice.length > shape[slice.dim])) {
    fail("'{}': a slice of [{}, {}) along dim {} is outside its shape {}", name, slice.begin,
         slice.begin + slice.length, slice.dim, shape);
  }
}

// Reads one byte per page so the mapping is resident before the first step.
void touch_pages(const Tensor& tensor) {
  const volatile std::byte* data = tensor.raw_data();
  const int64_t bytes = tensor.numel() * tensor.element_size();
  std::byte sink{0};
  for (int64_t offset = 0; offset < bytes; offset += 4096)
    sink ^= data[offset];
  (void)sink;
}

}  // namespace

LoadFormat parse_load_format(const std::string& text) {
  if (text == "auto" || text == "safetensors") return LoadFormat::kSafetensors;
  if (text == "dummy") return LoadFormat::kDummy;
  fail("unknown load format '{}'; expected auto, safetensors or dummy", text);
}

WeightSource WeightSource::from_checkpoint(const std::string& model_dir) {
  WeightSource source;
  source.checkpoint_ = Checkpoint::open(model_dir);
  source.total_bytes_ = source.checkpoint_->total_bytes();
  source.show_progress_ =
      source.total_bytes_ >= kProgressThresholdBytes && ::isatty(STDERR_FILENO) == 1;
  return source;
}

WeightSource WeightSource::dummy(DType dtype, uint64_t seed) {
  if (!is_floating(dtype)) fail("dummy weights need a floating dtype, not {}", dtype_name(dtype));
  WeightSource source;
  source.dummy_dtype_ = dtype;
  source.seed_ = seed;
  return source;
}

float WeightSource::get_scalar(const std::string& name) {
  const bool zero_dim = has(name) && checkpoint_->tensor(name).shape().empty();
  return cpu::to_floats(host_tensor(name, zero_dim ? Shape{} : Shape{1}, {}))[0];
}

bool WeightSource::has(const std::string& name) const {
  return checkpoint_ && checkpoint_->contains(name);
}

Tensor WeightSource::place(Tensor tensor) const {
  if (device_.is_cpu() && !host_bf16_) return tensor;
  if (tensor.dtype() != DType::kBF16) {
    const Tensor source = tensor.contiguous();
    Tensor bf16 = Tensor::empty(source.shape(), DType::kBF16);
    auto* dst = bf16.data<uint16_t>();
    ThreadPool::global().parallel_for(source.numel(), [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        dst[i] = f32_to_bf16(
            cpu::load_float(source.raw_data() + i * source.element_size(), source.dtype()));
      }
    });
    tensor = std::move(bf16);
  }
  return device_.is_cpu() ? tensor : tensor.to(device_);
}

void WeightSource::mark_used(const std::string& name) {
  PAGODA_CHECK(used_.insert(name).second, "weight '{}' bound twice", name);
}

Tensor WeightSource::stored(const std::string& name, const Shape& shape) {
  PAGODA_CHECK(checkpoint_, "no checkpoint to read '{}' from", name);
  mark_used(name);
  if (!checkpoint_->contains(name)) {
    fail("checkpoint is missing tensor '{}' (expected shape {})", name, shape);
  }
  Tensor tensor = checkpoint_->tensor(name);
  if (tensor.shape() != shape) {
    fail("{}: tensor '{}' has shape {}; the architecture expects {}", checkpoint_->file_of(name),
         name, tensor.shape(), shape);
  }
  return tensor;
}

std::vector<int64_t> WeightSource::get_int64(const std::string& name, const Shape& shape) {
  int64_t count = 1;
  for (const int64_t dim : shape)
    count *= dim;
  std::vector<int64_t> values(count);
  if (!checkpoint_) {
    mark_used(name);
    for (int64_t i = 0; i < count; ++i)
      values[i] = i;
    return values;
  }
  const Tensor tensor = stored(name, shape);
  if (tensor.dtype() != DType::kI64) {
    fail("{}: tensor '{}' is {}; it must be int64", checkpoint_->file_of(name), name,
         dtype_name(tensor.dtype()));
  }
  std::memcpy(values.data(), tensor.raw_data(), count * sizeof(int64_t));
  return values;
}

Tensor WeightSource::get(const std::string& name, const Shape& shape) {
  return get(name, shape, WeightSlice{});
}

Tensor WeightSource::get(const std::string& name, const Shape& shape, const WeightSlice& slice) {
  return place(host_tensor(name, shape, slice));
}

Tensor WeightSource::host_tensor(const std::string& name, const Shape& shape,
                                 const WeightSlice& slice) {
  const bool whole = slice.length == 0;
  check_slice(name, shape, slice);
  Shape part = shape;
  if (!whole) part[slice.dim] = slice.length;
  if (!checkpoint_) {
    mark_used(name);
    Tensor tensor = Tensor::empty(part, dummy_dtype_);
    fill_dummy(tensor, name, seed_, shape, slice);
    return tensor;
  }
  Tensor tensor = stored(name, shape);
  // Refused here, not inside a kernel that meets an integer weight.
  if (!is_floating(tensor.dtype())) {
    fail("{}: tensor '{}' is {}; a weight must be float32, float16 or bfloat16{}",
         checkpoint_->file_of(name), name, dtype_name(tensor.dtype()),
         tensor.dtype() == DType::kF8E4M3 ? " (FP8 is read only for quantized projections)" : "");
  }
  if (!whole) tensor = tensor.narrow(slice.dim, slice.begin, slice.length);
  // Views of the mapping are kept when contiguous and aligned; otherwise copied, so elements load
  // aligned and a slice across rows reads only its own bytes.
  if (!tensor.is_contiguous() ||
      reinterpret_cast<uintptr_t>(tensor.raw_data()) % tensor.element_size() != 0) {
    tensor = tensor.clone();
  } else {
    touch_pages(tensor);
  }
  report_progress(tensor.numel() * tensor.element_size());
  return tensor;
}

Weight WeightSource::get_weight(const std::string& name, const Shape& shape,
                                const WeightSlice& slice) {
  if (checkpoint_ && checkpoint_->contains(name) &&
      checkpoint_->tensor(name).dtype() == DType::kF8E4M3) {
    return stored_fp8(name, shape, slice);
  }
  const std::string module = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
  const bool quantize = quantization_.fp8 && shape.size() == 2 &&
                        (checkpoint_ ? !quantization_.stored && quantization_.quantizes(module)
                                     : quantization_.quantizes(module));
  if (!quantize) return Weight(get(name, shape, slice));
  const Tensor host = host_tensor(name, shape, slice);
  const Weight weight = quantization_.per_tensor ? quantize_fp8(host, host.size(0), host.size(1))
                                                 : quantize_fp8(host, quantization_.block_rows,
                                                                quantization_.block_cols);
  return device_.is_cpu() ? weight : weight.to(device_);
}

Weight WeightSource::stored_fp8(const std::string& name, const Shape& shape,
                                const WeightSlice& slice) {
  const std::string file = checkpoint_->file_of(name);
  if (shape.size() != 2) fail("{}: FP8 tensor '{}' must be a 2-D projection weight", file, name);
  Tensor values = stored(name, shape);
  const bool blocks = checkpoint_->contains(name + "_scale_inv");
  const std::string scale_name = name + (blocks ? "_scale_inv" : "_scale");
  if (!checkpoint_->contains(scale_name)) {
    fail("{}: FP8 tensor '{}' has no scale ('{}_scale_inv' or '{}_scale')", file, name, name, name);
  }
  int64_t block_rows = shape[0];
  int64_t block_cols = shape[1];
  if (blocks) {
    if (quantization_.per_tensor || !quantization_.stored) {
      fail(
          "{}: '{}' holds block scales, but config.json's quantization_config gives no "
          "weight_block_size",
          file, scale_name);
    }
    block_rows = quantization_.block_rows;
    block_cols = quantization_.block_cols;
  }
  const Shape scale_shape{(shape[0] + block_rows - 1) / block_rows,
                          (shape[1] + block_cols - 1) / block_cols};
  mark_used(scale_name);
  Tensor scales = checkpoint_->tensor(scale_name);
  if (!is_floating(scales.dtype()) ||
      (blocks ? scales.shape() != scale_shape : scales.numel() != 1)) {
    fail("{}: scale '{}' is {} {}; FP8 weight '{}' of shape {} needs {} f32 scales", file,
         scale_name, dtype_name(scales.dtype()), scales.shape(), name, shape,
         blocks ? fmt::format("{}", scale_shape) : std::string("one"));
  }
  // The scales in f32, contiguous, on the host.
  Tensor f32 = Tensor::empty(scale_shape, DType::kF32);
  const Tensor dense = scales.contiguous();
  for (int64_t i = 0; i < f32.numel(); ++i) {
    const float scale = cpu::load_float(dense.raw_data() + i * dense.element_size(), dense.dtype());
    // A scale of 0, below 0 or not finite turns the weight into zeros or NaN.
    if (!(std::isfinite(scale) && scale > 0.0f)) {
      fail("{}: scale '{}' holds {} at index {}; FP8 scales must be finite and positive", file,
           scale_name, scale, i);
    }
    f32.data<float>()[i] = scale;
  }
  Weight weight(values, f32, block_rows, block_cols);
  check_slice(name, shape, slice);
  if (slice.length != 0) {
    if (slice.dim == 0) {
      weight = weight.narrow_rows(slice.begin, slice.length);
    } else {
      if (slice.begin % block_cols != 0 && block_cols != shape[1]) {
        fail(
            "{}: this rank's columns [{}, {}) of FP8 weight '{}' start inside a block of {} "
            "columns; choose a tensor-parallel size that splits it on block boundaries",
            file, slice.begin, slice.begin + slice.length, name, block_cols);
      }
      const int64_t first = block_cols == shape[1] ? 0 : slice.begin / block_cols;
      const int64_t count =
          block_cols == shape[1]
              ? 1
              : (slice.begin + slice.length + block_cols - 1) / block_cols - first;
      weight = Weight(values.narrow(1, slice.begin, slice.length).clone(),
                      weight.scales.narrow(1, first, count).clone(), block_rows,
                      block_cols == shape[1] ? slice.length : block_cols);
    }
  }
  if (!weight.values.is_contiguous()) weight.values = weight.values.clone();
  if (!weight.scales.is_contiguous()) weight.scales = weight.scales.clone();
  touch_pages(weight.values);
  report_progress(weight.bytes());
  return device_.is_cpu() ? weight : weight.to(device_);
}

std::vector<std::string> WeightSource::unused() const {
  std::vector<std::string> names;
  if (!checkpoint_) return names;
  for (const std::string& name : checkpoint_->names()) {
    if (used_.count(name) == 0) names.push_back(name);
  }
  return names;
}

void WeightSource::finish() {
  if (show_progress_) std::fputs("\n", stderr);
  show_progress_ = false;
  if (checkpoint_ && quantization_.stored && quantization_.static_activations) {
    spdlog::warn(
        "config.json's quantization_config.activation_scheme is \"static\": its input_scale "
        "tensors are not read; activations are scaled per token group as they come (dynamic)");
  }
  const std::vector<std::string> ignored = unused();
  if (!ignored.empty()) {
    spdlog::debug("{} checkpoint tensors are not used by the architecture: {}", ignored.size(),
                  fmt::join(ignored, ", "));
  }
}

void WeightSource::report_progress(int64_t bytes) {
  loaded_bytes_ += bytes;
  if (!show_progress_ || total_bytes_ == 0) return;
  const int percent = static_cast<int>(100 * loaded_bytes_ / total_bytes_);
  if (percent == last_percent_) return;
  last_percent_ = percent;
  std::fprintf(stderr, "\rloading weights %3d%% (%s of %s)", percent,
               format_bytes(loaded_bytes_).c_str(), format_bytes(total_bytes_).c_str());
  std::fflush(stderr);
}

}  // namespace pagoda
