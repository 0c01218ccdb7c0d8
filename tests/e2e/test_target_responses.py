"""[data] responses = "target" end to end (issue 21, item 2): the target answers the prompts inside
the pipeline and the drafter learns those answers; what a user observes is the exported weights.

- The same answers as offline: a run with responses = "target" over data/demo.jsonl exports the
  very drafter (bit for bit, CPU) that `hsring data generate` + a responses = "dataset" run on its
  output exports. One sample per slot and a step-based cosine in both, so the two plans are the
  same; a stop token that ends some answers early, so the answers' lengths vary.
- Several turns: a two-turn chat is answered turn after turn (turn 2 from turn 1's own answer);
  the export equals the one trained on the turns answered one by one with `hsring model generate`.
- Whatever dies: the same run with a drafter SIGKILL, then a supervisor SIGKILL and a second
  `hsring run` exports the unkilled run's weights, bit for bit (re-issued samples are answered
  again, identically), with two samples per slot and answers shorter than their room.

The target is a tiny HF Qwen3 dir (random weights, sharp argmax margins)."""
import collections
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_harness import SOURCE, TrainRun, tiny_qwen3_dir  # noqa: E402
from harness import HSRING, check, main  # noqa: E402

MASK = 511
MAX_NEW = 24
SAMPLES = 60
EPOCHS = 2


def sharp_target(tmp):
    return tiny_qwen3_dir(os.path.join(tmp, "target"), seed=5, proj_std=0.08, norms="random", head_scale=4.0)


def demo_lines(path, n=SAMPLES):
    with open(os.path.join(SOURCE, "data", "demo.jsonl")) as src, open(path, "w") as dst:
        dst.writelines(line for i, line in enumerate(src) if i < n)
    return path


def generate(config, prompts, out):
    g = subprocess.run([HSRING, "data", "generate", config, "--prompts", prompts, "--out", out],
                       capture_output=True, text=True, timeout=300)
    check(g.returncode == 0, f"hsring data generate exited {g.returncode}: {g.stderr[-2000:]}")
    with open(out) as f:
        return [json.loads(line) for line in f]


def common_stop_token(rows):
    """The token this target says most often (past an answer's first tokens): as a stop token it
    ends some answers early and others not at all."""
    count = collections.Counter()
    for r in rows:
        n = r["loss_mask"].index(1)
        count.update(r["input_ids"][n + 3:])
    return count.most_common(1)[0][0]


def export(run):
    with open(os.path.join(run.run_dir, "drafter", "model.safetensors"), "rb") as f:
        return f.read()


class AnswerRun(TrainRun):
    def __init__(self, tag, model, data, stop, responses, per_slot=1, samples=SAMPLES, **kw):
        steps = f"max_steps = {samples * EPOCHS}" if per_slot == 1 else ""
        super().__init__(tag, model=model, data_path=data, samples=samples, epochs=EPOCHS, warmup_steps=8,
                         checkpoint_every=7, drafter_extra=f"mask_token_id = {MASK}",
                         ring_extra=f"max_samples_per_slot = {per_slot}" if per_slot else "",
                         data_extra=f'responses = "{responses}"', train_extra=steps,
                         tail=f"[generate]\nmax_new_tokens = {MAX_NEW}\nstop_token_ids = [{stop}]\nbatch = 1\n", **kw)


def with_stop(run, stop, batch=1):
    run.tail = f"[generate]\nmax_new_tokens = {MAX_NEW}\nstop_token_ids = [{stop}]\nbatch = {batch}\n"
    run.write_config()


def target_and_stop(run):
    """The target dir, the demo's first prompts, and a stop token this target emits, picked by a
    first `hsring data generate` pass without one (written into run's config)."""
    model = sharp_target(run.tmp)
    prompts = demo_lines(os.path.join(run.tmp, "prompts.jsonl"))
    run.settings.update(model=model, data_path=prompts)
    with_stop(run, "")
    stop = common_stop_token(generate(run.config, prompts, os.path.join(run.tmp, "probe.jsonl")))
    return model, prompts, stop


def spec_tail(prompts):
    return f"[eval]\nspec_prompts = \"{prompts}\"\nspec_every = 35\nspec_max_new_tokens = 16\n"


def test_answers_in_the_pipeline_train_what_offline_answers_train():
    inline = AnswerRun("rsi", model="x", data="x", stop=0, responses="target")
    offline = AnswerRun("rso", model="x", data="x", stop=0, responses="dataset")
    try:
        model, prompts, stop = target_and_stop(inline)
        # The inline run also measures tau ([eval]): that must not change what it trains.
        heldout = os.path.join(inline.tmp, "heldout.jsonl")
        with open(os.path.join(SOURCE, "data", "demo-heldout.jsonl")) as src, open(heldout, "w") as dst:
            dst.writelines(line for i, line in enumerate(src) if i < 6)
        with_stop(inline, stop)
        inline.tail += spec_tail(heldout)
        inline.write_config()
        answered = os.path.join(offline.tmp, "answered.jsonl")
        offline.settings.update(model=model, data_path=answered)
        with_stop(offline, stop)
        rows = generate(offline.config, prompts, answered)
        lengths = [len(r["input_ids"]) - r["loss_mask"].index(1) for r in rows]
        check(min(lengths) < MAX_NEW and max(lengths) == MAX_NEW,
              f"answer lengths {sorted(lengths)}: some end at stop token {stop}, some run to {MAX_NEW}")
        for r in (offline, inline):
            r.start()
            r.expect_exit(0, timeout=600)
            r.verify()
        a, b = offline.rows(), inline.rows()
        check(len(a) == SAMPLES * EPOCHS and [x["tokens"] for x in a] == [x["tokens"] for x in b],
              "the same steps of the same token counts")
        check(export(inline) == export(offline),
              "the drafter trained on answers generated in the pipeline equals the one trained on "
              "`hsring data generate`'s answers")
        log = open(os.path.join(inline.run_dir, "logs", "target.0.log")).read()
        check("answer tokens" in log, "the target's log reports what it generated")
        check_tau(inline, model, heldout, len(b))
        print(f"responses = target: {len(b)} steps, export equal to the offline answers' (stop token {stop}, "
              f"answers of {min(lengths)}..{max(lengths)} tokens)", flush=True)
    finally:
        offline.cleanup()
        inline.cleanup()


def check_tau(run, model, heldout, steps):
    """[eval] spec_prompts: the export's tau is metrics.jsonl's last row (final), equal to what
    `hsring model spec-decode` says of the export; measurements during training (target.0, when it
    got ahead of the drafter) are of committed checkpoints at or after multiples of spec_every;
    the run's last line says it."""
    sys.path.insert(0, os.path.join(SOURCE, "bin"))
    from plot_run import read_spec
    spec = read_spec(run.run_dir)
    check(spec and spec[-1]["spec"]["final"] and spec[-1]["step"] == steps, f"a final tau row at step {steps}: {spec}")
    during = [x["step"] for x in spec[:-1]]
    check(all(s % 7 == 0 and s >= 35 for s in during), f"tau during training at checkpoints: {during}")
    # When target.0 decoded (wall clock: one window, every prompt a row of one batch) and when each
    # step ended: what lines up the steps that shared a GPU with the measurement
    # (bench/gpu/target_speaks.sh).
    for x in spec[:-1]:
        w = x.get("windows", [])
        check(len(w) == 1 and all(a <= b for a, b in w), f"decode windows {w}")
    steps = [r for r in run.rows() if "loss" in r]
    check(all(r.get("unix_time", 0) > 1.6e9 for r in steps), "every step row has its wall-clock time")
    g = subprocess.run([HSRING, "model", "spec-decode", os.path.join(run.run_dir, "drafter"), "--target", model,
                        "--prompts", heldout, "--max-new-tokens", "16", "--json"], capture_output=True, text=True,
                       timeout=300)
    check(g.returncode == 0, g.stderr[-2000:])
    ref = json.loads(g.stdout)
    final = spec[-1]["spec"]
    check(final["tau"] == ref["tau"] and final["lossless"] and final["prompts"] == 6,
          f"the final tau {final} is spec-decode's {ref['tau']}")
    check(len(final["acceptance_per_position"]) == 7 and all(0 <= a <= 1 for a in final["acceptance_per_position"]),
          f"acceptance per drafted position: {final['acceptance_per_position']}")
    check(any("real tau" in line for line in run.lines), "the run's last line reports the real tau")
    print(f"tau: {len(during)} measurements during training (steps {during}), final {final['tau']:.3f} = "
          f"spec-decode's", flush=True)


TURNS_SAMPLES = 24


def model_generate(model, prompts, out_dir, name):
    """`hsring model generate` (greedy, batch 1, the model's eos) of each prompt: the new tokens."""
    path = os.path.join(out_dir, name + ".jsonl")
    with open(path, "w") as f:
        f.writelines(json.dumps({"input_ids": p}) + "\n" for p in prompts)
    g = subprocess.run([HSRING, "model", "generate", model, "--prompts", path, "--max-new-tokens", str(MAX_NEW),
                        "--batch", "1", "--json"], capture_output=True, text=True, timeout=300)
    check(g.returncode == 0, f"hsring model generate exited {g.returncode}: {g.stderr[-2000:]}")
    return [o["output_ids"] for o in json.loads(g.stdout)["outputs"]]


def test_several_turns_answered_in_order():
    """A two-turn chat: the target answers turn 1 from the user's first message, then turn 2 from
    the first message, its own answer and the second message. The export equals the one trained
    on the same conversations answered turn by turn with `hsring model generate`. The answers end
    at the model's eos (its generation_config.json), not at [generate] stop_token_ids."""
    inline = AnswerRun("rti", model="x", data="x", stop=0, responses="target", samples=TURNS_SAMPLES)
    offline = AnswerRun("rto", model="x", data="x", stop=0, responses="dataset", samples=TURNS_SAMPLES)
    try:
        model, _, stop = target_and_stop(inline)
        with open(os.path.join(model, "generation_config.json"), "w") as f:
            json.dump({"eos_token_id": stop}, f)
        with open(os.path.join(SOURCE, "data", "demo.jsonl")) as f:
            rows = [json.loads(line) for _, line in zip(range(TURNS_SAMPLES + 1), f)]
        firsts = [r["input_ids"][:r["loss_mask"].index(1)] for r in rows[:TURNS_SAMPLES]]
        seconds = [r["input_ids"][:6] for r in rows[1:]]  # the user's second message: 6 tokens
        # The template: what the dataset's author wrote as answers is replaced (its length does not matter).
        chats = os.path.join(inline.tmp, "chats.jsonl")
        with open(chats, "w") as f:
            for u1, u2 in zip(firsts, seconds):
                ids = u1 + [3] * 5 + u2 + [4] * 9
                mask = [0] * len(u1) + [1] * 5 + [0] * len(u2) + [1] * 9
                f.write(json.dumps({"input_ids": ids, "loss_mask": mask}) + "\n")
        a1 = model_generate(model, firsts, offline.tmp, "turn1")
        a2 = model_generate(model, [u1 + x + u2 for u1, x, u2 in zip(firsts, a1, seconds)], offline.tmp, "turn2")
        lengths = [len(x) for x in a1 + a2]
        check(min(lengths) < MAX_NEW and max(lengths) == MAX_NEW and any(x[-1] == stop for x in a1 + a2),
              f"answer lengths {sorted(lengths)}: some end at the eos {stop}, some run to {MAX_NEW}")
        answered = os.path.join(offline.tmp, "answered.jsonl")
        with open(answered, "w") as f:
            for u1, x1, u2, x2 in zip(firsts, a1, seconds, a2):
                f.write(json.dumps({"input_ids": u1 + x1 + u2 + x2,
                                    "loss_mask": [0] * len(u1) + [1] * len(x1) + [0] * len(u2) + [1] * len(x2)})
                        + "\n")
        for r, data in ((inline, chats), (offline, answered)):
            r.settings.update(model=model, data_path=data)
            r.tail = f"[generate]\nmax_new_tokens = {MAX_NEW}\nbatch = 1\n"
            r.write_config()
            r.start()
            r.expect_exit(0, timeout=600)
            r.verify()
        a, b = offline.rows(), inline.rows()
        check(len(a) == TURNS_SAMPLES * EPOCHS and [x["tokens"] for x in a] == [x["tokens"] for x in b],
              "the same steps of the same token counts")
        check(export(inline) == export(offline),
              "the drafter trained on two turns answered in the pipeline equals the one trained on the same "
              "turns answered one after the other by `hsring model generate`")
        print(f"two turns: {len(b)} steps, export equal to turn-by-turn answers (eos {stop}, answers of "
              f"{min(lengths)}..{max(lengths)} tokens)", flush=True)
    finally:
        offline.cleanup()
        inline.cleanup()


def test_answers_survive_kills_bit_for_bit():
    # Two samples per slot: 60 steps, so the supervisor is killed well before the end.
    ref = AnswerRun("rkr", model="x", data="x", stop=0, responses="target", per_slot=2, targets='["cpu", "cpu"]')
    run = AnswerRun("rkk", model="x", data="x", stop=0, responses="target", per_slot=2, targets='["cpu", "cpu"]')
    try:
        model, prompts, stop = target_and_stop(ref)
        with_stop(ref, stop, batch=8)
        run.settings.update(model=model, data_path=prompts)
        with_stop(run, stop, batch=8)
        ref.start()
        ref.expect_exit(0, timeout=600)
        ref.verify()
        rows = ref.rows()
        check(all(x["slots"] == 1 for x in rows) and len(rows) > 40, f"{len(rows)} steps")

        run.start()
        run.kill_and_wait_restart("drafter.0", 9, 20, timeout=300)  # after the checkpoint at step 7
        run.supervisor_kill_and_rerun()
        run.expect_exit(0, timeout=600)
        run.verify()
        mine = run.rows()
        check([x["tokens"] for x in mine] == [x["tokens"] for x in rows], "the same steps of the same token counts")
        check(export(run) == export(ref), "after a drafter SIGKILL and a supervisor SIGKILL the export is the "
                                          "unkilled run's, bit for bit")
        print(f"responses = target, killed twice: export and all {len(rows)} steps equal the unkilled run's",
              flush=True)
    finally:
        ref.cleanup()
        run.cleanup()


def test_data_generate_refuses_a_directory_and_leaves_nothing_when_stopped():
    """`hsring data generate --out DIR` is refused before any answer (it used to answer every prompt,
    then fail on the rename); SIGTERM or Ctrl-C while it answers leaves no OUT.partial-PID."""
    import glob
    import signal
    import time
    run = TrainRun("dgs", samples=SAMPLES, drafter_extra=f"mask_token_id = {MASK}",
                   tail="[generate]\nmax_new_tokens = 24\nstop_token_ids = []\nbatch = 16\n")
    try:
        run.settings.update(model=sharp_target(run.tmp))
        run.write_config()
        prompts = demo_lines(os.path.join(run.tmp, "prompts.jsonl"), n=4000)
        t0 = time.time()
        g = subprocess.run([HSRING, "data", "generate", run.config, "--prompts", prompts, "--out", run.tmp],
                           capture_output=True, text=True, timeout=120)
        check(g.returncode != 0 and "is a directory" in g.stderr and "samples," not in g.stderr,
              f"--out DIR: exit {g.returncode}: {g.stderr[-1000:]}")
        for sig in (signal.SIGTERM, signal.SIGINT):
            out = os.path.join(run.tmp, f"answers-{int(sig)}.jsonl")
            p = subprocess.Popen([HSRING, "data", "generate", run.config, "--prompts", prompts, "--out", out],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            deadline = time.time() + 60
            while not glob.glob(out + ".partial-*") and time.time() < deadline and p.poll() is None:
                time.sleep(0.02)
            if p.poll() is not None:
                check(False, f"data generate ended (exit {p.returncode}) before it could be stopped: "
                             f"{p.stderr.read().decode()[-1500:]}")
            p.send_signal(sig)
            p.wait(timeout=60)
            check(p.returncode == -sig, f"{sig.name}: exit {p.returncode}")
            check(not glob.glob(out + "*"), f"{sig.name} left {glob.glob(out + '*')}")
        print(f"data generate: --out DIR refused in {time.time() - t0:.1f} s with the stops; SIGTERM and SIGINT "
              "leave no partial file", flush=True)
    finally:
        run.cleanup()


if __name__ == "__main__":
    main([test_answers_in_the_pipeline_train_what_offline_answers_train, test_several_turns_answered_in_order,
          test_answers_survive_kills_bit_for_bit, test_data_generate_refuses_a_directory_and_leaves_nothing_when_stopped])
