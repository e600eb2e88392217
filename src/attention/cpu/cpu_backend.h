// The CPU attention backend: its declared layout and capabilities, and its plans, which run the
// CPU kernel (cpu_attention.h) over the step's host metadata. Its kernels read pages in NHD order
// through a runtime block stride, so padded and interleaved pages are safe for it.
#pragma once

#include "attention/backend.h"

namespace pagoda {

const AttentionBackend& cpu_attention_backend();

}  // namespace pagoda
