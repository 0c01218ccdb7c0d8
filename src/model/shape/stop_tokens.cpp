// Stop tokens of generated responses (see hsring/stop_tokens.hpp).
#include "hsring/stop_tokens.hpp"

#include "hsring/error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

namespace hsring {

std::vector<std::int64_t> model_stop_tokens(const ModelShape& shape) {
    std::vector<std::int64_t> out;
    if (is_preset_spec(shape.source)) return out;
    for (const char* name : {"generation_config.json", "config.json"}) {
        const std::filesystem::path file = std::filesystem::path(shape.source) / name;
        std::ifstream in(file);
        if (!in) continue;  // generation_config.json is optional
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(in);
        } catch (const nlohmann::json::exception& e) {
            fail("{}: not valid JSON: {}", file.string(), e.what());
        }
        if (!j.is_object() || !j.contains("eos_token_id") || j["eos_token_id"].is_null()) continue;
        const nlohmann::json& e = j["eos_token_id"];
        std::vector<nlohmann::json> ids = e.is_array() ? e.get<std::vector<nlohmann::json>>() : std::vector{e};
        for (const auto& id : ids) {
            if (!id.is_number_integer() || id.get<std::int64_t>() < 0)
                fail("{}: eos_token_id must be a token id or a list of them, got {}", file.string(), e.dump());
            const auto t = id.get<std::int64_t>();
            if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
        }
    }
    return out;
}

std::vector<std::int64_t> response_stop_tokens(const Config& cfg, const ModelShape& shape) {
    if (cfg.generate.stop_token_ids_set) {
        std::vector<std::int64_t> ids(cfg.generate.stop_token_ids.begin(), cfg.generate.stop_token_ids.end());
        for (std::int64_t id : ids)
            if (id >= shape.vocab_size)
                fail("{}: [generate] stop_token_ids holds {}, outside the vocabulary of {} (0..{})", cfg.file.string(),
                     id, shape.source, shape.vocab_size - 1);
        return ids;
    }
    std::vector<std::int64_t> ids = model_stop_tokens(shape);
    if (ids.empty())
        fail("{}: [generate] stop_token_ids is not set and the target {} declares no eos_token_id "
             "(generation_config.json, config.json): name the tokens that end a response, e.g. "
             "stop_token_ids = [151645], or stop_token_ids = [] to generate max_new_tokens every time",
             cfg.file.string(), shape.source);
    for (std::int64_t id : ids)
        if (id >= shape.vocab_size)
            fail("{}: the eos_token_id {} of {} is outside its vocabulary of {}: set [generate] stop_token_ids",
                 cfg.file.string(), id, shape.source, shape.vocab_size);
    return ids;
}

} // namespace hsring
