#pragma once
// The drafter types hsring trains, one line each in registry.cpp: [drafter] type's name, the
// architecture its export's config.json names, how to make a fresh one and how to load an export.
// Adding a type: its room src/model/drafter/<type>/ (a TrainableDrafter, and its torch-free half
// kind.cpp: a DrafterKind with its captured layers, so the ring is sized without torch), one line
// here in registry.cpp, one in src/config/drafter_kinds.cpp, and its planner part (a DrafterPlan,
// src/plan/drafter_plan.hpp) with one line in src/plan/drafter_plans.cpp.
#include "model/drafter/interface/trainable_drafter.hpp"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace hsring::model {

// A fresh drafter of spec.type; an unknown type is an error listing the known ones.
std::unique_ptr<TrainableDrafter> make_drafter(const DrafterSpec& spec, std::uint64_t seed, at::Device device);
// An exported (or checkpointed) drafter directory of any type, told by its config.json's architectures.
// Throws naming the tensor when a weight or buffer is not finite (an export never trains, resumes or
// decodes with NaN).
std::unique_ptr<TrainableDrafter> load_drafter(const std::filesystem::path& dir, at::Device device);
// The type of the drafter in `dir` ("dflash", "eagle3"), or an error naming what it found.
std::string drafter_type_of(const std::filesystem::path& dir);

} // namespace hsring::model
