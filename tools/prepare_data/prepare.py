"""bin/prepare-data: chat JSONL -> the pre-tokenized JSONL that hsring trains on.

Each input line is one conversation, ShareGPT ({"conversations": [{"from", "value"}]}) or
OpenAI ({"messages": [{"role", "content"}]}) style; a file holding one JSON array of them
works too. Each output line is {"input_ids": [...], "loss_mask": [...]}: the conversation
rendered with the target's chat template and tokenized with its tokenizer, loss mask 1 on the
assistant's tokens only. Unusable conversations are reported as FILE:LINE: reason and skipped
(or stop the run with --on-bad-line fail). The output is written to OUTPUT.tmp and renamed at
the end, so a failed run leaves no half-written data set.
"""
import argparse
import collections
import json
import os
import re
import sys

from conversations import BadConversation, messages_of
from masking import Unmaskable, tokenize_with_mask

MAX_LOGGED = 20


def say(msg):
    print(f"prepare-data: {msg}", file=sys.stderr, flush=True)


def reason_kind(reason):
    """A reason without its details, to count reasons of one kind together."""
    return re.split(r": | \(|; ", re.sub(r"\[\d+\]", "[i]", reason), maxsplit=1)[0]


def records(path):
    """(line number, record, or the BadConversation of an unreadable line) per conversation."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise SystemExit(f"prepare-data: cannot read {path}: {e.strerror}")
    with f:
        if f.read(1 << 16).lstrip().startswith(b"["):  # one JSON array; "line" = element number
            f.seek(0)
            try:
                data = json.loads(f.read())
            except ValueError as e:
                raise SystemExit(f"prepare-data: {path}: not JSON ({e})")
            yield from enumerate(data, 1)
            return
        f.seek(0)
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield n, json.loads(line.decode("utf-8"))
            except UnicodeDecodeError:
                yield n, BadConversation("not UTF-8 text")
            except ValueError as e:
                yield n, BadConversation(f"not JSON ({e})")


def load_tokenizer(name, chat_template):
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise SystemExit("prepare-data: needs transformers: run bin/setup (it installs it into .venv)")
    try:
        tok = AutoTokenizer.from_pretrained(name)
    except Exception as e:
        raise SystemExit(f"prepare-data: cannot load the tokenizer {name!r}: {e}")
    if not getattr(tok, "is_fast", False):
        raise SystemExit(f"prepare-data: {name!r} has no fast (tokenizers) tokenizer: its offsets are needed "
                         "to place the loss mask; convert it to tokenizer.json first")
    if chat_template:
        with open(chat_template, encoding="utf-8") as f:
            tok.chat_template = f.read()
    if not tok.chat_template:
        raise SystemExit(f"prepare-data: {name!r} has no chat template: pass --chat-template FILE (jinja)")
    return tok


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="bin/prepare-data", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", metavar="INPUT", help="chat JSONL (or JSON array) files")
    ap.add_argument("-o", "--output", required=True, help="pre-tokenized JSONL to write")
    ap.add_argument("--tokenizer", required=True, metavar="DIR_OR_NAME",
                    help="the target's HF tokenizer: its model directory or hub name")
    ap.add_argument("--max-len", type=int, default=0, metavar="N",
                    help="truncate samples to N tokens (0 = no limit); match [data] max_seq_len")
    ap.add_argument("--on-bad-line", choices=["skip", "fail"], default="skip",
                    help="an unusable conversation is reported and skipped (default) or stops the run")
    ap.add_argument("--chat-template", metavar="FILE", help="a jinja chat template replacing the tokenizer's")
    ap.add_argument("--template-kwargs", default="{}", metavar="JSON",
                    help='extra chat template variables, e.g. \'{"enable_thinking": false}\'')
    args = ap.parse_args(argv)
    if args.max_len < 0:
        ap.error("--max-len must be >= 0")
    try:
        args.template_kwargs = json.loads(args.template_kwargs)
        assert isinstance(args.template_kwargs, dict)
    except (json.JSONDecodeError, AssertionError):
        ap.error("--template-kwargs must be a JSON object")
    return args


def main(argv):
    args = parse_args(argv)
    for path in args.inputs:  # before any work: a typo should not cost a long run
        if not os.path.isfile(path):
            raise SystemExit(f"prepare-data: {path}: no such file")
    tok = load_tokenizer(args.tokenizer, args.chat_template)
    skipped = collections.Counter()
    written = tokens = trained = truncated = 0
    tmp = args.output + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as out:
            for path in args.inputs:
                for line_no, rec in records(path):
                    try:
                        if isinstance(rec, BadConversation):
                            raise rec
                        ids, mask = tokenize_with_mask(tok, messages_of(rec), args.template_kwargs)
                        if args.max_len and len(ids) > args.max_len:
                            ids, mask = ids[:args.max_len], mask[:args.max_len]
                            truncated += 1
                        if not any(mask):
                            raise BadConversation("no assistant token" + (
                                f" within the first {args.max_len} tokens (--max-len)" if args.max_len else ""))
                    except (BadConversation, Unmaskable) as e:
                        where = f"{path}:{line_no}: {e}"
                        if args.on_bad_line == "fail":
                            raise SystemExit(f"prepare-data: {where} (--on-bad-line skip skips such lines)")
                        skipped[reason_kind(str(e))] += 1
                        if sum(skipped.values()) <= MAX_LOGGED:
                            say(f"{where} (skipped)")
                        continue
                    out.write(json.dumps({"input_ids": ids, "loss_mask": mask}, separators=(",", ":")))
                    out.write("\n")
                    written += 1
                    tokens += len(ids)
                    trained += sum(mask)
        if written == 0:
            raise SystemExit("prepare-data: no conversation could be used; nothing written")
        os.replace(tmp, args.output)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)

    n_skipped = sum(skipped.values())
    say(f"wrote {written} samples, {tokens} tokens ({trained} trained) to {args.output}")
    if truncated:
        say(f"{truncated} samples truncated to --max-len {args.max_len}")
    if n_skipped:
        say(f"skipped {n_skipped} conversations: " + "; ".join(f"{n} x {why}" for why, n in skipped.most_common()))
    return 0
