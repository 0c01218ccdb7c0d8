// TFRecord framing and metrics rows as scalars (src/tensorboard).
#ifdef HSRING_HAVE_TENSORBOARD
#include "tensorboard/metric_scalars.hpp"
#include "tensorboard/record_writer.hpp"
#endif

#include <doctest/doctest.h>

#include <map>

#include <cmath>
#include <cstring>

#ifdef HSRING_HAVE_TENSORBOARD
using namespace hsring::tensorboard;

TEST_CASE("CRC-32C and TFRecord framing") {
    CHECK(crc32c("123456789") == 0xE3069283u);  // the check value of CRC-32C
    CHECK(crc32c("") == 0u);
    const std::string rec = frame_record("abc");
    REQUIRE(rec.size() == 8 + 4 + 3 + 4);
    std::uint64_t len = 0;
    std::memcpy(&len, rec.data(), 8);  // little endian on x86
    CHECK(len == 3);
    std::uint32_t c = 0;
    std::memcpy(&c, rec.data() + 8, 4);
    CHECK(c == masked_crc32c(std::string_view(rec.data(), 8)));
    CHECK(rec.substr(12, 3) == "abc");
    std::memcpy(&c, rec.data() + 15, 4);
    CHECK(c == masked_crc32c("abc"));
}

TEST_CASE("metrics rows as scalars") {
    using nlohmann::json;
    const auto r = metric_row(json::parse(R"({"step": 7, "time": 1.5, "unix_time": 1.8e9, "loss": 2.5, "grad_norm": null,
        "acc": [0.5, 0.25], "ring": {"free": 3}, "incarnation": 2, "world": 1, "skipped_nonfinite": "loss"})"));
    REQUIRE(r);
    CHECK(r->step == 7);
    CHECK_FALSE(r->restart_at);
    std::map<std::string, double> m;
    for (const auto& s : r->scalars) m[s.tag] = s.value;
    CHECK(m.size() == 6);
    CHECK(m["gang/world_size"] == 1);  // the gang's size over the steps (resized runs)
    CHECK(m["train/loss"] == 2.5);
    CHECK(std::isnan(m["train/grad_norm"]));
    CHECK(m["train/acc/1"] == 0.5);
    CHECK(m["train/acc/2"] == 0.25);
    CHECK(m["train/ring/free"] == 3);

    const auto e = metric_row(json::parse(R"({"step": 10, "eval": {"loss": 1.0, "acc": [0.5], "final": true}})"));
    REQUIRE(e);
    CHECK(e->scalars.size() == 2);
    CHECK(e->scalars[0].tag.starts_with("eval/"));

    const auto sp = metric_row(json::parse(
        R"({"step": 20, "spec": {"tau": 1.5, "acceptance_per_position": [0.4, 0.1], "step": 20, "final": false},
            "windows": [[1.8e9, 1.8e9]]})"));
    REQUIRE(sp);
    CHECK(sp->step == 20);
    std::map<std::string, double> t;
    for (const auto& x : sp->scalars) t[x.tag] = x.value;
    CHECK(t["spec/tau"] == 1.5);
    CHECK(t["spec/acceptance_per_position/2"] == 0.1);

    const auto res = metric_row(json::parse(R"({"resume": {"step": 10, "incarnation": 2}, "time": 3})"));
    REQUIRE(res);
    CHECK(res->restart_at == 11);
    CHECK_FALSE(metric_row(json::parse(R"({"hello": 1})")));
}
#else
TEST_CASE("built without TensorBoard support") {}
#endif
