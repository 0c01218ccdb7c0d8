"""A conversation -> token ids and a loss mask that is 1 exactly on the assistant's tokens.

The chat template decides how messages become text, and may change them (strip whitespace,
move reasoning into <think> blocks, drop old reasoning, render the last turn differently). So
the assistant text is not searched for; the conversation is rendered twice instead: as is, and
with every assistant content replaced by a unique marker. The marker render splits the
template's own text into pieces P0 | m1 | P1 | m2 | ... | Pk, and the real render is
P0 + A1 + P1 + ... + Pk: the assistant spans A_i are what lies between consecutive pieces.
When the template's own text depends on the content (Qwen3 writes the reasoning of the last
turn into its <think> block), the pieces do not match exactly; then a character diff of the
two renders finds the spans: every character of the real render that the marker render does
not have came from assistant content. The text is tokenized once, with offsets, and a token
is trained when its characters overlap an assistant span.
"""
import difflib
import os
import re

# Private-use code points only: no template writes them, strip() keeps them, and the diff
# cannot match a character of real content against a marker.
_MARK_BEGIN, _MARK_END, _MARK_ID0 = "\ue000", "\ue001", 0xF0000
_MARKER_RE = re.compile("\ue000([\U000F0000-\U000FFFFD])\ue001")


class Unmaskable(Exception):
    """The template's output cannot be aligned to the messages; the caller adds FILE:LINE."""


def _marker(n):
    return _MARK_BEGIN + chr(_MARK_ID0 + n) + _MARK_END


def render(tokenizer, messages, template_kwargs):
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False,
                                             **template_kwargs)
    except Exception as e:  # jinja raises anything, e.g. "roles must alternate"
        raise Unmaskable(f"the chat template refused the conversation: {e}") from None


def _align_pieces(text, pieces):
    """Spans between the template pieces when they occur verbatim in order, else None."""
    if not text.startswith(pieces[0]) or not text.endswith(pieces[-1]):
        return None
    spans, cursor = [], len(pieces[0])
    for piece in pieces[1:-1]:
        at = text.find(piece, cursor) if piece else -1
        if at < 0:
            return None
        spans.append((cursor, at))
        cursor = at + len(piece)
    end = len(text) - len(pieces[-1])
    if end < cursor:
        return None
    spans.append((cursor, end))
    return spans


def _align_diff(text, marked_text):
    """Spans of `text` that `marked_text` does not have: content-dependent, i.e. assistant text."""
    p = len(os.path.commonprefix([text, marked_text]))
    s = len(os.path.commonprefix([text[p:][::-1], marked_text[p:][::-1]]))
    a, b = marked_text[p:len(marked_text) - s], text[p:len(text) - s]
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    return [(p + j1, p + j2) for tag, _, _, j1, j2 in ops if tag in ("replace", "insert")]


def assistant_spans(tokenizer, messages, template_kwargs=None):
    """(text, [(start, end), ...]): the rendered conversation and the character spans in it
    that come from assistant messages, left to right."""
    kw = template_kwargs or {}
    if len(messages) >= 0xFFFD:
        raise Unmaskable("too many messages")
    text = render(tokenizer, messages, kw)
    assistant = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    marked = [dict(m, content=_marker(i)) if m["role"] == "assistant" else m for i, m in enumerate(messages)]
    marked_text = render(tokenizer, marked, kw)

    pieces, found, last = [], [], 0
    for m in _MARKER_RE.finditer(marked_text):
        pieces.append(marked_text[last:m.start()])
        found.append(ord(m.group(1)) - _MARK_ID0)
        last = m.end()
    pieces.append(marked_text[last:])
    if found != assistant:
        raise Unmaskable("the chat template drops, repeats or reorders assistant messages "
                         f"(it rendered {len(found)} of {len(assistant)})")
    spans = _align_pieces(text, pieces)
    if spans is None:
        spans = _align_diff(text, marked_text)
    return text, spans


def tokenize_with_mask(tokenizer, messages, template_kwargs=None):
    """(input_ids, loss_mask) of one conversation, loss_mask 1 on assistant tokens."""
    text, spans = assistant_spans(tokenizer, messages, template_kwargs)
    spans = [s for s in spans if s[1] > s[0]]  # an empty reply has no token to train
    # The template already wrote BOS and the like: add nothing (as apply_chat_template does).
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(enc["input_ids"]), enc["offset_mapping"]
    mask, k = [0] * len(ids), 0
    for t, (start, end) in enumerate(offsets):
        while k < len(spans) and spans[k][1] <= start:  # spans and tokens both go left to right
            k += 1
        if k < len(spans) and end > start and start < spans[k][1] and end > spans[k][0]:
            mask[t] = 1
    return ids, mask
