// The JSONL line scanner (see dataset_parse.hpp): strict JSON (RFC 8259) for the whole line,
// integers of input_ids / loss_mask parsed in place.
#include "dataset_parse.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cstdint>
#include <limits>

namespace hsring::data::detail {
namespace {

constexpr std::string_view kShape =
    R"(each line must be one JSON object {"input_ids": [token ids], "loss_mask": [0/1 per token]})";
constexpr int kMaxDepth = 256;

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// At most 24 characters of a value, for messages.
std::string excerpt(const char* begin, const char* end) {
    constexpr std::size_t kMax = 24;
    std::size_t n = static_cast<std::size_t>(end - begin);
    return n <= kMax ? std::string(begin, n) : std::string(begin, kMax) + "...";
}

// One integer array element as read: its text, sign and magnitude.
struct IntElement {
    std::size_t index;
    std::string_view text;
    bool negative;
    bool huge;         // beyond 2^64: no token id, no mask value
    std::uint64_t magnitude;
};

class Scanner {
public:
    explicit Scanner(std::string_view line)
        : begin_(line.data()), p_(line.data()), end_(line.data() + line.size()) {}

    [[noreturn]] void not_json(std::string_view what) const {
        throw BadLine{fmt::format("not JSON at column {} ({}): {}", p_ - begin_ + 1, what, kShape)};
    }

    void ws() {
        while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\r' || *p_ == '\n')) ++p_;
    }
    bool at_end() const { return p_ == end_; }
    char peek() const { return p_ < end_ ? *p_ : '\0'; }
    const char* pos() const { return p_; }
    void expect(char c, std::string_view what) {
        if (peek() != c) not_json(what);
        ++p_;
    }

    // At '"': skips the string, returns its raw text between the quotes (escapes not decoded).
    std::string_view string() {
        const char* s = ++p_;
        for (;;) {
            if (p_ >= end_) not_json("unterminated string");
            auto c = static_cast<unsigned char>(*p_);
            if (c == '"') break;
            if (c < 0x20) not_json("control character in a string");
            ++p_;
            if (c != '\\') continue;
            if (p_ >= end_) not_json("unterminated string");
            switch (*p_++) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't': break;
            case 'u':
                for (int k = 0; k < 4; ++k, ++p_)
                    if (p_ >= end_ || !std::isxdigit(static_cast<unsigned char>(*p_)))
                        not_json("bad \\u escape");
                break;
            default: --p_; not_json("bad escape in a string");
            }
        }
        return {s, static_cast<std::size_t>(p_++ - s)};
    }

    void number() {
        if (peek() == '-') ++p_;
        if (peek() == '0') {
            ++p_;
        } else if (is_digit(peek())) {
            while (is_digit(peek())) ++p_;
        } else {
            not_json("bad number");
        }
        if (peek() == '.') {
            ++p_;
            if (!is_digit(peek())) not_json("bad number");
            while (is_digit(peek())) ++p_;
        }
        if (peek() == 'e' || peek() == 'E') {
            ++p_;
            if (peek() == '+' || peek() == '-') ++p_;
            if (!is_digit(peek())) not_json("bad number");
            while (is_digit(peek())) ++p_;
        }
    }

    // Skips any JSON value.
    void value(int depth) {
        if (depth > kMaxDepth) not_json("nested too deeply");
        switch (peek()) {
        case '"': string(); return;
        case '{':
            ++p_;
            ws();
            if (peek() == '}') { ++p_; return; }
            for (;;) {
                ws();
                if (peek() != '"') not_json("expected a key in double quotes");
                string();
                ws();
                expect(':', "expected ':' after a key");
                ws();
                value(depth + 1);
                ws();
                if (peek() == ',') { ++p_; continue; }
                expect('}', "expected ',' or '}' after a value");
                return;
            }
        case '[':
            ++p_;
            ws();
            if (peek() == ']') { ++p_; return; }
            for (;;) {
                ws();
                value(depth + 1);
                ws();
                if (peek() == ',') { ++p_; continue; }
                expect(']', "expected ',' or ']' after an array element");
                return;
            }
        case 't': literal("true"); return;
        case 'f': literal("false"); return;
        case 'n': literal("null"); return;
        default:
            if (peek() == '-' || is_digit(peek())) return number();
            not_json("expected a value");
        }
    }

    // At the value of `key`: an array of integers, each handed to on_int(IntElement). Any other
    // element is reported with on_other(index, text).
    template <typename OnInt, typename OnOther>
    void int_array(std::string_view key, OnInt&& on_int, OnOther&& on_other) {
        if (peek() != '[') {
            const char* s = p_;
            value(1);
            throw BadLine{fmt::format(R"("{}" is {}, not an array of integers)", key, excerpt(s, p_))};
        }
        ++p_;
        ws();
        if (peek() == ']') { ++p_; return; }
        for (std::size_t i = 0;; ++i) {
            ws();
            const char* s = p_;
            if (peek() == '-' || is_digit(peek())) {
                IntElement e{i, {}, peek() == '-', false, 0};
                if (e.negative) ++p_;
                if (peek() == '0') {
                    ++p_;
                } else if (is_digit(peek())) {
                    constexpr std::uint64_t kLimit = (std::numeric_limits<std::uint64_t>::max() - 9) / 10;
                    while (is_digit(peek())) {
                        if (e.magnitude > kLimit) e.huge = true;
                        else e.magnitude = e.magnitude * 10 + static_cast<std::uint64_t>(*p_ - '0');
                        ++p_;
                    }
                } else {
                    not_json("bad number");
                }
                if (peek() == '.' || peek() == 'e' || peek() == 'E') {
                    p_ = s;
                    number();
                    on_other(i, excerpt(s, p_));
                } else {
                    if (is_digit(peek())) not_json("leading zero in a number");
                    e.text = {s, static_cast<std::size_t>(p_ - s)};
                    if (e.magnitude == 0 && !e.huge) e.negative = false;  // -0 is 0
                    on_int(e);
                }
            } else {
                value(1);
                on_other(i, excerpt(s, p_));
            }
            ws();
            if (peek() == ',') { ++p_; continue; }
            expect(']', "expected ',' or ']' after an array element");
            return;
        }
    }

private:
    void literal(std::string_view word) {
        if (static_cast<std::size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word)
            not_json("expected a value");
        p_ += word.size();
    }

    const char* begin_;
    const char* p_;
    const char* end_;
};

} // namespace

bool parse_sample_line(std::string_view line, std::int64_t vocab_size,
                       std::vector<std::int32_t>& tokens, std::vector<std::uint8_t>& mask) {
    constexpr std::uint64_t kMaxToken = std::numeric_limits<std::int32_t>::max();
    const std::size_t tokens0 = tokens.size();
    const std::size_t mask0 = mask.size();
    Scanner in(line);
    in.ws();
    if (in.peek() != '{') {
        in.value(0);  // not JSON at all, or JSON of the wrong kind?
        in.ws();
        if (!in.at_end()) in.not_json("text after the value");
        throw BadLine{fmt::format("not a JSON object: {}", kShape)};
    }

    auto token = [&](const IntElement& e) {
        if (e.negative)
            throw BadLine{fmt::format("input_ids[{}] is {}: token ids are never negative", e.index, e.text)};
        if (vocab_size > 0 && (e.huge || e.magnitude >= static_cast<std::uint64_t>(vocab_size)))
            throw BadLine{fmt::format("token {} (input_ids[{}]) is outside the target's vocabulary 0..{}: "
                                      "was the data tokenized for another model?",
                                      e.text, e.index, vocab_size - 1)};
        if (e.huge || e.magnitude > kMaxToken)
            throw BadLine{fmt::format("input_ids[{}] is {}: too large for a token id", e.index, e.text)};
        tokens.push_back(static_cast<std::int32_t>(e.magnitude));
    };
    auto not_token = [](std::size_t i, const std::string& text) {
        throw BadLine{fmt::format("input_ids[{}] is {}, not a token id (an integer >= 0)", i, text)};
    };
    auto mask_value = [&](const IntElement& e) {
        if (e.negative || e.huge || e.magnitude > 1)
            throw BadLine{fmt::format("loss_mask[{}] is {}: loss_mask values are 0 (not trained) or 1 (trained)",
                                      e.index, e.text)};
        mask.push_back(static_cast<std::uint8_t>(e.magnitude));
    };
    auto not_mask = [](std::size_t i, const std::string& text) {
        throw BadLine{fmt::format("loss_mask[{}] is {}: loss_mask values are 0 (not trained) or 1 (trained)", i, text)};
    };

    bool have_ids = false;
    bool have_mask = false;
    in.expect('{', "expected an object");
    in.ws();
    if (in.peek() == '}') {
        in.expect('}', "expected '}'");
    } else {
        for (;;) {
            in.ws();
            if (in.peek() != '"') in.not_json("expected a key in double quotes");
            std::string_view key = in.string();
            in.ws();
            in.expect(':', "expected ':' after a key");
            in.ws();
            if (key == "input_ids") {
                if (have_ids) throw BadLine{R"("input_ids" appears twice)"};
                have_ids = true;
                in.int_array(key, token, not_token);
            } else if (key == "loss_mask") {
                if (have_mask) throw BadLine{R"("loss_mask" appears twice)"};
                have_mask = true;
                in.int_array(key, mask_value, not_mask);
            } else {
                in.value(1);
            }
            in.ws();
            if (in.peek() == ',') {
                in.expect(',', "expected ','");
                continue;
            }
            in.expect('}', "expected ',' or '}' after a value");
            break;
        }
    }
    in.ws();
    if (!in.at_end()) in.not_json("text after the object; one sample per line");

    if (!have_ids)
        throw BadLine{R"(no "input_ids": each line needs the token ids of one sample )"
                      "(chat data must be tokenized first: bin/prepare-data)"};
    const std::size_t n = tokens.size() - tokens0;
    if (n == 0) throw BadLine{R"("input_ids" is empty: a sample needs at least one token)"};
    if (!have_mask) {
        mask.insert(mask.end(), n, std::uint8_t{1});
    } else if (const std::size_t m = mask.size() - mask0; m != n) {
        throw BadLine{fmt::format(R"("loss_mask" has {} values but "input_ids" has {} tokens: )"
                                  "they must match (one 0/1 per token)",
                                  m, n)};
    }
    return have_mask;
}

} // namespace hsring::data::detail
