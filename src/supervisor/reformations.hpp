#pragma once
// The drafter gang's (re-)formations, as metrics.jsonl's resume rows record them (the master's
// machine writes metrics.jsonl): every gang start (step 0: the first, else from the checkpoint of
// that step), with the world size then and
// the checkpoint's (a resize between runs) and the seconds since that checkpoint was written.
// `hsring status` shows them. Read incrementally: each look reads only what was appended since the
// last (a long run's metrics.jsonl holds millions of rows).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>

namespace hsring::supervisor {

class Reformations {
public:
    explicit Reformations(std::filesystem::path metrics) : metrics_(std::move(metrics)) {}
    // The last kKept resume rows ({step, incarnation, world, world_before?, since_checkpoint_s?}),
    // oldest first; and how many there were in all.
    const nlohmann::json& rows();
    std::uint64_t total() const { return total_; }

    static constexpr std::size_t kKept = 20;

private:
    std::filesystem::path metrics_;
    std::uint64_t offset_ = 0;
    std::string partial_;  // a last line not yet ended by '\n'
    nlohmann::json rows_ = nlohmann::json::array();
    std::uint64_t total_ = 0;
};

} // namespace hsring::supervisor
