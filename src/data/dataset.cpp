// Loading a pre-tokenized JSONL data set into flat arrays (see hsring/dataset.hpp).
#include "hsring/dataset.hpp"

#include "dataset_parse.hpp"
#include "splitmix.hpp"

#include "hsring/error.hpp"
#include "hsring/log.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

namespace hsring::data {
namespace {

constexpr std::uint64_t kMaxLoggedSkips = 20;
constexpr std::uint64_t kFingerprintVersion = 1;  // bump when the hashed fields change

// A whole file mapped read-only; the mapping goes with the object.
class MappedFile {
public:
    explicit MappedFile(const std::filesystem::path& file) {
        int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            fail("cannot open data file {}: {} (check [data] path; it is relative to the config file)",
                 file.string(), errno_text(errno));
        struct stat st {};
        if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            ::close(fd);
            fail("data file {} is not a regular file: [data] path must name a JSONL file", file.string());
        }
        size_ = static_cast<std::size_t>(st.st_size);
        if (size_ > 0) {
            void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
            int err = errno;
            ::close(fd);
            if (p == MAP_FAILED) fail("cannot map data file {}: {}", file.string(), errno_text(err));
            ::madvise(p, size_, MADV_SEQUENTIAL);
            data_ = static_cast<const char*>(p);
        } else {
            ::close(fd);
        }
    }
    ~MappedFile() {
        if (data_) ::munmap(const_cast<char*>(data_), size_);
    }
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    std::string_view text() const { return {data_ ? data_ : "", size_}; }

private:
    const char* data_ = nullptr;
    std::size_t size_ = 0;
};

// The sample at [start, end) of the arrays -> its response template (hsring/dataset.hpp).
void to_response_template(std::vector<std::int32_t>& tokens, std::vector<std::uint8_t>& mask, std::size_t start,
                          bool had_mask, std::uint64_t response_tokens) {
    if (!had_mask) {  // one prompt; one answer after it
        std::fill(mask.begin() + static_cast<std::ptrdiff_t>(start), mask.end(), std::uint8_t{0});
        tokens.insert(tokens.end(), response_tokens, 0);
        mask.insert(mask.end(), response_tokens, std::uint8_t{1});
        return;
    }
    if (mask[start] == 1)
        throw detail::BadLine{"with [data] responses = \"target\" the target answers each loss-masked turn from the "
                              "tokens before it, but this sample's first token is loss-masked: it has no prompt (give "
                              "the prompt loss_mask 0, or leave loss_mask out to make the whole line the prompt)"};
    std::vector<std::int32_t> t;
    std::vector<std::uint8_t> m;
    for (std::size_t i = start; i < tokens.size(); ++i) {
        if (mask[i] == 0) {
            t.push_back(tokens[i]);
            m.push_back(0);
        } else if (mask[i - 1] == 0) {  // an answer starts: its room
            t.insert(t.end(), response_tokens, 0);
            m.insert(m.end(), response_tokens, std::uint8_t{1});
        }
    }
    tokens.resize(start);
    mask.resize(start);
    tokens.insert(tokens.end(), t.begin(), t.end());
    mask.insert(mask.end(), m.begin(), m.end());
}

bool is_blank(std::string_view line) { return line.find_first_not_of(" \t\r") == std::string_view::npos; }

} // namespace

Dataset Dataset::load(const std::filesystem::path& file, const DatasetOptions& options) {
    MappedFile mapped(file);
    return parse(mapped.text(), file.string(), options);
}

Dataset Dataset::parse(std::string_view text, std::string_view source, const DatasetOptions& options) {
    Dataset d;
    d.source_ = source;
    LoadReport& r = d.report_;
    if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // a UTF-8 byte order mark
    // ~6 bytes of JSON per token with a mask: a first guess that avoids most regrowth.
    d.tokens_.reserve(text.size() / 6);
    d.mask_.reserve(text.size() / 6);

    const char* p = text.data();
    const char* const end = p + text.size();
    while (p < end) {
        const auto* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p)));
        const char* line_end = nl ? nl : end;
        std::string_view line(p, static_cast<std::size_t>(line_end - p));
        p = nl ? nl + 1 : end;
        const std::uint64_t line_no = ++r.lines;
        if (is_blank(line)) continue;

        const std::size_t start = d.tokens_.size();
        try {
            const bool had_mask = detail::parse_sample_line(line, options.vocab_size, d.tokens_, d.mask_);
            if (options.reserved_token >= 0) {
                const auto first = d.tokens_.begin() + static_cast<std::ptrdiff_t>(start);
                const auto it = std::find(first, d.tokens_.end(), static_cast<std::int32_t>(options.reserved_token));
                if (it != d.tokens_.end())
                    throw detail::BadLine{fmt::format(
                        "input_ids[{}] is {}, the drafter's mask token ([drafter] mask_token_id), which marks the "
                        "slots a DFlash block drafts: no sample may hold it (tokenize without it, or set another "
                        "mask_token_id)", it - first, options.reserved_token)};
            }
            if (options.response_tokens > 0) to_response_template(d.tokens_, d.mask_, start, had_mask, options.response_tokens);
        } catch (const detail::BadLine& bad) {
            d.tokens_.resize(start);
            d.mask_.resize(start);
            std::string where = fmt::format("{}:{}: {}", source, line_no, bad.reason);
            if (options.on_bad_line == OnBadLine::Fail)
                fail("{} (to skip bad lines instead: [data] on_bad_line = \"skip\")", where);
            ++r.skipped;
            if (r.skipped <= kMaxLoggedSkips)
                log::warn("{} (line skipped{})", where,
                          r.skipped == kMaxLoggedSkips ? "; further bad lines are counted, not logged" : "");
            if (r.skip_reasons.size() < LoadReport::kMaxReasons) r.skip_reasons.push_back(std::move(where));
            continue;
        }

        std::size_t n = d.tokens_.size() - start;
        if (options.max_seq_len > 0 && n > options.max_seq_len) {
            if (r.truncated++ == 0)
                log::warn("{}:{}: sample of {} tokens truncated to max_seq_len {} (further truncations are "
                          "counted, not logged)",
                          source, line_no, n, options.max_seq_len);
            n = options.max_seq_len;
            d.tokens_.resize(start + n);
            d.mask_.resize(start + n);
        }
        const auto trained = static_cast<std::uint64_t>(
            std::count(d.mask_.begin() + static_cast<std::ptrdiff_t>(start), d.mask_.end(), std::uint8_t{1}));
        if (trained == 0) ++r.no_loss;
        d.loss_tokens_ += trained;
        d.max_length_ = std::max(d.max_length_, n);
        d.offsets_.push_back(d.tokens_.size());
    }

    if (d.size() == 0) {
        if (r.skipped > 0)
            fail("{}: no usable sample: all {} non-blank lines are bad; the first: {}", source, r.skipped,
                 r.skip_reasons.front());
        fail("{}: holds no sample: [data] path must name pre-tokenized JSONL, one "
             "{{\"input_ids\": [...], \"loss_mask\": [...]}} per line (bin/prepare-data writes it)",
             source);
    }
    if (d.size() > std::numeric_limits<std::uint32_t>::max())
        fail("{}: {} samples; at most {} fit the sample ledger: split the data set", source, d.size(),
             std::numeric_limits<std::uint32_t>::max());
    d.tokens_.shrink_to_fit();
    d.mask_.shrink_to_fit();

    detail::Hash64 h(0x6873'7269'6e67'6473ull);  // "hsringds"
    h.add(kFingerprintVersion);
    h.add(options.on_bad_line == OnBadLine::Skip ? 1 : 0);
    h.add(options.max_seq_len);
    h.add(static_cast<std::uint64_t>(options.vocab_size));
    if (options.response_tokens > 0) h.add(options.response_tokens);  // (fingerprints of older runs unchanged)
    h.add(d.size());
    for (std::size_t i = 0; i < d.size(); ++i) {
        h.add(d.length(i));
        for (std::size_t k = d.offsets_[i]; k < d.offsets_[i + 1]; ++k)
            h.add(static_cast<std::uint32_t>(d.tokens_[k]) | (std::uint64_t{d.mask_[k]} << 32));
    }
    d.fingerprint_ = h.value();

    if (r.skipped > 0) log::warn("{}: {} bad lines skipped", source, r.skipped);
    if (r.truncated > 0) log::warn("{}: {} samples truncated to max_seq_len {}", source, r.truncated, options.max_seq_len);
    if (r.no_loss > 0) log::warn("{}: {} samples have no loss-masked token and train nothing", source, r.no_loss);
    log::info("{}: {} samples, {} tokens ({} trained), longest {}", source, d.size(), d.total_tokens(),
              d.loss_tokens_, d.max_length_);
    return d;
}

} // namespace hsring::data
