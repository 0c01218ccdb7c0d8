#pragma once
// The held-out evaluation board ([data] eval_path): which held-out samples of this machine's share
// have been produced and evaluated in the current evaluation round. A small named shared-memory
// region beside the ring (`<ring>-eval`), created, attached and removed with it. The held-out
// samples travel through the same ring as training samples (in slots marked as evaluation slots)
// but never enter the sample ledger: they are not training samples.
//
//   header  magic, version, samples, fingerprint, round (the round drafters asked for, 0 = none),
//           rounds (the last round id handed out: ids never repeat, across incarnations too)
//   entries one atomic u64 per held-out sample: [round : 24 | state : 2 | ticket : 38]
//
//   (any older round, or IDLE in this round) --take(round, ticket)--> IN_SLOT(round, ticket)
//   IN_SLOT(round, ticket) --done(round, ticket)--> DONE(round)        (a drafter evaluated it)
//   IN_SLOT(round, ticket) --repend_ticket(ticket)--> IDLE(round)       (the slot's writer died)
//
// A round is requested by the drafters (every machine at the same optimizer step); targets fill
// evaluation slots first while a round has samples left; the gang sums what its ranks evaluated
// and the round is complete when every held-out sample of every machine is counted once. A
// drafter that dies mid-round loses that round's sums: the restarted gang asks for a new round
// (a new id), so samples DONE in the old round are taken again. Every transition is one CAS.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace hsring {

namespace shm {
class Region;
}

class EvalBoard {
public:
    static EvalBoard create(std::string_view name, std::uint64_t samples, std::uint64_t fingerprint);
    // Attaches; another data set (samples, fingerprint) is refused with a message saying what to do.
    static EvalBoard attach(std::string_view name, std::uint64_t samples, std::uint64_t fingerprint);
    // Attaches whatever held-out set the board was made for (drafters, which do not read it).
    static EvalBoard attach(std::string_view name);
    static bool exists(std::string_view name);
    static bool remove(std::string_view name);
    static std::string name_for_ring(std::string_view ring_name);

    EvalBoard(EvalBoard&&) noexcept;
    EvalBoard& operator=(EvalBoard&&) noexcept;
    ~EvalBoard();

    std::uint64_t samples() const;

    // --- drafters ---
    // Opens a new round (a fresh id, larger than any before) and returns it.
    std::uint32_t open_round();
    // No round is wanted any more (the current one is complete).
    void close_round();
    // IN_SLOT(round, ticket) -> DONE(round); false if the entry moved on (re-issued).
    bool done(std::uint64_t index, std::uint32_t round, std::uint64_t ticket);

    // --- targets ---
    // The round drafters want now (0 = none).
    std::uint32_t round() const;
    // Takes the next sample not yet taken in `round` for the slot with `ticket`.
    std::optional<std::uint64_t> take(std::uint32_t round, std::uint64_t ticket);
    // IN_SLOT(round, ticket) -> IDLE(round) for a sample taken but not written (it did not fit).
    void untake(std::uint64_t index, std::uint32_t round, std::uint64_t ticket);

    // --- reclaim (the ring's before_free hook, beside the ledger's) ---
    std::uint64_t repend_ticket(std::uint64_t ticket);

private:
    EvalBoard() = default;
    std::unique_ptr<shm::Region> region_;
};

} // namespace hsring
