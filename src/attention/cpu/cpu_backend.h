// The CPU attention backend's declared layout and capabilities. Its kernels read pages in NHD
// order through a runtime block stride, so padded and interleaved pages are safe for it.
#pragma once

#include "attention/backend.h"

namespace pagoda {

const AttentionBackend& cpu_attention_backend();

}  // namespace pagoda
