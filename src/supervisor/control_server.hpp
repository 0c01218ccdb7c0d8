#pragma once
// The supervisor's end of RUN_DIR/control.sock. One request per connection, one JSON object per
// line (the protocol is in control_client.hpp). Non-blocking: the supervisor's poll() loop
// watches fds() and calls service(); a client that sends nothing is dropped after a few seconds.
// A request may ask to hold its connection open (`hsring stop` waits for the run's end): the
// supervisor sends its final report to held connections with finish().
#include <nlohmann/json.hpp>

#include <poll.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace hsring::supervisor {

struct ControlReply {
    nlohmann::json body;
    bool hold = false;  // keep the connection for finish()
};
using ControlHandler = std::function<ControlReply(const nlohmann::json& request)>;

class ControlServer {
public:
    // Binds `socket` with mode 0600 (a stale socket of a dead supervisor is replaced; a live one is
    // an error) and listens. Throws hsring::Error with the path.
    explicit ControlServer(std::filesystem::path socket);
    ~ControlServer();
    ControlServer(const ControlServer&) = delete;
    ControlServer& operator=(const ControlServer&) = delete;

    // The descriptors to poll for POLLIN.
    void poll_fds(std::vector<pollfd>& out) const;
    // Accepts and answers what is ready among `ready` (poll results for our fds).
    void service(const std::vector<pollfd>& ready, const ControlHandler& handler);
    // Drops clients that sent no request in time.
    void expire();
    // Sends `report` to every held connection and closes them.
    void finish(const nlohmann::json& report);

private:
    struct Conn {
        int fd = -1;
        std::string in;
        bool held = false;
        std::chrono::steady_clock::time_point deadline;
    };
    void accept_all();
    void read_conn(Conn& c, const ControlHandler& handler);
    static void send_line(int fd, const nlohmann::json& body);
    void close_conn(Conn& c);

    std::filesystem::path path_;
    int listen_fd_ = -1;
    std::vector<Conn> conns_;
};

} // namespace hsring::supervisor
