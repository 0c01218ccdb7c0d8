#pragma once
// Command line of hsring-bench ring (the parent and its worker children share it).
#include "hsring/config.hpp"
#include "hsring/error.hpp"

#include <cstdlib>
#include <string>

namespace hsring::bench {

struct Args {
    int writers = 1, readers = 1, slot_mib = 64, slots = 8, depth = 2, index = 0, peer_buffers = 4;
    double seconds = 5.0, warmup_s = 1.0;
    bool cuda = false;
    HugePages huge_pages = HugePages::Auto;
    TransportKind transport = TransportKind::Host;
    std::string role, ring, handle;
};

inline Args parse_args(int argc, char** argv) {
    Args a;
    auto value = [&](int& i) -> std::string {
        if (i + 1 >= argc) fail("{} needs a value", argv[i]);
        return argv[++i];
    };
    auto num = [&](int& i, int lo, int hi) {
        std::string flag = argv[i], v = value(i);
        char* end = nullptr;
        long n = std::strtol(v.c_str(), &end, 10);
        if (*end || n < lo || n > hi) fail("{} {}: expected an integer in {}..{}", flag, v, lo, hi);
        return static_cast<int>(n);
    };
    for (int i = 1; i < argc; ++i) {
        std::string f = argv[i];
        if (f == "--writers") a.writers = num(i, 1, 64);
        else if (f == "--readers") a.readers = num(i, 1, 64);
        else if (f == "--slot-mib") a.slot_mib = num(i, 1, 1 << 16);
        else if (f == "--slots") a.slots = num(i, 2, 1 << 16);
        else if (f == "--depth") a.depth = num(i, 1, 16);
        else if (f == "--index") a.index = num(i, 0, 1 << 16);
        else if (f == "--seconds") a.seconds = std::atof(value(i).c_str());
        else if (f == "--warmup") a.warmup_s = std::atof(value(i).c_str());
        else if (f == "--cuda") a.cuda = true;
        else if (f == "--peer-buffers") a.peer_buffers = num(i, 1, 16);
        else if (f == "--handle") a.handle = value(i);
        else if (f == "--transport") {
            std::string v = value(i);
            if (v == "host") a.transport = TransportKind::Host;
            else if (v == "peer") a.transport = TransportKind::Peer;
            else if (v == "peer+host") a.transport = TransportKind::PeerAndHost;
            else fail("--transport {}: use host, peer or peer+host", v);
        }
        else if (f == "--role") a.role = value(i);
        else if (f == "--ring") a.ring = value(i);
        else if (f == "--huge-pages") {
            std::string v = value(i);
            if (v == "auto") a.huge_pages = HugePages::Auto;
            else if (v == "require") a.huge_pages = HugePages::Require;
            else if (v == "off") a.huge_pages = HugePages::Off;
            else fail("--huge-pages {}: use auto, require or off", v);
        } else if (f == "-h" || f == "--help") {
            fail("usage: hsring-bench ring --writers P --readers C --slot-mib S --slots N --seconds T [--cuda] "
                 "[--transport host|peer|peer+host] [--peer-buffers B] [--huge-pages auto|require|off] [--depth D] "
                 "[--warmup S]");
        } else {
            fail("unknown argument '{}' (see --help)", f);
        }
    }
    if (a.seconds <= 0) fail("--seconds must be > 0");
    if (a.transport != TransportKind::Host && !a.cuda)
        fail("--transport {} copies between GPUs: add --cuda", to_string(a.transport));
    return a;
}

} // namespace hsring::bench
