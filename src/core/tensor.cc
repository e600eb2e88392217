#include "core/tensor.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/cuda/device_storage.h"

namespace pagoda {
namespace {

cuda::StridedLayout strided_layout(const Tensor& t) {
  if (t.dim() > cuda::kMaxDims) {
    fail("device copies support at most {} dims; tensor has {}", cuda::kMaxDims, t.dim());
  }
  cuda::StridedLayout layout;
  layout.num_dims = static_cast<int>(t.dim());
  for (int d = 0; d < layout.num_dims; ++d) {
    layout.shape[d] = t.shape()[d];
    layout.strides[d] = t.strides()[d];
  }
  return layout;
}

// Calls visit(dst_byte_offset, src_byte_offset) for every element, in row-major order.
template <typename Visit>
void for_each_element(const Shape& shape, const Shape& a_strides, const Shape& b_strides,
                      int64_t element_size, Visit&& visit) {
  const int64_t numel = shape_numel(shape);
  if (numel == 0) return;
  const size_t rank = shape.size();
  std::vector<int64_t> index(rank, 0);
  int64_t a = 0;
  int64_t b = 0;
  for (int64_t n = 0; n < numel; ++n) {
    visit(a * element_size, b * element_size);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < shape[d]) {
        a += a_strides[d];
        b += b_strides[d];
        break;
      }
      a -= a_strides[d] * (shape[d] - 1);
      b -= b_strides[d] * (shape[d] - 1);
      index[d] = 0;
    }
  }
}

uint64_t fill_pattern(DType dtype, double value) {
  switch (dtype) {
    case DType::kF32:
      return std::bit_cast<uint32_t>(static_cast<float>(value));
    case DType::kF16:
      return f32_to_f16(static_cast<float>(value));
    case DType::kBF16:
      return f32_to_bf16(static_cast<float>(value));
    case DType::kF8E4M3:
      return f32_to_e4m3(static_cast<float>(value));
    case DType::kI32:
    case DType::kI64:
    case DType::kU8: {
      if (!std::isfinite(value) || value != std::trunc(value)) {
        fail("cannot fill a {} tensor with {}", dtype_name(dtype), value);
      }
      if (dtype == DType::kU8 && (value < 0 || value > 255)) {
        fail("cannot fill a uint8 tensor with {}; the range is 0..255", value);
      }
      if (dtype == DType::kI32 && std::abs(value) > std::numeric_limits<int32_t>::max()) {
        fail("cannot fill an int32 tensor with {}; it is out of range", value);
      }
      if (dtype == DType::kI32) return static_cast<uint32_t>(static_cast<int32_t>(value));
      return static_cast<uint64_t>(static_cast<int64_t>(value));
    }
  }
  PAGODA_CHECK(false, "unknown dtype");
}

// Bytes of a contiguous tensor of `shape` and `dtype`. Error past 64-bit sizes.
int64_t storage_bytes(const Shape& shape, DType dtype) {
  int64_t bytes = 0;
  if (__builtin_mul_overflow(shape_numel(shape), static_cast<int64_t>(dtype_size(dtype)), &bytes)) {
    fail("tensor shape {} of {} has more bytes than 64-bit sizes hold", shape, dtype_name(dtype));
  }
  return bytes;
}

}  // namespace

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t running = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = running;
    if (__builtin_mul_overflow(running, std::max<int64_t>(shape[d], 1), &running)) {
      fail("tensor shape {} has more elements than 64-bit sizes hold", shape);
    }
  }
  return strides;
}

int64_t shape_numel(const Shape& shape) {
  int64_t numel = 1;
  for (int64_t extent : shape) {
    if (__builtin_mul_overflow(numel, extent, &numel)) {
      fail("tensor shape {} has more elements than 64-bit sizes hold", shape);
    }
  }
  return numel;
}

Tensor::Tensor(std::shared_ptr<Storage> storage, DType dtype, Shape shape, Shape strides,
               int64_t offset_bytes)
    : storage_(std::move(storage)),
      offset_bytes_(offset_bytes),
      dtype_(dtype),
      shape_(std::move(shape)),
      strides_(std::move(strides)) {
  check_in_bounds();
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t extent : shape) {
    if (extent < 0) fail("tensor shape {} has a negative dim", shape);
  }
  auto storage = allocate(storage_bytes(shape, dtype), device);
  return Tensor(std::move(storage), dtype, shape, contiguous_strides(shape), 0);
}

Tensor Tensor::uninitialized(const Shape& shape, DType dtype, Device device) {
  for (int64_t extent : shape) {
    if (extent < 0) fail("tensor shape {} has a negative dim", shape);
  }
  auto storage = allocate_uninitialized(storage_bytes(shape, dtype), device);
  return Tensor(std::move(storage), dtype, shape, contiguous_strides(shape), 0);
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, DType dtype, const Shape& shape,
                            const Shape& strides, int64_t offset_bytes) {
  PAGODA_CHECK(storage != nullptr, "from_storage needs a storage");
  return Tensor(std::move(storage), dtype, shape, strides, offset_bytes);
}

void Tensor::check_in_bounds() const {
  if (shape_.size() != strides_.size()) {
    fail("tensor shape {} and strides {} differ in rank", shape_, strides_);
  }
  if (offset_bytes_ < 0) fail("tensor offset {} is negative", offset_bytes_);
  for (size_t d = 0; d < shape_.size(); ++d) {
    if (shape_[d] < 0) fail("tensor shape {} has a negative dim", shape_);
    if (strides_[d] < 0) fail("tensor strides {} have a negative stride", strides_);
    if (shape_[d] == 0) return;  // empty: touches no bytes
  }
  // The byte after the last element, every step checked: a view past 64 bits is out of bounds.
  int64_t end = 0;
  bool overflow = false;
  for (size_t d = 0; d < shape_.size(); ++d) {
    int64_t span = 0;
    overflow = overflow || __builtin_mul_overflow(shape_[d] - 1, strides_[d], &span) ||
               __builtin_add_overflow(end, span, &end);
  }
  overflow = overflow || __builtin_add_overflow(end, 1, &end) ||
             __builtin_mul_overflow(end, element_size(), &end) ||
             __builtin_add_overflow(end, offset_bytes_, &end);
  if (overflow || end > storage_->size_bytes()) {
    fail(
        "tensor view (shape {}, strides {}, offset {} bytes, {}) reaches {} of a {}-byte "
        "storage",
        shape_, strides_, offset_bytes_, dtype_name(dtype_),
        overflow ? std::string("past 64-bit sizes") : fmt::format("byte {}", end),
        storage_->size_bytes());
  }
}

int64_t Tensor::wrap_dim(int64_t dim) const {
  const int64_t rank = this->dim();
  if (dim < -rank || dim >= rank) fail("dim {} is out of range for a {}-dim tensor", dim, rank);
  return dim < 0 ? dim + rank : dim;
}

int64_t Tensor::size(int64_t dim) const {
  return shape_[wrap_dim(dim)];
}
int64_t Tensor::stride(int64_t dim) const {
  return strides_[wrap_dim(dim)];
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t d = shape_.size(); d-- > 0;) {
    if (shape_[d] == 0) return true;
    if (shape_[d] != 1 && strides_[d] != expected) return false;
    expected *= shape_[d];
  }
  return true;
}

int64_t Tensor::element_offset(std::initializer_list<int64_t> index) const {
  PAGODA_CHECK(static_cast<int64_t>(index.size()) == dim(), "index rank {} for a {}-dim tensor",
               index.size(), dim());
  int64_t offset = 0;
  size_t d = 0;
  for (int64_t i : index) {
    PAGODA_CHECK(i >= 0 && i < shape_[d], "index {} out of range for dim {} of size {}", i, d,
                 shape_[d]);
    offset += i * strides_[d++];
  }
  return offset;
}

Tensor Tensor::view(Shape shape) const {
  if (!is_contiguous()) {
    fail("view of a non-contiguous tensor (shape {}, strides {}); use reshape or contiguous",
         shape_, strides_);
  }
  int64_t known = 1;
  int inferred = -1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1) {
      if (inferred >= 0) fail("view shape {} has more than one -1", shape);
      inferred = static_cast<int>(d);
    } else if (shape[d] < 0) {
      fail("view shape {} has a negative dim", shape);
    } else {
      known *= shape[d];
    }
  }
  if (inferred >= 0) {
    if (known == 0 || numel() % known != 0) {
      fail("cannot view {} elements as shape {}", numel(), shape);
    }
    shape[inferred] = numel() / known;
  }
  if (shape_numel(shape) != numel()) fail("cannot view shape {} as shape {}", shape_, shape);
  return Tensor(storage_, dtype_, shape, contiguous_strides(shape), offset_bytes_);
}

Tensor Tensor::reshape(const Shape& shape) const {
  return is_contiguous() ? view(shape) : clone().view(shape);
}

Tensor Tensor::as_strided(const Shape& shape, const Shape& strides, int64_t offset_elements) const {
  return Tensor(storage_, dtype_, shape, strides, offset_elements * element_size());
}

Tensor Tensor::permute(const std::vector<int>& order) const {
  if (static_cast<int64_t>(order.size()) != dim()) {
    fail("permute order {} does not match a {}-dim tensor", order, dim());
  }
  Shape shape(order.size());
  Shape strides(order.size());
  std::vector<bool> seen(order.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t d = wrap_dim(order[i]);
    if (seen[d]) fail("permute order {} repeats dim {}", order, d);
    seen[d] = true;
    shape[i] = shape_[d];
    strides[i] = strides_[d];
  }
  return Tensor(storage_, dtype_, shape, strides, offset_bytes_);
}

Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  const int64_t d = wrap_dim(dim);
  if (start < 0 || length < 0 || start + length > shape_[d]) {
    fail("narrow [{}, {}) is outside dim {} of size {}", start, start + length, d, shape_[d]);
  }
  Shape shape = shape_;
  shape[d] = length;
  return Tensor(storage_, dtype_, shape, strides_,
                offset_bytes_ + start * strides_[d] * element_size());
}

Tensor Tensor::select(int64_t dim, int64_t index) const {
  const int64_t d = wrap_dim(dim);
  if (index < 0 || index >= shape_[d]) {
    fail("select index {} is outside dim {} of size {}", index, d, shape_[d]);
  }
  Shape shape = shape_;
  Shape strides = strides_;
  const int64_t offset = offset_bytes_ + index * strides_[d] * element_size();
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return Tensor(storage_, dtype_, shape, strides, offset);
}

Tensor Tensor::reinterpret(DType dtype) const {
  const int64_t old_size = element_size();
  const int64_t new_size = dtype_size(dtype);
  if (old_size == new_size) return Tensor(storage_, dtype, shape_, strides_, offset_bytes_);
  if (dim() == 0)
    fail("cannot reinterpret a 0-dim {} tensor as {}", dtype_name(dtype_), dtype_name(dtype));
  if (strides_.back() != 1 && shape_.back() != 1) {
    fail("reinterpret needs a last dim with stride 1; strides are {}", strides_);
  }
  Shape shape = shape_;
  Shape strides = strides_;
  const int64_t last_bytes = shape.back() * old_size;
  if (last_bytes % new_size != 0) {
    fail("cannot reinterpret a last dim of {} bytes as {} ({} bytes each)", last_bytes,
         dtype_name(dtype), new_size);
  }
  shape.back() = last_bytes / new_size;
  strides.back() = 1;
  for (size_t d = 0; d + 1 < strides.size(); ++d) {
    if ((strides[d] * old_size) % new_size != 0) {
      fail("cannot reinterpret: stride {} of dim {} is not a whole number of {} elements",
           strides[d], d, dtype_name(dtype));
    }
    strides[d] = strides[d] * old_size / new_size;
  }
  if (offset_bytes_ % new_size != 0) {
    fail("cannot reinterpret: byte offset {} is not aligned to {}", offset_bytes_, new_size);
  }
  return Tensor(storage_, dtype, shape, strides, offset_bytes_);
}

Tensor Tensor::clone() const {
  Tensor out = Tensor::empty(shape_, dtype_, device());
  out.copy_from(*this);
  return out;
}

Tensor Tensor::contiguous() const {
  return is_contiguous() ? *this : clone();
}

Tensor Tensor::to(Device device) const {
  Tensor out = Tensor::empty(shape_, dtype_, device);
  out.copy_from(*this);
  return out;
}

void Tensor::copy_from(const Tensor& src) const {
  if (src.shape_ != shape_ || src.dtype_ != dtype_) {
    fail("copy from a {} tensor of shape {} into a {} tensor of shape {}", dtype_name(src.dtype_),
         src.shape_, dtype_name(dtype_), shape_);
  }
  if (!storage_->writable()) fail("cannot write into a read-only tensor (e.g. a mapped file)");
  const Device dst_device = device();
  const Device src_device = src.device();
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::byte* dst = raw_data();
    const std::byte* from = src.raw_data();
    const int64_t size = element_size();
    for_each_element(shape_, strides_, src.strides_, size,
                     [&](int64_t a, int64_t b) { std::memcpy(dst + a, from + b, size); });
    return;
  }
  if (dst_device == src_device) {
    cuda::strided_copy(raw_data(), strided_layout(*this), src.raw_data(), strided_layout(src),
                       static_cast<int>(element_size()), dst_device.index);
    return;
  }
  // Across devices: make the source contiguous where it lives, move the bytes, then scatter.
  const Tensor packed = src.contiguous();
  const Tensor staging = is_contiguous() ? *this : Tensor::empty(shape_, dtype_, dst_device);
  copy_bytes(*staging.storage_, staging.offset_bytes_, *packed.storage_, packed.offset_bytes_,
             numel() * element_size());
  if (staging.storage_ != storage_) copy_from(staging);
}

void Tensor::fill(double value) const {
  if (!storage_->writable()) fail("cannot write into a read-only tensor (e.g. a mapped file)");
  const uint64_t pattern = fill_pattern(dtype_, value);
  const int64_t size = element_size();
  if (device().is_cpu()) {
    std::byte* dst = raw_data();
    for_each_element(shape_, strides_, strides_, size,
                     [&](int64_t a, int64_t) { std::memcpy(dst + a, &pattern, size); });
    return;
  }
  cuda::strided_fill(raw_data(), strided_layout(*this), pattern, static_cast<int>(size),
                     device().index);
}

}  // namespace pagoda
