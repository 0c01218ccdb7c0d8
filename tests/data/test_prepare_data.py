"""bin/prepare-data: the loss mask covers exactly the assistant content, whatever the chat
template does around it; bad conversations are reported with FILE:LINE and skipped (or fatal).

A tiny word-level tokenizer and two chat templates are built here, and the expected ids and
masks are assembled independently, message by message, from the templates' known structure.
Runs on the venv's Python ($HSRING_PYTHON); exits 77 (skipped) without tokenizers/transformers.
"""
import collections
import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

if not all(importlib.util.find_spec(m) for m in ("tokenizers", "transformers")):
    py = os.environ.get("HSRING_PYTHON", "")
    if py and os.path.exists(py) and os.path.realpath(py) != os.path.realpath(sys.executable):
        os.execv(py, [py] + sys.argv)
    print("skipped: needs the tokenizers and transformers packages (bin/setup installs them)")
    sys.exit(77)

from tokenizers import Tokenizer, models, pre_tokenizers

ROOT = os.environ.get("HSRING_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
TOOL = os.path.join(ROOT, "bin", "prepare-data")
# Most cases call the tool in this process: importing transformers once, not per case, keeps
# the test fast. One case runs bin/prepare-data itself.
sys.path.insert(0, os.path.join(ROOT, "tools", "prepare_data"))
import prepare  # noqa: E402

Result = collections.namedtuple("Result", "returncode stderr")
SPECIALS = ["<|im_start|>", "<|im_end|>", "<s>", "<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>"]

# ChatML that trims the content.
CHATML = (
    "{%- for m in messages -%}<|im_start|>{{ m.role }}\n{{ m.content | trim }}<|im_end|>\n{% endfor -%}"
)
# BOS, a default system prompt, and a think block before the last assistant turn only, holding
# the reasoning split off its content; older turns lose their reasoning (as Qwen3 renders it).
# Template text that depends on the position and on the content of a message.
QWENISH = (
    "{{- bos_token -}}"
    "{%- if messages[0].role != 'system' %}{{ '<|im_start|>system\\nDefault system prompt<|im_end|>\\n' }}{% endif %}"
    "{%- for m in messages %}"
    "{%- set content = m.content %}{% set reasoning = '' %}"
    "{%- if m.role == 'assistant' and '</think>' in content %}"
    "{%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- endif %}"
    "{{- '<|im_start|>' + m.role + '\\n' }}"
    "{%- if m.role == 'assistant' and loop.last %}{{ '<think>\\n' + reasoning + '\\n</think>\\n\\n' }}{% endif %}"
    "{{- content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
)

# gpt-oss's harmony format, in the shape of its tokenizer's template: a system message the
# template writes itself (with the date), the user's system prompt as a developer message, every
# assistant turn on the final channel, the last one ended by <|return|> instead of <|end|>.
HARMONYISH = (
    "{{- '<|start|>system<|message|>You are ChatGPT Current date ' + strftime_now('%Y-%m-%d') + '<|end|>' }}"
    "{%- for m in messages %}"
    "{%- if m.role == 'system' %}{{ '<|start|>developer<|message|>' + m.content + '<|end|>' }}"
    "{%- elif m.role == 'assistant' %}{{ '<|start|>assistant<|channel|>final<|message|>' + m.content }}"
    "{{- '<|return|>' if loop.last else '<|end|>' }}"
    "{%- else %}{{ '<|start|>' + m.role + '<|message|>' + m.content + '<|end|>' }}{% endif %}"
    "{%- endfor %}"
)

# Conversations, written in both input shapes. Replies that also occur elsewhere ("Yes"
# in the question, "assistant" = the role header) catch a mask placed by searching the text.
CONVERSATIONS = [
    [("system", "You are terse."), ("user", "Yes or no?"), ("assistant", "Yes"),
     ("user", "Name your role"), ("assistant", "assistant")],
    [("user", "Count to three"), ("assistant", "  one two three  \n")],
    [("user", "Hello there"), ("assistant", "General Kenobi ! You are a bold one"),
     ("user", "Again"), ("assistant", "Hello there")],
    [("user", "Hello there"), ("assistant", "<think>\nhmm\n</think>\n\nGeneral Kenobi"),
     ("user", "Again"), ("assistant", "<think>\nok then\n</think>\n\nYes")],
]
SHAREGPT_FROM = {"system": "system", "user": "human", "assistant": "gpt"}


def sharegpt(conv):
    return {"id": "x", "conversations": [{"from": SHAREGPT_FROM[r], "value": c} for r, c in conv]}


def openai(conv):
    # Content parts for user messages: the OpenAI list form must work too.
    return {"messages": [{"role": r, "content": [{"type": "text", "text": c}] if r == "user" else c}
                         for r, c in conv]}


def make_tokenizer(directory):
    ws = pre_tokenizers.Whitespace()
    text = " ".join(c for conv in CONVERSATIONS for _, c in conv)
    text += " system user assistant Default system prompt <think> </think> unused words"
    text += " developer final You are ChatGPT Current date " + time.strftime("%Y-%m-%d")
    vocab = {"[UNK]": 0}
    for s in SPECIALS:
        vocab[s] = len(vocab)
    for w, _ in ws.pre_tokenize_str(text):
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = ws
    tok.add_special_tokens(SPECIALS)
    tok.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHATML,
                   "bos_token": "<s>", "eos_token": "<|im_end|>", "unk_token": "[UNK]"}, f)
    return tok


class PrepareData(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="hsring-prepare-data-")
        cls.dir = cls.tmp.name
        cls.tokdir = os.path.join(cls.dir, "tok")
        os.mkdir(cls.tokdir)
        cls.tok = make_tokenizer(cls.tokdir)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def ids(self, text):
        return self.tok.encode(text, add_special_tokens=False).ids

    def special(self, s):
        return self.tok.token_to_id(s)

    # The expected sample, assembled piece by piece from the template's structure.
    def expected(self, conv, template):
        ids, mask = [], []

        def add(piece_ids, m):
            ids.extend(piece_ids)
            mask.extend([m] * len(piece_ids))

        if template == "harmonyish":
            add([self.special("<|start|>")] + self.ids("system") + [self.special("<|message|>")] +
                self.ids("You are ChatGPT Current date " + time.strftime("%Y-%m-%d")) + [self.special("<|end|>")], 0)
            for i, (role, content) in enumerate(conv):
                header = {"system": "developer"}.get(role, role)
                add([self.special("<|start|>")] + self.ids(header), 0)
                if role == "assistant":
                    add([self.special("<|channel|>")] + self.ids("final"), 0)
                add([self.special("<|message|>")], 0)
                add(self.ids(content), 1 if role == "assistant" else 0)
                last = role == "assistant" and i == len(conv) - 1
                add([self.special("<|return|>" if last else "<|end|>")], 0)
            return ids, mask
        if template == "qwenish":
            add([self.special("<s>")], 0)
            if conv[0][0] != "system":
                add([self.special("<|im_start|>")] + self.ids("system Default system prompt") +
                    [self.special("<|im_end|>")], 0)
        for i, (role, content) in enumerate(conv):
            add([self.special("<|im_start|>")] + self.ids(role), 0)
            trained = 1 if role == "assistant" else 0
            if template == "qwenish" and role == "assistant":
                reasoning = ""
                if "</think>" in content:
                    reasoning = content.split("</think>")[0].split("<think>")[-1]
                    content = content.split("</think>")[-1]
                if i == len(conv) - 1:
                    add(self.ids("<think>"), 0)
                    add(self.ids(reasoning), 1)
                    add(self.ids("</think>"), 0)
            add(self.ids(content.strip()), trained)
            add([self.special("<|im_end|>")], 0)
        return ids, mask

    def write(self, name, lines):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            for line in lines:
                f.write(line if isinstance(line, str) else json.dumps(line))
                f.write("\n")
        return path

    def run_tool(self, *args, via_bin=False):
        argv = ["--tokenizer", self.tokdir, *args]
        if via_bin:
            r = subprocess.run([TOOL, *argv], capture_output=True, text=True)
            return Result(r.returncode, r.stderr)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                code = prepare.main(argv)
            except SystemExit as e:  # as the interpreter would report it
                code = e.code if isinstance(e.code, int) else 1
                if isinstance(e.code, str):
                    print(e.code, file=sys.stderr)
        return Result(code, err.getvalue())

    def read(self, path):
        with open(path) as f:
            return [json.loads(line) for line in f]

    def check_samples(self, samples, convs, template):
        self.assertEqual(len(samples), len(convs))
        for sample, conv in zip(samples, convs):
            self.assertEqual(set(sample), {"input_ids", "loss_mask"})
            want_ids, want_mask = self.expected(conv, template)
            self.assertEqual(sample["input_ids"], want_ids)
            self.assertEqual(sample["loss_mask"], want_mask, self.tok.decode(want_ids))
            self.assertNotIn(self.special("[UNK]") or 0, sample["input_ids"])

    def test_masks_exactly_the_assistant_content_in_both_input_shapes(self):
        jsonl = self.write("chat.jsonl", [sharegpt(c) for c in CONVERSATIONS] + [openai(c) for c in CONVERSATIONS])
        array = os.path.join(self.dir, "chat.json")  # a JSON array file works too
        with open(array, "w") as f:
            json.dump([sharegpt(c) for c in CONVERSATIONS], f, indent=1)
        out = os.path.join(self.dir, "out.jsonl")
        r = self.run_tool("-o", out, jsonl, array, via_bin=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check_samples(self.read(out), CONVERSATIONS * 3, "chatml")
        self.assertIn("wrote 12 samples", r.stderr)

    def test_template_text_that_depends_on_position_and_content_stays_unmasked(self):
        path = os.path.join(self.dir, "qwenish.jinja")
        with open(path, "w") as f:
            f.write(QWENISH)
        src = self.write("chat2.jsonl", [openai(c) for c in CONVERSATIONS])
        out = os.path.join(self.dir, "out2.jsonl")
        r = self.run_tool("--chat-template", path, "-o", out, src)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check_samples(self.read(out), CONVERSATIONS, "qwenish")

    def test_gpt_oss_harmony_shaped_template_masks_each_final_channel_answer(self):
        path = os.path.join(self.dir, "harmonyish.jinja")
        with open(path, "w") as f:
            f.write(HARMONYISH)
        convs = [c for c in CONVERSATIONS if not any("<think>" in x for _, x in c)]
        src = self.write("chat3.jsonl", [openai(c) for c in convs])
        out = os.path.join(self.dir, "out3.jsonl")
        r = self.run_tool("--chat-template", path, "-o", out, src)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check_samples(self.read(out), convs, "harmonyish")

    def bad_input(self):
        return self.write("bad.jsonl", [
            sharegpt(CONVERSATIONS[0]),
            "{not json",
            {"conversations": [{"from": "human", "value": "only a question"}]},
            "",
            {"conversations": [{"from": "bot", "value": "hi"}]},
            {"text": "no conversation here"},
            {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": None}]},
            sharegpt(CONVERSATIONS[1]),
        ])

    def test_bad_conversations_are_reported_with_file_line_and_skipped(self):
        src = self.bad_input()
        out = os.path.join(self.dir, "out4.jsonl")
        r = self.run_tool("-o", out, src)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check_samples(self.read(out), [CONVERSATIONS[0], CONVERSATIONS[1]], "chatml")
        for where, reason in [(2, "not JSON"), (3, "no assistant message"),
                              (5, "conversations[0] is from 'bot'"),
                              (6, 'no "conversations" (ShareGPT) or "messages" (OpenAI) key'),
                              (7, "messages[1] has no text content")]:
            self.assertIn(f"{src}:{where}: {reason}", r.stderr)
        self.assertIn("skipped 5 conversations", r.stderr)

    def test_fail_mode_stops_at_the_first_bad_conversation_and_writes_nothing(self):
        src = self.bad_input()
        out = os.path.join(self.dir, "out5.jsonl")
        r = self.run_tool("--on-bad-line", "fail", "-o", out, src)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(f"{src}:2: not JSON", r.stderr)
        self.assertFalse(os.path.exists(out))
        self.assertFalse(os.path.exists(out + ".tmp"))

    def test_max_len_truncates_and_drops_samples_left_without_assistant_tokens(self):
        long_prompt = [("user", " ".join(["Again"] * 30)), ("assistant", "Yes")]
        src = self.write("long.jsonl", [sharegpt(CONVERSATIONS[2]), sharegpt(long_prompt)])
        out = os.path.join(self.dir, "out6.jsonl")
        r = self.run_tool("--max-len", "12", "-o", out, src)
        self.assertEqual(r.returncode, 0, r.stderr)
        samples = self.read(out)
        self.assertEqual(len(samples), 1)
        want_ids, want_mask = self.expected(CONVERSATIONS[2], "chatml")
        self.assertEqual(samples[0], {"input_ids": want_ids[:12], "loss_mask": want_mask[:12]})
        self.assertIn(f"{src}:2: no assistant token within the first 12 tokens", r.stderr)
        self.assertIn("2 samples truncated to --max-len 12", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
