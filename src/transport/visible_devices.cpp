#include "transport/visible_devices.hpp"

#include <algorithm>
#include <sstream>

namespace hsring::transport {

namespace {
std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, ',');)
        if (!item.empty()) out.push_back(item);
    return out;
}
} // namespace

std::string widen_visible_devices(const std::string& visible, const std::vector<Place>& targets) {
    std::vector<std::string> ids = split(visible);
    if (ids.empty()) return visible;
    for (const Place& t : targets) {
        if (t.is_cpu()) continue;
        const std::string id = std::to_string(t.gpu);
        if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    std::string out;
    for (const auto& id : ids) out += (out.empty() ? "" : ",") + id;
    return out;
}

std::vector<int> peer_ordinals(const std::string& visible, const std::vector<Place>& targets) {
    const std::vector<std::string> ids = split(visible);
    std::vector<int> out;
    for (const Place& t : targets) {
        if (t.is_cpu()) continue;
        int ordinal = t.gpu;  // every GPU visible: ordinal = index
        if (!ids.empty()) {
            const auto it = std::find(ids.begin(), ids.end(), std::to_string(t.gpu));
            if (it == ids.end()) continue;  // not visible here: its copies cannot be checked at start
            ordinal = static_cast<int>(it - ids.begin());
        }
        if (ordinal != 0 && std::find(out.begin(), out.end(), ordinal) == out.end()) out.push_back(ordinal);
    }
    return out;
}

} // namespace hsring::transport
