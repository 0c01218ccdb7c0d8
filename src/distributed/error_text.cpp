// Exception messages on one line (see error_text.hpp).
#include "distributed/error_text.hpp"

#include <c10/util/Exception.h>

namespace hsring::distributed {

std::string error_text(const std::exception& e) {
    const auto* c10 = dynamic_cast<const c10::Error*>(&e);
    const std::string s = c10 ? c10->what_without_backtrace() : e.what();
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '\n') {
            out += s[i];
            continue;
        }
        while (i + 1 < s.size() && (s[i + 1] == ' ' || s[i + 1] == '\n')) ++i;
        if (!out.empty()) out += "; ";
    }
    return out;
}

} // namespace hsring::distributed
