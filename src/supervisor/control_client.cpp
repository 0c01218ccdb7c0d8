// The control socket, client side (see control_client.hpp).
#include "supervisor/control_client.hpp"

#include "hsring/config.hpp"
#include "hsring/error.hpp"
#include "supervisor/run_files.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hsring::supervisor {

using nlohmann::json;
namespace fs = std::filesystem;

ControlClient::ControlClient(const fs::path& run_dir) : socket_(run_dir / "control.sock") {
    check_socket_path(socket_);
    if (!fs::exists(fs::symlink_status(socket_)))
        fail("no supervisor is running in {} (no {}): start one with `hsring run CONFIG`, or name the run "
             "with --run-dir DIR or --config FILE", run_dir.string(), socket_.filename().string());
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) fail("socket: {}", errno_text(errno));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, socket_.c_str(), sizeof a.sun_path - 1);
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
        const int e = errno;
        ::close(fd_);
        fd_ = -1;
        if (e == ECONNREFUSED)
            fail("no supervisor is running in {}: {} is left over from one that died (`hsring run` replaces it)",
                 run_dir.string(), socket_.string());
        fail("cannot connect to {}: {}", socket_.string(), errno_text(e));
    }
}

ControlClient::~ControlClient() {
    if (fd_ >= 0) ::close(fd_);
}

json ControlClient::request(const json& req, std::chrono::milliseconds timeout) {
    // A worker name typed with bytes that are not UTF-8 reaches the supervisor replaced (U+FFFD),
    // which then names no worker; dump() would throw instead.
    std::string s = req.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    std::size_t off = 0;
    while (off < s.size()) {
        const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail("sending to {}: {}", socket_.string(), errno_text(errno));
        off += static_cast<std::size_t>(n);
    }
    auto reply = next(timeout);
    if (!reply) fail("the supervisor at {} did not answer within {} ms", socket_.string(), timeout.count());
    if (!reply->value("ok", false)) fail("{}", reply->value("error", std::string("the supervisor refused the request")));
    return *reply;
}

std::optional<json> ControlClient::next(std::optional<std::chrono::milliseconds> timeout) {
    const auto deadline = timeout ? std::chrono::steady_clock::now() + *timeout : std::chrono::steady_clock::time_point::max();
    for (;;) {
        const auto nl = in_.find('\n');
        if (nl != std::string::npos) {
            std::string line = in_.substr(0, nl);
            in_.erase(0, nl + 1);
            try {
                return json::parse(line);
            } catch (const json::exception& e) {
                fail("bad reply from {}: {}", socket_.string(), e.what());
            }
        }
        int wait_ms = -1;
        if (timeout) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) return std::nullopt;
            wait_ms = static_cast<int>(left.count());
        }
        pollfd p{fd_, POLLIN, 0};
        const int r = ::poll(&p, 1, wait_ms);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return std::nullopt;
        char buf[8192];
        const ssize_t n = ::read(fd_, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return std::nullopt;
        in_.append(buf, static_cast<std::size_t>(n));
    }
}

fs::path control_run_dir(const std::optional<std::string>& run_dir_opt, const std::optional<std::string>& config_opt) {
    if (run_dir_opt) return fs::absolute(*run_dir_opt);
    if (config_opt) {
        Config cfg = load_config(*config_opt);
        return fs::absolute(derive(cfg).run_dir);
    }
    return fs::current_path();
}

} // namespace hsring::supervisor
