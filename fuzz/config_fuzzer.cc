// config.json for every architecture: parsing, then planning a small KV cache for what parsed, so
// that the arithmetic on the config's numbers is exercised too.
#include <nlohmann/json.hpp>

#include "core/device.h"
#include "core/files.h"
#include "engine/cache_config.h"
#include "fuzz/fuzz_util.h"
#include "model/model_config.h"

using namespace pagoda;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(fuzz::as_text(data, size));
  fuzz::expect_clean_errors([&] {
    const ModelConfig config =
        parse_model_config(parse_json_text(text, "config.json"), "config.json");
    const CacheConfig cache{.block_size = 16, .max_model_len = 256, .num_blocks = 8};
    (void)plan_cache(config, nullptr, resolve_cache_config(cache, config, Device::cpu()));
  });
  return 0;
}
