// hsring-model dump-hidden: the target's captured hidden states for given tokens, so users can
// compare them with HF transformers (layer.K = hidden_states[K+1]).
#include "hsring/error.hpp"
#include "hsring/model_shape.hpp"
#include "model/io/safetensors.hpp"
#include "model/target/target.hpp"
#include "model/tools/commands.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include <fstream>
#include <string>
#include <vector>

namespace hsring::model::tools {
namespace {

std::vector<int> parse_layers(const std::string& spec, const ModelShape& shape) {
    std::vector<int> ids;
    if (spec == "all") {
        for (int i = 0; i < shape.num_layers; ++i) ids.push_back(i);
        return ids;
    }
    std::size_t pos = 0;
    while (pos <= spec.size()) {
        std::size_t end = spec.find(',', pos);
        std::string item = spec.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
        try {
            std::size_t used = 0;
            int v = std::stoi(item, &used);
            if (used != item.size()) throw std::invalid_argument(item);
            ids.push_back(v);
        } catch (const std::exception&) {
            fail("--layers: '{}' is not a layer id (write e.g. 1,9,17 or all)", item);
        }
        if (end == std::string::npos) break;
        pos = end + 1;
    }
    return ids;
}

struct Tokens {
    at::Tensor ids;
    std::vector<std::int64_t> cu{0};
};

Tokens read_tokens(const std::string& file, std::int64_t vocab) {
    std::ifstream in(file);
    if (!in) fail("{}: cannot open: {}", file, errno_text(errno));
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        fail("{}: not valid JSON: {}", file, e.what());
    }
    if (!j.is_array() || j.empty()) fail("{}: must be a non-empty list of token-id lists, e.g. [[1, 2], [3]]", file);
    std::vector<std::int64_t> flat;
    Tokens t;
    for (std::size_t s = 0; s < j.size(); ++s) {
        if (!j[s].is_array() || j[s].empty()) fail("{}: sequence {} is not a non-empty list of token ids", file, s);
        for (std::size_t i = 0; i < j[s].size(); ++i) {
            const auto& v = j[s][i];
            if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= vocab)
                fail("{}: sequence {} item {}: {} is not a token id in [0, {})", file, s, i, v.dump(), vocab);
            flat.push_back(v.get<std::int64_t>());
        }
        t.cu.push_back(static_cast<std::int64_t>(flat.size()));
    }
    t.ids = at::tensor(flat, at::kLong);
    return t;
}

std::string join(const std::vector<std::int64_t>& v) {
    std::string s;
    for (auto x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
    return s;
}

} // namespace

int dump_hidden(int argc, char** argv) {
    std::string model, layers, tokens_file, out, device_s = "cpu", dtype_s;
    std::uint64_t seed = 1234;  // [run] seed's default: the same random preset as a default run
    bool logits = false;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) fail("dump-hidden: {} needs a value", a);
            return argv[++i];
        };
        if (a == "--layers") layers = value();
        else if (a == "--tokens") tokens_file = value();
        else if (a == "--out") out = value();
        else if (a == "--device") device_s = value();
        else if (a == "--dtype") dtype_s = value();
        else if (a == "--logits") logits = true;
        else if (a == "--seed") {
            std::string v = value();
            try {
                seed = std::stoull(v);
            } catch (const std::exception&) {
                fail("dump-hidden: --seed '{}' is not a non-negative integer", v);
            }
        } else if (!a.empty() && a[0] == '-') fail("dump-hidden: unknown option {}", a);
        else if (model.empty()) model = a;
        else fail("dump-hidden: unexpected argument '{}' (MODEL is already '{}')", a, model);
    }
    if (model.empty() || layers.empty() || tokens_file.empty() || out.empty())
        fail("dump-hidden: usage: dump-hidden MODEL --layers 1,9,17|all --tokens TOKENS.json --out HS.safetensors");

    at::Device device(at::kCPU);
    try {
        device = at::Device(device_s);
    } catch (const std::exception&) {
        fail("dump-hidden: --device '{}' is not a device (cpu, cuda, cuda:1)", device_s);
    }
    if (device.is_cuda() && !torch::cuda::is_available())
        fail("dump-hidden: --device {} but torch sees no CUDA device (or this build has no torch_cuda)", device_s);
    at::ScalarType dtype = device.is_cuda() ? at::kBFloat16 : at::kFloat;
    if (dtype_s == "fp32") dtype = at::kFloat;
    else if (dtype_s == "bf16") dtype = at::kBFloat16;
    else if (!dtype_s.empty()) fail("dump-hidden: --dtype must be fp32 or bf16, got '{}'", dtype_s);

    ModelShape shape = resolve_model_shape(model);
    std::vector<int> ids = parse_layers(layers, shape);
    Tokens tokens = read_tokens(tokens_file, shape.vocab_size);
    TargetModel target = TargetModel::load(shape, device, dtype, seed);

    TensorMap result;
    at::Tensor lg = target.forward(tokens.ids, tokens.cu, ids, [&](std::size_t i, const at::Tensor& h) {
        result["layer." + std::to_string(ids[i])] = h.to(at::kCPU, at::kFloat);
    }, logits);
    if (logits) result["logits"] = lg.to(at::kCPU, at::kFloat);
    std::string layer_list;
    for (int k : ids) layer_list += (layer_list.empty() ? "" : ",") + std::to_string(k);
    save_safetensors(out, result,
                     {{"model", model}, {"layers", layer_list}, {"cu_seqlens", join(tokens.cu)},
                      {"device", device.str()}, {"dtype", c10::toString(dtype)}, {"seed", std::to_string(seed)},
                      {"convention", "layer.K = HF hidden_states[K+1] (the last layer after the final norm)"}});
    fmt::print(stderr, "hsring-model: wrote {} layers x {} tokens to {}\n", ids.size(), tokens.ids.size(0), out);
    return 0;
}

} // namespace hsring::model::tools
