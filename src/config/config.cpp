// TOML -> Config. Defaults live in the struct definitions (hsring/config.hpp) and are documented
// key by key in config/reference.toml; ranges live here.
#include "config/toml_section.hpp"
#include "hsring/config.hpp"
#include "hsring/drafter_kind.hpp"
#include "hsring/worker_contract.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>

#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace hsring {

std::size_t dtype_bytes(DType t) {
    switch (t) {
    case DType::BF16:
    case DType::F16: return 2;
    case DType::F32: return 4;
    }
    return 0;
}
const char* to_string(DType t) {
    switch (t) {
    case DType::BF16: return "bf16";
    case DType::F16: return "fp16";
    case DType::F32: return "fp32";
    }
    return "?";
}
const char* to_string(HugePages h) {
    switch (h) {
    case HugePages::Auto: return "auto";
    case HugePages::Require: return "require";
    case HugePages::Off: return "off";
    }
    return "?";
}
const char* to_string(Restart r) {
    switch (r) {
    case Restart::OnFailure: return "on-failure";
    case Restart::Always: return "always";
    case Restart::Never: return "never";
    }
    return "?";
}

const char* to_string(Recompute r) {
    switch (r) {
    case Recompute::None: return "none";
    case Recompute::Layers: return "layers";
    }
    return "?";
}

const char* to_string(TargetWeights w) { return w == TargetWeights::FP8 ? "fp8" : "bf16"; }

const char* to_string(Matmul m) {
    switch (m) {
    case Matmul::BF16: return "bf16";
    case Matmul::FP8: return "fp8";
    }
    return "?";
}

const char* to_string(TransportKind k) {
    switch (k) {
    case TransportKind::Host: return "host";
    case TransportKind::Peer: return "peer";
    case TransportKind::PeerAndHost: return "peer+host";
    }
    return "?";
}

std::string Place::str() const { return is_cpu() ? "cpu" : fmt::format("gpu{}", gpu); }

std::filesystem::path Config::resolve(const std::filesystem::path& p) const {
    if (p.empty() || p.is_absolute()) return p;
    return file.parent_path() / p;
}

namespace {

using config_detail::Section;
constexpr std::uint64_t kU64Max = std::numeric_limits<std::int64_t>::max();

// Shared-memory names hold at most 60 characters (src/shm/region.cpp); the longest suffix is
// "-ledger" (7), and the default ring name prefixes "hsring-" (7).
constexpr std::size_t kMaxRingName = 60 - 7;
constexpr std::size_t kMaxRunName = kMaxRingName - 7;

const std::vector<std::pair<const char*, DType>> kDTypes{
    {"bf16", DType::BF16}, {"fp16", DType::F16}, {"fp32", DType::F32}};

Section section(const toml::table& root, const char* name, const std::string& file) {
    const toml::node* n = root.get(name);
    if (!n) return Section(nullptr, name, file, {});
    if (!n->is_table())
        fail("{}:{}:{}: [{}] must be a table (write [{}] on its own line, then its keys)", file,
             n->source().begin.line, n->source().begin.column, name, name);
    return Section(n->as_table(), name, file, n->source());
}

std::vector<Place> to_places(const std::vector<int>& v) {
    std::vector<Place> out;
    for (int g : v) out.push_back(Place{g});
    return out;
}

void read_run(Config& c, const toml::table& root, const std::string& file) {
    Section s = section(root, "run", file);
    s.string("name", c.run.name, false);
    for (char ch : c.run.name)
        if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.'))
            s.bad("name", fmt::format("\"{}\" may hold only letters, digits, '-', '_' and '.' (it names the ring and files)", c.run.name));

    std::string dir;
    s.string("run_dir", dir, false);
    c.run.run_dir = dir;
    s.integer("seed", c.run.seed, 0, kU64Max);
    s.boolean("keep_ring", c.run.keep_ring);
    s.choice("mode", c.run.mode, {{"train", RunMode::Train}, {"synthetic", RunMode::Synthetic}});
    s.finish();
}

void read_topology(Config& c, const toml::table& root, const std::string& file) {
    Section s = section(root, "topology", file);
    s.require("targets", "the target workers' places, e.g. targets = [0, 1, 2] (GPU indices) or [\"cpu\"]");
    s.require("drafters", "the drafter workers' places, e.g. drafters = [3] or [3, 4] (data-parallel) or [\"cpu\"]");
    std::vector<int> t, d;
    s.places("targets", t);
    s.places("drafters", d);
    if (t.empty()) s.bad("targets", "must name at least one place (a GPU index or \"cpu\")");
    if (d.empty()) s.bad("drafters", "must name at least one place: a run without a drafter trains nothing");
    if (t.size() > kDrafterStatsBase)
        s.bad("targets", fmt::format("{} targets: at most {} per machine", t.size(), kDrafterStatsBase));
    if (d.size() > kMaxWorkers - kDrafterStatsBase)
        s.bad("drafters", fmt::format("{} drafters: at most {} per machine", d.size(), kMaxWorkers - kDrafterStatsBase));
    s.boolean("allow_shared_gpus", c.topology.allow_shared_gpus);
    // A GPU holds one worker, unless allow_shared_gpus (then targets with each other or with a
    // drafter). Two drafter ranks never share one: NCCL, which sums their gradients, refuses two
    // ranks on one device, and the gang would fail and restart forever.
    std::map<int, std::string> owner, drafter_on;
    auto place = [&](const char* key, const std::vector<int>& v) {
        const bool drafters = key[0] == 'd';
        for (std::size_t i = 0; i < v.size(); ++i) {
            const int g = v[i];
            const std::string who = fmt::format("{}.{}", drafters ? "drafter" : "target", i);
            if (g < 0) continue;
            if (drafters) {
                auto [it, fresh] = drafter_on.emplace(g, who);
                if (!fresh)
                    s.bad(key, fmt::format("GPU {} holds two drafter ranks ({} and {}): NCCL, which sums the drafters' "
                                           "gradients, refuses two ranks on one GPU (allow_shared_gpus does not change "
                                           "that); give each drafter rank its own GPU, or list the GPU once",
                                           g, it->second, who));
            }
            auto [it, fresh] = owner.emplace(g, who);
            if (!fresh && !c.topology.allow_shared_gpus)
                s.bad(key, fmt::format("GPU {} is used twice ({} and {}): give each worker its own GPU, or set "
                                       "allow_shared_gpus = true to share it", g, it->second, who));
        }
    };
    place("targets", t);
    place("drafters", d);
    c.topology.targets = to_places(t);
    c.topology.drafters = to_places(d);
    s.finish();
}

void read_ring(Config& c, const toml::table& root, const std::string& file) {
    Section s = section(root, "ring", file);
    s.string("name", c.ring.name, false);
    s.bytes("size", c.ring.size, 0, 1ull << 50);
    s.integer("slots", c.ring.slots, 0, 1u << 16);
    s.integer("slot_tokens", c.ring.slot_tokens, 16, 1ull << 24);
    s.integer("max_samples_per_slot", c.ring.max_samples_per_slot, 0, 1u << 20);
    s.choice("huge_pages", c.ring.huge_pages,
             {{"auto", HugePages::Auto}, {"require", HugePages::Require}, {"off", HugePages::Off}});
    s.choice("dtype", c.ring.dtype, kDTypes);
    if (!c.ring.name.empty()) {
        for (char ch : c.ring.name)
            if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.'))
                s.bad("name", "may hold only letters, digits, '-', '_' and '.' (a POSIX shm name)");
        if (c.ring.name.size() > kMaxRingName || c.ring.name[0] == '.')
            s.bad("name", fmt::format("\"{}\": a ring name has 1 to {} characters (its ledger \"<name>-ledger\" must fit "
                                      "the 60 of a shared-memory name) and does not start with '.'", c.ring.name,
                                      kMaxRingName));
    }
    if (c.ring.slots == 1) s.bad("slots", "a ring of one slot cannot overlap writing and reading: use 2 or more (0 = from size)");
    if (c.ring.size == 0 && c.ring.slots == 0)
        fail("{}: [ring] needs size (e.g. size = \"16GiB\") or slots (e.g. slots = 8)", s.at(nullptr));
    s.finish();
}

void read_transport(Config& c, const toml::table& root, const std::string& file) {
    Section s = section(root, "transport", file);
    s.choice("kind", c.transport.kind,
             {{"host", TransportKind::Host}, {"peer", TransportKind::Peer}, {"peer+host", TransportKind::PeerAndHost}});
    s.integer("peer_buffers", c.transport.peer_buffers, 1, 16);
    if (c.transport.kind != TransportKind::Host) {
        // A peer copy lives in a target's GPU memory and is pulled by a drafter's GPU.
        auto on_cpu = [](const std::vector<Place>& v) {
            return std::any_of(v.begin(), v.end(), [](const Place& p) { return p.is_cpu(); });
        };
        if (on_cpu(c.topology.targets) || on_cpu(c.topology.drafters))
            s.bad("kind", fmt::format("\"{}\" copies hidden states between GPUs: every [topology] target and drafter "
                                      "must be on a GPU (\"cpu\" places use kind = \"host\")",
                                      to_string(c.transport.kind)));
    }
    s.finish();
}

void read_target(Config& c, const toml::table& root, const std::string& file) {
    Section s = section(root, "target", file);
    s.require("model", "\"preset:tiny\" (or another preset) or a HF model directory");
    s.string("model", c.target.model, false);
    s.int_list("layer_ids", c.target.layer_ids, 0, 4096);
    s.choice("dtype", c.target.dtype, kDTypes);
    s.choice("weights", c.target.weights, {{"bf16", TargetWeights::BF16}, {"fp8", TargetWeights::FP8}});
    s.finish();
}

void read_drafter(Config& c, const toml::table& root, const std::string& file) {
    Section s = section(root, "drafter", file);
    // The types of the drafter kinds' table (hsring/drafter_kind.hpp).
    std::vector<std::pair<const char*, std::string>> types;
    for (const DrafterKind* k : drafter_kinds()) types.emplace_back(k->type.data(), std::string(k->type));
    s.choice("type", c.drafter.type, types);
    s.integer("num_layers", c.drafter.num_layers, 1, 64);
    s.integer("block_size", c.drafter.block_size, 2, 256);
    s.integer("mask_token_id", c.drafter.mask_token_id, -1, std::numeric_limits<std::int32_t>::max());
    s.integer("inflight_slots", c.drafter.inflight_slots, 1, 16);
    s.integer("ttt_steps", c.drafter.ttt_steps, 1, 64);
    s.integer("draft_vocab", c.drafter.draft_vocab, 0, std::numeric_limits<std::int32_t>::max());
    s.string("init", c.drafter.init);
    std::string exp;
    s.string("export_dir", exp);
    c.drafter.export_dir = exp;
    s.finish();
}

void read_data(Config& c, const toml::table& root, const std::string& file) {
    Section s = section(root, "data", file);
    s.require("path", "the pre-tokenized JSONL file (one {\"input_ids\": [...], \"loss_mask\": [...]} per line)");
    std::string p;
    s.string("path", p, false);
    c.data.path = p;
    s.integer("epochs", c.data.epochs, 1, 100000);
    s.choice("on_bad_line", c.data.on_bad_line, {{"fail", OnBadLine::Fail}, {"skip", OnBadLine::Skip}});
    s.integer("max_seq_len", c.data.max_seq_len, 0, 1ull << 24);
    s.boolean("shuffle", c.data.shuffle);
    std::string eval;
    s.string("eval_path", eval);
    c.data.eval_path = eval;
    s.choice("responses", c.data.responses, {{"dataset", Responses::Dataset}, {"target", Responses::Target}});
    s.finish();
}

void read_generate(Config& c, const toml::table& root, const std::string& file) {
    Section s = section(root, "generate", file);
    auto& g = c.generate;
    s.integer("max_new_tokens", g.max_new_tokens, 1, 1u << 20);
    s.number("temperature", g.temperature, 0.0, 100.0);
    s.number("top_p", g.top_p, 1e-9, 1.0);
    s.integer("seed", g.seed, 0, kU64Max);
    s.integer("batch", g.batch, 1, 1u << 16);
    g.stop_token_ids_set = s.has("stop_token_ids");
    s.int_list("stop_token_ids", g.stop_token_ids, 0, std::numeric_limits<std::int32_t>::max());
    s.finish();
}

void read_eval(Config& c, const toml::table& root, const std::string& file) {
    Section s = section(root, "eval", file);
    auto& e = c.eval;
    std::string prompts;
    s.string("spec_prompts", prompts);
    e.spec_prompts = prompts;
    s.integer("spec_every", e.spec_every, 0, kU64Max);
    s.integer("spec_max_new_tokens", e.spec_max_new_tokens, 1, 1u << 20);
    s.integer("spec_samples", e.spec_samples, 0, kU64Max);
    if (e.spec_prompts.empty() && e.spec_every > 0)
        s.bad("spec_every", fmt::format("= {} needs prompts: tau is measured on the prompts of a JSONL file (set "
                                        "spec_prompts = \"heldout.jsonl\")", e.spec_every));
    s.finish();
}

void read_train(Config& c, const toml::table& root, const std::string& file) {
    Section s = section(root, "train", file);
    auto& t = c.train;
    s.number("lr", t.lr, 0.0, 10.0);
    s.number("min_lr_ratio", t.min_lr_ratio, 0.0, 1.0);
    s.integer("warmup_steps", t.warmup_steps, 0, kU64Max);
    s.integer("max_steps", t.max_steps, 0, kU64Max);
    s.number("weight_decay", t.weight_decay, 0.0, 10.0);
    s.number("beta1", t.beta1, 0.0, 0.999999);
    s.number("beta2", t.beta2, 0.0, 0.999999);
    s.number("eps", t.eps, 1e-30, 1.0);
    s.number("grad_clip", t.grad_clip, 0.0, 1e9);
    s.integer("tokens_per_step", t.tokens_per_step, 0, kU64Max);
    s.integer("micro_batch_tokens", t.micro_batch_tokens, 1, kU64Max);
    s.integer("num_anchors", t.num_anchors, 1, 1u << 20);
    s.number("loss_decay_gamma", t.loss_decay_gamma, 0.0, 1e9);
    s.number("ttt_decay", t.ttt_decay, 0.0, 1.0);
    s.integer("loss_chunk", t.loss_chunk, 1, 1u << 24);
    s.choice("recompute", t.recompute, {{"none", Recompute::None}, {"layers", Recompute::Layers}});
    s.choice("matmul", t.matmul, {{"bf16", Matmul::BF16}, {"fp8", Matmul::FP8}});
    s.choice("lm_head", t.lm_head, {{"bf16", Matmul::BF16}, {"fp8", Matmul::FP8}});
    s.integer("checkpoint_every", t.checkpoint_every, 1, kU64Max);
    s.boolean("checkpoint_background", t.checkpoint_background);
    s.integer("log_every", t.log_every, 1, 1u << 30);
    s.integer("eval_every", t.eval_every, 0, kU64Max);
    s.integer("max_nonfinite_steps", t.max_nonfinite_steps, 1, 1u << 30);
    s.finish();
}

void read_supervisor(Config& c, const toml::table& root, const std::string& file) {
    Section s = section(root, "supervisor", file);
    auto& v = c.supervisor;
    s.choice("restart", v.restart,
             {{"on-failure", Restart::OnFailure}, {"always", Restart::Always}, {"never", Restart::Never}});
    s.integer("max_restarts", v.max_restarts, 0, 1000000);
    s.number("restart_window_s", v.restart_window_s, 0.0, 1e9);
    s.number("backoff_initial_s", v.backoff_initial_s, 0.0, 3600.0);
    s.number("backoff_max_s", v.backoff_max_s, 0.0, 86400.0);
    s.number("status_interval_s", v.status_interval_s, 0.05, 3600.0);
    s.number("stop_timeout_s", v.stop_timeout_s, 0.0, 86400.0);
    if (v.backoff_max_s < v.backoff_initial_s)
        s.bad("backoff_max_s", fmt::format("{} is below backoff_initial_s {}", v.backoff_max_s, v.backoff_initial_s));
    s.finish();
}

void read_distributed(Config& c, const toml::table& root, const std::string& file) {
    Section s = section(root, "distributed", file);
    auto& d = c.distributed;
    s.integer("nnodes", d.nnodes, 1, 4096);
    s.integer("node_rank", d.node_rank, 0, 4095);
    s.string("master_addr", d.master_addr, false);
    s.integer("master_port", d.master_port, 1, 65535);
    s.number("timeout_s", d.timeout_s, 1.0, 86400.0);
    s.choice("backend", d.backend, {{"auto", DistBackend::Auto}, {"nccl", DistBackend::Nccl}, {"gloo", DistBackend::Gloo}});
    if (d.node_rank >= d.nnodes)
        s.bad("node_rank", fmt::format("{} is not below nnodes = {}: machines are numbered 0..{}", d.node_rank,
                                       d.nnodes, d.nnodes - 1));
    s.finish();
}

// Cross-table checks.
void check_config(const Config& c) {
    const std::string& file = c.file.string();
    if (c.train.eval_every && c.data.eval_path.empty())
        fail("{}: [train] eval_every = {} needs held-out data: set [data] eval_path to a pre-tokenized JSONL file, or "
             "remove eval_every", file, c.train.eval_every);
    if (c.data.responses == Responses::Target && c.run.mode == RunMode::Synthetic)
        fail("{}: [data] responses = \"target\" needs a target model to answer the prompts, but [run] mode = "
             "\"synthetic\" runs no model: use mode = \"train\" or responses = \"dataset\"", file);
    const bool gpu = std::any_of(c.topology.drafters.begin(), c.topology.drafters.end(), [](const Place& p) { return !p.is_cpu(); });
    const bool cpu = std::any_of(c.topology.drafters.begin(), c.topology.drafters.end(), [](const Place& p) { return p.is_cpu(); });
    if (gpu && cpu)
        fail("{}: [topology] drafters mixes GPUs and \"cpu\": data-parallel drafters all run on GPUs (NCCL) or all on "
             "the CPU (Gloo)", file);
    if (cpu && c.distributed.backend == DistBackend::Nccl)
        fail("{}: [distributed] backend = \"nccl\" needs GPU drafters; CPU drafters use \"gloo\" (or \"auto\")", file);
    // GPU gradients over Gloo would need a device-to-host copy per bucket: not built. Refused
    // rather than run on NCCL behind the user's back.
    if (gpu && c.distributed.backend == DistBackend::Gloo)
        fail("{}: [distributed] backend = \"gloo\" is for CPU drafters; GPU drafters use \"nccl\" (or \"auto\")", file);
}

} // namespace

const char* to_string(DistBackend b) {
    switch (b) {
    case DistBackend::Auto: return "auto";
    case DistBackend::Nccl: return "nccl";
    case DistBackend::Gloo: return "gloo";
    }
    return "?";
}

void apply_launcher_overrides(Config& cfg, const char* node_rank_flag) {
    auto& d = cfg.distributed;
    auto number = [](const char* name, const char* text, std::uint64_t hi) -> std::uint32_t {
        char* end = nullptr;
        errno = 0;
        const unsigned long long v = std::strtoull(text, &end, 10);
        if (errno || end == text || *end || v > hi)
            fail("{}={}: expected a whole number from 0 to {}", name, text, hi);
        return static_cast<std::uint32_t>(v);
    };
    auto from_env = [](const char* name) -> const char* {
        const char* v = std::getenv(name);
        return v && *v ? v : nullptr;
    };
    if (const char* v = from_env(launcher_env::kMasterAddr)) d.master_addr = v;
    if (const char* v = from_env(launcher_env::kMasterPort)) {
        d.master_port = number(launcher_env::kMasterPort, v, 65535);
        if (d.master_port == 0) fail("{}=0: give the master's TCP port (1..65535)", launcher_env::kMasterPort);
    }
    if (const char* v = from_env(launcher_env::kNnodes)) {
        d.nnodes = number(launcher_env::kNnodes, v, 4096);
        if (d.nnodes == 0) fail("{}=0: a run has at least one machine", launcher_env::kNnodes);
        d.nnodes_source = launcher_env::kNnodes;
    }
    if (const char* v = from_env(launcher_env::kNodeRank)) {
        d.node_rank = number(launcher_env::kNodeRank, v, 4095);
        d.node_rank_source = launcher_env::kNodeRank;
    }
    if (node_rank_flag) {
        d.node_rank = number("--node-rank", node_rank_flag, 4095);
        d.node_rank_source = "--node-rank";
    }
    if (d.node_rank >= d.nnodes)
        fail("{}: node rank {} (from {}) is not below the number of machines {} (from {}): machines are numbered "
             "0..{}", cfg.file.string(), d.node_rank, d.node_rank_source, d.nnodes, d.nnodes_source, d.nnodes - 1);
}

Config parse_config(const std::string& text, const std::string& source_name) {
    toml::table root;
    try {
        root = toml::parse(text, source_name);
    } catch (const toml::parse_error& e) {
        const auto& b = e.source().begin;
        fail("{}:{}:{}: not valid TOML: {}", source_name, b.line, b.column, e.description());
    }
    static const std::set<std::string, std::less<>> kTables{
        "run",  "topology", "ring",  "transport",  "target",     "drafter",
        "data", "generate", "train", "eval", "supervisor", "distributed"};
    for (auto&& [k, v] : root) {
        if (!kTables.count(k.str())) {
            const auto& r = k.source();
            fail("{}:{}:{}: unknown table or key '{}' at the top level (allowed tables: [run], "
                 "[topology], [ring], [transport], [target], [drafter], [data], [generate], [train], [eval], [supervisor], "
                 "[distributed])",
                 source_name, r.begin.line, r.begin.column, k.str());
        }
    }
    Config c;
    c.file = source_name;
    read_run(c, root, source_name);
    read_topology(c, root, source_name);
    read_ring(c, root, source_name);
    read_transport(c, root, source_name);
    // The ring is "hsring-<name>" unless [ring] name is set, and its ledger "<ring>-ledger": a
    // shared-memory name holds at most 60 characters (src/shm/region.cpp).
    if (c.ring.name.empty() && c.run.name.size() > kMaxRunName)
        section(root, "run", source_name)
            .bad("name", fmt::format("\"{}\" is {} characters; at most {} (the ring is named hsring-<name>, its ledger "
                                     "hsring-<name>-ledger, and a shared-memory name holds at most 60): use a shorter "
                                     "name, or set [ring] name", c.run.name, c.run.name.size(), kMaxRunName));
    read_target(c, root, source_name);
    read_drafter(c, root, source_name);
    read_data(c, root, source_name);
    read_generate(c, root, source_name);
    read_train(c, root, source_name);
    read_eval(c, root, source_name);
    read_supervisor(c, root, source_name);
    read_distributed(c, root, source_name);
    check_config(c);
    return c;
}

Config load_config(const std::filesystem::path& file) {
    // An ifstream opens a directory and reads it as empty text: the config would be "missing
    // [topology]" instead of "not a file".
    std::error_code ec;
    const auto st = std::filesystem::status(file, ec);
    if (st.type() == std::filesystem::file_type::not_found)
        fail("{}: no such config file ({}): give the path of a TOML config (config/reference.toml lists every key)",
             file.string(), std::filesystem::absolute(file).lexically_normal().string());
    if (st.type() == std::filesystem::file_type::directory) {
        std::vector<std::string> tomls;
        for (const auto& e : std::filesystem::directory_iterator(file, ec))
            if (e.path().extension() == ".toml") tomls.push_back(e.path().string());
        std::sort(tomls.begin(), tomls.end());
        std::string hint;
        for (std::size_t i = 0; i < tomls.size() && i < 3; ++i) hint += (i ? ", " : "") + tomls[i];
        fail("{} is a directory, not a config file: give a TOML config{}", file.string(),
             hint.empty() ? std::string(" (config/reference.toml lists every key)") : ", e.g. " + hint);
    }
    std::ifstream in(file);
    if (!in) fail("{}: cannot read the config file: {}", file.string(), errno_text(errno));
    std::stringstream ss;
    ss << in.rdbuf();
    return parse_config(ss.str(), file.string());
}

} // namespace hsring
