#include "transport/peer_imports.hpp"

#include <cstring>
#include <utility>

namespace hsring::transport {

PeerImports::PeerImports(Calls calls) : calls_(std::move(calls)) {}

PeerImports::~PeerImports() {
    for (auto& [rank, w] : writers_) close_all(w);
}

void PeerImports::close_all(Writer& w) {
    for (auto& [b, entry] : w.buffers) calls_.close(entry.second);
    w.buffers.clear();
}

const Imported& PeerImports::get(std::uint32_t writer, Owner holder, const PeerRef& ref) {
    Writer& w = writers_[writer];
    if (!(w.holder == holder)) {  // first use, or that target restarted: its old handles are dead
        close_all(w);
        w.holder = holder;
    }
    auto it = w.buffers.find(ref.buffer);
    if (it != w.buffers.end()) {
        // A holder exports each buffer once; other bytes would be another allocation.
        if (std::memcmp(it->second.first.memory, ref.memory, sizeof ref.memory) == 0 &&
            std::memcmp(it->second.first.event, ref.event, sizeof ref.event) == 0)
            return it->second.second;
        calls_.close(it->second.second);
        w.buffers.erase(it);
    }
    Imported imp = calls_.open(ref);
    return w.buffers.emplace(ref.buffer, std::make_pair(ref, imp)).first->second.second;
}

std::size_t PeerImports::sweep(const std::function<bool(Owner)>& alive) {
    std::size_t closed = 0;
    for (auto it = writers_.begin(); it != writers_.end();) {
        if (alive(it->second.holder)) {
            ++it;
            continue;
        }
        close_all(it->second);
        it = writers_.erase(it);
        ++closed;
    }
    return closed;
}

std::size_t PeerImports::imported() const {
    std::size_t n = 0;
    for (const auto& [rank, w] : writers_) n += w.buffers.size();
    return n;
}

} // namespace hsring::transport
