#pragma once
// The message of a c10d/torch exception for logs and the supervisor: c10::Error::what() appends
// the C++ backtrace (a page of frames; the supervisor, which repeats a worker's last stderr
// line, would repeat its last frame), and c10 puts context on lines of their own.
#include <exception>
#include <string>

namespace hsring::distributed {

// what_without_backtrace() for a c10::Error, what() otherwise; on one line ("; " between lines).
std::string error_text(const std::exception& e);

} // namespace hsring::distributed
