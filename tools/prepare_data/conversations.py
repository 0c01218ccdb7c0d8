"""Chat records -> a list of {"role", "content"} messages, from the two common shapes:

ShareGPT  {"conversations": [{"from": "human" | "gpt" | "system", "value": "..."}, ...]}
OpenAI    {"messages": [{"role": "user" | "assistant" | "system" | "tool", "content": "..."}]}

Records that cannot become a conversation raise BadConversation with the reason.
"""


class BadConversation(Exception):
    """Why one record is not usable; the caller adds FILE:LINE."""


# ShareGPT speaker names seen in the wild -> chat template roles.
SHAREGPT_ROLES = {
    "human": "user", "user": "user",
    "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant", "model": "assistant",
    "bard": "assistant", "bing": "assistant",
    "system": "system",
    "tool": "tool", "observation": "tool",
}
OPENAI_ROLES = {"system", "developer", "user", "assistant", "tool"}


def _text(content, where):
    """A message's text: a string, or OpenAI content parts of type "text" joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise BadConversation(f"{where} has a content part that is not text (only text is supported)")
            parts.append(part["text"])
        return "".join(parts)
    if content is None:
        raise BadConversation(f"{where} has no text content (tool calls are not supported)")
    raise BadConversation(f"{where} content is {type(content).__name__}, not text")


def messages_of(record):
    """The record's messages as [{"role": ..., "content": str}]; raises BadConversation."""
    if not isinstance(record, dict):
        raise BadConversation(f"a JSON {type(record).__name__}, not an object with \"conversations\" or \"messages\"")
    if "conversations" in record:
        turns, key = record["conversations"], "conversations"
    elif "messages" in record:
        turns, key = record["messages"], "messages"
    else:
        raise BadConversation('no "conversations" (ShareGPT) or "messages" (OpenAI) key')
    if not isinstance(turns, list) or not turns:
        raise BadConversation(f'"{key}" is not a non-empty list of messages')

    messages = []
    for i, turn in enumerate(turns):
        where = f"{key}[{i}]"
        if not isinstance(turn, dict):
            raise BadConversation(f"{where} is not an object")
        if "from" in turn:  # ShareGPT turn (also found under "messages")
            speaker = turn["from"]
            role = SHAREGPT_ROLES.get(speaker.lower() if isinstance(speaker, str) else speaker)
            if role is None:
                raise BadConversation(f"{where} is from {speaker!r}; known: {', '.join(sorted(SHAREGPT_ROLES))}")
            content = turn.get("value")
        elif "role" in turn:
            role = turn["role"]
            if role not in OPENAI_ROLES:
                raise BadConversation(f"{where} has role {role!r}; known: {', '.join(sorted(OPENAI_ROLES))}")
            content = turn.get("content")
        else:
            raise BadConversation(f'{where} has neither "from" (ShareGPT) nor "role" (OpenAI)')
        messages.append({"role": role, "content": _text(content, where)})

    if not any(m["role"] == "assistant" for m in messages):
        raise BadConversation("no assistant message: nothing to train on")
    return messages
