// hsring-ring-testworker: a writer or reader process for the multi-process ring tests.
//
//   writer RING LOG ID INCARNATION COUNT PAYLOAD_BYTES   claims, fills a checksummed pattern,
//                                                         commits COUNT slots (or until stopping)
//   reader RING LOG ID INCARNATION                        acquires, verifies, releases until
//                                                         the ring is stopping, empty and no slot WRITING
// Every event is one line appended to LOG (one write(2) per line, O_APPEND):
//   I <writer> <inc> <n>   a writer is about to commit slot payload n
//   C <writer> <inc> <n>   ... and did
//   D <writer> <inc> <n> <deliveries> <ok>   a reader verified (ok=1) a slot, about to release
// HSRING_TEST_CRASH_AT=POINT:N makes the process SIGKILL itself the N-th time the ring passes
// POINT (see set_ring_test_hook). HSRING_TEST_ABORT_EVERY=K makes a writer abort every K-th slot
// it claims instead of committing it (the abort path: "abort.before").
#include "hsring/ring.hpp"
#include "ring_test_util.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace hsring;
using namespace std::chrono_literals;

namespace {

int g_log = -1;
std::string g_crash_point;
long g_crash_after = 0;

void crash_hook(const char* point) {
    if (g_crash_point == point && --g_crash_after == 0) ::kill(::getpid(), SIGKILL);
}

void log_line(const char* fmt, auto... args) {
    char buf[160];
    int n = std::snprintf(buf, sizeof buf, fmt, args...);
    if (::write(g_log, buf, static_cast<std::size_t>(n)) != n) std::abort();
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 6) {
        std::fprintf(stderr, "usage: see the header of ring_worker.cpp\n");
        return 2;
    }
    const std::string role = argv[1];
    const std::string ring_name = argv[2];
    g_log = ::open(argv[3], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    const unsigned id = static_cast<unsigned>(std::atoi(argv[4]));
    const unsigned inc = static_cast<unsigned>(std::atoi(argv[5]));
    if (const char* c = std::getenv("HSRING_TEST_CRASH_AT")) {
        std::string s(c);
        g_crash_point = s.substr(0, s.find(':'));
        g_crash_after = std::atol(s.c_str() + s.find(':') + 1);
        set_ring_test_hook(crash_hook);
    }
    Ring ring = Ring::attach(ring_name);
    if (role == "writer") {
        const long count = std::atol(argv[6]);
        const std::size_t bytes = static_cast<std::size_t>(std::atol(argv[7]));
        ring.join(Role::Writer, inc, "writer");
        const char* ae = std::getenv("HSRING_TEST_ABORT_EVERY");
        const long abort_every = ae ? std::atol(ae) : 0;
        long claims = 0;
        for (long n = 0; n < count;) {
            auto w = ring.claim(200ms);
            if (!w) {
                if (ring.stopping()) break;
                continue;
            }
            if (abort_every > 0 && ++claims % abort_every == 0) {
                if (!w->abort()) return 4;
                continue;
            }
            const std::uint64_t uid = (std::uint64_t{id} << 48) | (std::uint64_t{inc} << 32) | static_cast<std::uint64_t>(n);
            auto m = w->meta();
            m.user()[0] = id;
            m.user()[1] = inc;
            m.user()[2] = static_cast<std::uint64_t>(n);
            m.user()[3] = bytes;
            m.set_checksum(test::fill_pattern(w->payload().first(bytes), uid));
            log_line("I %u %u %ld\n", id, inc, n);
            if (!w->commit()) return 4;
            log_line("C %u %u %ld\n", id, inc, n);
            ++n;
        }
    } else {
        ring.join(Role::Reader, inc, "reader");
        for (;;) {
            auto r = ring.acquire(200ms);
            if (!r) {
                // Done when nothing is READY and no writer is mid-slot: a writer that claimed before
                // the stop still commits (a dead one's slot is reclaimed by these timed-out waits).
                const Occupancy o = ring.occupancy();
                if (ring.stopping() && o.ready == 0 && o.writing == 0) break;
                continue;
            }
            auto m = r->meta();
            const std::size_t bytes = m.user()[3];
            const bool ok = test::checksum(r->payload().first(bytes)) == m.checksum();
            log_line("D %lu %lu %lu %u %d\n", static_cast<unsigned long>(m.user()[0]),
                     static_cast<unsigned long>(m.user()[1]), static_cast<unsigned long>(m.user()[2]),
                     r->deliveries(), ok ? 1 : 0);
            if (!r->release()) return 4;
        }
    }
    return 0;
}
