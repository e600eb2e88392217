// A build without CUDA (or without NCCL): NCCL communicators fail with an error saying so.
#include "core/error.h"
#include "parallel/nccl_communicator.h"

namespace pagoda {

bool nccl_available_in_build() {
  return false;
}

NcclId make_nccl_id() {
  fail("this pagoda binary was built without NCCL");
}

std::unique_ptr<Communicator> make_nccl_communicator(const NcclId&, int, int, int) {
  fail("this pagoda binary was built without NCCL");
}

std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::vector<int>&) {
  fail("this pagoda binary was built without NCCL");
}

void run_nccl_ranks(const std::vector<int>&, const std::function<void(Communicator&)>&) {
  fail("this pagoda binary was built without NCCL");
}

}  // namespace pagoda
