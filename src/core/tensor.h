// Tensor views: shared storage + byte offset + dtype + shape + strides (in elements) + device.
// A Tensor never owns its bytes alone; views made from it share the same storage.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/storage.h"

namespace pagoda {

using Shape = std::vector<int64_t>;

// Element strides of a contiguous (row-major) tensor of `shape`.
Shape contiguous_strides(const Shape& shape);
int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor; defined() is false

  // A new zero-filled contiguous tensor.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  // A new contiguous tensor whose device contents are unspecified: for outputs an op writes whole.
  static Tensor uninitialized(const Shape& shape, DType dtype, Device device);
  // A view of existing storage. Throws Error when the view would reach outside the storage.
  static Tensor from_storage(std::shared_ptr<Storage> storage, DType dtype, const Shape& shape,
                             const Shape& strides, int64_t offset_bytes);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_->device(); }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t numel() const { return shape_numel(shape_); }
  int64_t element_size() const { return dtype_size(dtype_); }
  int64_t offset_bytes() const { return offset_bytes_; }  // from the start of the storage
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  bool is_contiguous() const;

  // Address of the first element. data<T>() checks that sizeof(T) matches the dtype.
  std::byte* raw_data() const { return storage_->data() + offset_bytes_; }
  template <typename T>
  T* data() const {
    PAGODA_CHECK(sizeof(T) == static_cast<size_t>(element_size()), "data<T>() size mismatch");
    return reinterpret_cast<T*>(raw_data());
  }
  // Host element access by index (no bounds check beyond the debug check on rank).
  template <typename T>
  T& at(std::initializer_list<int64_t> index) const {
    return *reinterpret_cast<T*>(raw_data() + element_offset(index) * element_size());
  }

  // Same bytes, new shape. Requires a contiguous tensor; one dim may be -1.
  Tensor view(Shape shape) const;
  // view() when contiguous, else a contiguous copy viewed as `shape`.
  Tensor reshape(const Shape& shape) const;
  // Arbitrary strides over the same storage; `offset_elements` counts from the storage start.
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset_elements) const;
  // Reorders dims: result dim i is this tensor's dim order[i].
  Tensor permute(const std::vector<int>& order) const;
  // Elements [start, start + length) of `dim`.
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  // Index `index` of `dim`, removing that dim.
  Tensor select(int64_t dim, int64_t index) const;
  // The same bytes read as `dtype`; the last dim must have stride 1 and its byte size must divide.
  Tensor reinterpret(DType dtype) const;

  // A new contiguous tensor with the same values (a copy even when already contiguous).
  Tensor clone() const;
  // This tensor when contiguous, else clone().
  Tensor contiguous() const;
  // A contiguous copy on `device`.
  Tensor to(Device device) const;
  // Copies `src` (same shape and dtype, any device) into this tensor's elements.
  void copy_from(const Tensor& src) const;
  // Sets every element to `value` converted to the dtype.
  void fill(double value) const;

 private:
  Tensor(std::shared_ptr<Storage> storage, DType dtype, Shape shape, Shape strides,
         int64_t offset_bytes);
  int64_t element_offset(std::initializer_list<int64_t> index) const;
  int64_t wrap_dim(int64_t dim) const;
  void check_in_bounds() const;

  std::shared_ptr<Storage> storage_;
  int64_t offset_bytes_ = 0;
  DType dtype_ = DType::kF32;
  Shape shape_;
  Shape strides_;
};

}  // namespace pagoda
