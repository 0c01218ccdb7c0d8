#pragma once
// The client end of RUN_DIR/control.sock, used by `hsring status|restart|kill|stop`.
//
// Protocol: the client sends one JSON object and a newline; the supervisor answers one JSON
// object and a newline, then closes, except for a held request (stop with "wait": true), which
// gets a second line when the run has ended:
//
//   {"cmd": "status"}                          -> {"ok": true, "status": {...}}  (status.hpp)
//   {"cmd": "restart", "worker": "target.0"}   -> {"ok": true, "message": "..."}
//   {"cmd": "kill", "worker": "drafter.0"}     -> {"ok": true, "message": "..."}
//   {"cmd": "stop", "now": false, "wait": true}-> {"ok": true, "message": "..."}
//                                                 ... {"done": true, "exit_code": 0, "summary": "..."}
//   any error                                  -> {"ok": false, "error": "unknown worker 'x': ..."}
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

namespace hsring::supervisor {

class ControlClient {
public:
    // Connects to RUN_DIR/control.sock. No socket, or nobody listening, is an error saying that
    // no supervisor runs there.
    explicit ControlClient(const std::filesystem::path& run_dir);
    ~ControlClient();
    ControlClient(const ControlClient&) = delete;
    ControlClient& operator=(const ControlClient&) = delete;

    // Sends `request` and returns the first reply line. A reply with "ok": false is thrown as an
    // hsring::Error carrying the supervisor's message.
    nlohmann::json request(const nlohmann::json& request, std::chrono::milliseconds timeout);
    // The next line the supervisor sends; nullopt if it closed the connection (or it timed out).
    std::optional<nlohmann::json> next(std::optional<std::chrono::milliseconds> timeout);

private:
    std::filesystem::path socket_;
    int fd_ = -1;
    std::string in_;
};

// The default run directory of the control commands: --run-dir, else the run dir of --config's
// file, else the current directory.
std::filesystem::path control_run_dir(const std::optional<std::string>& run_dir_opt,
                                      const std::optional<std::string>& config_opt);

} // namespace hsring::supervisor
