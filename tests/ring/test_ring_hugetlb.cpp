// The hugetlbfs path, where 2 MiB huge pages are reserved and mounted; skipped (77) elsewhere.
// The GPU machine's script reserves pages first (sysctl vm.nr_hugepages, mount -t hugetlbfs).
#include "hsring/ring.hpp"
#include "hsring/units.hpp"
#include "shm/region.hpp"
#include "ring_test_util.hpp"

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

using namespace hsring;
using namespace std::chrono_literals;

TEST_CASE("with huge pages reserved, require maps the ring on hugetlbfs and it works") {
    std::string name = test::unique_ring_name("huge");
    RingGeometry g = test::small_geometry(4, 2 * MiB);
    {
        Ring r = Ring::create({name, g, HugePages::Require, true});
        CHECK(r.region().huge_pages);
        CHECK(r.region().path.find(shm::probe_huge_pages().mount) == 0);
        r.join(Role::Writer, 0, "t");
        auto w = r.claim(0ms);
        REQUIRE(w);
        w->meta().set_checksum(test::fill_pattern(w->payload(), 1));
        REQUIRE(w->commit());
        Ring other = Ring::attach(name, &g);
        other.join(Role::Reader, 0, "t");
        auto rd = other.acquire(0ms);
        REQUIRE(rd);
        CHECK(test::checksum(rd->payload()) == rd->meta().checksum());
        rd->release();
    }
    CHECK(Ring::remove(name));
}

int main(int argc, char** argv) {
    auto probe = shm::probe_huge_pages();
    if (probe.mount.empty() || probe.free_pages < 8) {
        // On the GPU machine (bin/gpu-build: GPU tests required) the huge-page path must run.
        const char* req = std::getenv("HSRING_GPU_TESTS");
        const bool required = req && std::strcmp(req, "required") == 0;
        std::fprintf(stderr, "%s: no hugetlbfs mount with free 2 MiB pages (mount %s, %lu free)%s\n",
                     required ? "FAILED" : "skipped", probe.mount.empty() ? "none" : probe.mount.c_str(),
                     static_cast<unsigned long>(probe.free_pages),
                     required ? "; HSRING_GPU_TESTS=required: reserve pages first (as root: bin/hugepages 64)" : "");
        return required ? 1 : 77;
    }
    doctest::Context ctx(argc, argv);
    return ctx.run();
}
