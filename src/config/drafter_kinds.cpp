// The drafter types' torch-free halves (see hsring/drafter_kind.hpp): one line per type.
#include "hsring/drafter_kind.hpp"

#include "hsring/error.hpp"

#include <array>

namespace hsring {

extern const DrafterKind kDFlashKind;  // src/model/drafter/dflash/kind.cpp
extern const DrafterKind kEagle3Kind;  // src/model/drafter/eagle3/kind.cpp

namespace {
const std::array<const DrafterKind*, 2> kKinds{&kDFlashKind, &kEagle3Kind};
}

std::span<const DrafterKind* const> drafter_kinds() { return kKinds; }

const DrafterKind& drafter_kind(std::string_view type) {
    std::string known;
    for (const DrafterKind* k : kKinds) {
        if (k->type == type) return *k;
        known += (known.empty() ? "\"" : ", \"") + std::string(k->type) + "\"";
    }
    fail("[drafter] type = \"{}\" is no drafter type: use one of {}", type, known);
}

} // namespace hsring
