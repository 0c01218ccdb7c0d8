// EAGLE-3 against the public reference (vllm-project/speculators 0.9.0's Eagle3DraftModel, run by
// tests/model/eagle3_reference.py on a tiny random case): the draft vocabulary from token counts,
// every training-time-test step's logits, the per-step KL sums, the loss and its gradients; the
// export read back by the reference's own loader; packing; the registry and the export round trip.
// Exits 77 (skipped) only where the reference cannot be imported.
#include "model/drafter/eagle3/export.hpp"
#include "model/drafter/eagle3/loss.hpp"
#include "model/drafter/eagle3/trainable.hpp"
#include "model/drafter/eagle3/vocab.hpp"
#include "model/drafter/registry/registry.hpp"
#include "model/io/safetensors.hpp"
#include "model_test_util.hpp"

#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

using namespace hsring;
using namespace hsring::model;
using hsring::test::TempDir;

namespace {

double max_abs(const at::Tensor& a, const at::Tensor& b) {
    return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

std::string metadata(const std::filesystem::path& file, const std::string& key) {
    const SafetensorsFile f = read_safetensors(file);
    const auto it = f.metadata.find(key);
    REQUIRE_MESSAGE(it != f.metadata.end(), file.string() << " has no metadata " << key);
    return it->second;
}

// The reference case: drafter directory, inputs, reference outputs (written once per test run).
struct Case {
    TempDir dir;
    TensorMap in, ref;
    int samples = 0, steps = 0;
    double decay = 0, eps = 0;
    Case() {
        hsring::test::run_python_script("eagle3_reference.py", "parity --out '" + dir.path().string() + "'");
        in = load_safetensors(dir.path() / "inputs.safetensors");
        ref = load_safetensors(dir.path() / "reference.safetensors");
        samples = std::stoi(metadata(dir.path() / "inputs.safetensors", "samples"));
        steps = std::stoi(metadata(dir.path() / "inputs.safetensors", "ttt_steps"));
        decay = std::stod(metadata(dir.path() / "inputs.safetensors", "decay"));
        eps = std::stod(metadata(dir.path() / "reference.safetensors", "eps"));
    }
    TargetHead head() const { return {in.at("target.embed"), in.at("target.lm_head"), in.at("target.norm")}; }
    // Sample s alone as a ring slot holds it: [3 fused | last] layers.
    DrafterBatch batch(int s) const {
        const std::string p = "s" + std::to_string(s) + ".";
        const at::Tensor hidden = at::cat({in.at(p + "aux"), in.at(p + "last").unsqueeze(0)}, 0);
        const std::int64_t n = hidden.size(1);
        return {hidden, in.at(p + "tokens"), in.at(p + "loss_mask"), {0, n}, {}};
    }
};

} // namespace

TEST_SUITE("eagle3") {

TEST_CASE("the draft vocabulary from token counts is the reference's d2t/t2d") {
    Case c;
    const TensorMap drafter = load_safetensors(c.dir.path() / "drafter" / "model.safetensors");
    const at::Tensor counts = c.in.at("token_counts");
    const std::vector<std::int64_t> v(counts.data_ptr<std::int64_t>(), counts.data_ptr<std::int64_t>() + counts.numel());
    auto [d2t, t2d] = eagle3_vocab_map(v, drafter.at("d2t").size(0));
    CHECK(at::equal(d2t, drafter.at("d2t")));
    CHECK(at::equal(t2d, drafter.at("t2d")));
    // Fewer tokens seen than the draft vocabulary: the smallest unseen ids fill up.
    const at::Tensor sparse = c.in.at("vocab_sparse.token_counts");
    const std::vector<std::int64_t> w(sparse.data_ptr<std::int64_t>(), sparse.data_ptr<std::int64_t>() + sparse.numel());
    auto [d2t2, t2d2] = eagle3_vocab_map(w, c.in.at("vocab_sparse.d2t").size(0));
    CHECK(at::equal(d2t2, c.in.at("vocab_sparse.d2t")));
    CHECK(at::equal(t2d2, c.in.at("vocab_sparse.t2d")));
    CHECK(hsring::test::error_of([&] { eagle3_vocab_map(w, 0); }).find("draft vocabulary") != std::string::npos);
}

TEST_CASE("every step's logits, KL sums, the loss and its gradients equal the reference") {
    Case c;
    auto [drafter, cfg] = import_eagle3(c.dir.path() / "drafter");
    const TargetHead head = c.head();
    at::Tensor total = at::zeros({});
    for (int s = 0; s < c.samples; ++s) {
        CAPTURE(s);
        const std::string p = "s" + std::to_string(s) + ".";
        Eagle3LossParts parts;
        const DrafterLoss r = eagle3_loss(drafter, head, c.batch(s), c.steps, c.decay, at::kFloat, &parts);
        REQUIRE(parts.kl_sum.size() == static_cast<std::size_t>(c.steps));
        at::Tensor loss = at::zeros({});
        at::Tensor hsring_sum = at::zeros({});
        for (int k = 0; k < c.steps; ++k) {
            CAPTURE(k);
            const std::string q = p + "step" + std::to_string(k) + ".";
            const at::Tensor ref_logits = c.ref.at(q + "logits");
            const at::Tensor mine = parts.logits[static_cast<std::size_t>(k)].narrow(0, 0, ref_logits.size(0));
            CHECK(max_abs(mine, ref_logits) < 1e-4);
            CHECK(std::abs(parts.kl_sum[k].item<double>() - c.ref.at(q + "kl_sum").item<double>()) < 1e-4);
            CHECK(parts.mask_sum[k].item<double>() == c.ref.at(q + "mask_sum").item<double>());
            // The reference's normalisation: each step by its own mask sum.
            loss = loss + parts.kl_sum[k] * std::pow(c.decay, k) / (parts.mask_sum[k] + c.eps);
            hsring_sum = hsring_sum + parts.kl_sum[k] * std::pow(c.decay, k);
        }
        CHECK(std::abs(loss.item<double>() - c.ref.at(p + "loss").item<double>()) < 1e-4);
        // hsring's sums: the same steps, over the step-0 weight.
        CHECK(std::abs(r.loss_sum.item<double>() - hsring_sum.item<double>()) < 1e-5);
        CHECK(r.weight_sum.item<double>() == parts.mask_sum[0].item<double>());
        total = total + loss;
    }
    total.backward();
    int compared = 0;
    for (const auto& p : drafter->named_parameters()) {
        CAPTURE(p.key());
        const auto it = c.ref.find("grad." + p.key());
        REQUIRE(it != c.ref.end());
        REQUIRE(p.value().grad().defined());
        const double scale = std::max(1e-3, it->second.abs().max().item<double>());
        CHECK(max_abs(p.value().grad(), it->second) / scale < 1e-4);
        ++compared;
    }
    CHECK(compared == 12);  // fc, 9 midlayer tensors, norm (the LM head and embedding are frozen)
}

TEST_CASE("a packed batch scores each sequence as alone") {
    Case c;
    auto [drafter, cfg] = import_eagle3(c.dir.path() / "drafter");
    const TargetHead head = c.head();
    std::vector<at::Tensor> hidden, tokens, mask;
    std::vector<std::int64_t> cu{0};
    std::vector<double> alone(static_cast<std::size_t>(c.steps), 0.0);
    for (int s = 0; s < c.samples; ++s) {
        const DrafterBatch b = c.batch(s);
        hidden.push_back(b.hidden);
        tokens.push_back(b.tokens);
        mask.push_back(b.loss_mask);
        cu.push_back(cu.back() + b.tokens.size(0));
        Eagle3LossParts parts;
        at::NoGradGuard no_grad;
        eagle3_loss(drafter, head, b, c.steps, c.decay, at::kFloat, &parts);
        for (int k = 0; k < c.steps; ++k) alone[static_cast<std::size_t>(k)] += parts.kl_sum[k].item<double>();
    }
    const DrafterBatch packed{at::cat(hidden, 1), at::cat(tokens), at::cat(mask), cu, {}};
    Eagle3LossParts parts;
    at::NoGradGuard no_grad;
    const DrafterLoss r = eagle3_loss(drafter, head, packed, c.steps, c.decay, at::kFloat, &parts);
    for (int k = 0; k < c.steps; ++k) CHECK(std::abs(parts.kl_sum[k].item<double>() - alone[k]) < 1e-4);
    CHECK(r.units == cu.back() - c.samples);  // n - 1 rows per sequence
    CHECK(r.counted.size(0) == c.steps);
}

TEST_CASE("an export is what the reference loads: its logits equal the drafter's") {
    Case c;
    auto [drafter, cfg] = import_eagle3(c.dir.path() / "drafter");
    {
        at::NoGradGuard no_grad;  // weights of its own: one signed-gradient-like nudge per tensor
        for (auto& p : drafter->named_parameters()) p.value().add_(at::ones_like(p.value()) * 0.01);
    }
    const std::filesystem::path out = c.dir.path() / "export";
    export_eagle3(out, [&] {
        TensorMap m;
        for (const auto& p : drafter->named_parameters()) m[p.key()] = p.value();
        return m;
    }(), drafter->lm_head, drafter->d2t, drafter->t2d, cfg);
    hsring::test::run_python_script("eagle3_reference.py", "load --export '" + out.string() + "' --inputs '" +
                                                               (c.dir.path() / "inputs.safetensors").string() +
                                                               "' --out '" + (c.dir.path() / "load.safetensors").string() + "'");
    const TensorMap loaded = load_safetensors(c.dir.path() / "load.safetensors");
    at::NoGradGuard no_grad;
    for (int s = 0; s < c.samples; ++s) {
        Eagle3LossParts parts;
        eagle3_loss(drafter, c.head(), c.batch(s), c.steps, c.decay, at::kFloat, &parts);
        for (int k = 0; k < c.steps; ++k) {
            CAPTURE(s);
            CAPTURE(k);
            const at::Tensor ref = loaded.at("s" + std::to_string(s) + ".step" + std::to_string(k) + ".logits");
            CHECK(max_abs(parts.logits[static_cast<std::size_t>(k)].narrow(0, 0, ref.size(0)), ref) < 1e-4);
        }
    }
    // And hsring reads its own export back, by type, through the registry.
    CHECK(drafter_type_of(out) == "eagle3");
    auto again = load_drafter(out, at::kCPU);
    CHECK(std::string(again->type()) == "eagle3");
    CHECK(std::string(load_drafter(c.dir.path() / "drafter", at::kCPU)->type()) == "eagle3");
}

TEST_CASE("a fresh EAGLE-3 drafter for a target: layers, vocabulary, the LM head rows, mismatches") {
    ModelShape shape = resolve_model_shape("preset:tiny");
    const TargetHead head = load_target_head(shape, at::kCPU, at::kFloat, 3);
    DrafterSpec spec;
    spec.type = "eagle3";
    spec.target = shape;
    spec.layer_ids = eagle3_layer_ids(static_cast<int>(shape.num_layers));
    CHECK(spec.layer_ids == std::vector<int>{1, 3, 4, 7});
    spec.draft_vocab = 100;
    spec.token_counts.assign(static_cast<std::size_t>(shape.vocab_size), 0);
    for (std::int64_t i = 0; i < shape.vocab_size; ++i) spec.token_counts[static_cast<std::size_t>(i)] = (i * 37) % 11;
    spec.head = &head;
    auto d = make_drafter(spec, 5, at::kCPU);
    auto& e = dynamic_cast<Eagle3Trainable&>(*d);
    CHECK(e.config().draft_vocab_size == 100);
    CHECK(at::equal(e.drafter()->lm_head, head.lm_head.index_select(0, e.drafter()->draft_ids())));
    CHECK(e.mismatch(spec).empty());
    DrafterSpec other = spec;
    other.draft_vocab = 200;
    CHECK(e.mismatch(other).find("draft vocabulary") != std::string::npos);
    other = spec;
    other.type = "dflash";
    CHECK(e.mismatch(other).find("EAGLE-3") != std::string::npos);
    spec.num_layers = 2;
    CHECK(hsring::test::error_of([&] { make_drafter(spec, 5, at::kCPU); }).find("num_layers = 1") != std::string::npos);
    spec.type = "medusa";
    CHECK(hsring::test::error_of([&] { make_drafter(spec, 5, at::kCPU); }).find("\"dflash\", \"eagle3\"") !=
          std::string::npos);
}

TEST_CASE("training lowers the loss on a fixed batch") {
    ModelShape shape = resolve_model_shape("preset:tiny");
    const TargetHead head = load_target_head(shape, at::kCPU, at::kFloat, 3);
    DrafterSpec spec;
    spec.type = "eagle3";
    spec.target = shape;
    spec.layer_ids = eagle3_layer_ids(static_cast<int>(shape.num_layers));
    spec.head = &head;
    auto d = make_drafter(spec, 5, at::kCPU);
    at::Generator g = at::detail::createCPUGenerator(9);
    const std::int64_t n = 24;
    const DrafterBatch b{at::randn({4, n, shape.hidden_size}, g), at::randint(0, 500, {n}, g), at::ones({n}), {0, 10, n}, {}};
    torch::optim::AdamW opt(d->module().parameters(), torch::optim::AdamWOptions(1e-2));
    DrafterTrainOptions o;
    o.ttt_steps = 3;
    double first = 0, last = 0;
    for (int i = 0; i < 30; ++i) {
        opt.zero_grad();
        const DrafterLoss r = d->loss(head, b, o, g);
        const double l = (r.loss_sum / r.weight_sum).item<double>();
        (r.loss_sum / r.weight_sum).backward();
        opt.step();
        if (i == 0) first = l;
        last = l;
    }
    CHECK(last < 0.5 * first);
}

} // TEST_SUITE
