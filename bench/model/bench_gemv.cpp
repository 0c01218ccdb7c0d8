// hsring-bench gemv: the decode step's projections (src/kernels/gemv_rows) at Qwen3-8B's shapes,
// one row (plain decoding) and 16 rows (a verify step), each kernel beside cuBLAS (at::matmul)
// and beside the device-to-device copy bandwidth measured in the same run: a projection at so few
// rows reads its weight once, so bytes / copy bandwidth is its limit. Each shape's weight is
// cycled over copies that together exceed the L2 cache, so every call reads HBM.
#include "bench_common.hpp"
#include "model/ops/kernel_call.hpp"

#if HSRING_KERNELS_ON
#include "kernels/gemv_rows.hpp"

#include <c10/cuda/CUDAGuard.h>
#endif

#include <cstdio>

using namespace hsring;
#if HSRING_KERNELS_ON
namespace kernel_call = hsring::model::kernel_call;
#endif

namespace {

struct Shape {
    const char* name;
    std::int64_t out, in, per_step;  // per_step: how many a Qwen3-8B decode step runs
};

// Qwen3-8B (36 layers): fused q|k|v, o, fused gate|up, down, and the LM head.
const Shape kShapes[] = {{"qkv", 6144, 4096, 36},  {"o", 4096, 4096, 36},         {"gate_up", 24576, 4096, 36},
                         {"down", 4096, 12288, 36}, {"lm_head", 151936, 4096, 1}};

// Bytes per second of a 2 GiB device-to-device copy (read + write), the best of 5.
double copy_bandwidth() {
    const at::Tensor src = at::empty({std::int64_t{1} << 31}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
    at::Tensor dst = at::empty_like(src);
    return 2.0 * static_cast<double>(src.nbytes()) /
           bench::seconds_per_iter(at::Device(at::kCUDA), [&] { dst.copy_(src); }, 1, 5);
}

} // namespace

int main(int argc, char** argv) {
    try {
        bench::Options o(argc, argv, {{"iters", "50"}, {"dtype", "bf16"}, {"json", "false"}});
        if (o.help()) {
            o.print_help("hsring-bench gemv",
                         "Qwen3-8B's decode projections at 1 and 16 rows: the Simt and TensorCores GEMV kernels and\n"
                         "cuBLAS, in ms and as a fraction of the copy bandwidth measured in the same run.");
            return 0;
        }
        if (!bench::have_gpu("hsring-bench gemv")) return 77;
#if !HSRING_KERNELS_ON
        fmt::print("hsring-bench gemv: this build has no src/kernels (no nvcc or no c10_cuda); nothing measured\n");
        return 77;
#else
        const std::string dt = o.str("dtype");
        if (dt != "bf16" && dt != "f16") fail("--dtype must be bf16 or f16, got '{}'", dt);
        const at::ScalarType dtype = dt == "bf16" ? at::kBFloat16 : at::kHalf;
        const int iters = static_cast<int>(o.num("iters"));
        const at::Device dev("cuda:0");
        const c10::cuda::CUDAGuard guard(dev);
        const double copy_bw = copy_bandwidth();
        const auto opts = at::TensorOptions().device(dev).dtype(dtype);
        const std::int64_t elem = at::elementSize(dtype);
        nlohmann::json result = {{"mode", "gemv"}, {"dtype", dt}, {"copy_bytes_per_s", copy_bw}, {"shapes", nlohmann::json::array()}};
        std::map<std::string, double> step_s;  // "rows/kernel" -> a decode step's projections, seconds
        auto& out = o.flag("json") ? stderr : stdout;
        fmt::print(out, "copy bandwidth {:.2f} TB/s; {} calls per timing\n", copy_bw / 1e12, iters);
        fmt::print(out, "{:<8} {:>4} {:<12} {:>9} {:>10}\n", "shape", "rows", "kernel", "us", "of copy BW");
        for (const Shape& s : kShapes) {
            const std::int64_t bytes = s.out * s.in * elem;
            const std::int64_t copies = std::max<std::int64_t>(2, (std::int64_t{512} << 20) / bytes + 1);
            std::vector<at::Tensor> ws;
            for (std::int64_t c = 0; c < copies; ++c) ws.push_back(at::randn({s.out, s.in}, opts) * 0.02);
            for (const std::int64_t rows : {std::int64_t{1}, std::int64_t{16}}) {
                const at::Tensor x = at::randn({rows, s.in}, opts);
                at::Tensor y = at::empty({rows, s.out}, opts);
                for (const std::string kernel : {"simt", "tensor_cores", "cublas"}) {
                    kernels::GemvArgs a;
                    a.x = x.data_ptr();
                    a.y = y.data_ptr();
                    a.rows = rows;
                    a.in = s.in;
                    a.out = s.out;
                    a.dtype = kernel_call::dtype(dtype);
                    a.kernel = kernel == "simt" ? kernels::GemvKernel::Simt : kernels::GemvKernel::TensorCores;
                    a.stream = kernel_call::stream(x);
                    a.weight = ws[0].data_ptr();
                    if (kernel != "cublas" && !kernels::gemv_rows_supports(a)) continue;
                    std::size_t next = 0;
                    auto call = [&] {
                        const at::Tensor& w = ws[next++ % ws.size()];
                        if (kernel == "cublas") {
                            at::mm_out(y, x, w.t());
                        } else {
                            a.weight = w.data_ptr();
                            kernel_call::check(kernels::gemv_rows(a), "gemv {} {}", s.name, kernel);
                        }
                    };
                    const double sec = bench::seconds_per_iter(dev, call, 3, iters);
                    const double frac = static_cast<double>(bytes) / sec / copy_bw;
                    fmt::print(out, "{:<8} {:>4} {:<12} {:>9.1f} {:>10.3f}\n", s.name, rows, kernel, sec * 1e6, frac);
                    result["shapes"].push_back({{"shape", s.name}, {"out", s.out}, {"in", s.in}, {"rows", rows},
                                                {"kernel", kernel}, {"seconds", sec}, {"of_copy_bandwidth", frac}});
                    step_s[std::to_string(rows) + "/" + kernel] += sec * static_cast<double>(s.per_step);
                }
            }
        }
        double weight_bytes = 0;
        for (const Shape& s : kShapes) weight_bytes += static_cast<double>(s.out * s.in * elem * s.per_step);
        fmt::print(out, "a Qwen3-8B step's projections ({:.2f} GB, limit {:.2f} ms at the copy bandwidth):\n",
                   weight_bytes / 1e9, weight_bytes / copy_bw * 1e3);
        for (const auto& [k, sec] : step_s) {
            fmt::print(out, "  {:<16} {:.3f} ms = {:.2f}x the limit\n", k, sec * 1e3, sec / (weight_bytes / copy_bw));
            result["step_projections_ms"][k] = sec * 1e3;
        }
        result["step_weight_bytes"] = weight_bytes;
        if (o.flag("json")) bench::print_json_result(result);
        return 0;
#endif
    } catch (const std::exception& e) {
        fmt::print(stderr, "hsring-bench gemv: {}\n", e.what());
        return 1;
    }
}
