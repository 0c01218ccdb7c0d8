#include "hsring/train_log.hpp"

#include "hsring/error.hpp"
#include "hsring/safe_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace hsring {

TrainLog::TrainLog(const std::filesystem::path& file) : path_(file) {
    fd_ = safe::open_file(file, O_RDWR | O_CREAT | O_APPEND).release();  // never through a planted link
    const off_t size = ::lseek(fd_, 0, SEEK_END);
    if (size > 0) {
        char last = '\n';
        if (::pread(fd_, &last, 1, size - 1) == 1 && last != '\n') buffer_ = "\n";  // end a torn line
    }
}

TrainLog::~TrainLog() {
    try {
        flush();
    } catch (...) {
    }
    if (fd_ >= 0) ::close(fd_);
}

void TrainLog::resume(std::uint32_t inc, std::uint64_t step) {
    buffer_ += fmt::format("R {} {}\n", inc, step);
    sync();
}

void TrainLog::trained(std::uint32_t inc, std::uint64_t step, std::span<const std::uint64_t> positions) {
    for (std::uint64_t p : positions) fmt::format_to(std::back_inserter(buffer_), "T {} {} {}\n", inc, step, p);
    if (buffer_.size() > (1u << 20)) flush();
}

void TrainLog::rejected(std::uint32_t inc, std::uint64_t step, std::span<const std::uint64_t> positions) {
    for (std::uint64_t p : positions) fmt::format_to(std::back_inserter(buffer_), "X {} {} {}\n", inc, step, p);
    if (buffer_.size() > (1u << 20)) flush();
}

void TrainLog::checkpoint(std::uint32_t inc, std::uint64_t step) {
    buffer_ += fmt::format("K {} {}\n", inc, step);
    sync();
}

void TrainLog::flush() {
    std::size_t off = 0;
    while (off < buffer_.size()) {
        ssize_t n = ::write(fd_, buffer_.data() + off, buffer_.size() - off);
        if (n < 0) {
            if (errno == EINTR) continue;
            fail("cannot write the train log {}: {}", path_.string(), errno_text(errno));
        }
        off += static_cast<std::size_t>(n);
    }
    buffer_.clear();
}

void TrainLog::sync() {
    flush();
    if (::fdatasync(fd_) != 0) fail("cannot sync the train log {}: {}", path_.string(), errno_text(errno));
}

std::uint64_t LineageReport::missing() const {
    std::uint64_t n = 0;
    for (const auto& e : epochs) n += e.missing;
    return n;
}

std::uint64_t LineageReport::rejected() const {
    std::uint64_t n = 0;
    for (const auto& e : epochs) n += e.rejected;
    return n;
}

std::uint64_t LineageReport::doubled() const {
    std::uint64_t n = 0;
    for (const auto& e : epochs) n += e.more_than_once;
    return n;
}

std::filesystem::path train_log_path(const std::filesystem::path& run_dir, std::uint32_t rank) {
    return run_dir / ("train-log." + std::to_string(rank) + ".txt");
}

std::vector<std::pair<std::uint32_t, std::filesystem::path>> train_logs_in(const std::filesystem::path& run_dir) {
    std::vector<std::pair<std::uint32_t, std::filesystem::path>> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(run_dir, ec)) {
        const std::string name = e.path().filename().string();
        constexpr std::string_view head = "train-log.", tail = ".txt";
        if (name.size() <= head.size() + tail.size() || !name.starts_with(head) || !name.ends_with(tail)) continue;
        const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
        if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
        out.emplace_back(static_cast<std::uint32_t>(std::stoul(digits)), e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
}

bool LineageReport::ok() const {
    for (const auto& e : epochs)
        if (e.missing || e.more_than_once) return false;
    return !epochs.empty();
}

std::vector<Ledger::Trained> surviving_records(const std::filesystem::path& log, std::uint32_t rank,
                                               std::uint64_t final_step, LineageReport* report) {
    struct Line {
        char kind;
        std::uint64_t step, pos;
    };
    std::vector<Line> lines;
    // Streamed: a long run's log holds millions of lines. Never read through a planted link.
    safe::Fd fd = safe::open_file(log, O_RDONLY);
    std::uint32_t incarnations = 0;
    if (fd) {
        std::FILE* in = ::fdopen(fd.get(), "r");
        if (!in) fail("cannot read the train log {}: {}", log.string(), errno_text(errno));
        fd.release();
        char* buf = nullptr;
        std::size_t cap = 0;
        while (::getline(&buf, &cap, in) > 0) {
            char kind = 0;
            unsigned long long inc = 0, step = 0, pos = 0;
            const int n = std::sscanf(buf, " %c %llu %llu %llu", &kind, &inc, &step, &pos);
            if (n < 3 || ((kind == 'T' || kind == 'X') && n < 4)) continue;  // a torn line
            if (kind == 'R') ++incarnations;
            if (kind == 'R' || kind == 'T' || kind == 'X') lines.push_back({kind, step, pos});
        }
        std::free(buf);
        std::fclose(in);
    }
    // Walk backwards: each resume bounds the steps of everything before it.
    std::vector<Ledger::Trained> out;
    std::uint64_t bound = final_step, records = 0;
    for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
        if (it->kind == 'R') {
            bound = std::min(bound, it->step);
        } else {
            ++records;
            if (it->step <= bound) out.push_back({it->pos, rank, it->step, it->kind == 'X'});
        }
    }
    if (report) {
        report->final_step = final_step;
        report->incarnations += incarnations;
        report->records += records;
        report->surviving += out.size();
    }
    return out;
}

namespace {
// Per epoch (`per_epoch` counts each): once as trained = exactly once, once as rejected =
// rejected, never = missing, more = more than once.
void tally(LineageReport& r, const std::vector<std::uint32_t>& count, const std::vector<std::uint32_t>& rejected,
           std::uint64_t per_epoch, std::uint32_t epochs, std::uint64_t final_step) {
    r.final_step = final_step;
    r.epochs.resize(epochs);
    for (std::uint64_t p = 0; p < count.size(); ++p) {
        EpochReport& e = r.epochs[p / per_epoch];
        ++e.total;
        if (count[p] == 0) ++e.missing;
        else if (count[p] > 1) ++e.more_than_once;
        else if (rejected[p]) ++e.rejected;
        else ++e.exactly_once;
    }
}
} // namespace

LineageReport verify_lineage(const std::vector<LogOfMachine>& logs, std::uint64_t final_step,
                             std::uint64_t dataset_samples, std::uint32_t epochs, std::uint64_t seed, bool shuffle) {
    LineageReport r;
    const std::uint64_t total = dataset_samples * epochs;
    std::vector<std::uint32_t> count(total, 0), rejected(total, 0);
    for (const LogOfMachine& m : logs) {
        data::ShardOrder order(dataset_samples, seed, shuffle, m.nnodes, m.node_rank);
        for (const Ledger::Trained& t : surviving_records(m.log, m.rank, final_step, &r)) {
            const std::uint64_t epoch = order.epoch_of(t.pos);
            if (epoch >= epochs)
                fail("train log {}: position {} is outside the run's {} epochs of {} samples", m.log.string(), t.pos,
                     epochs, order.share());
            const std::uint64_t at = epoch * dataset_samples + order.sample_of(t.pos);
            ++count[at];
            if (t.rejected) ++rejected[at];
        }
    }
    tally(r, count, rejected, dataset_samples, epochs, final_step);
    return r;
}

LineageReport verify_positions(const std::vector<std::filesystem::path>& logs, std::uint64_t final_step,
                               std::uint64_t share, std::uint32_t epochs) {
    LineageReport r;
    const std::uint64_t total = share * epochs;
    std::vector<std::uint32_t> count(total, 0), rejected(total, 0);
    for (std::uint32_t rank = 0; rank < logs.size(); ++rank)
        for (const Ledger::Trained& t : surviving_records(logs[rank], rank, final_step, &r)) {
            if (t.pos >= total)
                fail("train log {}: position {} is outside the run's {} epochs of {} samples", logs[rank].string(),
                     t.pos, epochs, share);
            ++count[t.pos];
            if (t.rejected) ++rejected[t.pos];
        }
    tally(r, count, rejected, share, epochs, final_step);
    return r;
}

LineageReport verify_lineage(const std::filesystem::path& log, std::uint64_t final_step, const LedgerInfo& info) {
    const std::uint64_t n = info.dataset_samples ? info.dataset_samples : info.samples;
    return verify_lineage({LogOfMachine{log, 0, info.nnodes, info.node_rank}}, final_step, n, info.epochs, info.seed,
                          info.shuffle);
}

} // namespace hsring
