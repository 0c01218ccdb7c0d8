// hsring-model check-drafter DIR [--target MODEL --data FILE.jsonl ...]: checks an exported drafter
// (config.json + model.safetensors) of any type the registry knows.
//
// With --target: the real check. For each of the first --samples samples of the data set, the
// target computes the drafter's captured layers and the training loss, per-position accuracy and
// acceptance estimate are summed at deterministic choices. DFlash: blocks at the training rule's
// anchors, seeded per sample (eval_dflash_blocks, model::evaluate_dflash); --dump writes the logits
// of every evaluated block and the inputs that reproduce them. Other types (EAGLE-3): the type's
// own held-out evaluation (TrainableDrafter::evaluate; EAGLE-3: its training-time test of
// --ttt-steps steps, which is deterministic).
// Without --target: a smoke check only (DFlash: load + one forward over random inputs; others:
// load, which refuses a weight that is not finite), as exports are checked at the end of a run.
#include "hsring/dataset.hpp"
#include "hsring/error.hpp"
#include "hsring/model_shape.hpp"
#include "model/drafter/dflash/eval.hpp"
#include "model/drafter/dflash/export.hpp"
#include "model/drafter/registry/registry.hpp"
#include "model/io/safetensors.hpp"
#include "model/target/target.hpp"
#include "model/tools/cli_args.hpp"
#include "model/tools/commands.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include <charconv>
#include <cmath>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

namespace hsring::model::tools {
namespace fs = std::filesystem;

namespace {

constexpr const char* kCheckDrafterUsage =
    "usage: hsring-model check-drafter DRAFTER_DIR [--target MODEL --data FILE.jsonl [--samples N] "
    "[--num-anchors K] [--seed S] [--gamma G] [--dump OUT.safetensors] (DFlash) [--ttt-steps K] [--ttt-decay D] "
    "(EAGLE-3) [--device cpu|cuda[:I]]] [--json]";

struct CheckDrafterArgs {
    fs::path dir;
    std::string target;
    fs::path data;
    std::uint64_t samples = 0;  // 0 = all
    std::int64_t num_anchors = 512;
    std::uint64_t seed = 1234;  // [run] seed's default: the same random preset as a default run
    double gamma = 7.0;
    std::string device = "cpu";
    fs::path dump;
    int ttt_steps = 7;       // [train] ttt_steps' default
    double ttt_decay = 0.8;  // [train] ttt_decay's default
    bool json = false;
    std::vector<std::string> dflash_only, eagle3_only;  // the type-specific options given
};

CheckDrafterArgs parse_check_drafter_args(int argc, char** argv) {
    CheckDrafterArgs o;
    std::string needs_target;  // the first option that means something only with --target
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw UsageError(fmt::format("check-drafter: {} needs a value; {}", a, kCheckDrafterUsage));
            return argv[++i];
        };
        auto eval_value = [&]() -> std::string {
            if (needs_target.empty()) needs_target = a;
            return value();
        };
        if (a == "--num-anchors" || a == "--gamma" || a == "--dump") o.dflash_only.push_back(a);
        if (a == "--ttt-steps" || a == "--ttt-decay") o.eagle3_only.push_back(a);
        if (a == "--target") o.target = value();
        else if (a == "--json") o.json = true;
        else if (a == "--data") o.data = eval_value();
        else if (a == "--samples") o.samples = number<std::uint64_t>("check-drafter", a, eval_value());
        else if (a == "--num-anchors") o.num_anchors = number<std::int64_t>("check-drafter", a, eval_value());
        else if (a == "--seed") o.seed = number<std::uint64_t>("check-drafter", a, eval_value());
        else if (a == "--gamma") o.gamma = number<double>("check-drafter", a, eval_value());
        else if (a == "--device") o.device = eval_value();
        else if (a == "--dump") o.dump = eval_value();
        else if (a == "--ttt-steps") o.ttt_steps = number<int>("check-drafter", a, eval_value());
        else if (a == "--ttt-decay") o.ttt_decay = number<double>("check-drafter", a, eval_value());
        else if (!a.empty() && a[0] == '-') throw UsageError(fmt::format("check-drafter: unknown option {}; {}", a, kCheckDrafterUsage));
        else if (o.dir.empty()) o.dir = a;
        else throw UsageError(fmt::format("check-drafter: unexpected argument '{}' (DRAFTER_DIR is already '{}'); {}", a,
                                          o.dir.string(), kCheckDrafterUsage));
    }
    if (o.dir.empty()) throw UsageError(fmt::format("check-drafter: DRAFTER_DIR is missing; {}", kCheckDrafterUsage));
    if (o.target.empty() && !needs_target.empty())
        throw UsageError(fmt::format("check-drafter: {} needs --target MODEL (the target the drafter was trained for); "
                                     "without --target check-drafter only loads the drafter (a smoke check)",
                                     needs_target));
    if (!o.target.empty() && o.data.empty())
        throw UsageError(fmt::format("check-drafter: --target needs --data FILE.jsonl (pre-tokenized samples to "
                                     "evaluate on); {}", kCheckDrafterUsage));
    if (o.num_anchors <= 0) throw UsageError("check-drafter: --num-anchors must be at least 1");
    if (o.gamma < 0) throw UsageError("check-drafter: --gamma must be >= 0 (0 = no decay)");
    if (o.ttt_steps < 1 || o.ttt_steps > 64) throw UsageError("check-drafter: --ttt-steps must be 1..64");
    if (!(o.ttt_decay > 0 && o.ttt_decay <= 1)) throw UsageError("check-drafter: --ttt-decay must be in (0, 1]");
    return o;
}

} // namespace

void check_drafter_fits(const fs::path& dir, const DFlashConfig& c, const std::string& target, const ModelShape& t) {
    const std::string cfg = (dir / "config.json").string();
    const std::string fix = "pass the --target the drafter was trained for";
    if (c.hidden_size != t.hidden_size)
        fail("{}: the drafter's hidden_size {} does not match the target {}'s {}: {}", cfg, c.hidden_size, target,
             t.hidden_size, fix);
    if (c.vocab_size != t.vocab_size)
        fail("{}: the drafter's vocab_size {} does not match the target {}'s {}: {}", cfg, c.vocab_size, target,
             t.vocab_size, fix);
    if (c.num_target_layers > 0 && c.num_target_layers != t.num_layers)
        fail("{}: the drafter was trained on a {}-layer target (num_target_layers) but {} has {} layers: {}", cfg,
             c.num_target_layers, target, t.num_layers, fix);
    for (int k : c.target_layer_ids)
        if (k >= t.num_layers)
            fail("{}: target layer id {} (dflash_config.target_layer_ids) is out of range for {} ({} layers): {}", cfg,
                 k, target, t.num_layers, fix);
}

namespace {

const char* dtype_name(at::ScalarType t) {
    return t == at::kFloat ? "fp32" : t == at::kBFloat16 ? "bf16" : c10::toString(t);
}

// --data, loaded for `shape`'s vocabulary; a path that is not a file is named.
data::Dataset load_data(const CheckDrafterArgs& o, const ModelShape& shape) {
    std::error_code ec;
    if (!fs::is_regular_file(o.data, ec))
        fail("{}: {} (--data must name a pre-tokenized JSONL file: {{\"input_ids\": [...], \"loss_mask\": [...]}} "
             "per line)",
             o.data.string(), fs::exists(o.data, ec) ? "not a regular file" : "no such file");
    return data::Dataset::load(o.data, {OnBadLine::Fail, 0, shape.vocab_size});
}

// Sample i of the data set alone as a batch: its tokens and loss mask on `device`, and the target's
// layers `ids` over it, stacked [L, T, H] in that order.
DrafterBatch sample_batch(const data::Dataset& ds, std::size_t i, TargetModel& target, const std::vector<int>& ids,
                          at::Device device) {
    auto toks = ds.tokens(i);
    auto mask = ds.loss_mask(i);
    const auto len = static_cast<std::int64_t>(toks.size());
    DrafterBatch batch;
    batch.tokens = at::tensor(std::vector<std::int64_t>(toks.begin(), toks.end()), at::kLong).to(device);
    batch.loss_mask = at::tensor(std::vector<float>(mask.begin(), mask.end()), at::kFloat).to(device);
    batch.cu_seqlens = {0, len};
    std::vector<at::Tensor> layers(ids.size());
    target.forward(batch.tokens, batch.cu_seqlens, ids, [&](std::size_t l, const at::Tensor& h) { layers[l] = h; });
    batch.hidden = at::stack(layers);
    return batch;
}

std::string header(const fs::path& dir, const DFlashConfig& c, DFlashDrafter& d) {
    std::int64_t params = 0;
    for (const auto& p : d->parameters()) params += p.numel();
    return fmt::format("{}: DFlash drafter, {} layers, hidden {}, block {}, mask token {}, target layers [{}], {:.2f} M "
                       "parameters",
                       dir.string(), c.num_layers, c.hidden_size, c.block_size, c.mask_token_id,
                       fmt::join(c.target_layer_ids, ","), double(params) / 1e6);
}

// Load + one forward over random inputs (no target needed).
int smoke_check(const CheckDrafterArgs& o) {
    auto [drafter, cfg] = import_dflash(o.dir, at::kCPU);
    at::NoGradGuard no_grad;
    // Two short sequences of random tokens, random captured layers, blocks at two anchors each.
    const std::int64_t len = std::max<std::int64_t>(cfg.block_size + 4, 24), total = 2 * len;
    const std::int64_t vocab = std::min<std::int64_t>(cfg.vocab_size, 1000);
    at::Tensor tokens = at::randint(vocab, {total}, at::kLong);
    at::Tensor mask = at::ones({total});
    std::vector<std::int64_t> cu{0, len, total};
    DFlashBlocks blocks = dflash_blocks_at(tokens, mask, cu, cfg.block_size, cfg.mask_token_id,
                                           {2, len / 2, len + 3, len + len / 2}, 0.0);
    at::Tensor embed = at::randn({std::max(vocab, cfg.mask_token_id + 1), cfg.hidden_size}) * 0.02;
    DFlashInputs in;
    in.context = at::randn({cfg.num_context_layers(), total, cfg.hidden_size});
    in.block_embeds = embed.index_select(0, blocks.block_tokens);
    in.blocks = &blocks;
    at::Tensor out = drafter->forward(in);
    const bool finite = at::isfinite(out).all().item<bool>();
    if (o.json) {
        nlohmann::json j = {{"drafter", o.dir.string()}, {"check", "smoke"}, {"finite", finite},
                            {"block_rows", out.size(0)}};
        fmt::print("{}\n", j.dump());
    } else {
        fmt::print("{}; smoke check only (load + one forward over random inputs, {} block rows): {}\n"
                   "(to measure accuracy: --target MODEL --data FILE.jsonl)\n",
                   header(o.dir, cfg, drafter), out.size(0), finite ? "finite" : "NOT FINITE");
    }
    return finite ? 0 : 1;
}

// What --dump collects over the samples.
struct Dump {
    std::vector<at::Tensor> logits, block_tokens, block_positions, labels, weights, anchors, block_sample_id;
    std::vector<at::Tensor> input_ids, loss_mask, target_hidden;
    std::vector<std::int64_t> sample_ids, cu{0};
};

int evaluate(const CheckDrafterArgs& o) {
    const at::Device device = parse_device("check-drafter", o.device);
    auto [drafter, cfg] = import_dflash(o.dir, device);
    ModelShape shape = resolve_model_shape(o.target);
    check_drafter_fits(o.dir, cfg, o.target, shape);
    const data::Dataset ds = load_data(o, shape);
    const std::size_t n = o.samples ? std::min<std::size_t>(o.samples, ds.size()) : ds.size();

    const at::ScalarType compute = default_compute_dtype(device);
    TargetModel target = TargetModel::load(shape, device, compute, o.seed);
    const TargetHead head = target.head();
    DFlashLossOptions opts;
    opts.num_anchors = static_cast<int>(o.num_anchors);
    opts.gamma = o.gamma;
    drafter->eval();

    DFlashEvalSums sums;
    std::size_t without_blocks = 0;
    Dump dump;
    const std::vector<int>& ids = cfg.target_layer_ids;
    for (std::size_t i = 0; i < n; ++i) {
        const DFlashBatch batch = sample_batch(ds, i, target, ids, device);
        const std::int64_t len = batch.cu_seqlens.back();
        DFlashBlocks blocks = eval_dflash_blocks(batch.tokens, batch.loss_mask, batch.cu_seqlens, cfg.block_size,
                                                 cfg.mask_token_id, opts.num_anchors, opts.gamma, o.seed, {i});
        at::Tensor out;
        sums.add(evaluate_dflash(drafter, head, batch, blocks, opts, o.dump.empty() ? nullptr : &out));
        if (blocks.num_blocks() == 0) ++without_blocks;
        if (o.dump.empty()) continue;
        const std::int64_t nb = blocks.num_blocks(), b = cfg.block_size;
        auto rows = [&](const at::Tensor& t) { return t.to(at::kCPU).reshape({nb, b}); };
        at::NoGradGuard no_grad;
        if (nb > 0) {
            dump.logits.push_back(
                at::matmul(out.to(at::kFloat), head.lm_head.to(at::kFloat).t()).to(at::kCPU).reshape({nb, b, -1}));
            dump.block_tokens.push_back(rows(blocks.block_tokens));
            dump.block_positions.push_back(rows(blocks.block_positions));
            dump.labels.push_back(rows(blocks.labels));
            dump.weights.push_back(rows(blocks.weights));
            dump.anchors.push_back(at::tensor(blocks.anchors, at::kLong));  // one sample: global = local
            dump.block_sample_id.push_back(at::full({nb}, static_cast<std::int64_t>(i), at::kLong));
        }
        dump.sample_ids.push_back(static_cast<std::int64_t>(i));
        dump.cu.push_back(dump.cu.back() + len);
        dump.input_ids.push_back(batch.tokens.to(at::kCPU));
        dump.loss_mask.push_back(batch.loss_mask.to(at::kCPU));
        // [T, L*H]: the layers concatenated in target_layer_ids order (DFlash's target_hidden).
        dump.target_hidden.push_back(batch.hidden.to(at::kFloat).permute({1, 0, 2}).reshape({len, -1}).to(at::kCPU));
    }
    if (sums.num_blocks == 0)
        fail("{}: none of the {} evaluated samples has a valid anchor (a trained token followed by a trained token "
             "and a whole block of {} tokens inside the sample): evaluate on data with longer trained spans",
             o.data.string(), n, cfg.block_size);

    const auto acc = sums.accuracy();
    const double loss = sums.loss(), accept = sums.accept_length();
    const bool finite = std::isfinite(loss) && std::isfinite(accept);
    if (!o.dump.empty()) {
        const std::int64_t b = cfg.block_size;
        TensorMap t;
        t["logits"] = at::cat(dump.logits);
        t["block_tokens"] = at::cat(dump.block_tokens);
        t["block_positions"] = at::cat(dump.block_positions);
        t["labels"] = at::cat(dump.labels);
        t["weights"] = at::cat(dump.weights);
        t["anchors"] = at::cat(dump.anchors);
        t["block_sample_id"] = at::cat(dump.block_sample_id);
        t["sample_ids"] = at::tensor(dump.sample_ids, at::kLong);
        t["cu_seqlens"] = at::tensor(dump.cu, at::kLong);
        t["input_ids"] = at::cat(dump.input_ids);
        t["loss_mask"] = at::cat(dump.loss_mask);
        t["target_hidden"] = at::cat(dump.target_hidden);
        save_safetensors(o.dump, t,
                         {{"drafter", o.dir.string()}, {"target", o.target}, {"data", o.data.string()},
                          {"seed", std::to_string(o.seed)}, {"num_anchors", std::to_string(o.num_anchors)},
                          {"gamma", fmt::format("{}", o.gamma)}, {"block_size", std::to_string(b)},
                          {"mask_token_id", std::to_string(cfg.mask_token_id)},
                          {"target_layer_ids", fmt::format("{}", fmt::join(ids, ","))}, {"device", device.str()},
                          {"compute_dtype", dtype_name(compute)},
                          {"convention", "see src/model/README.md, check-drafter --dump"}});
    }
    if (o.json) {
        nlohmann::json j = {
            {"drafter", o.dir.string()},   {"target", o.target},         {"data", o.data.string()},
            {"device", device.str()},      {"seed", o.seed},             {"num_anchors", o.num_anchors},
            {"gamma", o.gamma},            {"block_size", cfg.block_size}, {"samples", n},
            {"samples_without_blocks", without_blocks}, {"blocks", sums.num_blocks}, {"loss", loss},
            {"weight_sum", sums.weight_sum}, {"acc", acc},               {"counted", sums.counted},
            {"accept_len", accept},
            {"dump", o.dump.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.dump.string())},
        };
        fmt::print("{}\n", j.dump());
    } else {
        fmt::print("{}\n", header(o.dir, cfg, drafter));
        fmt::print("target {} ({} {}, seed {}), data {}: {} samples ({} without a valid anchor), {} blocks (at most {} "
                   "per sample, anchors seeded by {} and the sample's index)\n",
                   o.target, device.str(), dtype_name(compute), o.seed, o.data.string(), n, without_blocks,
                   sums.num_blocks, o.num_anchors, o.seed);
        fmt::print("loss {:.4f} (gamma {}, weight sum {:.1f})\n", loss, o.gamma, sums.weight_sum);
        fmt::print("accuracy at block positions 1..{}: {:.3f}\n", acc.size(), fmt::join(acc, " "));
        fmt::print("acceptance length estimate {:.3f} (1 + sum_k prod_(j<=k) acc_j)\n", accept);
        if (!o.dump.empty()) fmt::print("dump: {} ({} blocks)\n", o.dump.string(), sums.num_blocks);
        if (!finite) fmt::print("NOT FINITE\n");
    }
    return finite ? 0 : 1;
}

// Any other type: loading refuses a weight that is not finite (load_drafter), which is what an
// export's smoke check can say without a target.
int smoke_check_any(const CheckDrafterArgs& o, const std::string& type) {
    auto d = load_drafter(o.dir, at::kCPU);
    std::int64_t params = 0;
    for (const auto& p : d->module().parameters()) params += p.numel();
    if (o.json) {
        nlohmann::json j = {{"drafter", o.dir.string()}, {"type", type}, {"check", "smoke"}, {"finite", true},
                            {"parameters", params}};
        fmt::print("{}\n", j.dump());
    } else {
        fmt::print("{}: {}, {:.2f} M parameters; smoke check only (load: every weight finite)\n"
                   "(to measure accuracy: --target MODEL --data FILE.jsonl)\n",
                   o.dir.string(), d->describe(), double(params) / 1e6);
    }
    return 0;
}

// Any other type through its own held-out evaluation (TrainableDrafter::evaluate), one sample at a
// time: the target's layers the drafter reads, stacked in its slot order.
int evaluate_any(const CheckDrafterArgs& o, const std::string& type) {
    const at::Device device = parse_device("check-drafter", o.device);
    auto drafter = load_drafter(o.dir, device);
    const ModelShape shape = resolve_model_shape(o.target);
    if (const std::string why = drafter->misfit(shape); !why.empty())
        fail("{}: {}: pass the --target the drafter was trained for", (o.dir / "config.json").string(), why);
    const data::Dataset ds = load_data(o, shape);
    const std::size_t n = o.samples ? std::min<std::size_t>(o.samples, ds.size()) : ds.size();
    const at::ScalarType compute = default_compute_dtype(device);
    TargetModel target = TargetModel::load(shape, device, compute, o.seed);
    const TargetHead head = target.head();
    const std::vector<int> ids = drafter->captured_layers(shape);
    DrafterTrainOptions opts;
    opts.ttt_steps = o.ttt_steps;
    opts.ttt_decay = o.ttt_decay;
    drafter->module().eval();
    DrafterEvalSums sums;
    for (std::size_t i = 0; i < n; ++i) sums.add(drafter->evaluate(head, sample_batch(ds, i, target, ids, device), {i}, o.seed, opts));
    if (sums.weight_sum <= 0)
        fail("{}: none of the {} evaluated samples has a trained token (loss_mask 1) with a token after it: evaluate "
             "on data with trained spans",
             o.data.string(), n);
    const auto acc = sums.accuracy();
    const double loss = sums.loss(), accept = sums.accept_length();
    const bool finite = std::isfinite(loss) && std::isfinite(accept);
    if (o.json) {
        nlohmann::json j = {
            {"drafter", o.dir.string()}, {"type", type},           {"target", o.target},
            {"data", o.data.string()},   {"device", device.str()}, {"seed", o.seed},
            {"ttt_steps", o.ttt_steps},  {"ttt_decay", o.ttt_decay}, {"samples", n},
            {"rows", sums.num_blocks},   {"loss", loss},           {"weight_sum", sums.weight_sum},
            {"acc", acc},                {"counted", sums.counted}, {"accept_len", accept},
        };
        fmt::print("{}\n", j.dump());
    } else {
        fmt::print("{}: {}\n", o.dir.string(), drafter->describe());
        fmt::print("target {} ({} {}, seed {}), data {}: {} samples, {} trained rows, target layers [{}]\n", o.target,
                   device.str(), dtype_name(compute), o.seed, o.data.string(), n, sums.num_blocks, fmt::join(ids, ","));
        fmt::print("loss {:.4f} (training-time test of {} steps, decay {}, weight sum {:.1f})\n", loss, o.ttt_steps,
                   o.ttt_decay, sums.weight_sum);
        fmt::print("accuracy at draft positions 1..{}: {:.3f}\n", acc.size(), fmt::join(acc, " "));
        fmt::print("acceptance length estimate {:.3f} (1 + sum_k prod_(j<=k) acc_j)\n", accept);
        if (!finite) fmt::print("NOT FINITE\n");
    }
    return finite ? 0 : 1;
}

} // namespace

int check_drafter(int argc, char** argv) {
    const CheckDrafterArgs o = parse_check_drafter_args(argc, argv);
    const std::string type = drafter_type_of(o.dir);
    const auto& foreign = type == "dflash" ? o.eagle3_only : o.dflash_only;
    if (!foreign.empty())
        throw UsageError(fmt::format("check-drafter: {} is not an option for {}'s drafter type {} ({} are DFlash's, "
                                     "--ttt-steps and --ttt-decay EAGLE-3's)",
                                     foreign.front(), (o.dir / "config.json").string(), type,
                                     "--num-anchors, --gamma and --dump"));
    if (type == "dflash") return o.target.empty() ? smoke_check(o) : evaluate(o);
    return o.target.empty() ? smoke_check_any(o, type) : evaluate_any(o, type);
}

} // namespace hsring::model::tools
