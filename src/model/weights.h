// Binds checkpoint tensors by name to what an architecture expects, or makes seeded random
// weights of the right shapes (--load-format dummy).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/safetensors.h"
#include "ops/weight.h"

namespace pagoda {

enum class LoadFormat { kSafetensors, kDummy };

// Part of a tensor along one dimension: indices [begin, begin + length) of `dim` (a rank's shard).
struct WeightSlice {
  int64_t dim = 0;
  int64_t begin = 0;
  int64_t length = 0;
};

// Parses "safetensors" / "auto" or "dummy". Throws Error naming the value.
LoadFormat parse_load_format(const std::string& text);

class WeightSource {
 public:
  // Reads the checkpoint in `model_dir`.
  static WeightSource from_checkpoint(const std::string& model_dir);
  // Every tensor asked for is made with `dtype` and seeded uniform values.
  static WeightSource dummy(DType dtype, uint64_t seed);

  // Where get() puts tensors: the host (stored dtype), or a GPU (converted to bf16).
  void set_device(Device device) { device_ = device; }
  Device device() const { return device_; }
  // Rounds host tensors to bf16 as a GPU's would be (to compare the two paths on equal weights).
  // FP8 weights keep their values.
  void round_to_bf16_on_host() { host_bf16_ = true; }
  // How get_weight() reads projection weights.
  void set_quantization(const QuantizationConfig& quantization) { quantization_ = quantization; }

  // The tensor `name` with exactly `shape`: on the host in its stored dtype (f32, f16 or bf16),
  // aligned to its element size; or on the GPU set by set_device(), in bf16. Throws Error naming
  // the tensor when it is missing, shaped otherwise or not floating point.
  Tensor get(const std::string& name, const Shape& shape);
  // get() of only `slice` of the tensor `name` of `shape`: read from the checkpoint's mapping
  // without the rest (dummy weights: the same values as that part of the whole tensor). Throws
  // Error as get() does, and for a slice outside the shape.
  Tensor get(const std::string& name, const Shape& shape, const WeightSlice& slice);
  // The projection weight `name` ("<module>.weight") of `shape` [N, K], or `slice` of it, as get()
  // reads it, except that with FP8 quantization it is FP8 with f32 scales on the device:
  // - a checkpoint's F8_E4M3 tensor comes with <name>_scale_inv (block scales, the config's
  //   block size) or <name>_scale (one scale); a slice along K must start on a block boundary;
  // - a floating tensor of a module the config quantizes at load (or any dummy weight of an FP8
  //   config) is quantized in the config's blocks on the host, after slicing.
  // Throws Error naming the tensor for a missing or misshapen scale or a misaligned slice.
  Weight get_weight(const std::string& name, const Shape& shape, const WeightSlice& slice = {});
  // An int64 tensor of `shape` (token ids and the like), on the host. Dummy weights give 0, 1, 2,
  // ... in order. Throws Error naming the tensor when it is missing, shaped otherwise or not I64.
  std::vector<int64_t> get_int64(const std::string& name, const Shape& shape);
  // The one-element floating tensor `name` (shape [] or [1]) as a float. Throws Error as get()
  // does.
  float get_scalar(const std::string& name);
  // True when `name` exists (always false for dummy weights, so optional tensors are skipped).
  bool has(const std::string& name) const;
  // Checkpoint tensors never asked for, in name order.
  std::vector<std::string> unused() const;
  // Logs unused tensors once at debug level and ends the progress display.
  void finish();

 private:
  void report_progress(int64_t bytes);
  Tensor place(Tensor tensor) const;
  // get()'s tensor before place(): on the host, in the stored dtype (dummy: the dummy dtype).
  Tensor host_tensor(const std::string& name, const Shape& shape, const WeightSlice& slice);
  // A checkpoint's FP8 weight `name` and its scale, sliced.
  Weight stored_fp8(const std::string& name, const Shape& shape, const WeightSlice& slice);
  // Records that `name` is bound; InternalError when it already was.
  void mark_used(const std::string& name);
  // The checkpoint's tensor `name`, marked used; Error when it is missing or not of `shape`.
  Tensor stored(const std::string& name, const Shape& shape);

  Device device_ = Device::cpu();
  bool host_bf16_ = false;
  QuantizationConfig quantization_;
  std::optional<Checkpoint> checkpoint_;
  DType dummy_dtype_ = DType::kBF16;
  uint64_t seed_ = 0;
  std::set<std::string> used_;
  int64_t total_bytes_ = 0;
  int64_t loaded_bytes_ = 0;
  int last_percent_ = -1;
  bool show_progress_ = false;
};

}  // namespace pagoda
