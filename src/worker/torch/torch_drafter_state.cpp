// TorchDrafter (torch_drafter.hpp): restore from a checkpoint (or fresh), the master's state sent
// to every rank, checkpoint snapshots (host copies written on any thread) and the export.
#include "worker/torch/torch_drafter_impl.hpp"

namespace hsring::worker {

namespace {

// Nothing non-finite is checkpointed or exported (invariant 10, docs/architecture.md): the first tensor of
// `named` that holds a NaN or inf, checked on its device (one small read per tensor).
void require_finite(const std::vector<std::pair<std::string, at::Tensor>>& named, const std::string& what) {
    for (const auto& [name, t] : named) {
        if (!t.defined() || at::isfinite(t).all().item<bool>()) continue;
        throw NonFiniteState(fmt::format("{}: {} holds non-finite values (NaN or inf); nothing is written. The last "
                                         "good checkpoint is kept", what, name));
    }
}

// A checkpoint of the drafter as of one step: drafter/ (the export format, fp32) and
// optimizer.safetensors (AdamW's moments and step per parameter name), written from the host
// copies only (any thread). Checkpoints of older hsring have optimizer.pt (torch::save) instead.
constexpr const char* kOptimizerFile = "optimizer.safetensors";

class TorchSnapshot final : public StateSnapshot {
public:
    TorchSnapshot(std::shared_ptr<HostState> state, model::DrafterExporter exporter, torch::optim::AdamWOptions options)
        : s_(std::move(state)), exporter_(std::move(exporter)), options_(std::move(options)) {}
    void write(const std::filesystem::path& dir) override {
        std::map<std::string, at::Tensor> named;
        for (std::size_t i = 0; i < s_->params.size(); ++i) named[s_->names[i]] = s_->params[i];
        exporter_(dir / "drafter", named, at::kFloat);
        // AdamW's state by parameter name, as safetensors: a restart maps it and copies it to the
        // device in a second or two (torch::save's archive took ~10 s to load back at Qwen3-8B dims).
        model::TensorMap moments;
        for (std::size_t i = 0; i < s_->params.size(); ++i) {
            if (!s_->exp_avg[i].defined()) continue;
            const std::string& n = s_->names[i];
            moments["exp_avg." + n] = s_->exp_avg[i];
            moments["exp_avg_sq." + n] = s_->exp_avg_sq[i];
            moments["step." + n] = at::full({1}, s_->steps[i], at::TensorOptions().dtype(at::kLong));
        }
        model::save_safetensors(dir / kOptimizerFile, moments, {{"format", "hsring-adamw"}});
    }
    std::uint64_t bytes() const override {
        std::uint64_t n = 0;
        for (const auto* v : {&s_->params, &s_->exp_avg, &s_->exp_avg_sq})
            for (const auto& t : *v)
                if (t.defined()) n += t.nbytes();
        return n;
    }

private:
    std::shared_ptr<HostState> s_;
    model::DrafterExporter exporter_;
    torch::optim::AdamWOptions options_;
};
} // namespace

void TorchDrafter::restore(const std::filesystem::path* checkpoint) {
    Impl& m = *impl_;
    if (checkpoint) {
        m.drafter = model::load_drafter(*checkpoint / "drafter", m.device);
        if (const std::string why = m.drafter->mismatch(m.spec); !why.empty())
            fail("checkpoint {}: the drafter cannot continue this run: {}", checkpoint->string(), why);
        m.make_optimizer();
        if (std::filesystem::exists(*checkpoint / kOptimizerFile)) {
            // Mapped, then copied to the parameters' device tensor by tensor.
            const model::SafetensorsFile f = model::read_safetensors(*checkpoint / kOptimizerFile);
            for (const auto& p : m.drafter->module().named_parameters()) {
                const auto a = f.tensors.find("exp_avg." + p.key());
                if (a == f.tensors.end()) continue;  // no step trained it yet
                const auto b = f.tensors.find("exp_avg_sq." + p.key()), n = f.tensors.find("step." + p.key());
                if (b == f.tensors.end() || n == f.tensors.end() || a->second.sizes() != p.value().sizes())
                    fail("{}: the AdamW state of {} is incomplete or of another shape: a damaged checkpoint",
                         (*checkpoint / kOptimizerFile).string(), p.key());
                auto st = std::make_unique<torch::optim::AdamWParamState>();
                st->step(n->second.item<std::int64_t>());
                st->exp_avg(a->second.to(p.value().device(), /*non_blocking=*/false, /*copy=*/true));
                st->exp_avg_sq(b->second.to(p.value().device(), false, true));
                m.optimizer->state()[p.value().unsafeGetTensorImpl()] = std::move(st);
            }
        } else {
            torch::load(*m.optimizer, (*checkpoint / "optimizer.pt").string());
            // The archive's tensors come back where they were saved (host memory since snapshots):
            // the state lives with its parameter.
            for (const auto& p : m.drafter->module().parameters()) {
                auto it = m.optimizer->state().find(p.unsafeGetTensorImpl());
                if (it == m.optimizer->state().end()) continue;
                auto& st = static_cast<torch::optim::AdamWParamState&>(*it->second);
                st.exp_avg(st.exp_avg().to(p.device()));
                st.exp_avg_sq(st.exp_avg_sq().to(p.device()));
                if (st.max_exp_avg_sq().defined()) st.max_exp_avg_sq(st.max_exp_avg_sq().to(p.device()));
            }
        }
    } else if (!m.ctx.cfg.drafter.init.empty()) {
        m.drafter = model::load_drafter(m.ctx.cfg.resolve(m.ctx.cfg.drafter.init), m.device);
        if (const std::string why = m.drafter->mismatch(m.spec); !why.empty())
            fail("[drafter] init {}: it does not fit this run: {}", m.ctx.cfg.drafter.init, why);
        m.make_optimizer();
    } else {
        m.make_fresh();
        m.make_optimizer();
    }
    m.drafter->module().train();
    if (checkpoint) {
        // A checkpoint with NaN weights (written by an older hsring) is never trained on.
        std::vector<std::pair<std::string, at::Tensor>> named;
        for (const auto& p : m.drafter->module().named_parameters()) named.emplace_back(p.key(), p.value());
        require_finite(named, fmt::format("the checkpoint {}", checkpoint->string()));
    }
    m.describe();
    if (m.device.is_cuda() && m.ctx.cfg.train.checkpoint_background) {
        // Master only (restore): pinned host buffers for the weights and both AdamW moments.
        // (allocated after the first step: SnapshotBuffers::allocate)
        std::vector<std::vector<std::int64_t>> shapes;
        for (const auto& p : m.drafter->module().parameters()) shapes.push_back(p.sizes().vec());
        m.snapshots.plan_pinned(std::move(shapes));
    }
    m.slot_reader();  // registered meanwhile; a failure is the start's (a user error), not a crash later
}

void TorchDrafter::prepare_replica() {
    Impl& m = *impl_;
    m.slot_reader();
    // Any weights do: the master's replace them (broadcast_state).
    m.make_fresh();
    m.make_optimizer();
    m.drafter->module().train();
    m.describe();
}

void TorchDrafter::broadcast_state() {
    Impl& m = *impl_;
    if (!m.sync) return;
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> params = m.drafter->module().parameters();
    // AdamW's state exists once the master made a step (a restored checkpoint): the others make
    // room for it, then every state tensor is sent like the weights.
    double has_state = m.optimizer->state().empty() ? 0.0 : 1.0;
    m.gang.allreduce_max({&has_state, 1});
    std::vector<at::Tensor> tensors = params;
    if (has_state > 0) {
        for (auto& p : params) {
            torch::optim::AdamWParamState& st = model::adamw_state(*m.optimizer, p);
            tensors.push_back(st.exp_avg());
            tensors.push_back(st.exp_avg_sq());
        }
        std::vector<double> steps;
        for (auto& p : params)
            steps.push_back(double(static_cast<torch::optim::AdamWParamState&>(*m.optimizer->state()[p.unsafeGetTensorImpl()]).step()));
        if (!m.gang.place().is_master()) std::fill(steps.begin(), steps.end(), 0.0);
        m.gang.allreduce_sum(steps);
        for (std::size_t i = 0; i < params.size(); ++i)
            static_cast<torch::optim::AdamWParamState&>(*m.optimizer->state()[params[i].unsafeGetTensorImpl()])
                .step(static_cast<std::int64_t>(steps[i]));
    }
    m.sync->broadcast(tensors);
}

bool TorchDrafter::snapshot_ready() {
    impl_->snapshots.allocate();  // normally after the first step; a checkpoint before it asks now
    return impl_->snapshots.ready_now();
}

std::unique_ptr<StateSnapshot> TorchDrafter::snapshot() {
    Impl& m = *impl_;
    torch::NoGradGuard no_grad;
    std::shared_ptr<HostState>& buffer = m.snapshots.acquire();
    HostState& h = *buffer;
    const auto no_allocation = m.snapshots.hold_allocation();  // until the copies below are done
    // Pinned only for background writes (kept for the run, allocated at start); a checkpoint
    // written in the step copies to pageable memory and pins nothing for good.
    const bool pinned = m.device.is_cuda() && m.ctx.cfg.train.checkpoint_background;
    // Asynchronous device -> pinned host copies on the compute stream, one wait at the end.
    auto copy_out = [&](at::Tensor& dst, const at::Tensor& src) {
        if (!dst.defined() || dst.sizes() != src.sizes() || dst.scalar_type() != src.scalar_type())
            dst = at::empty(src.sizes(), at::TensorOptions().dtype(src.scalar_type()).pinned_memory(pinned));
        dst.copy_(src, /*non_blocking=*/pinned);
    };
    const auto named = m.drafter->module().named_parameters();
    const std::size_t n = named.size();
    {
        std::vector<std::pair<std::string, at::Tensor>> check;
        for (std::size_t i = 0; i < n; ++i) {
            const at::Tensor& p = named[i].value();
            check.emplace_back(named[i].key(), p);
            auto it = m.optimizer->state().find(p.unsafeGetTensorImpl());
            if (it == m.optimizer->state().end()) continue;
            const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
            check.emplace_back(named[i].key() + " (AdamW first moment)", st.exp_avg());
            check.emplace_back(named[i].key() + " (AdamW second moment)", st.exp_avg_sq());
        }
        require_finite(check, "checkpoint");
    }
    h.names.resize(n);
    h.params.resize(n);
    h.exp_avg.resize(n);
    h.exp_avg_sq.resize(n);
    h.max_exp_avg_sq.resize(n);
    h.steps.assign(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
        const at::Tensor& p = named[i].value();
        h.names[i] = named[i].key();
        copy_out(h.params[i], p);
        auto it = m.optimizer->state().find(p.unsafeGetTensorImpl());
        if (it == m.optimizer->state().end()) {
            h.exp_avg[i] = h.exp_avg_sq[i] = h.max_exp_avg_sq[i] = at::Tensor();
            continue;
        }
        const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
        h.steps[i] = st.step();
        copy_out(h.exp_avg[i], st.exp_avg());
        copy_out(h.exp_avg_sq[i], st.exp_avg_sq());
        if (st.max_exp_avg_sq().defined()) copy_out(h.max_exp_avg_sq[i], st.max_exp_avg_sq());
        else h.max_exp_avg_sq[i] = at::Tensor();
    }
#ifdef HSRING_TORCH_CUDA
    if (pinned) c10::cuda::getCurrentCUDAStream(m.device.index()).synchronize();
#endif
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(m.optimizer->param_groups().front().options());
    return std::make_unique<TorchSnapshot>(buffer, m.drafter->exporter(), options);
}

void TorchDrafter::export_model(const std::filesystem::path& dir) {
    Impl& m = *impl_;
    std::vector<std::pair<std::string, at::Tensor>> named;
    for (const auto& p : m.drafter->module().named_parameters()) named.emplace_back(p.key(), p.value());
    require_finite(named, fmt::format("export to {}", dir.string()));
    m.drafter->export_to(dir, m.device.is_cuda() ? at::kBFloat16 : at::kFloat);
}

} // namespace hsring::worker
