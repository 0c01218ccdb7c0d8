// RUN_DIR/metrics.jsonl (src/metrics): rows appended whole; a full disk is a user error that names
// ENOSPC (it used to report a stale errno, and a restart cannot free space).
#include "hsring/error.hpp"
#include "hsring/metrics_file.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;

TEST_CASE("rows are appended as JSON lines, bytes that are not UTF-8 replaced") {
    const fs::path dir = fs::temp_directory_path() / ("hsring-metrics-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    {
        hsring::MetricsFile m(dir / "metrics.jsonl", {});
        m.append({{"step", 1}, {"loss", 2.5}});
        m.append({{"step", 2}, {"worker", std::string("drafter.\xff")}});
    }
    std::ifstream in(dir / "metrics.jsonl");
    std::string a, b;
    std::getline(in, a);
    std::getline(in, b);
    CHECK(nlohmann::json::parse(a)["loss"] == 2.5);
    CHECK(nlohmann::json::parse(b)["worker"] == "drafter.\xef\xbf\xbd");
    fs::remove_all(dir);
}

TEST_CASE("a full disk is a user error naming ENOSPC") {
    if (!fs::exists("/dev/full")) return;
    hsring::MetricsFile m("/dev/full", {});  // every write fails with ENOSPC
    bool user_error = false;
    std::string what;
    try {
        m.append({{"step", 1}});
    } catch (const hsring::UserError& e) {
        user_error = true;
        what = e.what();
    }
    CHECK(user_error);
    CHECK(what.find("No space left on device") != std::string::npos);
    CHECK(what.find("free disk space") != std::string::npos);
}
