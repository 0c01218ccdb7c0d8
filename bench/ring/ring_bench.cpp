// hsring-bench ring: P writer processes and C reader processes move slots through a ring.
//
//   hsring-bench ring --writers P --readers C --slot-mib S --slots N --seconds T [--cuda]
//                     [--transport host|peer|peer+host] [--peer-buffers B]
//                     [--huge-pages auto|require|off] [--depth D]
//
// CPU mode: writers memcpy a private buffer into slots, readers memcpy slots out.
// CUDA mode: writers DMA device -> slot (D2H), readers slot -> device (H2D), each on its own
// stream, D slots in flight per process (double-buffered by default); writers on GPU i % G,
// readers on the last GPUs, so with 2 GPUs data crosses GPU0 -> host ring -> GPU1.
// --transport peer / peer+host (with --cuda): slots go through the transport's peer path
// (src/transport/): writers copy into B exported buffers on their GPU (peer+host: and into the
// slot), readers pull each slot device to device (CUDA IPC) into one of D landing buffers.
//
// The parent never touches CUDA (it forks before any CUDA call; children exec this program).
// It measures the limit in the same run: CPU mode, a single-thread memcpy; CUDA mode, pinned
// (cudaMallocHost) D2H on the writers' GPUs and H2D on the readers' GPUs, in a child process;
// peer kinds, a raw cudaIpc device-to-device copy of one slot from the first writer's GPU to the
// first reader's (two child processes: an exporter and the timed importer).
// Last line: "ring: X GB/s end to end, limit Y GB/s, ratio Z".
#include "bench_args.hpp"
#include "hsring/error.hpp"
#include "hsring/log.hpp"
#include "hsring/programs.hpp"
#include "hsring/ring.hpp"
#include "hsring/units.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

using namespace hsring;
using namespace std::chrono_literals;

namespace hsring::bench {
int run_worker(const Args& a);       // ring_bench_worker.cpp
int run_probe(const Args& a);        // ring_bench_worker.cpp: prints the pinned limits
int run_ipc(const Args& a);          // ring_bench_worker.cpp: the raw cudaIpc copy (ipc-source, ipc-probe)
}

namespace {

pid_t spawn(const std::vector<std::string>& args, int out_fd = -1, int in_fd = -1) {
    pid_t pid = ::fork();
    if (pid < 0) fail("fork: {}", errno_text(errno));
    if (pid == 0) {
        if (out_fd >= 0) ::dup2(out_fd, STDOUT_FILENO);
        if (in_fd >= 0) ::dup2(in_fd, STDIN_FILENO);
        std::vector<char*> argv;
        for (const auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
        argv.push_back(nullptr);
        ::execv(self_exe().c_str(), argv.data());
        ::_exit(127);
    }
    return pid;
}

int wait_for(pid_t pid) {
    int st = 0;
    ::waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

double memcpy_gbs(std::size_t bytes) {
    std::vector<std::byte> a(bytes, std::byte{1}), b(bytes, std::byte{2});
    std::vector<double> gbs;
    for (int i = 0; i < 5; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        std::memcpy(b.data(), a.data(), bytes);
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        gbs.push_back(double(bytes) / s / 1e9);
    }
    std::sort(gbs.begin(), gbs.end());
    return gbs[gbs.size() / 2];
}

// Runs the CUDA probe child and parses "limit <gbs>" from its output.
double cuda_limit(const bench::Args& a) {
    int fds[2];
    if (::pipe(fds) != 0) fail("pipe: {}", errno_text(errno));
    pid_t pid = spawn({"hsring-bench-ring", "--role", "probe", "--writers", std::to_string(a.writers), "--readers",
                       std::to_string(a.readers), "--slot-mib", std::to_string(a.slot_mib)},
                      fds[1]);
    ::close(fds[1]);
    std::string out;
    char buf[512];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
    ::close(fds[0]);
    if (wait_for(pid) != 0) fail("the CUDA bandwidth probe failed:\n{}", out);
    fmt::print("{}", out);
    auto p = out.rfind("limit ");
    if (p == std::string::npos) fail("the CUDA probe printed no limit:\n{}", out);
    return std::stod(out.substr(p + 6));
}

// The raw cudaIpc copy of one slot (the peer kinds' limit): an exporter child prints its
// handle and waits for its stdin to close; an importer child times copies from it.
double ipc_limit(const bench::Args& a) {
    int out[2], in[2];
    if (::pipe(out) != 0 || ::pipe(in) != 0) fail("pipe: {}", errno_text(errno));
    ::fcntl(out[0], F_SETFD, FD_CLOEXEC);
    ::fcntl(in[1], F_SETFD, FD_CLOEXEC);
    const std::vector<std::string> common{"--slot-mib", std::to_string(a.slot_mib), "--transport", "peer", "--cuda"};
    std::vector<std::string> src_args{"hsring-bench-ring", "--role", "ipc-source"};
    src_args.insert(src_args.end(), common.begin(), common.end());
    const pid_t source = spawn(src_args, out[1], in[0]);
    ::close(out[1]);
    ::close(in[0]);
    std::string handle;
    char c;
    while (::read(out[0], &c, 1) == 1 && c != '\n') handle += c;
    ::close(out[0]);
    std::string probe_out;
    int rc = 1;
    if (!handle.empty()) {
        int p[2];
        if (::pipe(p) != 0) fail("pipe: {}", errno_text(errno));
        std::vector<std::string> probe_args{"hsring-bench-ring", "--role", "ipc-probe", "--handle", handle};
        probe_args.insert(probe_args.end(), common.begin(), common.end());
        const pid_t probe = spawn(probe_args, p[1]);
        ::close(p[1]);
        char buf[512];
        for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) probe_out.append(buf, static_cast<std::size_t>(n));
        ::close(p[0]);
        rc = wait_for(probe);
    }
    ::close(in[1]);  // the exporter may go now
    const int src_rc = wait_for(source);
    if (handle.empty() || src_rc != 0) fail("the cudaIpc exporter failed (exit {}) before printing its handle", src_rc);
    if (rc != 0) fail("the raw cudaIpc copy failed (exit {}):\n{}", rc, probe_out);
    fmt::print("{}", probe_out);
    auto pos = probe_out.rfind("limit ");
    if (pos == std::string::npos) fail("the cudaIpc probe printed no limit:\n{}", probe_out);
    return std::stod(probe_out.substr(pos + 6));
}

} // namespace

int main(int argc, char** argv) {
    log::set_name("bench");
    bench::Args a;
    try {
        a = bench::parse_args(argc, argv);
        if (a.role == "writer" || a.role == "reader") return bench::run_worker(a);
        if (a.role == "probe") return bench::run_probe(a);
        if (a.role == "ipc-source" || a.role == "ipc-probe") return bench::run_ipc(a);
    } catch (const Error& e) {
        fmt::print(stderr, "hsring-bench ring: {}\n", e.what());
        return 2;
    }
    try {
        const std::string name = fmt::format("hsring-bench-{}", ::getpid());
        RingGeometry g;
        g.slot_count = a.slots;
        g.slot_bytes = std::uint64_t(a.slot_mib) * MiB;
        g.slot_tokens = 1;
        g.max_samples = 1;
        g.n_layers = 1;
        g.hidden = static_cast<std::uint32_t>(g.slot_bytes / 2);
        g.dtype_bytes = 2;
        const bool peer = a.transport != TransportKind::Host;
        const double limit = peer     ? ipc_limit(a)
                             : a.cuda ? cuda_limit(a)
                                      : memcpy_gbs(std::min<std::size_t>(g.slot_bytes, 512 * MiB));
        auto t_create = std::chrono::steady_clock::now();
        Ring ring = Ring::create({name, g, a.huge_pages, true});
        struct Cleanup {
            std::string n;
            ~Cleanup() { Ring::remove(n); }
        } cleanup{name};
        fmt::print("ring '{}': {} on {} ({}), created in {:.2f} s\n", name, g.str(), ring.region().path,
                   ring.region().huge_pages ? "2 MiB huge pages" : "4 KiB pages",
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t_create).count());
        std::vector<pid_t> kids;
        for (int i = 0; i < a.writers + a.readers; ++i) {
            const bool w = i < a.writers;
            std::vector<std::string> args{"hsring-bench-ring", "--role", w ? "writer" : "reader", "--ring", name,
                                          "--index", std::to_string(w ? i : i - a.writers), "--writers",
                                          std::to_string(a.writers), "--readers", std::to_string(a.readers),
                                          "--depth", std::to_string(a.depth)};
            if (a.cuda) args.push_back("--cuda");
            if (peer) {
                args.insert(args.end(), {"--transport", to_string(a.transport), "--peer-buffers",
                                         std::to_string(a.peer_buffers)});
            }
            kids.push_back(spawn(args));
        }
        // Warm up (registration, first copies), then measure releases over the window.
        std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(a.warmup_s * 1000)));
        const auto c0 = ring.counters();
        const auto t0 = std::chrono::steady_clock::now();
        std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(a.seconds * 1000)));
        const auto c1 = ring.counters();
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const Occupancy occ = ring.occupancy();
        ring.set_stopping(true);
        int failures = 0;
        for (pid_t k : kids) failures += wait_for(k) != 0;
        if (failures) fail("{} worker process(es) failed", failures);
        const double gbs = double(c1.releases - c0.releases) * double(g.slot_bytes) / secs / 1e9;
        fmt::print("{} writers, {} readers, {} slots of {} MiB, {} in flight per process, {:.1f} s: {} slots moved; "
                   "occupancy at the end free {} writing {} ready {} reading {}\n",
                   a.writers, a.readers, a.slots, a.slot_mib, a.depth, secs, c1.releases - c0.releases, occ.free,
                   occ.writing, occ.ready, occ.reading);
        if (peer) fmt::print("transport {}: {} device buffers per writer\n", to_string(a.transport), a.peer_buffers);
        fmt::print("ring: {:.1f} GB/s end to end, limit {:.1f} GB/s, ratio {:.2f}\n", gbs, limit, gbs / limit);
        return 0;
    } catch (const Error& e) {
        fmt::print(stderr, "hsring-bench ring: {}\n", e.what());
        return 2;
    }
}
