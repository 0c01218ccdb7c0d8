"""A byte-level BPE tokenizer (GPT-2 / Qwen style) trained on the corpus's training part with
HF `tokenizers`, saved so that `transformers.AutoTokenizer` loads it from the model directory."""
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

EOS = "<|endoftext|>"  # id 0: ends every document (and generation)
MASK = "<|mask|>"      # id 1: the DFlash mask token: an embedding row no text ever produces
EOS_ID, MASK_ID = 0, 1


def train(texts, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS, MASK], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    assert tok.token_to_id(EOS) == EOS_ID and tok.token_to_id(MASK) == MASK_ID
    return tok


def save(tok, out_dir, max_length):
    from transformers import PreTrainedTokenizerFast
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS, mask_token=MASK,
                                   model_max_length=max_length)
    fast.save_pretrained(out_dir)


def encode_documents(tok, texts):
    """Each document's ids followed by EOS."""
    return [e.ids + [EOS_ID] for e in tok.encode_batch(texts)]
