"""A tiny llama-architecture GGUF model, written with the `gguf` package, for a real
llama-cpp-python server in the tests and the engines bench. Its weights are small seeded
random numbers: it writes nonsense, but through the real tokenizer, sampler and server
(streaming, seeds, usage counts). It never ends a reply by itself (see `output`): a
reply runs to the request's max_tokens, or the 16k context (~20-90 s here) without one. About 200 KB; written in well under a second.

    python tests/engines/tiny_gguf.py OUT.gguf
"""

from __future__ import annotations

import sys
from pathlib import Path

import gguf
import numpy as np

N_EMBD, N_LAYERS, N_HEAD, N_FF, N_CTX = 64, 2, 4, 128, 16384  # a long context: an uncapped reply runs ~20 s
WORDS = ("the a of and to in is it that was for on are with as his they be at one have this from or had by "
         "word but what some we can out other were all there when up use your how said an each she which do "
         "their time if will way about many then them write would like so these her long make thing see him "
         "two has look more day could go come did number sound no most people my over know water than call "
         "first who may down side been now find any new work part take get place made live where after back "
         "little only round man year came show every good me give our under name very through just").split()
# like many real templates, it refuses some input with raise_exception (the server answers 500)
TEMPLATE = ("{% for message in messages %}{% if '[refuse]' in message['content'] %}"
            "{{ raise_exception('this model refuses prompts that say [refuse]') }}{% endif %}"
            "<|{{ message['role'] }}|>{{ message['content'] }}</s>{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def write(path: Path, seed: int = 0) -> Path:
    tokens = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{i:02X}>".encode() for i in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    pieces = sorted({"\u2581" + w for w in WORDS} | set("\u2581abcdefghijklmnopqrstuvwxyz.,!?"))
    tokens += [p.encode() for p in pieces]
    types += [gguf.TokenType.NORMAL] * len(pieces)
    scores = [0.0] * 3 + [-1000.0] * 256 + [-float(len(p)) for p in pieces]
    n_vocab = len(tokens)

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("genservice-tiny-test")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYERS)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_scores(scores)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_chat_template(TEMPLATE)

    rng = np.random.default_rng(seed)

    def t(name: str, *shape: int) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * 0.2).astype(np.float32))

    t("token_embd.weight", n_vocab, N_EMBD)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    # only word pieces are written: </s> and the byte tokens score 0, far below the best
    # word piece, so a reply runs to max_tokens (a streamed byte token would be held back
    # by the server until it forms UTF-8, and a stream would go quiet)
    output = (rng.standard_normal((n_vocab, N_EMBD)) * 0.6).astype(np.float32)
    output[:3 + 256] = 0.0
    w.add_tensor("output.weight", output)
    for i in range(N_LAYERS):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            t(f"blk.{i}.{name}.weight", N_EMBD, N_EMBD)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        t(f"blk.{i}.ffn_gate.weight", N_FF, N_EMBD)
        t(f"blk.{i}.ffn_up.weight", N_FF, N_EMBD)
        t(f"blk.{i}.ffn_down.weight", N_EMBD, N_FF)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


if __name__ == "__main__":
    print(write(Path(sys.argv[1])))
