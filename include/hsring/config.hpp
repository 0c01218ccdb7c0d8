#pragma once
// One typed struct tree for a whole run, read from TOML. Every key, its default and its range
// are documented in config/reference.toml; the parser (src/config/) rejects unknown keys, wrong
// types and out-of-range values with "FILE:LINE:COL: [table] key: what is allowed".
//
// Derived sizes (bytes per token, slot bytes, slot count, ring bytes) are computed in one place,
// derive(), from the config and the target model's shape.
#include "hsring/huge_pages.hpp"
#include "hsring/model_shape.hpp"
#include "hsring/on_bad_line.hpp"
#include "hsring/ring_geometry.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace hsring {

enum class Restart { OnFailure, Always, Never };
enum class DType { BF16, F16, F32 };
enum class Responses { Dataset, Target };  // [data] responses
enum class RunMode { Train, Synthetic };
// Activation checkpointing of the drafter: none, or per decoder layer (recompute in backward).
enum class Recompute { None, Layers };
// Precision of the drafter's decoder-layer matmuls (and, [train] lm_head, of the frozen LM head's):
// the compute dtype (bf16 on a GPU, fp32 on the CPU), or FP8 with row scales (src/model/ops/fp8_linear.hpp,
// fp8_weights.hpp).
enum class Matmul { BF16, FP8 };
// The frozen target's linear layers: in the compute dtype, or FP8 e4m3 with one scale per output
// channel (computed once at load, or converted from a checkpoint's 128x128 block scales) and one
// per token for the activations (src/model/ops/fp8_weights.hpp). The GPU only; the CPU keeps bf16/fp32.
enum class TargetWeights { BF16, FP8 };
// How hidden states travel from targets to drafters (hsring/transport.hpp): through the host ring,
// device to device with CUDA IPC, or both.
enum class TransportKind { Host, Peer, PeerAndHost };

std::size_t dtype_bytes(DType t);
const char* to_string(DType t);
const char* to_string(HugePages h);
const char* to_string(Restart r);
const char* to_string(Recompute r);
const char* to_string(Matmul m);
const char* to_string(TargetWeights w);
const char* to_string(TransportKind k);

// Where a worker runs: a GPU index or the CPU ("cpu" in TOML).
struct Place {
    int gpu = -1;  // -1 = CPU
    bool is_cpu() const { return gpu < 0; }
    std::string str() const;
    bool operator==(const Place&) const = default;
};

struct RunConfig {
    std::string name = "hsring";
    std::filesystem::path run_dir;  // default runs/<name>, relative to the current directory
    std::uint64_t seed = 1234;
    bool keep_ring = false;
    RunMode mode = RunMode::Train;  // synthetic: checksummed patterns instead of models
};

struct TopologyConfig {
    std::vector<Place> targets;
    std::vector<Place> drafters;     // data-parallel drafter ranks of this machine (local ranks 0..n-1)
    bool allow_shared_gpus = false;  // several workers on one GPU (squeezed topologies)
};

enum class DistBackend { Auto, Nccl, Gloo };
const char* to_string(DistBackend b);

// Data-parallel drafters across machines: one `hsring run` per machine, all drafters in one c10d
// process group (include/hsring/worker_contract.hpp has the rank arithmetic). The launcher
// variables MASTER_ADDR, MASTER_PORT, NNODES, NODE_RANK and `hsring run --node-rank N` override
// the file (apply_launcher_overrides).
struct DistributedConfig {
    std::uint32_t nnodes = 1;
    std::uint32_t node_rank = 0;
    std::string master_addr = "127.0.0.1";
    std::uint32_t master_port = 29511;
    double timeout_s = 600.0;        // rendezvous, collectives: a dead or hung peer is an error after this
    DistBackend backend = DistBackend::Auto;  // auto: NCCL for GPU drafters, Gloo for CPU drafters
    // Where each value came from, for messages ("NODE_RANK", "--node-rank", "[distributed] node_rank").
    std::string node_rank_source = "[distributed] node_rank", nnodes_source = "[distributed] nnodes";
};

struct RingConfig {
    std::string name;                // shm object name; default "hsring-<run.name>"
    std::uint64_t size = 0;          // payload budget in bytes; 0 = slots x slot bytes
    std::uint32_t slots = 0;         // 0 = as many as `size` holds
    std::uint64_t slot_tokens = 4096;
    std::uint32_t max_samples_per_slot = 0;  // 0 = derived (slot_tokens / 16, at least 16)
    HugePages huge_pages = HugePages::Auto;
    DType dtype = DType::BF16;       // hidden states as stored in the ring
};

struct TransportConfig {
    TransportKind kind = TransportKind::Host;
    std::uint32_t peer_buffers = 2;  // per target (peer kinds): device buffers of one slot payload each
};

struct TargetConfig {
    std::string model;               // "preset:NAME" or a HF model directory (required)
    std::vector<int> layer_ids;      // empty = DFlash default for drafter.num_layers
    DType dtype = DType::BF16;       // compute dtype on GPU (CPU computes in fp32)
    TargetWeights weights = TargetWeights::BF16;  // fp8: the linear layers in FP8 (GPU)
};

struct DrafterConfig {
    std::string type = "dflash";      // a drafter type of src/model/drafter/registry: "dflash", "eagle3"
    std::uint32_t num_layers = 5;
    std::uint32_t block_size = 16;
    std::int64_t mask_token_id = -1;  // -1 = the model's known mask token
    std::uint32_t inflight_slots = 2;
    std::uint32_t ttt_steps = 7;      // eagle3: training-time test steps (draft positions trained)
    std::int64_t draft_vocab = 0;     // eagle3: draft vocabulary (0 = the target's; else its most frequent tokens)
    std::string init;                 // optional exported drafter directory (of `type`) to start from
    std::filesystem::path export_dir; // default RUN_DIR/drafter
};

struct DataConfig {
    std::filesystem::path path;       // pre-tokenized JSONL (required)
    std::uint32_t epochs = 1;
    OnBadLine on_bad_line = OnBadLine::Fail;
    std::uint64_t max_seq_len = 0;    // 0 = slot_tokens; longer samples are truncated
    bool shuffle = true;
    std::filesystem::path eval_path;  // held-out pre-tokenized JSONL (optional)
    // Who wrote the loss-masked turns the drafter learns: the data set's author, or the target,
    // which answers each sample's prompt in the pipeline ([generate] settings).
    Responses responses = Responses::Dataset;
};

// Responses generated by the target (`hsring data generate`): the decode engine's settings.
struct GenerateConfig {
    std::uint64_t max_new_tokens = 128;
    double temperature = 0.0;              // 0 = greedy
    double top_p = 1.0;
    std::uint64_t seed = 0;                // sample i draws from (seed, i); 0 = [run] seed
    std::uint32_t batch = 16;              // sequences in flight at once
    // Generation ends after one of these. Absent: the model's eos ids (generation_config.json,
    // config.json); a model without any must name them. An explicit [] means none.
    std::vector<int> stop_token_ids;
    bool stop_token_ids_set = false;
};

// The real acceptance length tau during training: speculative decoding of the latest committed
// drafter weights with the real target, measured by target.0 between the slots it writes (the
// target's weights are there; nothing on the drafter's device), and of the export at the end.
struct EvalConfig {
    std::filesystem::path spec_prompts;       // JSONL prompts (as spec-decode reads them); empty = off
    std::uint64_t spec_every = 0;             // steps between measurements (0 = at the end only)
    std::uint64_t spec_max_new_tokens = 64;   // per prompt
    std::uint64_t spec_samples = 0;           // the file's first N prompts; 0 = all
};

struct TrainConfig {
    double lr = 6e-4;
    double min_lr_ratio = 0.1;
    std::uint64_t warmup_steps = 20;
    std::uint64_t max_steps = 0;      // 0 = until the data's epochs are done
    double weight_decay = 0.0;
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
    double grad_clip = 1.0;
    std::uint64_t tokens_per_step = 0;  // global batch, rounded to whole slots; 0 = one slot per drafter rank
    std::uint64_t micro_batch_tokens = 16384;  // context tokens per forward/backward (bounds activations)
    std::uint32_t num_anchors = 512;
    double loss_decay_gamma = 7.0;    // 0 = no decay weighting
    double ttt_decay = 0.8;           // eagle3: training-time test step k's loss weighs ttt_decay^k
    std::uint32_t loss_chunk = 4096;  // block positions per cross-entropy chunk
    Recompute recompute = Recompute::None;  // layers: keep only each drafter layer's inputs, recompute in backward
    Matmul matmul = Matmul::BF16;  // fp8: the drafter layers' projections in FP8 (forward and dX)
    Matmul lm_head = Matmul::BF16;  // fp8: the frozen LM head's two products (logits, dX) in FP8, head quantised once
    std::uint64_t checkpoint_every = 200;
    // Written on a thread of its own while training goes on (the step pauses only to copy the
    // state to host memory); false: the step waits until the checkpoint is on disk.
    bool checkpoint_background = true;
    std::uint32_t log_every = 1;
    std::uint64_t eval_every = 0;     // steps between held-out evaluations (needs [data] eval_path); 0 = at the end only
    // Optimizer steps in a row with a non-finite loss or gradient norm (each skipped: nothing
    // changes) after which the run stops as diverged, its last good checkpoint kept.
    std::uint32_t max_nonfinite_steps = 3;
};

struct SupervisorConfig {
    Restart restart = Restart::OnFailure;
    std::uint32_t max_restarts = 5;
    double restart_window_s = 300.0;
    double backoff_initial_s = 0.5;
    double backoff_max_s = 30.0;
    double status_interval_s = 2.0;
    double stop_timeout_s = 300.0;  // graceful stop: wait this long, then SIGKILL
};

struct Config {
    std::filesystem::path file;       // where it was read from (for messages and relative paths)
    RunConfig run;
    TopologyConfig topology;
    RingConfig ring;
    TransportConfig transport;
    TargetConfig target;
    DrafterConfig drafter;
    DataConfig data;
    GenerateConfig generate;
    TrainConfig train;
    EvalConfig eval;
    SupervisorConfig supervisor;
    DistributedConfig distributed;

    // A path from the config, resolved against the config file's directory.
    std::filesystem::path resolve(const std::filesystem::path& p) const;
};

// Parses and validates everything that needs no model shape. Throws hsring::Error.
Config parse_config(const std::string& toml_text, const std::string& source_name);
// Reads `file`; a missing file or a directory is refused with what to give instead.
Config load_config(const std::filesystem::path& file);

// [data] path, and eval_path when set, name readable regular files that hold something: throws
// hsring::Error naming the config file, the key and the resolved path. `hsring config check` and
// `hsring run` call it before a data set is read, so that each message names the key at fault.
void check_data_files(const Config& cfg);

// The launcher's view wins over the file: MASTER_ADDR, MASTER_PORT, NNODES, NODE_RANK from the
// environment, then `node_rank_flag` (hsring run --node-rank). Checks node_rank < nnodes and
// names where the offending value came from. Throws hsring::Error.
void apply_launcher_overrides(Config& cfg, const char* node_rank_flag = nullptr);

// Sizes that follow from the config and the target model; one place computes them.
struct Derived {
    ModelShape target;
    std::vector<int> layer_ids;       // captured target layers (HF hidden_states[k+1])
    std::int64_t mask_token_id = -1;
    std::uint64_t bytes_per_token = 0;   // layers x hidden x dtype
    std::uint64_t slot_payload_bytes = 0;// slot_tokens x bytes_per_token
    std::uint64_t slot_stride = 0;       // payload rounded up to 2 MiB (RingGeometry::payload_stride)
    std::uint32_t slots = 0;
    std::uint32_t max_samples_per_slot = 0;
    std::uint64_t ring_payload_bytes = 0;// slots x slot_stride
    std::uint64_t max_seq_len = 0;
    // [data] responses = "target": the tokens that end a response ([generate] stop_token_ids, else
    // the model's eos ids; derive() refuses a model that declares none).
    std::vector<std::int64_t> stop_tokens;
    // Optimizer steps (see config/reference.toml, [train] tokens_per_step): a step is
    // `slots_per_rank` training slots on every drafter rank of every machine, so the global batch
    // is slots_per_step = slots_per_rank x world slots of at most slot_tokens tokens each.
    std::uint32_t world = 1;             // drafter ranks on all machines
    std::uint32_t slots_per_rank = 1;
    std::uint32_t slots_per_step = 1;
    RingGeometry ring;                   // the ring these sizes make (what src/ring lays out)
    std::string ring_name;
    std::filesystem::path run_dir;
    std::filesystem::path export_dir;
};

// Validates what needs the model shape (layer ids, slot vs ring size, mask token) and computes
// the sizes. Throws hsring::Error naming the key and the fix.
Derived derive(const Config& cfg);
Derived derive(const Config& cfg, const ModelShape& target);

// Human-readable report for `hsring config check`.
std::string describe(const Config& cfg, const Derived& d);

} // namespace hsring
