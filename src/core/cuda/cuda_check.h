// Checking macro for CUDA runtime calls: reports the call's text and the error string.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

#define PAGODA_CUDA_CHECK(call)                                                       \
  do {                                                                                \
    const cudaError_t pagoda_status_ = (call);                                        \
    if (pagoda_status_ != cudaSuccess) {                                              \
      ::pagoda::fail("CUDA call '{}' failed at {}:{}: {}", #call, __FILE__, __LINE__, \
                     cudaGetErrorString(pagoda_status_));                             \
    }                                                                                 \
  } while (0)
