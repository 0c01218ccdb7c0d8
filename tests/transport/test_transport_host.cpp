// The host-ring transport on the CPU: a writer puts each layer's rows at the payload's layer
// stride, a reader copies only the filled rows out and releases the slot once copied.
#include "hsring/error.hpp"
#include "hsring/ring.hpp"
#include "hsring/slot_rows.hpp"
#include "hsring/transport.hpp"
#include "bench_args.hpp"
#include "ring_test_util.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <vector>

using namespace hsring;
using namespace std::chrono_literals;

namespace {

std::string error_of(auto&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    FAIL("expected an hsring::Error");
    return {};
}

RingGeometry layered_geometry() {
    RingGeometry g;
    g.slot_count = 2;
    g.slot_bytes = 3 * 10 * 8;  // 3 layers x 10 tokens x 4 hidden x 2 bytes
    g.slot_tokens = 10;
    g.max_samples = 4;
    g.n_layers = 3;
    g.hidden = 4;
    g.dtype_bytes = 2;
    return g;
}

struct TempRing {
    std::string name;
    Ring ring;
    explicit TempRing(RingGeometry g) : name(test::unique_ring_name("tr")), ring(Ring::create({name, g, HugePages::Off, true})) {
        ring.join(Role::Writer, 1, "test");
    }
    ~TempRing() { Ring::remove(name); }
};

} // namespace

TEST_CASE("a batch's rows are copied layer by layer, only the filled ones: the rest of the buffer is untouched") {
    RingGeometry g;
    g.slot_tokens = 10;
    g.n_layers = 3;
    g.hidden = 4;
    g.dtype_bytes = 2;
    const std::size_t row = 8, layer = 10 * row, total = 3 * layer;
    std::vector<std::uint8_t> payload(total), buffer(total, 0xEE);
    for (std::size_t i = 0; i < total; ++i) payload[i] = static_cast<std::uint8_t>(i % 251);

    const FilledRows f = filled_rows(g, 4);
    CHECK(f.runs == 3);
    CHECK(f.run_bytes == 4 * row);
    CHECK(f.stride == layer);
    CHECK(f.bytes() == 3 * 4 * row);
    copy_filled_rows(buffer.data(), payload.data(), f);
    for (std::size_t l = 0; l < 3; ++l)
        for (std::size_t b = 0; b < layer; ++b) {
            const std::size_t i = l * layer + b;
            INFO("layer " << l << " byte " << b);
            CHECK(buffer[i] == (b < 4 * row ? payload[i] : 0xEE));  // rows 0..3 of each layer, nothing else
        }

    // A full slot is one run; an empty batch copies nothing; an oversized one is refused.
    const FilledRows full = filled_rows(g, 10);
    CHECK(full.runs == 1);
    CHECK(full.bytes() == total);
    copy_filled_rows(buffer.data(), payload.data(), full);
    CHECK(buffer == payload);
    CHECK(filled_rows(g, 0).bytes() == 0);
    CHECK(error_of([&] { filled_rows(g, 11); }).find("11 tokens does not fit a slot of 10 tokens") != std::string::npos);
}

TEST_CASE("a CPU target's layers land in the slot at the layer stride, and a CPU drafter gets exactly them back") {
    const RingGeometry g = layered_geometry();
    TempRing t(g);
    auto writer = transport::make_slot_writer(t.ring, {});
    auto reader = transport::make_slot_reader(t.ring, {});
    const std::uint64_t n = 6, row = 8, stride = 10 * row;

    auto w = t.ring.claim(0ms);
    REQUIRE(w);
    std::memset(w->payload().data(), 0xAB, g.slot_bytes);  // what a previous batch left behind
    w->meta().set_counts(1, n);
    writer->begin(*w, n);
    std::vector<std::vector<std::uint8_t>> layers(3, std::vector<std::uint8_t>(n * row));
    for (std::uint32_t l = 0; l < 3; ++l) {
        for (std::size_t i = 0; i < layers[l].size(); ++i) layers[l][i] = static_cast<std::uint8_t>(l * 50 + i);
        writer->put_layer(l, layers[l].data(), nullptr, nullptr);
    }
    writer->finish();
    for (std::uint32_t l = 0; l < 3; ++l) {
        INFO("layer " << l);
        CHECK(std::memcmp(w->payload().data() + l * stride, layers[l].data(), n * row) == 0);
        CHECK(static_cast<std::uint8_t>(w->payload()[l * stride + n * row]) == 0xAB);  // rows past the batch: untouched
    }
    REQUIRE(w->commit());

    auto r = t.ring.acquire(0ms);
    REQUIRE(r);
    const std::uint32_t index = r->index();
    std::vector<std::uint8_t> buffer(g.slot_bytes, 0);
    CHECK(reader->receive(*r, buffer.data()));
    auto copy = reader->stage(std::move(*r), buffer.data());
    CHECK(t.ring.state(index) == SlotState::Free);  // a CPU copy is done when stage() returns: released
    copy->wait(nullptr);
    CHECK(copy->copy_ms() >= 0);
    for (std::uint32_t l = 0; l < 3; ++l) {
        INFO("layer " << l);
        CHECK(std::memcmp(buffer.data() + l * stride, layers[l].data(), n * row) == 0);
    }
    CHECK(t.ring.counters().releases == 1);
}

TEST_CASE("a batch larger than the slot is refused before anything is copied") {
    TempRing t(layered_geometry());
    auto writer = transport::make_slot_writer(t.ring, {});
    auto w = t.ring.claim(0ms);
    REQUIRE(w);
    CHECK(error_of([&] { writer->begin(*w, 11); }).find("11 tokens does not fit a slot of 10 tokens") != std::string::npos);
}

TEST_CASE("hsring-bench ring --transport: host by default, the peer kinds need --cuda, an unknown kind names the choices") {
    auto parse = [](std::vector<std::string> args) {
        args.insert(args.begin(), "hsring-bench-ring");
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        return bench::parse_args(static_cast<int>(argv.size()), argv.data());
    };
    CHECK(parse({}).transport == TransportKind::Host);
    const bench::Args a = parse({"--cuda", "--transport", "peer+host", "--peer-buffers", "3"});
    CHECK(a.transport == TransportKind::PeerAndHost);
    CHECK(a.peer_buffers == 3);
    CHECK(parse({"--cuda", "--transport", "peer"}).transport == TransportKind::Peer);
    CHECK(error_of([&] { parse({"--transport", "peer"}); }) == "--transport peer copies between GPUs: add --cuda");
    CHECK(error_of([&] { parse({"--cuda", "--transport", "nvlink"}); }) == "--transport nvlink: use host, peer or peer+host");
    CHECK(error_of([&] { parse({"--cuda", "--transport", "peer", "--peer-buffers", "0"}); }).find("--peer-buffers 0") !=
          std::string::npos);
}
