#pragma once
// Which GPUs a peer drafter sees (CUDA-free). The supervisor gives each worker one GPU in
// CUDA_VISIBLE_DEVICES (CONTRACT.md); a drafter pulling from its targets' GPUs adds theirs after
// its own, so device 0 stays its own and cudaDeviceCanAccessPeer(0, k) can be asked at start.
#include "hsring/config.hpp"

#include <string>
#include <vector>

namespace hsring::transport {

// `visible` (a CUDA_VISIBLE_DEVICES value holding the drafter's GPU) followed by the targets' GPUs
// it lacks. Empty stays empty (every GPU is visible then).
std::string widen_visible_devices(const std::string& visible, const std::vector<Place>& targets);
// The ordinals, in a process that sees `visible` (empty: every GPU, in index order), of the
// targets' GPUs other than device 0, each once.
std::vector<int> peer_ordinals(const std::string& visible, const std::vector<Place>& targets);

} // namespace hsring::transport
