// Run directory files and run.json (see run_files.hpp).
#include "supervisor/run_files.hpp"

#include "hsring/dataset.hpp"

#include "hsring/error.hpp"
#include "hsring/safe_file.hpp"

#include <fcntl.h>
#include <sys/un.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <charconv>
#include <ctime>

namespace hsring::supervisor {

using nlohmann::json;

std::optional<std::uint64_t> read_latest_checkpoint(const RunFiles& files) {
    const fs::path p = files.latest_checkpoint();
    const auto content = safe::read_beneath(files.dir, "checkpoints/latest");
    if (!content) return std::nullopt;
    const std::string& text = *content;
    const auto b = text.find_first_not_of(" \t\r\n");
    const auto e = text.find_last_not_of(" \t\r\n");
    std::uint64_t step = 0;
    if (b == std::string::npos) fail("{} is empty: it should hold the step of the latest checkpoint", p.string());
    const char* first = text.data() + b;
    const char* last = text.data() + e + 1;
    auto [ptr, ec] = std::from_chars(first, last, step);
    if (ec != std::errc() || ptr != last)
        fail("{} holds '{}', not a checkpoint step (a non-negative integer)", p.string(), std::string(first, last));
    return step;
}

void check_socket_path(const fs::path& socket) {
    constexpr std::size_t kMax = sizeof(sockaddr_un{}.sun_path) - 1;
    const std::string s = socket.string();
    if (s.size() > kMax)
        fail("the control socket path {} is {} bytes, longer than the {} a Unix socket path may have: use a "
             "shorter run directory ([run] run_dir in the config, or --run-dir DIR)", s, s.size(), kMax);
}

namespace {

std::string hex64(std::uint64_t v) { return fmt::format("{:016x}", v); }

template <typename T>
T get(const json& j, const char* key, const fs::path& file) {
    if (!j.contains(key)) fail("{}: missing key \"{}\" (was it written by `hsring run`?)", file.string(), key);
    try {
        return j.at(key).get<T>();
    } catch (const json::exception& e) {
        fail("{}: key \"{}\": {}", file.string(), key, e.what());
    }
}

} // namespace

void write_run_record(const RunFiles& files, const RunRecord& r) {
    json workers = json::array();
    for (const auto& w : r.workers)
        workers.push_back({{"name", w.name}, {"pid", w.pid}, {"incarnation", w.incarnation}, {"start_ticks", w.start_ticks}});
    json j = {
        {"config", r.config},
        {"ring", r.ring},
        {"ledger", r.ledger},
        {"samples", r.samples},
        {"epochs", r.epochs},
        {"fingerprint", hex64(r.fingerprint)},
        {"seed", r.seed},
        {"shuffle", r.shuffle},
        {"nnodes", r.nnodes},
        {"node_rank", r.node_rank},
        {"drafters", r.drafters},
        {"max_steps", r.max_steps},
        {"name", r.name},
        {"master_addr", r.master_addr},
        {"master_port", r.master_port},
        {"identity", r.identity},
        {"started", r.started},
        {"supervisor_pid", r.supervisor_pid},
        {"supervisor_start_ticks", r.supervisor_start_ticks},
        {"workers", workers},
    };
    if (r.end)
        j["end"] = {{"time", r.end->time}, {"exit_code", r.end->exit_code}, {"reason", r.end->reason},
                    {"complete", r.end->complete}};

    safe::write_atomic(files.dir, "run.json", j.dump(2) + "\n", false);
}

RunRecord read_run_record(const fs::path& file) {
    const auto text = safe::read_file(file);
    if (!text) fail("cannot read {}: it does not exist (is this a run directory of `hsring run`?)", file.string());
    json j;
    try {
        j = json::parse(*text);
    } catch (const json::exception& e) {
        fail("{} is not valid JSON: {}", file.string(), e.what());
    }
    RunRecord r;
    r.config = get<std::string>(j, "config", file);
    r.ring = get<std::string>(j, "ring", file);
    r.ledger = get<std::string>(j, "ledger", file);
    r.samples = get<std::uint64_t>(j, "samples", file);
    r.epochs = get<std::uint32_t>(j, "epochs", file);
    const auto fp = get<std::string>(j, "fingerprint", file);
    auto [ptr, ec] = std::from_chars(fp.data(), fp.data() + fp.size(), r.fingerprint, 16);
    if (ec != std::errc() || ptr != fp.data() + fp.size()) fail("{}: \"fingerprint\" is not a hex number: {}", file.string(), fp);
    r.seed = get<std::uint64_t>(j, "seed", file);
    r.shuffle = get<bool>(j, "shuffle", file);
    r.nnodes = j.value("nnodes", 1u);
    r.node_rank = j.value("node_rank", 0u);
    r.drafters = j.value("drafters", 1u);
    r.max_steps = j.value("max_steps", std::uint64_t{0});
    // Absent before they were recorded: unknown, compared only where both machines know them.
    try {
        r.name = j.value("name", std::string());
        r.master_addr = j.value("master_addr", std::string());
        r.master_port = j.value("master_port", 0u);
    } catch (const json::exception& e) {
        fail("{}: \"name\", \"master_addr\" or \"master_port\": {}", file.string(), e.what());
    }
    if (j.contains("identity")) {
        r.identity = j["identity"];
        if (!r.identity.is_object() && !r.identity.is_null())
            fail("{}: \"identity\" is not a JSON object (was it written by `hsring run`?)", file.string());
    }
    if (r.nnodes == 0 || r.node_rank >= r.nnodes || r.drafters == 0)
        fail("{}: machine {} of {} with {} drafters is not a valid place in a run", file.string(), r.node_rank,
             r.nnodes, r.drafters);
    r.started = get<std::string>(j, "started", file);
    r.supervisor_pid = get<pid_t>(j, "supervisor_pid", file);
    r.supervisor_start_ticks = j.value("supervisor_start_ticks", std::uint64_t{0});
    if (j.contains("workers")) {
        for (const auto& w : j["workers"])
            r.workers.push_back({w.value("name", ""), w.value("pid", 0), w.value("incarnation", 0u),
                                 w.value("start_ticks", std::uint64_t{0})});
    }
    if (j.contains("end")) {
        const auto& e = j["end"];
        r.end = RunEnd{e.value("time", ""), e.value("exit_code", 0), e.value("reason", ""), e.value("complete", false)};
    }
    return r;
}

LedgerInfo RunRecord::ledger_info() const {
    LedgerInfo i;
    i.data_fingerprint = fingerprint;
    i.samples = data::shard_size(samples, nnodes, node_rank);
    i.epochs = epochs;
    i.seed = seed;
    i.shuffle = shuffle;
    i.dataset_samples = samples;
    i.nnodes = nnodes;
    i.node_rank = node_rank;
    return i;
}

std::string iso_time_now() {
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    return buf;
}

} // namespace hsring::supervisor
