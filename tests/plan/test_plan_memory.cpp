// `hsring plan`'s arithmetic against hand computations (each written out above its checks),
// the knobs it suggests (re-planned: the suggested value fits, the next larger one does not),
// several workers per GPU and several drafters, the GPU split, and an EAGLE-3 drafter's memory.
#include "hsring/slot_plan.hpp"
#include "hsring/config.hpp"
#include "hsring/error.hpp"
#include "hsring/ring.hpp"
#include "hsring/units.hpp"
#include "plan/dflash_memory.hpp"
#include "plan/eagle3_memory.hpp"
#include "plan/measure.hpp"
#include "plan/plan.hpp"
#include "plan/report.hpp"
#include "ring/layout.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

using namespace hsring;
using namespace hsring::plan;

namespace {

// Qwen3-8B target on GPU 0, the 5-layer drafter on GPU 1, 16,384-token slots.
const char* kQwen = R"(
[run]
name = "plan-test"
[topology]
targets = [0]
drafters = [1]
[ring]
size = "16GiB"
slot_tokens = 16384
[target]
model = "preset:qwen3-8b"
[drafter]
num_layers = 5
[data]
path = "unused.jsonl"
)";

Config qwen(const std::string& extra = "") {
    std::string text = kQwen;
    text += extra;
    return parse_config(text, "t.toml");
}

Capacity machine(std::uint64_t gpu_bytes, std::uint64_t host_bytes = 1024 * GiB, std::uint64_t gpus = 8) {
    Capacity c;
    c.gpu_bytes.assign(gpus, gpu_bytes);
    c.gpu_source = "--gpu-mem";
    c.gpu_count = gpus;
    c.gpu_count_source = "--gpus";
    c.host_bytes = host_bytes;
    c.host_source = "--host-mem";
    return c;
}

const Part& part(const WorkerMemory& w, const std::string& name) {
    const Part* p = w.part(name);
    REQUIRE_MESSAGE(p, "no part " << name << " in " << w.name);
    return *p;
}

} // namespace

TEST_CASE("Qwen3-8B parameter counts") {
    const ModelShape s = preset_shape("qwen3-8b");
    // per layer: q/k/v 4096 x (4096 + 2 x 1024) = 25,165,824; o 4096 x 4096 = 16,777,216;
    // gate/up/down 3 x 4096 x 12288 = 150,994,944; norms 2 x 4096 + q/k norms 2 x 128
    //   = 192,946,432;  x 36 = 6,946,071,552
    // + embedding and LM head 2 x 151,936 x 4096 = 1,244,659,712 + final norm 4096
    CHECK(target_params(s) == 8'190'735'360ull);
    // drafter: 5 x 192,946,432 = 964,732,160 + fc 4096 x 5 x 4096 = 83,886,080 + 2 norms 8192
    CHECK(dflash_params(s, 5, 5) == 1'048'626'432ull);
}

TEST_CASE("Qwen3-30B-A3B parameter counts: every expert and the router of each sparse layer") {
    const ModelShape s = preset_shape("qwen3-30b-a3b");
    // per layer: q/k/v 2048 x (4096 + 2 x 512) = 10,485,760; o 4096 x 2048 = 8,388,608; norms
    // 2 x 2048 + q/k norms 2 x 128 = 4,352; router 128 x 2048 = 262,144; experts
    // 128 x 3 x 2048 x 768 = 603,979,776 -> 623,120,640;  x 48 = 29,909,790,720
    // + embedding and LM head 2 x 151,936 x 2048 = 622,329,856 + final norm 2048
    CHECK(target_params(s) == 30'532'122'624ull);
    // The same model with every layer dense (intermediate 6144) counts 3 x 2048 x 6144 per MLP.
    ModelShape dense = s;
    dense.num_experts = 0;
    CHECK(target_params(dense) == 30'532'122'624ull - 48ull * (603'979'776 + 262'144) + 48ull * 3 * 2048 * 6144);
}

TEST_CASE("Qwen3-30B-A3B target memory: all experts' weights, activations of every routed pair at once") {
    const Config c = qwen();
    const Derived d = derive(c, preset_shape("qwen3-30b-a3b"));
    const WorkerMemory w = target_memory(c, d, "target.0", Place{0}, 16384);
    CHECK(part(w, "weights").bytes == 30'532'122'624ull * 2);
    // per token, elements: h + qkv = 2048 + 5120 = 7,168; + q 4096, k 512, v 512, attention out
    // 4096 (9,216); mid, normed mid, output 6,144; router logits 128; routing weights 2 x 8;
    // 8 routed pairs (grouped GEMMs over all of them), each the largest of rows + gate_up
    // 2048 + 1536, the SwiGLU 4 x 768, down + product 2048 + 768, the gather back 2 x 2048 = 4,096
    //   -> 32,768; in all 55,440 (the RoPE moment 7,168 + 4096 + 16,384 = 27,648 is lower)
    // bytes: 55,440 x 2 + RoPE tables 2 x 128 x 2 + 16 + lse 32 x 4 + fp32 probabilities 512,
    //   top-k weights 32, int64 ids/sorts/orders/tokens 384 = 110,880 + 512 + 16 + 128 + 928 = 112,464
    CHECK(part(w, "activations").bytes == 16384ull * 112'464);
}

TEST_CASE("gpt-oss-20b target memory: experts with biases, sinks, the clamped SwiGLU's temporaries") {
    const Config c = qwen();
    const Derived d = derive(c, preset_shape("gpt-oss-20b"));
    // 24 layers: attention 2880 x (4096 + 512 + 512 + 4096) + biases 4096 + 1024 + 2880 + sinks 64
    // + norms 5760; 32 experts x (3 x 2880 x 2880 + biases 5760 + 2880) + router 32 x 2880 + 32;
    // embedding and LM head 201,088 x 2880 each; final norm (20.9 B, as published)
    const std::uint64_t attention = 2880ull * 9216 + 4096 + 1024 + 2880 + 64 + 5760;
    const std::uint64_t experts = 32ull * (3ull * 2880 * 2880 + 5760 + 2880) + 32ull * 2880 + 32;
    CHECK(target_params(d.target) == 24 * (attention + experts) + 2ull * 201'088 * 2880 + 2880);
    const WorkerMemory w = target_memory(c, d, "target.0", Place{0}, 16384);
    // per routed pair the clamped SwiGLU's 6 x 2880 = 17,280 is the largest (rows + gate_up 8,640)
    // per token: 2880 + 5120 (h + qkv) + 8192 + 1024 (q, k, v, attention out) + 8640 (3H) + 32
    //   + 8 + 4 x 17,280 = 95,016 elements
    CHECK(part(w, "activations").bytes == 16384ull * (95'016ull * 2 + 2 * 64 * 2 + 16 + 64 * 4 + 4 * 32 + 4 * 4 + 48 * 4));
}

TEST_CASE("target memory with [target] weights = \"fp8\", by hand (the H200 measured 9.11 GiB, this predicts 9.08)") {
    Config c = qwen();
    c.target.weights = TargetWeights::FP8;
    const Derived d = derive(c, preset_shape("qwen3-8b"));
    const WorkerMemory w = target_memory(c, d, "target.0", Place{0}, 16384);
    // per layer in FP8: q|k|v 4096 x 6144 + o 4096 x 4096 + gate|up|down 3 x 4096 x 12,288 =
    // 192,937,984 parameters, 6144 + 4096 + 2 x 12,288 + 4096 = 38,912 row scales; x 36 layers
    const std::uint64_t fp8 = 36ull * 192'937'984, rows = 36ull * 38'912;
    CHECK(part(w, "weights").bytes == (8'190'735'360ull - fp8) * 2 + fp8 + 4 * rows);
    // + the widest quantised input (12,288 B) and its fp32 scale per token
    CHECK(part(w, "activations").bytes == 16384ull * (156'304 + 12'288 + 4));
    // on the CPU the rest is fp32; the FP8 weights are kept as they are (the products are emulated)
    CHECK(part(target_memory(c, d, "target.0", Place{}, 16384), "weights").bytes ==
          (8'190'735'360ull - fp8) * 4 + fp8 + 4 * rows);
}

TEST_CASE("target memory at a 16,384-token batch, by hand") {
    const Config c = qwen();
    const Derived d = derive(c, preset_shape("qwen3-8b"));
    const WorkerMemory w = target_memory(c, d, "target.0", Place{0}, 16384);
    // weights: 8,190,735,360 x 2 B (bf16)
    CHECK(part(w, "weights").bytes == 16'381'470'720ull);
    // per token, elements: h + qkv = 4096 + 6144 = 10,240 always alive; in swiglu + q 4096,
    // k 1024, v 1024, attention out 4096, mid + normed mid 8192, gate_up 24,576, silu 12,288,
    // product 12,288 -> 77,824 (RoPE moment 30,720, down-proj moment 73,728 are lower)
    // bytes: 77,824 x 2 + RoPE tables 2 x 128 x 2 + int64 tokens/positions 16 + lse 32 x 4 = 156,304
    CHECK(part(w, "activations").bytes == 16384ull * 156'304);
    // 4 of 5 captured layers x 16,384 x 4096 x 2 B
    CHECK(part(w, "captured_hidden_states").bytes == 536'870'912ull);
    const std::uint64_t allocated = 16'381'470'720ull + 16384ull * 156'304 + 536'870'912ull;
    CHECK(w.allocated() == allocated);
    CHECK(part(w, "cuda_context").bytes == 1 * GiB);
    CHECK(part(w, "allocator_slack").bytes == std::uint64_t(std::llround(allocated * 0.05)));
    CHECK(w.total() == allocated + 1 * GiB + std::uint64_t(std::llround(allocated * 0.05)));
}

TEST_CASE("sample shapes: expected anchors per attention group") {
    // 20 tokens, valid anchor positions 10..18 (9), 4 anchors, block 4: one group of 4 blocks =
    // 16 rows; its last anchor has rank round(4 x 10 / 5) - 1 = 7 -> position 17; keys
    // 17 + 16 = 33 padded to 256; mask 16 rows x 256
    const std::vector<std::uint32_t> valid{10, 11, 12, 13, 14, 15, 16, 17, 18};
    const SampleShape s = sample_shape(20, valid, 4, 4);
    CHECK(s.blocks == 4);
    CHECK(s.keys == 256);
    CHECK(s.mask == 16 * 256);

    // 3072 tokens all trained: 3071 valid positions, 512 anchors in 16 groups of 32 blocks x 16 =
    // 512 rows. Group g: last anchor at rank round(32 (g + 1) x 3072 / 513) - 1, keys that + 512
    // padded to 256: group 0 191 + 512 -> 768, group 7 1532 + 512 -> 2048, group 15 3065 + 512
    // -> 3584; 35,840 keys over the 16 groups.
    std::vector<std::uint32_t> all(3071);
    for (std::uint32_t i = 0; i < all.size(); ++i) all[i] = i;
    const SampleShape q = sample_shape(3072, all, 512, 16);
    std::uint64_t keys = 0;
    for (std::uint64_t g = 0; g < 16; ++g) {
        const auto rank = std::llround(double(32 * (g + 1)) * 3072.0 / 513.0) - 1;
        keys += (std::uint64_t(rank) + 512 + 255) / 256 * 256;
    }
    CHECK(keys == 35840);
    CHECK(q.blocks == 512);
    CHECK(q.keys == keys);
    CHECK(q.mask == 512ull * keys);

    // Fewer valid positions than anchors: every one is an anchor.
    const SampleShape few = sample_shape(8, std::vector<std::uint32_t>{5, 6}, 512, 16);
    CHECK(few.blocks == 2);
}

TEST_CASE("micro-batches split a slot like the drafter does") {
    // 3000 + 3000 fit 8192, a third would not; 3000 + 20000 would not; 20000 alone (longer than
    // the limit, still one micro-batch); 100 + 100
    const std::vector<std::uint64_t> lengths{3000, 3000, 3000, 20000, 100, 100};
    const auto mbs = split_micro_batches(lengths, 8192);
    using P = std::pair<std::size_t, std::size_t>;
    CHECK(mbs == std::vector<P>{{0, 2}, {2, 3}, {3, 4}, {4, 6}});
}

TEST_CASE("drafter memory for 5 samples of 3,072 tokens, by hand") {
    const Config c = qwen();
    const Derived d = derive(c, preset_shape("qwen3-8b"));
    const Workload w = make_workload(SampleSource::synthetic(3072), c, d);
    // 16,384-token slots hold 5 samples (15,360 tokens); tokens_per_step = 16,384 is one slot
    // (whole slots per step), one micro-batch. The memory below is asked for as if gradients
    // existed during a forward (gradient accumulation over several micro-batches).
    REQUIRE(w.slots.size() == 4);
    CHECK(w.slots[0].size() == 5);
    CHECK(w.max_slot_tokens == 15360);
    CHECK(w.micro_batches_per_step == 1);
    const auto mbs = w.micro_batches(0);
    REQUIRE(mbs.size() == 1);
    const MicroBatch mb = mbs[0];
    CHECK(mb.tokens == 15360);
    CHECK(mb.blocks == 2560);

    const WorkerMemory m = drafter_memory(c, d, "drafter.0", Place{1}, mb, true, 1);
    const std::uint64_t p = 1'048'626'432ull;
    CHECK(part(m, "embedding_and_lm_head").bytes == 2ull * 151936 * 4096 * 2);
    CHECK(part(m, "fp32_master_weights").bytes == p * 4);
    CHECK(part(m, "bf16_weight_casts").bytes == p * 2);
    CHECK(part(m, "adamw_state").bytes == p * 8);
    CHECK(part(m, "fp32_gradients").bytes == p * 4);
    // rows r = 2560 x 16 = 40,960; context t = 15,360
    // per layer: r x (4H + 4Q + K + 3I = 70,656) x 2 = 5,788,139,520 (3I: gate, up, product; the
    //          fused SwiGLU keeps no silu(gate) on a GPU)
    //          + t x K x 2 = 31,457,280 + r x (2 + 2 x 32 + 8) x 4 = 12,124,160 -> 5,831,720,960
    // keys: 5 layers x 5 samples x 35,840 keys (16 groups of 32 blocks) x 2 x 1024 x 2 B
    //   = 3,670,016,000
    // shared: context 2 x t x H x 2 = 251,658,240; final-norm input r x H x 2 = 335,544,320;
    //   RoPE 2 x 128 x 2 x (t + r) = 28,835,840; block tensors r x 29 + t x 8 = 1,310,720;
    //   mask 4 (GQA repeat) x 5 x 512 x 35,840 x 2 B = 734,003,200 -> 1,351,352,320
    // saved = 5 x 5,831,720,960 + 3,670,016,000 + 1,351,352,320 = 34,179,973,120
    // forward peak: gradients 4,194,505,728 + saved + output rows r x H x 2 + 2 x scored rows
    //   (2560 x 15) x H x 2 = 964,689,920 + the logits, overwritten by their gradient (the
    //   cross-entropy kernel), 4096 x 151,936 x 2 B = 1,244,659,712 -> 40,583,828,480 < backward peak: gradients + saved + scored-row
    //   gradient 314,572,800 + 3 x r x I x 2 + 2 x H x I x 4 = 3,422,552,064 -> 42,111,603,712
    CHECK(part(m, "activations").bytes == 34'179'973'120ull + 314'572'800ull);
    CHECK(part(m, "loss_chunk_logits").bytes == 0);
    CHECK(part(m, "backward_transients").bytes == 3'422'552'064ull);
    CHECK(m.peak_phase == "the backward of the last layer");
    // 2 x 5 layers x 16,384 x 4096 x 2 B
    CHECK(part(m, "inflight_slots").bytes == 1'342'177'280ull);
    CHECK(m.part("allreduce_buffers") == nullptr);
    // head 2,489,319,424 + master 4,194,505,728 + casts 2,097,252,864 + AdamW 8,389,011,456
    // + gradients 4,194,505,728 + activations 34,494,545,920 + backward 3,422,552,064
    // + slots 1,342,177,280
    CHECK(m.allocated() == 60'623'870'464ull);  // 56.46 GiB

    // On the CPU (fp32, ATen's silu(gate) * up): 4I per row, silu(gate) kept too. Per layer
    // r x (4H + 4Q + K + 4I = 82,944) x 4 + t x K x 4 + r x 74 x 4 = 13,664,583,680; keys
    // 7,340,032,000; shared 2,701,393,920 -> saved 78,364,344,320 + scored-row gradient
    // (2560 x 15) x H x 4 = 629,145,600 (the backward peak)
    CHECK(part(drafter_memory(c, d, "drafter.0", Place{}, mb, true, 1), "activations").bytes == 78'993'489'920ull);

    // Alone in its step (one micro-batch): no gradients at the forward's peak.
    const WorkerMemory first = drafter_memory(c, d, "drafter.0", Place{1}, mb, false, 1);
    CHECK(part(first, "fp32_gradients").bytes == 0);
    CHECK(first.allocated() == 60'623'870'464ull - p * 4);

    // [train] lm_head = "fp8": the head once more, twice in e4m3 (as is and transposed) with
    // fp32 scales per row of each: 2 x 151,936 x 4096 + 4 x (151,936 + 4096) = 1,245,283,840
    Config f = c;
    f.train.lm_head = Matmul::FP8;
    const WorkerMemory fp8 = drafter_memory(f, d, "drafter.0", Place{1}, mb, true, 1);
    CHECK(part(fp8, "fp8_lm_head").bytes == 1'245'283'840ull);
    CHECK(fp8.allocated() == 60'623'870'464ull + 1'245'283'840ull);
    CHECK(m.part("fp8_lm_head") == nullptr);

    // [train] matmul = "fp8": each layer's linear weights (q 4096 x 4096, k and v 1024 x 4096, o,
    // gate and up 12,288 x 4096, down: 192,937,984 parameters) are kept for backward as e4m3 copies
    // with an fp32 scale per output row, k and v twice (the block rows' and the context's
    // products): 16,793,600 + 2 x 2 x 4,198,400 + 16,793,600 + 2 x 50,380,800 + 50,348,032 =
    // 201,490,432 B per layer instead of 385,875,968; fc and the norms stay bf16 casts. (The H200
    // measured the peer's-shape drafter at 25.17 GiB, 1.49 GiB under the prediction that sized the
    // layers as bf16 casts: BENCHMARKS.md "The node"; this takes 0.86 GiB of it.)
    Config f8 = c;
    f8.train.matmul = Matmul::FP8;
    const WorkerMemory fm = drafter_memory(f8, d, "drafter.0", Place{1}, mb, true, 1);
    CHECK(part(fm, "bf16_weight_casts").bytes == (p - 5 * 192'937'984ull) * 2 + 5 * 201'490'432ull);
    CHECK(fm.allocated() == 60'623'870'464ull - (p * 2 - part(fm, "bf16_weight_casts").bytes));
}

TEST_CASE("the loss chunk's logits: e B per logit on a GPU, e + 1 with the FP8 head, 2e on the CPU") {
    // The peer's shape (2 x 768 tokens, 256 anchors): the peak is the forward's loss chunk, one
    // loss_chunk of 4,096 of its 7,680 scored rows (512 blocks x 15).
    Config c = qwen("[train]\nnum_anchors = 256\n");
    c.ring.slot_tokens = 1536;
    const Derived d = derive(c, preset_shape("qwen3-8b"));
    const MicroBatch mb = make_workload(SampleSource::synthetic(768), c, d).micro_batches(0).at(0);
    REQUIRE(mb.blocks == 512);
    const std::uint64_t logits = 4096ull * 151936;
    const WorkerMemory gpu = drafter_memory(c, d, "drafter.0", Place{1}, mb, false, 1);
    REQUIRE(gpu.peak_phase.find("cross-entropy") != std::string::npos);
    // the cross-entropy kernel overwrites the bf16 logits with their gradient
    CHECK(part(gpu, "loss_chunk_logits").bytes == logits * 2);
    Config f = c;
    f.train.lm_head = Matmul::FP8;
    // the gradient written beside them as e4m3 rows (the logits freed before its product)
    CHECK(part(drafter_memory(f, d, "drafter.0", Place{1}, mb, false, 1), "loss_chunk_logits").bytes == logits * 3);
    // the CPU's ATen path: fp32 logits and their softmax
    const WorkerMemory cpu = drafter_memory(c, d, "drafter.0", Place{}, mb, false, 1);
    REQUIRE(cpu.peak_phase.find("cross-entropy") != std::string::npos);
    CHECK(part(cpu, "loss_chunk_logits").bytes == logits * 8);
}

TEST_CASE("host memory: ring, ledger, huge pages, pinned bytes") {
    const Config c = qwen();
    const Derived d = derive(c, preset_shape("qwen3-8b"));
    const HostMemory h = host_memory(c, d, SampleSource::synthetic(3072), {});
    const std::uint64_t ring = ring_detail::Offsets::of(d.ring).total;
    // 16 GiB / 640 MiB slots = 25 slots of payload, plus header and metadata
    CHECK(d.slots == 25);
    CHECK(ring > 25ull * 640 * MiB);
    CHECK(h.huge_pages == (ring + 2 * MiB - 1) / (2 * MiB));
    // The ring, and the master drafter's snapshot buffers (checkpoint_background, on a GPU):
    // fp32 weights + two AdamW moments, 12 B x 1,048,626,432 parameters.
    CHECK(h.pinned_bytes == ring + 12ull * 1'048'626'432ull);
    REQUIRE(!h.parts.empty());
    CHECK(h.parts[0].name == "ring");
    CHECK(h.parts[0].bytes == ring);
    // 2 GPU worker processes x 2 GiB; checkpoint staging: weights + AdamW state 12 B x 1,048,626,432
    std::uint64_t sum = 0;
    for (const auto& p : h.parts) {
        sum += p.bytes;
        if (p.name == "worker_processes") CHECK(p.bytes == 4 * GiB);
        if (p.name == "checkpoint_staging") CHECK(p.bytes == 12ull * 1'048'626'432ull);
    }
    CHECK(h.total() == sum);
    // Written in the step (checkpoint_background = false): copied while saving, not kept pinned.
    Config sync = c;
    sync.train.checkpoint_background = false;
    CHECK(host_memory(sync, d, SampleSource::synthetic(3072), {}).pinned_bytes == ring);
    // Machine 1 of 2 holds no weights (the master, global rank 0, is on machine 0).
    Config other = c;
    other.distributed.nnodes = 2;
    other.distributed.node_rank = 1;
    for (const auto& p : host_memory(other, d, SampleSource::synthetic(3072), {}).parts)
        if (p.name == "checkpoint_staging") CHECK(p.bytes == 0);
}

TEST_CASE("a GPU shared by three targets sums them") {
    Config c = qwen();
    c.topology.targets = {Place{0}, Place{0}, Place{0}};
    c.topology.allow_shared_gpus = true;
    const Planner planner(c, SampleSource::synthetic(3072), machine(141 * GiB));
    const Plan p = planner.plan();
    const GpuPlan* g0 = p.gpu(0);
    REQUIRE(g0);
    CHECK(g0->workers.size() == 3);
    CHECK(g0->worker_names() == std::vector<std::string>{"target.0", "target.1", "target.2"});
    const Derived d = derive(c, preset_shape("qwen3-8b"));
    const WorkerMemory one = target_memory(c, d, "target.0", Place{0}, 16384);
    CHECK(g0->predicted() == 3 * one.total());
    for (const auto& [name, bytes] : g0->parts())
        if (name == "weights") CHECK(bytes == 3 * part(one, "weights").bytes);
    // The JSON keeps the issue's shape, parts summed.
    const auto j = plan_json(p, {}, planner.capacity());
    CHECK(j["gpus"][0]["index"] == 0);
    CHECK(j["gpus"][0]["workers"].size() == 3);
    CHECK(j["gpus"][0]["predicted_peak_bytes"] == 3 * one.total());
    CHECK(j["gpus"][0]["parts"]["weights"] == 3 * part(one, "weights").bytes);
    std::uint64_t sum = 0;
    for (const auto& [k, v] : j["gpus"][0]["parts"].items()) sum += v.get<std::uint64_t>();
    CHECK(sum == j["gpus"][0]["predicted_peak_bytes"].get<std::uint64_t>());
    CHECK(j["host"]["predicted_bytes"].get<std::uint64_t>() == p.host.memory.total());
    CHECK(j["host"]["huge_pages"].get<std::uint64_t>() == p.host.memory.huge_pages);
}

TEST_CASE("several data-parallel drafters: one plan per GPU, each with its gradient buckets and NCCL's buffers") {
    // The config parser still allows one drafter; the planner takes any number (structs).
    Config c = qwen();
    c.topology.targets = {Place{0}, Place{1}};
    c.topology.drafters = {Place{2}, Place{3}, Place{4}, Place{5}, Place{6}, Place{7}};
    const Planner planner(c, SampleSource::synthetic(3072), machine(96 * GiB, 1024 * GiB, 8));
    const Plan p = planner.plan();
    CHECK(p.gpus.size() == 8);
    const std::uint64_t pd = 1'048'626'432ull;
    std::uint64_t first = 0;
    for (int g = 2; g < 8; ++g) {
        const GpuPlan* gp = p.gpu(g);
        REQUIRE(gp);
        REQUIRE(gp->workers.size() == 1);
        CHECK(gp->workers[0].name == "drafter." + std::to_string(g - 2));
        // The gradients are views of the reducer's fp32 buckets (one copy, resident all the time:
        // also at the forward's peak of a one-micro-batch step); besides, NCCL's own buffers.
        CHECK(part(gp->workers[0], "fp32_gradients").bytes == pd * 4);
        CHECK(part(gp->workers[0], "allreduce_buffers").bytes == 256 * MiB);
        if (!first) first = gp->predicted();
        CHECK(gp->predicted() == first);
    }
    // host: 8 worker processes; one copy of the state (the master of the 6 ranks checkpoints)
    for (const auto& x : p.host.memory.parts) {
        if (x.name == "worker_processes") CHECK(x.bytes == 8 * 2 * GiB);
        if (x.name == "checkpoint_staging") CHECK(x.bytes == 12 * pd);
    }
    CHECK(p.fits());
}

TEST_CASE("an over-budget drafter gets knobs whose values the re-run arithmetic shows to fit") {
    const Config c = qwen();
    // The drafter needs 56.18 GiB with context and slack (52.55 GiB allocated): give it 54 GiB.
    const Planner planner(c, SampleSource::synthetic(3072), machine(54 * GiB));
    const Plan p = planner.plan();
    REQUIRE(!p.gpu(1)->fits());
    CHECK(p.gpu(0)->fits());
    CHECK(!p.fits());
    const auto s = planner.suggestions(p);
    auto find = [&](const std::string& knob) -> const Suggestion* {
        for (const auto& x : s)
            if (x.knob == knob) return &x;
        return nullptr;
    };
    const Suggestion* mbt = find("[train] micro_batch_tokens");
    REQUIRE(mbt);
    CHECK(mbt->current == "16384");
    CHECK(mbt->fits_all);
    CHECK(mbt->effect.find("drafter.0 on GPU 1 at") != std::string::npos);
    CHECK(mbt->effect.find("everything fits") != std::string::npos);
    const std::uint64_t v = std::stoull(mbt->value);
    // The value fits when planned again; the next larger multiple of 1024 does not.
    Config fixed = c;
    fixed.train.micro_batch_tokens = v;
    CHECK(planner.plan(fixed).fits());
    Config bigger = c;
    bigger.train.micro_batch_tokens = v + 1024;
    CHECK(!planner.plan(bigger).fits());
    // Whole samples of 3,072 tokens: 4 per micro-batch (12,288) fit, 5 (15,360) do not.
    CHECK(v >= 12288);
    CHECK(v < 15360);

    // loss_chunk cannot save what is over here (the backward peaks, not the loss chunk): not suggested.
    CHECK(find("[train] loss_chunk") == nullptr);
    // recompute = "layers" is offered, with what it costs in throughput.
    const Suggestion* rc = find("[train] recompute");
    REQUIRE(rc);
    CHECK(rc->value == "\"layers\"");
    CHECK(rc->current == "\"none\"");
    CHECK(rc->effect.find("~18-20% fewer samples/s measured on an H200") != std::string::npos);
    // Every suggestion fits when applied.
    for (const auto& x : s) {
        CAPTURE(x.knob);
        Config k = c;
        if (x.knob == "[train] recompute") {
            k.train.recompute = Recompute::Layers;
            CHECK(planner.plan(k).fits());
            CHECK(x.fits_all);
            continue;
        }
        const std::uint64_t value = std::stoull(x.value);
        if (x.knob == "[train] micro_batch_tokens") k.train.micro_batch_tokens = value;
        else if (x.knob == "[drafter] inflight_slots") k.drafter.inflight_slots = static_cast<std::uint32_t>(value);
        else if (x.knob == "[ring] slot_tokens") k.ring.slot_tokens = value;
        else FAIL("unexpected knob " << x.knob);
        CHECK(planner.plan(k).fits());
        CHECK(x.fits_all);
    }

    // The report names the knob and its value.
    const std::string text = format_plan(p, s, planner.capacity());
    CHECK(text.find("DOES NOT FIT") != std::string::npos);
    CHECK(text.find("[train] micro_batch_tokens = " + mbt->value) != std::string::npos);
    CHECK(text.find("[train] recompute = \"layers\"  (now \"none\")") != std::string::npos);

    // Already recomputing: the knob is not offered again.
    Config layers = c;
    layers.train.recompute = Recompute::Layers;
    const Planner lp(layers, SampleSource::synthetic(3072), machine(30 * GiB));
    const Plan lplan = lp.plan();
    REQUIRE(!lplan.fits());
    for (const auto& x : lp.suggestions(lplan)) CHECK(x.knob != "[train] recompute");
}

namespace {

// One of the H200 bench shapes planned as a config (BENCHMARKS.md, "Planner"): `hsring-bench
// drafter --preset qwen3-8b --layers 5 --anchors 512 --block 16 --chunk 4096` on `tokens` tokens
// in one micro-batch and one optimizer step, its [5, tokens, 4096] hidden states as one in-flight
// slot; samples of `sample_tokens`.
Plan bench_plan(std::uint64_t tokens, std::uint64_t sample_tokens, Recompute recompute) {
    Config c = qwen();
    c.ring.slot_tokens = tokens;
    c.train.micro_batch_tokens = tokens;
    c.train.tokens_per_step = tokens;
    c.train.loss_chunk = 4096;
    c.drafter.inflight_slots = 1;
    c.ring.size = 32 * GiB;
    c.train.recompute = recompute;
    return Planner(c, SampleSource::synthetic(sample_tokens), machine(141 * GiB)).plan();
}

} // namespace

TEST_CASE("recompute = layers: the drafter's peak against the H200 measurements, both settings") {
    // Measured on one H200, 2026-12-03 (torch allocated peak of `hsring-bench drafter --preset
    // qwen3-8b --layers 5 --anchors 512 --block 16 --chunk 4096`, bf16, 32-block attention
    // groups, the cross-entropy kernel, the fused SwiGLU; --recompute none and layers): 2 x 3,072
    // tokens 30.46 / 21.68 GiB, one 16,384-token sample 27.13 / 21.24 GiB, one 32,768-token
    // sample 31.52 / 23.62 GiB (2026-12-01, before the fused SwiGLU and with the logits' bound
    // at 2 x 2 B: 33.49 / 22.05, 29.53 / 21.50, 34.06 / 23.67). Predictions within 3% (issue 14
    // asks for 10%), and never below.
    struct Shape {
        std::uint64_t tokens, sample_tokens;
        double none_gib, layers_gib;
    };
    for (const Shape& k : {Shape{6144, 3072, 30.46, 21.68}, Shape{16384, 16384, 27.13, 21.24},
                           Shape{32768, 32768, 31.52, 23.62}}) {
        CAPTURE(k.tokens);
        const Plan none = bench_plan(k.tokens, k.sample_tokens, Recompute::None);
        const Plan layers = bench_plan(k.tokens, k.sample_tokens, Recompute::Layers);
        const WorkerMemory& wn = none.gpu(1)->workers.at(0);
        const WorkerMemory& wl = layers.gpu(1)->workers.at(0);
        const double pn = double(wn.allocated()) / double(GiB), pl = double(wl.allocated()) / double(GiB);
        MESSAGE(k.tokens << " tokens: none " << pn << " GiB (measured " << k.none_gib << "), layers " << pl
                         << " GiB (measured " << k.layers_gib << ")");
        CHECK(pn == doctest::Approx(k.none_gib).epsilon(0.03));
        CHECK(pl == doctest::Approx(k.layers_gib).epsilon(0.03));
        CHECK(pn >= k.none_gib);
        CHECK(pl >= k.layers_gib);
        // The same micro-batch; recompute moves the peak to the backward of layer 0, where
        // layers 1-4's fp32 gradients exist and one layer's activations are rebuilt.
        CHECK(layers.worst.tokens == none.worst.tokens);
        CHECK(wl.part("activations") == nullptr);
        REQUIRE(wl.part("activations_recompute_layers"));
        CHECK(wn.part("activations_recompute_layers") == nullptr);
        CHECK(wl.peak_phase.find("the backward of layer 0, recomputed") != std::string::npos);
        // 4 layers x 192,946,432 parameters x 4 B
        CHECK(part(wl, "fp32_gradients").bytes == 4ull * 192'946'432ull * 4);
        CHECK(part(wl, "loss_chunk_logits").bytes == 0);
        CHECK(part(wl, "activations_recompute_layers").bytes < part(wn, "activations").bytes * 3 / 4);
    }
}

TEST_CASE("recompute = layers at the recipe shape, by hand") {
    const Plan p = bench_plan(6144, 3072, Recompute::Layers);
    const WorkerMemory& w = p.gpu(1)->workers.at(0);
    // rows r = 2 x 512 x 16 = 16,384; context t = 6,144; one row r x H x 2 = 134,217,728
    // Backward of layer 0 (recomputed), one micro-batch per step:
    //   casts: fc + norms (5 x 4096 x 4096 + 8192) x 2 = 167,788,544; layer 0's 192,946,432 x 2
    //     = 385,892,864 -> 553,681,408
    CHECK(part(w, "bf16_weight_casts").bytes == 553'681'408ull);
    //   layers 1-4's fp32 gradients: 4 x 192,946,432 x 4 = 3,087,142,912
    CHECK(part(w, "fp32_gradients").bytes == 3'087'142'912ull);
    //   activations: layer 0's input 134,217,728
    //   + layer 0 recomputed: r x 70,656 x 2 = 2,315,255,808 + t x K x 2 = 12,582,912
    //     + r x 74 x 4 = 4,849,664 + its keys 2 x 35,840 x 2 x 1024 x 2 = 293,601,280
    //     + its output 134,217,728 -> 2,760,507,392
    //   + context and pre-norm 2 x t x H x 2 = 100,663,296, RoPE 2 x 128 x 2 x (t + r)
    //     = 11,534,336, block tensors r x 29 + t x 8 = 524,288, mask 4 x 2 x 512 x 35,840 x 2
    //     = 293,601,280 -> 406,323,200
    //   + gradient flowing in 134,217,728 + d(context) over layers 1-4 t x H x 2 = 50,331,648
    //   = 3,485,597,696
    CHECK(part(w, "activations_recompute_layers").bytes == 3'485'597'696ull);
    //   MLP backward: 2 x r x I x 2 = 805,306,368 + down's fp32 gradient H x I x 4 = 201,326,592
    CHECK(part(w, "backward_transients").bytes == 1'006'632'960ull);
    CHECK(part(w, "loss_chunk_logits").bytes == 0);
    // = 8,133,054,976 at layer 0, more than the forward's cross-entropy chunk (fc's casts
    // 167,788,544 + every layer's input 5 x 134,217,728 + context, RoPE, mask 406,323,200 + the
    // final norm's input 134,217,728 + output and scored rows 385,875,968 + the logits, which
    // the cross-entropy kernel overwrites with their gradient, 1,244,659,712 = 3,009,953,792) and
    // the last layer's backward (5 inputs, no gradients yet).
    CHECK(w.peak_phase.find("layer 0") != std::string::npos);
    // + embedding and LM head 2,489,319,424, master weights 4,194,505,728, AdamW 8,389,011,456,
    // one slot 5 x 6144 x 4096 x 2 = 251,658,240
    CHECK(w.allocated() == 8'133'054'976ull + 2'489'319'424ull + 4'194'505'728ull + 8'389'011'456ull + 251'658'240ull);
}

TEST_CASE("recompute = layers: a small loss chunk leaves the peak in a layer, never above recompute none") {
    for (std::uint32_t chunk : {256u, 1024u, 4096u, 16384u}) {
        CAPTURE(chunk);
        Config c = qwen();
        c.train.loss_chunk = chunk;
        const Derived d = derive(c, preset_shape("qwen3-8b"));
        const Workload w = make_workload(SampleSource::synthetic(3072), c, d);
        const MicroBatch mb = w.micro_batches(0).at(0);
        for (bool grads : {false, true}) {
            Config l = c;
            l.train.recompute = Recompute::Layers;
            const std::uint64_t none = drafter_batch_peak(c, d, Place{1}, mb, grads);
            const std::uint64_t layers = drafter_batch_peak(l, d, Place{1}, mb, grads);
            CHECK(layers < none);
            const WorkerMemory m = drafter_memory(l, d, "drafter.0", Place{1}, mb, grads, 1);
            std::uint64_t batch = 0;
            for (const auto& p : m.parts)
                if (p.name != "embedding_and_lm_head" && p.name != "fp32_master_weights" && p.name != "adamw_state" &&
                    p.name != "inflight_slots" && !p.overhead)
                    batch += p.bytes;
            // The parts add up to the peak the planner ranks micro-batches by (plus fc's casts,
            // which drafter_batch_peak counts too).
            CHECK(batch == layers);
        }
    }
}

TEST_CASE("a target too large for its GPU is told to lower slot_tokens") {
    const Config c = qwen("[train]\nmicro_batch_tokens = 4096\n");
    // target.0 needs 20.05 GiB at 16,384 tokens: 19 GiB on GPU 0 fails; 8,192 tokens fit.
    Capacity cap = machine(141 * GiB, 1024 * GiB, 2);
    cap.gpu_bytes[0] = 19 * GiB;
    cap.gpu_source = "nvidia-smi";
    const Planner planner(c, SampleSource::synthetic(3072), cap);
    const Plan p = planner.plan();
    REQUIRE(!p.gpu(0)->fits());
    const auto s = planner.suggestions(p);
    bool found = false;
    for (const auto& x : s)
        if (x.knob == "[ring] slot_tokens") {
            found = true;
            CHECK(x.value == "8192");
            Config fixed = c;
            fixed.ring.slot_tokens = 8192;
            CHECK(planner.plan(fixed).gpu(0)->fits());
        }
    CHECK(found);
}

TEST_CASE("host RAM too small: a smaller ring") {
    const Config c = qwen();
    const Planner planner(c, SampleSource::synthetic(3072), machine(141 * GiB, 20 * GiB));
    const Plan p = planner.plan();
    REQUIRE(!p.host.fits());
    const auto s = planner.suggestions(p);
    bool found = false;
    for (const auto& x : s)
        if (x.knob == "[ring] size") {
            found = true;
            CHECK(x.fits_all);
            // "NGiB" / "NMiB" as TOML
            Config fixed = parse_config(std::string(kQwen).replace(std::string(kQwen).find("\"16GiB\""), 7, x.value), "t.toml");
            CHECK(planner.plan(fixed).host.fits());
        }
    CHECK(found);
}

TEST_CASE("GPUs the machine lacks do not fit") {
    Config c = qwen();
    c.topology.drafters = {Place{3}};
    const Planner planner(c, SampleSource::synthetic(3072), machine(141 * GiB, 1024 * GiB, 2));
    const Plan p = planner.plan();
    CHECK(!p.gpu(3)->on_machine);
    CHECK(!p.fits());
    CHECK(format_plan(p, {}, planner.capacity()).find("NOT ON THIS MACHINE") != std::string::npos);
}

TEST_CASE("GPU splits: min(targets x target rate, drafter rate x (1 + 0.95 + 0.95^2 ...))") {
    // one target 35,000 tok/s, one drafter 14,700 tok/s (FACTS.md), 3,072-token samples
    // 4 GPUs: 1+3: min(35,000, 14,700 x 2.8525 = 41,931.75) = 35,000
    //         2+2: min(70,000, 14,700 x 1.95 = 28,665) = 28,665;  3+1: 14,700
    const auto s4 = gpu_splits(4, 35000, 14700, 3072);
    REQUIRE(s4.size() == 3);
    CHECK(s4[0].drafter_tokens_per_s == doctest::Approx(41931.75));
    CHECK(s4[0].tokens_per_s == doctest::Approx(35000));
    CHECK(s4[1].tokens_per_s == doctest::Approx(28665));
    CHECK(s4[2].tokens_per_s == doctest::Approx(14700));
    auto best = best_split(s4);
    REQUIRE(best);
    CHECK(best->targets == 1);
    CHECK(best->samples_per_s == doctest::Approx(35000.0 / 3072));
    // 8 GPUs: 2+6: min(70,000, 14,700 x (1 - 0.95^6) / 0.05 = 77,881.9) = 70,000;
    //         3+5: min(105,000, 14,700 x 4.5244 = 66,508) = 66,508
    const auto s8 = gpu_splits(8, 35000, 14700, 3072);
    best = best_split(s8);
    REQUIRE(best);
    CHECK(best->targets == 2);
    CHECK(best->drafters == 6);
    CHECK(best->tokens_per_s == doctest::Approx(70000));
    CHECK(s8[2].tokens_per_s == doctest::Approx(14700 * (1 - std::pow(0.95, 5)) / 0.05));
    CHECK(gpu_splits(1, 35000, 14700, 3072).empty());
}

TEST_CASE("--measure on a machine with fewer GPUs than the config names measures on GPU 0, not on a GPU it lacks") {
    // config/qwen3-8b-specforge-8gpu.toml names drafters on GPUs 2-7; `--gpus 8` plans the 8-GPU
    // node. On one H200 the drafter's benchmark ran with CUDA_VISIBLE_DEVICES=2 and found no GPU.
    const std::vector<Place> drafters{Place{2}, Place{3}};
    CHECK(measure_gpu(drafters, std::uint64_t{1}) == 0);
    CHECK(measure_gpu(drafters, std::uint64_t{8}) == 2);
    CHECK(measure_gpu(drafters, std::nullopt) == 2);
    CHECK(measure_gpu({Place{}}, std::uint64_t{8}) == 0);  // a CPU place
}

TEST_CASE("capacity: /proc/meminfo, --gpu-mem for every GPU") {
    const MemInfo m = parse_meminfo("MemTotal:       1056764196 kB\nMemFree: 1 kB\nHugePages_Total:   16384\n");
    REQUIRE(m.total_bytes);
    CHECK(*m.total_bytes == 1056764196ull * 1024);
    CHECK(m.huge_pages_total == 16384u);
    Capacity c;
    c.gpu_bytes = {96 * GiB};
    c.gpu_source = "--gpu-mem";
    CHECK(c.gpu(5) == 96 * GiB);
    c.gpu_source = "nvidia-smi";
    CHECK(!c.gpu(5));
}

namespace {

// A shipped config that lists several drafters, read the way the parser accepts it today (one
// drafter) and given its drafter list through the structs.
Config load_with_drafters(const std::string& name) {
    const char* root = std::getenv("HSRING_SOURCE_ROOT");
    REQUIRE_MESSAGE(root, "HSRING_SOURCE_ROOT is set by meson test");
    const std::string path = std::string(root) + "/config/" + name;
    std::ifstream f(path);
    REQUIRE_MESSAGE(f, "cannot read " << path);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string text = ss.str();
    const auto at = text.find("drafters = [");
    REQUIRE(at != std::string::npos);
    const auto end = text.find(']', at);
    std::vector<Place> drafters;
    std::stringstream list(text.substr(at + 12, end - at - 12));
    for (std::string g; std::getline(list, g, ',');) drafters.push_back(Place{std::stoi(g)});
    text.replace(at, end - at + 1, "drafters = [" + std::to_string(drafters.front().gpu) + "]");
    Config c = parse_config(text, path);
    c.topology.drafters = drafters;
    return c;
}

} // namespace

TEST_CASE("the shipped 4 x 96 GB and 8-GPU configs fit 96 GB GPUs and 1 TB of host RAM") {
    struct Case {
        const char* file;
        std::size_t targets, drafters;
    };
    for (const Case& k : {Case{"qwen3-8b-1t3d.toml", 1, 3}, Case{"qwen3-8b-2t6d.toml", 2, 6}}) {
        CAPTURE(k.file);
        const Config c = load_with_drafters(k.file);
        CHECK(c.topology.targets.size() == k.targets);
        CHECK(c.topology.drafters.size() == k.drafters);
        const std::uint64_t gpus = k.targets + k.drafters;
        // 96 GB and 1 TB as vendors count them; samples of 3,072 tokens like the data they name.
        const Planner planner(c, SampleSource::synthetic(3072), machine(96'000'000'000ull, 1'000'000'000'000ull, gpus));
        const Plan p = planner.plan();
        CHECK(p.fits());
        CHECK(p.gpus.size() == gpus);
        const double target = double(p.gpu(0)->predicted()) / double(GiB);
        const double drafter = double(p.gpu(int(k.targets))->predicted()) / double(GiB);
        const double host = double(p.host.memory.total()) / double(GiB);
        MESSAGE(k.file << ": target " << target << " GiB, drafter " << drafter << " GiB, host " << host
                       << " GiB, huge pages " << p.host.memory.huge_pages);
        // What the files' comments say.
        CHECK(target == doctest::Approx(29).epsilon(0.05));
        CHECK(drafter == doctest::Approx(64).epsilon(0.05));
        CHECK(host == doctest::Approx(k.targets == 1 ? 82 : 90).epsilon(0.05));
    }
}

TEST_CASE("a peer transport's exported buffers are part of each GPU target's memory") {
    Config c = qwen();
    const Derived d = derive(c, preset_shape("qwen3-8b"));
    const WorkerMemory host = target_memory(c, d, "target.0", Place{0}, 16384);
    c.transport.kind = TransportKind::Peer;
    c.transport.peer_buffers = 3;
    const WorkerMemory peer = target_memory(c, d, "target.0", Place{0}, 16384);
    // 3 x (layers x slot_tokens x 4096 x 2 B)
    const std::uint64_t payload = d.layer_ids.size() * c.ring.slot_tokens * 4096ull * 2;
    CHECK(part(peer, "peer_buffers").bytes == 3 * payload);
    CHECK(peer.allocated() == host.allocated() + 3 * payload);
    // CPU targets have no peer buffers (peer kinds need GPUs; config check refuses them there).
    for (const auto& p : target_memory(c, d, "target.0", Place{}, 16384).parts) CHECK(p.name != "peer_buffers");
}

TEST_CASE("a gang rank holds one fp32 copy of its gradients all the time, whichever way the gang is spread") {
    // Before the gradients were bucket views the reducer held a second fp32 copy (the buckets)
    // beside .grad: ~2 GiB more at Qwen3-8B dims than the plan said (it assumed a bf16 copy).
    const std::uint64_t pd = 1'048'626'432ull;
    const Planner solo_planner(qwen(), SampleSource::synthetic(3072), machine(96 * GiB));
    const WorkerMemory solo = solo_planner.plan().gpu(1)->workers[0];
    CHECK(part(solo, "fp32_gradients").bytes == 0);  // one micro-batch per step: freed by zero_grad
    CHECK(solo.part("allreduce_buffers") == nullptr);

    Config two = qwen();
    two.topology.drafters = {Place{1}, Place{2}};
    const Planner two_planner(two, SampleSource::synthetic(3072), machine(96 * GiB));
    const WorkerMemory rank = two_planner.plan().gpu(1)->workers[0];
    CHECK(part(rank, "fp32_gradients").bytes == pd * 4);
    CHECK(part(rank, "allreduce_buffers").bytes == 256 * MiB);
    CHECK(rank.allocated() == solo.allocated() + pd * 4 + 256 * MiB);
    CHECK(rank.peak_phase == solo.peak_phase);  // the rebuild's moment is far below it on a GPU

    // One drafter on each of two machines is a gang too ([distributed] nnodes).
    Config machines = qwen("[distributed]\nnnodes = 2\n");
    const Planner machines_planner(machines, SampleSource::synthetic(3072), machine(96 * GiB));
    const WorkerMemory m1 = machines_planner.plan().gpu(1)->workers[0];
    CHECK(m1.allocated() == rank.allocated());
    CHECK(gang_world(machines) == 2);
    CHECK(gang_world(two) == 2);
    CHECK(gang_world(qwen()) == 1);
}

TEST_CASE("a gang rank whose bucket rebuild outweighs its micro-batch peaks there") {
    // fp32 on the CPU (no casts) with one 16-token sample: old + new buckets at the end of the first
    // reduced backward are more than the micro-batch's activations.
    Config c = qwen();
    c.topology.drafters = {Place{}, Place{}};
    const Derived d = derive(c, preset_shape("qwen3-8b"));
    MicroBatch mb;
    mb.tokens = 16;
    mb.samples = 1;
    mb.blocks = 1;
    mb.keys = 16;
    mb.mask = 16 * 16;
    const WorkerMemory m = drafter_memory(c, d, "drafter.0", Place{}, mb, false, 2);
    const std::uint64_t p = 1'048'626'432ull;
    CHECK(m.peak_phase == "the gang's bucket rebuild after its first reduced backward (once)");
    CHECK(part(m, "fp32_gradients").bytes == p * 4);
    CHECK(part(m, "rebuilt_gradient_buckets").bytes == p * 4);
    CHECK(part(m, "allreduce_buffers").bytes == 0);  // Gloo on the CPU
    CHECK(part(m, "activations").bytes == 0);
    CHECK(m.allocated() == part(m, "embedding_and_lm_head").bytes + p * 4 * 5 + part(m, "inflight_slots").bytes);
}

namespace {

// Qwen3-8B with an EAGLE-3 drafter (layers 1, 17, 32 fused + 35, the last, captured), 16,384-token
// slots; `drafter` adds [drafter] keys, `extra` whole tables.
Config qwen_eagle3(const std::string& drafter = "", const std::string& extra = "") {
    std::string text = R"(
[run]
name = "plan-eagle3"
[topology]
targets = [0]
drafters = [1]
[ring]
size = "16GiB"
slot_tokens = 16384
[target]
model = "preset:qwen3-8b"
[drafter]
type = "eagle3"
num_layers = 1
)";
    text += drafter + "\n[data]\npath = \"unused.jsonl\"\n" + extra;
    return parse_config(text, "t.toml");
}

// The drafter's predicted allocated bytes for the config's worst micro-batch of 3,072-token samples.
std::uint64_t eagle3_drafter_bytes(const Config& c, Place place = Place{1}, std::uint64_t sample_tokens = 3072) {
    const Planner planner(c, SampleSource::synthetic(sample_tokens), machine(1024 * GiB));
    const Plan p = planner.plan();
    return drafter_memory(c, p.derived, "drafter.0", place, p.worst, p.workload.micro_batches_per_step > 1, 1).allocated();
}

} // namespace

TEST_CASE("EAGLE-3 parameter count and ring geometry: 3 fused layers + the last, 4 per slot") {
    const Config c = qwen_eagle3();
    const Derived d = derive(c, preset_shape("qwen3-8b"));
    CHECK(d.layer_ids == std::vector<int>{1, 17, 32, 35});
    // fc 3 x 4096^2 = 50,331,648; q/k/v over [8192]: 8192 x (4096 + 2 x 1024) = 50,331,648; o
    // 16,777,216; MLP 3 x 4096 x 12,288 = 150,994,944; 4 norms 16,384
    CHECK(eagle3_params(d.target) == 268'451'840ull);
    // 16,384 tokens x 4 layers x 4096 x 2 B = 512 MiB per slot
    CHECK(d.slot_payload_bytes == 512 * MiB);
    CHECK(d.slot_stride == 512 * MiB);
}

TEST_CASE("EAGLE-3 drafter memory for 2 samples of 3,072 tokens on a GPU, by hand") {
    const Config c = qwen_eagle3("ttt_steps = 7\ndraft_vocab = 32000\n", "[train]\nmicro_batch_tokens = 6144\n");
    const Derived d = derive(c, preset_shape("qwen3-8b"));
    const Workload w = make_workload(SampleSource::synthetic(3072), c, d);
    // 5 samples per slot, micro-batches of 2, 2 and 1: one optimizer step holds 3.
    REQUIRE(w.micro_batches(0).size() == 3);
    const MicroBatch mb = w.micro_batches(0).at(0);
    REQUIRE(mb.tokens == 6144);
    CHECK(eagle3_rows(mb) == 6142);  // every token of a sample but its last

    // Asked for as the first micro-batch of a step (no gradients yet).
    const WorkerMemory m = drafter_memory(c, d, "drafter.0", Place{1}, mb, false, 1);
    const std::uint64_t p = 268'451'840ull, r = 6142;
    CHECK(part(m, "embedding_and_lm_head").bytes == 2ull * 151936 * 4096 * 2);
    // 32,000 rows x 4096 x 4 B + d2t 32,000 x 8 B + t2d 151,936 x 1 B
    CHECK(part(m, "draft_lm_head").bytes == 524'695'936ull);
    CHECK(part(m, "fp32_master_weights").bytes == p * 4);
    CHECK(part(m, "adamw_state").bytes == p * 8);
    CHECK(part(m, "fp32_gradients").bytes == 0);
    // once: fc 50,331,648 + layer 218,103,808 + its 3 norms 12,288 + LM head rows 131,072,000;
    // per step the final norm 4,096
    CHECK(part(m, "bf16_weight_casts").bytes == (399'519'744ull + 7 * 4096ull) * 2);
    // per step and row: (6H + 2Q + 2K + 3I + 2 x 128 = 71,936) x 2 + 16 = 143,888 B x 7 steps
    //   = 6,186,320,672; fc's and the 7 steps' outputs 8 x r x H x 2 = 402,522,112; fused rows
    //   3 x r x H x 2 = 150,945,792; row indices r x (32 + 20 x 7) = 1,056,424
    CHECK(part(m, "activations").bytes == 6'186'320'672ull + 402'522'112ull + 150'945'792ull + 1'056'424ull);
    // flash: 7 x r x 32 heads x 4 B of log-sum-exp, no score matrix
    CHECK(part(m, "attention").bytes == 7 * r * 32 * 4);
    // r x 32,000 x (8 B x 7 steps + 16 + 2) + the target's log-probabilities at all 6,144 tokens
    CHECK(part(m, "ttt_logits").bytes == r * 32000 * 74 + 6144ull * 32000 * 4);
    CHECK(part(m, "backward_transients").bytes == 0);
    CHECK(m.peak_phase == "the forward's loss of the last training-time-test step");
    // 2 x 4 layers x 16,384 x 4096 x 2 B
    CHECK(part(m, "inflight_slots").bytes == 1'073'741'824ull);
    CHECK(m.part("loss_chunk_logits") == nullptr);
    CHECK(m.allocated() == 30'185'312'328ull);  // 28.11 GiB

    // Later micro-batches of the step: the gradients exist during their forward.
    const WorkerMemory later = drafter_memory(c, d, "drafter.0", Place{1}, mb, true, 1);
    CHECK(part(later, "fp32_gradients").bytes == p * 4);
    CHECK(later.allocated() == m.allocated() + p * 4);
}

TEST_CASE("EAGLE-3 drafter memory grows with ttt_steps, draft_vocab and micro_batch_tokens") {
    const std::uint64_t base = eagle3_drafter_bytes(qwen_eagle3("ttt_steps = 4\ndraft_vocab = 32000\n",
                                                                "[train]\nmicro_batch_tokens = 6144\n"));
    const std::uint64_t steps = eagle3_drafter_bytes(qwen_eagle3("ttt_steps = 8\ndraft_vocab = 32000\n",
                                                                 "[train]\nmicro_batch_tokens = 6144\n"));
    const std::uint64_t vocab = eagle3_drafter_bytes(qwen_eagle3("ttt_steps = 4\ndraft_vocab = 64000\n",
                                                                 "[train]\nmicro_batch_tokens = 6144\n"));
    const std::uint64_t tokens = eagle3_drafter_bytes(qwen_eagle3("ttt_steps = 4\ndraft_vocab = 32000\n",
                                                                  "[train]\nmicro_batch_tokens = 12288\n"));
    MESSAGE("EAGLE-3 drafter: " << base / double(GiB) << " GiB; 8 steps " << steps / double(GiB) << ", vocabulary 64,000 "
                                << vocab / double(GiB) << ", 12,288 tokens " << tokens / double(GiB));
    CHECK(steps > base);
    CHECK(vocab > base);
    CHECK(tokens > base);
    // draft_vocab = 0: the target's whole vocabulary (151,936 rows).
    CHECK(eagle3_drafter_bytes(qwen_eagle3("ttt_steps = 4\n", "[train]\nmicro_batch_tokens = 6144\n")) > vocab);
}

TEST_CASE("EAGLE-3 on the CPU: the eager attention's [heads, R, R + k] probabilities outgrow a GPU's flash path") {
    // One 16,384-token sample: 16,383 rows.
    const Config c = qwen_eagle3("ttt_steps = 3\ndraft_vocab = 32000\n");
    const std::uint64_t gpu = eagle3_drafter_bytes(c, Place{1}, 16384);
    const std::uint64_t cpu = eagle3_drafter_bytes(c, Place{}, 16384);
    MESSAGE("one 16,384-token sample: GPU " << gpu / double(GiB) << " GiB, CPU " << cpu / double(GiB) << " GiB");
    CHECK(cpu > 2 * gpu);
    const Derived d = derive(c, preset_shape("qwen3-8b"));
    const MicroBatch mb = make_workload(SampleSource::synthetic(16384), c, d).micro_batches(0).at(0);
    const WorkerMemory on_cpu = drafter_memory(c, d, "drafter.0", Place{}, mb, false, 1);
    // 32 heads x 16,383 rows x (3 x 16,383 + 0 + 1 + 2) x 4 B of probabilities + 4 negated/causal
    // masks of 16,383^2 B + the repeated keys and values of grouped heads, 16,383 x 4096 x 4 B x 3 x 4
    const std::uint64_t r = 16383;
    CHECK(part(on_cpu, "attention").bytes == 32 * r * (3 * r + 3) * 4 + 4 * r * r + r * 4096 * 4 * 12);
    CHECK(part(drafter_memory(c, d, "drafter.0", Place{1}, mb, false, 1), "attention").bytes == 3 * r * 32 * 4);
    // Long rows: the attention's backward is the CPU's peak.
    CHECK(on_cpu.peak_phase == "the backward of the last training-time-test step's attention (eager, CPU)");
}

TEST_CASE("plan with an EAGLE-3 drafter: the report names it, its rows and steps, its slot of 4 captured layers") {
    const Config c = qwen_eagle3("ttt_steps = 7\ndraft_vocab = 32000\n", "[train]\nmicro_batch_tokens = 6144\n");
    const Planner planner(c, SampleSource::synthetic(3072), machine(80 * GiB));
    const Plan p = planner.plan();
    CHECK(p.fits());
    const std::string text = format_plan(p, planner.suggestions(p), planner.capacity());
    CHECK(text.find("drafter  EAGLE-3: micro-batches of <= 6,144 tokens") != std::string::npos);
    CHECK(text.find("2 samples, 6,144 tokens = 6,142 rows x 7 training-time-test steps, draft vocabulary 32,000") !=
          std::string::npos);
    CHECK(text.find("4 captured layers (3 fused + the last) x 16,384 tokens") != std::string::npos);
    CHECK(text.find("ttt_logits") != std::string::npos);
    CHECK(text.find("draft_lm_head") != std::string::npos);
    CHECK(text.find("blocks of") == std::string::npos);
    CHECK(text.find("loss_chunk") == std::string::npos);
    CHECK(text.find("recompute") == std::string::npos);
    const nlohmann::json j = plan_json(p, {}, planner.capacity());
    CHECK(j["workload"]["drafter_type"] == "eagle3");
    CHECK(j["workload"]["worst_micro_batch"]["rows"] == 6142);
    CHECK(j["workload"]["ttt_steps"] == 7);
    CHECK(j["gpus"][1]["parts"].contains("ttt_logits"));
    // The ring's slots hold the 4 captured layers: 512 MiB each.
    CHECK(p.host.memory.parts.front().how.find("512.00 MiB") != std::string::npos);
}

TEST_CASE("an over-budget EAGLE-3 drafter is told a micro_batch_tokens that fits; DFlash's knobs are not offered") {
    const Config c = qwen_eagle3("ttt_steps = 7\ndraft_vocab = 32000\n", "[train]\nmicro_batch_tokens = 16384\n");
    const Planner planner(c, SampleSource::synthetic(3072), machine(40 * GiB));
    const Plan p = planner.plan();
    REQUIRE(!p.fits());
    const auto s = planner.suggestions(p);
    REQUIRE(!s.empty());
    CHECK(s.front().knob == "[train] micro_batch_tokens");
    for (const auto& x : s) {
        CHECK(x.knob != "[train] recompute");
        CHECK(x.knob != "[train] loss_chunk");
    }
    Config fixed = c;
    fixed.train.micro_batch_tokens = std::stoull(s.front().value);
    CHECK(planner.plan(fixed).gpu(1)->fits());
}
