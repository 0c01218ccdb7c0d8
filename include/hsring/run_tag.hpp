#pragma once
// Whose a shared-memory object is (invariant 8, docs/architecture.md). The ring, the ledger and the status
// board carry the tag of the run that created them in their headers; every attach compares it
// with the attaching run's and refuses another run's object with a message that says whose it
// is and what to do. Left-over state of another run dir, another user, other data or another
// layout is never trained on.
#include <cstdint>
#include <string>
#include <string_view>

namespace hsring {

struct RunTag {
    std::string run_dir;                 // absolute, symbolic links resolved
    std::uint64_t layout_hash = 0;       // RingGeometry::layout_hash() of the run's config
    std::uint64_t data_fingerprint = 0;  // the data set's (data::Dataset::fingerprint)
    std::uint32_t owner_uid = 0;
    std::uint32_t node_rank = 0, nnodes = 1;

    // The tag of a run in `run_dir` of this process's user (geteuid()).
    static RunTag of(const std::string& run_dir, std::uint64_t layout_hash, std::uint64_t data_fingerprint,
                     std::uint32_t node_rank, std::uint32_t nnodes);
    // The canonical form of a run dir as tags hold it (absolute, links resolved).
    static std::string canonical_dir(const std::string& run_dir);

    // What differs between `found` (in shared memory) and this tag (the attaching run's), as
    // "run dir /a (this run: /b), data fingerprint ... (this run: ...)"; "" when they are the same
    // run. Fields this tag does not know (empty run dir, zero layout or fingerprint) are skipped.
    std::string differences(const RunTag& found) const;
    // "run dir /a of user alice (uid 1000), machine 0 of 1, data 0123456789abcdef, layout ..."
    std::string str() const;
};

// Throws hsring::Error: "<what> '<name>' (<path>) belongs to another run: <differences>. ..."
// with what to do (hsring ring rm NAME, hsring run --fresh, another [run] name).
[[noreturn]] void refuse_foreign(std::string_view what, std::string_view name, std::string_view path,
                                 const RunTag& found, const RunTag& expected, std::string_view ring_name);

} // namespace hsring
