// The CUDA attention backend: the kernels of paged_attention.h over NHD pages with a bf16 cache,
// and its plans, which keep each KV group's step metadata on the device in buffers sized for the
// largest step so far, and fix the decode kernel's KV splits for the batch a CUDA graph is
// captured at.
#pragma once

#include "attention/backend.h"

namespace pagoda {

const AttentionBackend& cuda_attention_backend();

}  // namespace pagoda
