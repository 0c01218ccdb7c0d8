#include "shm/region.hpp"

#include "hsring/error.hpp"
#include "hsring/liveness.hpp"
#include "hsring/log.hpp"
#include "hsring/units.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <sstream>

#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif

namespace hsring::shm {
namespace {

void check_name(std::string_view name) {
    if (name.empty() || name.size() > 60 || name.find('/') != std::string_view::npos || name[0] == '.')
        fail("ring name '{}' is not valid: 1-60 characters, no '/', not starting with '.'", name);
}

std::uint64_t meminfo_kb(const std::string& key) {
    std::ifstream in("/proc/meminfo");
    std::string k;
    std::uint64_t v = 0;
    std::string unit;
    while (in >> k >> v) {
        std::getline(in, unit);
        if (k == key + ":") return v;
    }
    return 0;
}

// SIGBUS guard for pre-faulting: a page the kernel cannot back raises SIGBUS on first touch.
thread_local sigjmp_buf* t_bus_jump = nullptr;
void on_sigbus(int) {
    if (t_bus_jump) siglongjmp(*t_bus_jump, 1);
    signal(SIGBUS, SIG_DFL);
    raise(SIGBUS);
}

// Touches one byte per page; false if a page could not be backed.
bool prefault_guarded(std::byte* base, std::uint64_t bytes, std::uint64_t page) {
    struct sigaction sa{}, old{};
    sa.sa_handler = on_sigbus;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &old);
    sigjmp_buf jump;
    bool ok = true;
    if (sigsetjmp(jump, 1) == 0) {
        t_bus_jump = &jump;
        for (std::uint64_t off = 0; off < bytes; off += page)
            reinterpret_cast<volatile std::byte*>(base)[off] = std::byte{0};
    } else {
        ok = false;
    }
    t_bus_jump = nullptr;
    sigaction(SIGBUS, &old, nullptr);
    return ok;
}

// Maps `bytes` of `fd` at a 2 MiB-aligned address, so payload offsets aligned to 2 MiB are
// aligned in memory too (hugetlbfs needs it; tmpfs may then use transparent huge pages).
void* map_aligned(int fd, std::uint64_t bytes, int extra_flags) {
    void* probe = ::mmap(nullptr, bytes + kHugePage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (probe == MAP_FAILED) return MAP_FAILED;
    auto at = align_up(reinterpret_cast<std::uintptr_t>(probe), kHugePage);
    void* p = ::mmap(reinterpret_cast<void*>(at), bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | extra_flags, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        ::munmap(probe, bytes + kHugePage);
        errno = e;
        return MAP_FAILED;
    }
    // Give back the unused head and tail of the reservation.
    const auto start = reinterpret_cast<std::uintptr_t>(probe);
    if (at > start) ::munmap(probe, at - start);
    const std::uintptr_t end = start + bytes + kHugePage, used_end = at + bytes;
    if (end > used_end) ::munmap(reinterpret_cast<void*>(used_end), end - used_end);
    return p;
}

// Shared memory of another user, or memory other users may read or write, is never attached
// (invariant 8, docs/architecture.md): they could read the run's data and corrupt its ring and ledger.
void check_owner(const std::string& path, const struct stat& st) {
    if (!S_ISREG(st.st_mode)) fail("{} is not a regular file: not an hsring ring; remove it", path);
    if (st.st_uid != ::geteuid()) {
        struct passwd pw{}, *found = nullptr;
        char buf[1024];
        const bool known = ::getpwuid_r(st.st_uid, &pw, buf, sizeof buf, &found) == 0 && found;
        fail("{} belongs to user {} (uid {}), not to you (uid {}): hsring attaches only to its own user's shared "
             "memory. Ask its owner to remove it (hsring ring rm), or give this run another [run] name or [ring] name",
             path, known ? found->pw_name : "?", st.st_uid, ::geteuid());
    }
    if (st.st_mode & 0077)
        fail("{} has mode {:04o}: other users may read or write it (hsring makes its shared memory 0600). Remove it "
             "(hsring ring rm NAME) and start again", path, st.st_mode & 07777);
}

struct Fd {
    int fd = -1;
    ~Fd() { if (fd >= 0) ::close(fd); }
};

// Builds the region at `dir/name` via a temporary file; returns the mapping or throws.
// `reserve_error` receives ENOSPC/ENOMEM-style failures so the caller can fall back.
std::byte* build(const std::string& dir, std::string_view name, std::uint64_t bytes, std::uint64_t page,
                 bool prefault, const std::function<void(std::byte*)>& init, int& reserve_errno) {
    reserve_errno = 0;
    const std::string final_path = dir + "/" + std::string(name);
    const std::string tmp_path = dir + "/." + std::string(name) + ".creating." + std::to_string(::getpid());
    Fd f;
    f.fd = ::open(tmp_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (f.fd < 0) fail("cannot create {}: {}", tmp_path, errno_text(errno));
    auto cleanup = [&] { ::unlink(tmp_path.c_str()); };
    if (::ftruncate(f.fd, static_cast<off_t>(bytes)) != 0) {
        int e = errno;
        cleanup();
        fail("cannot size {} to {}: {}", tmp_path, format_bytes(bytes), errno_text(e));
    }
    // Reserve every page now: "not enough memory" must be a start-up error.
    if (int rc = ::posix_fallocate(f.fd, 0, static_cast<off_t>(bytes)); rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
        cleanup();
        reserve_errno = rc;
        return nullptr;
    }
    void* p = map_aligned(f.fd, bytes, prefault ? MAP_POPULATE : 0);
    if (p == MAP_FAILED) {
        int e = errno;
        cleanup();
        if (e == ENOMEM) { reserve_errno = e; return nullptr; }
        fail("cannot map {}: {}", tmp_path, errno_text(e));
    }
    auto* base = static_cast<std::byte*>(p);
    if (prefault && !prefault_guarded(base, bytes, page)) {
        ::munmap(p, bytes);
        cleanup();
        reserve_errno = ENOMEM;
        return nullptr;
    }
    try {
        init(base);
    } catch (...) {
        ::munmap(p, bytes);
        cleanup();
        throw;
    }
    // The name appears only now, fully initialised. link() fails if the name exists (a racing
    // creator), unlike rename(); tmpfs and hugetlbfs both support it.
    if (::link(tmp_path.c_str(), final_path.c_str()) != 0) {
        int e = errno;
        ::munmap(p, bytes);
        cleanup();
        if (e == EEXIST) fail("a ring named '{}' already exists ({})", name, final_path);
        fail("cannot name the ring {}: {}", final_path, errno_text(e));
    }
    cleanup();
    return base;
}

// `.NAME.creating.PID` files of creators that died mid-create (on hugetlbfs they hold reserved
// pages): removed once that pid is gone. A live pid's file is its creation in progress.
void remove_stale_temporaries(const std::string& dir, std::string_view name) {
    if (dir.empty()) return;
    const std::string prefix = "." + std::string(name) + ".creating.";
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        const std::string f = e.path().filename().string();
        if (f.rfind(prefix, 0) != 0) continue;
        char* end = nullptr;
        const long pid = std::strtol(f.c_str() + prefix.size(), &end, 10);
        if (!end || *end || pid <= 0 || pid == ::getpid() || process_alive(static_cast<pid_t>(pid))) continue;
        if (::unlink(e.path().c_str()) == 0)
            log::info("removed {}, left by process {} that died while it created '{}'", e.path().string(), pid, name);
    }
}

bool is_hugetlbfs(const std::string& path) {
    struct statfs s{};
    return ::statfs(path.c_str(), &s) == 0 && static_cast<unsigned long>(s.f_type) == HUGETLBFS_MAGIC;
}

} // namespace

std::string shm_dir() {
    const char* d = std::getenv("HSRING_SHM_DIR");
    return d && *d ? d : "/dev/shm";
}

HugePageProbe probe_huge_pages() {
    HugePageProbe p;
    p.page_bytes = meminfo_kb("Hugepagesize") * 1024;
    std::uint64_t free = meminfo_kb("HugePages_Free");
    std::uint64_t rsvd = meminfo_kb("HugePages_Rsvd");
    p.free_pages = free > rsvd ? free - rsvd : 0;
    if (const char* o = std::getenv("HSRING_HUGETLBFS")) {
        std::string v(o);
        if (v != "none" && is_hugetlbfs(v)) p.mount = v;
        if (v == "none") p.free_pages = 0;
        return p;
    }
    std::ifstream mounts("/proc/mounts");
    std::string line;
    while (std::getline(mounts, line)) {
        std::istringstream ls(line);
        std::string dev, dir, type, opts;
        ls >> dev >> dir >> type >> opts;
        if (type != "hugetlbfs") continue;
        // Only 2 MiB-page mounts: the layout aligns payloads to 2 MiB.
        bool other_size = opts.find("pagesize=") != std::string::npos && opts.find("pagesize=2M") == std::string::npos;
        if (!other_size && p.page_bytes == kHugePage && ::access(dir.c_str(), W_OK) == 0) {
            p.mount = dir;
            break;
        }
    }
    return p;
}

std::unique_ptr<Region> Region::create(std::string_view name, std::uint64_t bytes, HugePages hp, bool prefault,
                                       const std::function<void(std::byte*)>& init) {
    check_name(name);
    for (const std::string& dir : {probe_huge_pages().mount, shm_dir()}) remove_stale_temporaries(dir, name);
    if (std::string existing = find(name); !existing.empty())
        fail("a ring named '{}' already exists ({}): attach to it, remove it (hsring ring rm {}), or choose "
             "another [ring] name", name, existing, name);
    bytes = align_up(bytes, kHugePage);
    const std::uint64_t pages = bytes / kHugePage;
    auto r = std::unique_ptr<Region>(new Region());
    int err = 0;
    if (hp != HugePages::Off) {
        HugePageProbe probe = probe_huge_pages();
        std::string why;
        if (probe.mount.empty()) {
            why = fmt::format("no hugetlbfs mount with 2 MiB pages was found (as root: mkdir -p /dev/hugepages && "
                              "mount -t hugetlbfs -o pagesize=2M none /dev/hugepages)");
        } else if (probe.free_pages < pages) {
            why = fmt::format("{} free 2 MiB huge pages, {} needed (as root: sysctl vm.nr_hugepages={})",
                              probe.free_pages, pages, pages + (meminfo_kb("HugePages_Total") - probe.free_pages));
        } else {
            r->base_ = build(probe.mount, name, bytes, kHugePage, prefault, init, err);
            if (r->base_) {
                r->info_ = {probe.mount + "/" + std::string(name), true, bytes};
                return r;
            }
            why = fmt::format("reserving {} huge pages on {} failed: {}", pages, probe.mount, errno_text(err));
        }
        if (hp == HugePages::Require)
            fail("ring '{}' needs {} of huge pages ([ring] huge_pages = \"require\") but {}; or set huge_pages = "
                 "\"auto\" to fall back to /dev/shm", name, format_bytes(bytes), why);
        log::warn("ring '{}': using /dev/shm with 4 KiB pages because {}. Huge pages make registration and "
                  "first touch ~2-3x faster.", name, why);
    }
    const std::string dir = shm_dir();
    r->base_ = build(dir, name, bytes, 4096, prefault, init, err);
    if (!r->base_)
        fail("cannot reserve {} for ring '{}' in {}: {}. Free memory, enlarge {} (mount -o remount,size=... {}), "
             "or lower [ring] size / slots", format_bytes(bytes), name, dir, errno_text(err), dir, dir);
    r->info_ = {dir + "/" + std::string(name), false, bytes};
    return r;
}

std::string Region::find(std::string_view name) {
    check_name(name);
    HugePageProbe probe = probe_huge_pages();
    for (const std::string& dir : {probe.mount, shm_dir()}) {
        if (dir.empty()) continue;
        std::string path = dir + "/" + std::string(name);
        if (::faccessat(AT_FDCWD, path.c_str(), F_OK, AT_SYMLINK_NOFOLLOW) == 0) return path;
    }
    return "";
}

std::unique_ptr<Region> Region::open(std::string_view name) {
    std::string path = find(name);
    if (path.empty())
        fail("no ring named '{}' (looked in the hugetlbfs mount and {}): is `hsring run` running, or was the ring "
             "removed?", name, shm_dir());
    Fd f;
    f.fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (f.fd < 0) {
        if (errno == ELOOP) fail("{} is a symbolic link, not an hsring ring: remove it (rm {})", path, path);
        fail("cannot open ring {}: {}", path, errno_text(errno));
    }
    struct stat st{};
    if (::fstat(f.fd, &st) != 0) fail("cannot stat ring {}: {}", path, errno_text(errno));
    check_owner(path, st);
    if (st.st_size < static_cast<off_t>(kHugePage))
        fail("{} is not an hsring ring (only {} bytes)", path, st.st_size);
    void* p = map_aligned(f.fd, static_cast<std::uint64_t>(st.st_size), 0);
    if (p == MAP_FAILED) fail("cannot map ring {}: {}", path, errno_text(errno));
    auto r = std::unique_ptr<Region>(new Region());
    r->base_ = static_cast<std::byte*>(p);
    r->info_ = {path, is_hugetlbfs(path.substr(0, path.rfind('/'))), static_cast<std::uint64_t>(st.st_size)};
    return r;
}

bool Region::remove(std::string_view name) {
    ::unlink((shm_dir() + "/." + std::string(name) + ".cuda-register.lock").c_str());
    for (const std::string& dir : {probe_huge_pages().mount, shm_dir()}) remove_stale_temporaries(dir, name);
    bool removed = false;
    for (std::string path = find(name); !path.empty(); path = find(name)) {
        if (::unlink(path.c_str()) != 0) fail("cannot remove ring {}: {}", path, errno_text(errno));
        removed = true;
    }
    return removed;
}

Region::~Region() {
    if (base_) ::munmap(base_, info_.bytes);
}

} // namespace hsring::shm
