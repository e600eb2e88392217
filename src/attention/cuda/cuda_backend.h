// The CUDA attention backend: the kernels of paged_attention.h over NHD pages with a bf16 cache,
// and its plans, which keep each KV group's step metadata on the device in buffers sized for the
// largest step so far, and fix the decode kernel's KV splits for the batch a CUDA graph is
// captured at.
#pragma once

#include <memory>

#include "attention/backend.h"
#include "attention/cuda/device_metadata.h"

namespace pagoda {

const AttentionBackend& cuda_attention_backend();

// A plan of the CUDA backend whose prefill CTAs take the shape `ctas` (the backend's own plans
// take kDefault), for tests that run every shape.
std::unique_ptr<AttentionPlan> make_cuda_plan(const AttentionGroup& group, cuda::PrefillCtas ctas);

}  // namespace pagoda
