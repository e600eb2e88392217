// Elementwise CUDA ops (see ops.h): in-place add, scale and softcap, gated activations, dtype
// conversion. Everything is computed in f32 and rounded to the output dtype once. Kernels move 8
// elements per access (16 bytes of bf16) when every pointer and row stride involved is 16-byte
// aligned, and one element at a time otherwise.
#include <algorithm>
#include <cstdint>

#include "core/cuda/context.h"
#include "core/cuda/launch.h"
#include "ops/cuda/elementwise_common.cuh"
#include "ops/cuda/ops.h"

namespace pagoda::cuda {
namespace {

using namespace elementwise;

// The flat elementwise ops: dst[i] = op(a[i], b[i]) over n contiguous elements, where b is read
// only by binary ops. dst may alias a or b.
struct Add {
  static constexpr bool kBinary = true;
  __device__ float operator()(float a, float b) const { return a + b; }
};

struct ScaleBy {
  static constexpr bool kBinary = false;
  float factor;
  __device__ float operator()(float a, float) const { return a * factor; }
};

struct Softcap {
  static constexpr bool kBinary = false;
  float cap;
  __device__ float operator()(float a, float) const { return cap * tanhf(a / cap); }
};

struct Identity {
  static constexpr bool kBinary = false;
  __device__ float operator()(float a, float) const { return a; }
};

template <typename A, typename D, bool kVector, typename Op>
__global__ void flat_kernel(const A* a, const D* b, D* dst, int64_t n, Op op) {
  start_after_prior_kernels();
  for_each_pack<kVector>(n, [&](int64_t i, auto width) {
    constexpr int kWidth = decltype(width)::value;
    float va[kWidth];
    float vb[kWidth] = {};
    load(a + i, va);
    if constexpr (Op::kBinary) load(b + i, vb);
#pragma unroll
    for (int j = 0; j < kWidth; ++j)
      va[j] = op(va[j], vb[j]);
    store(dst + i, va);
  });
}

template <typename T>
struct GatedArgs {
  const T* gate;  // [rows, cols], row stride gate_stride
  const T* up;    // [rows, cols], row stride up_stride
  T* out;         // [rows, cols], row stride out_stride; may alias gate or up
  int64_t gate_stride;
  int64_t up_stride;
  int64_t out_stride;
  int64_t rows;
  int64_t cols;
};

// Rows along grid y, packs of columns along grid x, both grid-stride.
template <typename T, bool kVector, Activation kActivation>
__global__ void gated_activation_kernel(GatedArgs<T> args) {
  constexpr int kWidth = kVector ? kPack : 1;
  start_after_prior_kernels();
  const int64_t packs = args.cols / kWidth;
  for (int64_t r = blockIdx.y; r < args.rows; r += gridDim.y) {
    for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < packs;
         p += int64_t{gridDim.x} * blockDim.x) {
      float g[kWidth];
      float u[kWidth];
      load(args.gate + r * args.gate_stride + p * kWidth, g);
      load(args.up + r * args.up_stride + p * kWidth, u);
#pragma unroll
      for (int j = 0; j < kWidth; ++j)
        g[j] = activate<kActivation>(g[j]) * u[j];
      store(args.out + r * args.out_stride + p * kWidth, g);
    }
  }
}

void check_flat(const Tensor& t, const char* op) {
  PAGODA_CHECK(t.is_contiguous(), "CUDA {} needs a contiguous tensor; got strides {}", op,
               t.strides());
}

// Launches flat_kernel: dst (D) = op(a (A), b (D, or undefined for unary ops)).
template <typename A, typename D, typename Op>
void launch_flat(const Tensor& a, const Tensor& b, const Tensor& dst, Op op, cudaStream_t s) {
  const int64_t n = dst.numel();
  const bool vector = aligned16(a) && aligned16(dst) && (!b.defined() || aligned16(b));
  dispatch_vector(vector, [&](auto vec) {
    launch(flat_kernel<A, D, decltype(vec)::value, Op>, flat_blocks(n / kPack), kThreads, 0, s,
           data_of<const A>(a), b.defined() ? data_of<const D>(b) : nullptr, data_of<D>(dst), n,
           op);
  });
}

template <typename Op>
void map_in_place(const Tensor& x, const char* name, Op op) {
  check_flat(x, name);
  const cudaStream_t s = device_stream(x);
  if (x.numel() == 0) return;
  dispatch_activation(x.dtype(), name, [&](auto act) {
    using T = typename decltype(act)::type;
    launch_flat<T, T>(x, Tensor(), x, op, s);
  });
}

}  // namespace

void add_in_place(const Tensor& x, const Tensor& y) {
  PAGODA_CHECK(x.shape() == y.shape(), "add_in_place shapes {} and {}", x.shape(), y.shape());
  check_flat(x, "add_in_place");
  check_flat(y, "add_in_place");
  check_same_dtype("add_in_place", x, y);
  const cudaStream_t s = device_stream(x, y);
  if (x.numel() == 0) return;
  dispatch_activation(x.dtype(), "add_in_place", [&](auto act) {
    using T = typename decltype(act)::type;
    launch_flat<T, T>(x, y, x, Add{}, s);
  });
}

void scale_in_place(const Tensor& x, float factor) {
  map_in_place(x, "scale_in_place", ScaleBy{factor});
}

void softcap_in_place(const Tensor& x, float cap) {
  PAGODA_CHECK(cap > 0.0f, "softcap {} must be positive", cap);
  map_in_place(x, "softcap_in_place", Softcap{cap});
}

void gated_activation(Activation activation, const Tensor& gate, const Tensor& up,
                      const Tensor& out) {
  check_rows(gate, "gated activation gate");
  check_rows(up, "gated activation up");
  check_rows(out, "gated activation output");
  PAGODA_CHECK(gate.shape() == up.shape() && gate.shape() == out.shape(),
               "gated activation shapes {}, {} -> {}", gate.shape(), up.shape(), out.shape());
  check_same_dtype("gated_activation", gate, up);
  check_same_dtype("gated_activation", gate, out);
  const cudaStream_t s = device_stream(out, gate, up);
  const int64_t rows = gate.size(0);
  const int64_t cols = gate.size(1);
  if (rows == 0 || cols == 0) return;
  const DType dtype = gate.dtype();
  const bool vector =
      cols % kPack == 0 && vectorizable(gate) && vectorizable(up) && vectorizable(out);
  const int64_t packs = vector ? cols / kPack : cols;
  const int threads = std::min(kThreads, round_up_32(packs));
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((packs + threads - 1) / threads, 1024)),
                  static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
  dispatch_activation(dtype, "gated_activation", [&](auto act) {
    using T = typename decltype(act)::type;
    const GatedArgs<T> args{data_of<const T>(gate),
                            data_of<const T>(up),
                            data_of<T>(out),
                            gate.stride(0),
                            up.stride(0),
                            out.stride(0),
                            rows,
                            cols};
    dispatch_vector(vector, [&](auto vec) {
      constexpr bool kVector = decltype(vec)::value;
      const auto kernel = activation == Activation::kSilu
                              ? gated_activation_kernel<T, kVector, Activation::kSilu>
                              : gated_activation_kernel<T, kVector, Activation::kGeluTanh>;
      launch(kernel, grid, threads, 0, s, args);
    });
  });
}

void convert(const Tensor& src, const Tensor& dst) {
  PAGODA_CHECK(src.shape() == dst.shape(), "convert shapes {} -> {}", src.shape(), dst.shape());
  check_flat(src, "convert");
  check_flat(dst, "convert");
  const cudaStream_t s = device_stream(dst, src);
  if (src.numel() == 0) return;
  dispatch_float(src.dtype(), "convert", [&](auto from) {
    dispatch_float(dst.dtype(), "convert", [&](auto to) {
      launch_flat<typename decltype(from)::type, typename decltype(to)::type>(src, Tensor(), dst,
                                                                              Identity{}, s);
    });
  });
}

}  // namespace pagoda::cuda
