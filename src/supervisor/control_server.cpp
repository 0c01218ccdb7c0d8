// The control socket, server side (see control_server.hpp).
#include "supervisor/control_server.hpp"

#include "hsring/error.hpp"
#include "supervisor/run_files.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace hsring::supervisor {

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

constexpr auto kRequestTimeout = 5s;
constexpr std::size_t kMaxRequest = 64 * 1024;

sockaddr_un address(const std::filesystem::path& p) {
    check_socket_path(p);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, p.c_str(), sizeof a.sun_path - 1);
    return a;
}

// True if a process accepts connections on `p` (a live supervisor).
bool someone_listens(const sockaddr_un& a) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
}

} // namespace

ControlServer::ControlServer(std::filesystem::path socket) : path_(std::move(socket)) {
    const sockaddr_un a = address(path_);
    if (std::filesystem::is_symlink(path_))
        fail("{} is a symbolic link: refusing to use it as the control socket; remove the link", path_.string());
    if (std::filesystem::exists(std::filesystem::symlink_status(path_))) {
        if (someone_listens(a))
            fail("{} is in use: a supervisor is already running in this run directory (hsring status --run-dir {})",
                 path_.string(), path_.parent_path().string());
        ::unlink(path_.c_str());  // left by a supervisor that died
    }
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (listen_fd_ < 0) fail("socket: {}", errno_text(errno));
    // The socket's mode comes from the umask at bind(): 0600 from the start, no chmod race.
    const mode_t old = ::umask(0177);
    const int rc = ::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a);
    const int err = errno;
    ::umask(old);
    if (rc != 0) {
        ::close(listen_fd_);
        fail("cannot bind the control socket {}: {}", path_.string(), errno_text(err));
    }
    if (::listen(listen_fd_, 16) != 0) {
        const int e = errno;
        ::close(listen_fd_);
        ::unlink(path_.c_str());
        fail("listen on {}: {}", path_.string(), errno_text(e));
    }
}

ControlServer::~ControlServer() {
    for (auto& c : conns_) close_conn(c);
    if (listen_fd_ >= 0) {
        ::close(listen_fd_);
        ::unlink(path_.c_str());
    }
}

void ControlServer::poll_fds(std::vector<pollfd>& out) const {
    out.push_back({listen_fd_, POLLIN, 0});
    for (const auto& c : conns_)
        if (c.fd >= 0) out.push_back({c.fd, POLLIN, 0});
}

void ControlServer::service(const std::vector<pollfd>& ready, const ControlHandler& handler) {
    for (const auto& p : ready) {
        if (!p.revents) continue;
        if (p.fd == listen_fd_) {
            accept_all();
            continue;
        }
        for (auto& c : conns_)
            if (c.fd == p.fd) read_conn(c, handler);
    }
    std::erase_if(conns_, [](const Conn& c) { return c.fd < 0; });
}

void ControlServer::accept_all() {
    for (;;) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) return;  // EAGAIN: none left; other errors: the client is gone
        conns_.push_back({fd, {}, false, std::chrono::steady_clock::now() + kRequestTimeout});
    }
}

void ControlServer::read_conn(Conn& c, const ControlHandler& handler) {
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(c.fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n <= 0) {
            close_conn(c);  // the client hung up (a held `hsring stop` that gave up waiting)
            return;
        }
        if (c.held) continue;  // nothing more is expected from a held client
        c.in.append(buf, static_cast<std::size_t>(n));
        if (c.in.size() > kMaxRequest) {
            send_line(c.fd, {{"ok", false}, {"error", "request too long"}});
            close_conn(c);
            return;
        }
    }
    const auto nl = c.in.find('\n');
    if (c.held || nl == std::string::npos) return;
    ControlReply reply;
    try {
        reply = handler(json::parse(c.in.substr(0, nl)));
    } catch (const json::exception& e) {
        reply.body = {{"ok", false}, {"error", std::string("bad request: ") + e.what()}};
    } catch (const Error& e) {
        reply.body = {{"ok", false}, {"error", e.what()}};
    } catch (const std::exception& e) {
        // Nothing a client sends may end the supervisor's loop: any other failure is this
        // request's error.
        reply.body = {{"ok", false}, {"error", std::string("the supervisor could not answer: ") + e.what()}};
    }
    send_line(c.fd, reply.body);
    if (reply.hold) c.held = true;
    else close_conn(c);
}

void ControlServer::send_line(int fd, const json& body) {
    // A reply may quote the request (an unknown worker's name): bytes that are not UTF-8 are
    // replaced, never thrown, so no request can end the supervisor's loop.
    std::string s = body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    // Replies are small (a status of a few KiB); the client reads at once. Give a slow one a
    // moment rather than a partial answer, but never block the supervisor for long.
    std::size_t off = 0;
    for (int tries = 0; off < s.size() && tries < 200; ++tries) {
        const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
        if (n > 0) {
            off += static_cast<std::size_t>(n);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            pollfd p{fd, POLLOUT, 0};
            ::poll(&p, 1, 5);
            continue;
        }
        return;
    }
}

void ControlServer::close_conn(Conn& c) {
    if (c.fd >= 0) ::close(c.fd);
    c.fd = -1;
}

void ControlServer::expire() {
    const auto now = std::chrono::steady_clock::now();
    for (auto& c : conns_)
        if (!c.held && now > c.deadline) close_conn(c);
    std::erase_if(conns_, [](const Conn& c) { return c.fd < 0; });
}

void ControlServer::finish(const json& report) {
    for (auto& c : conns_) {
        if (c.held) send_line(c.fd, report);
        close_conn(c);
    }
    conns_.clear();
}

} // namespace hsring::supervisor
