#pragma once
// What the data set reader does with a line it cannot use ([data] on_bad_line). Its own header so
// the reader (src/data) needs nothing of the config.
namespace hsring {

enum class OnBadLine { Skip, Fail };

} // namespace hsring
