// metrics.jsonl's resume rows, read as they are appended (see reformations.hpp).
#include "supervisor/reformations.hpp"

#include <fstream>

namespace hsring::supervisor {

const nlohmann::json& Reformations::rows() {
    std::ifstream in(metrics_, std::ios::binary);
    if (!in) return rows_;
    in.seekg(0, std::ios::end);
    const auto size = static_cast<std::uint64_t>(in.tellg());
    if (size < offset_) {  // a new metrics.jsonl (another run in this dir): start over
        offset_ = 0;
        partial_.clear();
        rows_ = nlohmann::json::array();
        total_ = 0;
    }
    if (size == offset_) return rows_;
    in.seekg(static_cast<std::streamoff>(offset_));
    std::string text(static_cast<std::size_t>(size - offset_), '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    offset_ = size;
    text = partial_ + text;
    std::size_t begin = 0;
    for (std::size_t nl; (nl = text.find('\n', begin)) != std::string::npos; begin = nl + 1) {
        const std::string_view line(text.data() + begin, nl - begin);
        if (line.find("\"resume\"") == std::string_view::npos) continue;
        const nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
        if (!row.is_object() || !row.contains("resume") || !row["resume"].is_object()) continue;
        rows_.push_back(row["resume"]);
        ++total_;
        if (rows_.size() > kKept) rows_.erase(rows_.begin());
    }
    partial_ = text.substr(begin);
    return rows_;
}

} // namespace hsring::supervisor
