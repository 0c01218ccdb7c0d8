// The packer's plan (hsring/slot_plan.hpp): slots fixed before the run from the data, order and
// sizes alone; steps and ranks follow from the slot index.
#include "hsring/error.hpp"
#include "hsring/slot_plan.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <string>

using namespace hsring;

namespace {

// Samples of the given lengths (every token trained).
data::Dataset data_of(const std::vector<int>& lengths) {
    std::string text;
    for (int n : lengths) {
        std::string ids;
        for (int t = 0; t < n; ++t) ids += fmt::format("{}{}", t ? "," : "", t + 1);
        text += "{\"input_ids\": [" + ids + "]}\n";
    }
    return data::Dataset::parse(text, "test.jsonl", {});
}

} // namespace

TEST_CASE("a plan slot ends before the sample that would overflow its tokens or its sample count") {
    const auto d = data_of({4, 4, 4, 7, 1, 1, 1, 1});
    // No shuffle: positions follow the file. Slots of at most 8 tokens and 2 samples:
    // [4 4] [4] [7 1] [1 1] [1]
    const auto first = plan_slots(d, 1, false, 1, 0, 1, 8, 2);
    CHECK(first == std::vector<std::uint64_t>{0, 2, 3, 5, 7, 8});
}

TEST_CASE("each epoch starts a slot, and the plan is a function of data, seed and sizes only") {
    const auto d = data_of({3, 3, 3, 3, 3, 3, 3});
    const auto a = plan_slots(d, 7, true, 1, 0, 2, 9, 100);
    CHECK(a.front() == 0);
    CHECK(a.back() == 14);
    CHECK(std::find(a.begin(), a.end(), 7u) != a.end());  // epoch 1 starts at position 7
    CHECK(plan_slots(d, 7, true, 1, 0, 2, 9, 100) == a);
    // A machine's share is planned over its own positions.
    const auto share = plan_slots(d, 7, true, 2, 1, 1, 9, 100);
    CHECK(share.back() == 3);  // machine 1 of 2 has 3 of the 7 samples
}

TEST_CASE("a sample longer than a slot is refused with the file named") {
    const auto d = data_of({2, 12});
    CHECK_THROWS_WITH_AS(plan_slots(d, 1, false, 1, 0, 1, 8, 4), doctest::Contains("test.jsonl"), Error);
}

TEST_CASE("plan steps: each rank's share of each step, in order") {
    const PlanSteps p{11, 2, 2};  // 11 plan slots, 2 per rank, 2 ranks: 4 per step
    CHECK(p.steps() == 3);
    CHECK(p.step_of(0) == 1);
    CHECK(p.step_of(3) == 1);
    CHECK(p.step_of(4) == 2);
    CHECK(p.rank_of(2) == 1);
    CHECK(p.rank_of(5) == 0);
    CHECK(p.share(1, 0) == std::pair<std::uint64_t, std::uint64_t>{0, 2});
    CHECK(p.share(1, 1) == std::pair<std::uint64_t, std::uint64_t>{2, 4});
    CHECK(p.share(3, 0) == std::pair<std::uint64_t, std::uint64_t>{8, 10});
    CHECK(p.share(3, 1) == std::pair<std::uint64_t, std::uint64_t>{10, 11});  // the plan's last step is short
    CHECK(p.share(4, 0).first == p.share(4, 0).second);
    // A rank walks its own slots only: 0 1 4 5 8 9 for rank 0; 2 3 6 7 10 for rank 1.
    std::vector<std::uint64_t> walk0, walk1;
    for (std::uint64_t j = 0; j < p.slots; j = p.next_of_rank(j, 0)) walk0.push_back(j);
    for (std::uint64_t j = 2; j < p.slots; j = p.next_of_rank(j, 1)) walk1.push_back(j);
    CHECK(walk0 == std::vector<std::uint64_t>{0, 1, 4, 5, 8, 9});
    CHECK(walk1 == std::vector<std::uint64_t>{2, 3, 6, 7, 10});
}

TEST_CASE("plan steps rebased where a gang resumes: the same grid with the same settings, the rest planned again with others") {
    const PlanSteps p{11, 2, 2};
    // Resumed after step 2 with the settings it was planned with: the grid of an unkilled run.
    PlanSteps same = p;
    same.base_step = 2;
    same.base_slot = 8;
    CHECK(same.steps() == p.steps());
    for (std::uint64_t j = 8; j < 11; ++j) {
        CHECK(same.step_of(j) == p.step_of(j));
        CHECK(same.rank_of(j) == p.rank_of(j));
    }
    for (std::uint32_t r = 0; r < 2; ++r) CHECK(same.share(3, r) == p.share(3, r));
    CHECK(same.share(2, 0).first == same.share(2, 0).second);  // steps up to the base are trained
    // One rank of 3 slots a step after step 2 (another tokens_per_step and drafter count): slots
    // 8..10 in step 3, nothing skipped.
    const PlanSteps other{11, 3, 1, 2, 8};
    CHECK(other.steps() == 3);
    CHECK(other.share(3, 0) == std::pair<std::uint64_t, std::uint64_t>{8, 11});
    CHECK(other.step_of(10) == 3);
    // More epochs after a run whose last step was short (slot 10 alone in step 3): the new
    // epoch's first slot (11) starts step 4 instead of being skipped.
    const PlanSteps more{19, 2, 2, 3, 11};
    CHECK(more.steps() == 5);
    CHECK(more.share(4, 0) == std::pair<std::uint64_t, std::uint64_t>{11, 13});
    CHECK(more.share(4, 1) == std::pair<std::uint64_t, std::uint64_t>{13, 15});
    CHECK(more.share(5, 1) == std::pair<std::uint64_t, std::uint64_t>{17, 19});
    std::vector<std::uint64_t> walk1;
    for (std::uint64_t j = 13; j < more.slots; j = more.next_of_rank(j, 1)) walk1.push_back(j);
    CHECK(walk1 == std::vector<std::uint64_t>{13, 14, 17, 18});
}
