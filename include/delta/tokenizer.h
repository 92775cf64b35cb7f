/* delta — a byte-level BPE tokenizer (GPT-2's) read from a Hugging Face
 * tokenizer.json, to encode prompts and decode what a model writes.
 *
 * What a file must be: model.type "BPE" with model.vocab (token -> id) and
 * model.merges, either as "a b" strings or as [a, b] pairs (newer files);
 * the ByteLevel pre-tokenizer (GPT-2's split regex, add_prefix_space as
 * given) or none, no normalizer; added_tokens (<|endoftext|>) are taken.
 * Anything else (WordPiece, a normalizer, byte_fallback, a Split
 * pre-tokenizer's own regex) is refused with DELTA_ERR_UNSUPPORTED and a
 * message naming the field.
 *
 * Encoding: added tokens in the text become their ids when asked (as
 * Hugging Face's tokenizers always do, tiktoken with allowed_special); the
 * rest is cut by GPT-2's regex
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * (PCRE2 with Unicode properties: a build without libpcre2 refuses to
 * encode with DELTA_ERR_UNSUPPORTED; \s is Unicode whitespace, as in the
 * regex libraries of OpenAI's encoder.py and of tiktoken, so U+0085 is
 * whitespace and U+FEFF is not, where JavaScript ports of the tokenizer
 * have it the other way round), each piece's UTF-8 bytes are its
 * first symbols and the merges are applied lowest rank first. Decoding
 * gives the bytes the tokens stand for; ids cut inside a UTF-8 character
 * give that character's bytes so far (a caller printing token by token
 * gets whole text once the rest comes).
 *
 * Errors leave a message in delta_tokenizer_error (loading: in err). Not
 * locked: one thread at a time per tokenizer. */
#ifndef DELTA_TOKENIZER_H
#define DELTA_TOKENIZER_H

#include "delta/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct delta_tokenizer delta_tokenizer;

/* Reads a tokenizer.json. NULL on failure with *status (may be NULL) and a
 * message in err: DELTA_ERR_IO (cannot read the file), DELTA_ERR_FORMAT
 * (not JSON, a field of the wrong type, a merge of tokens not in the
 * vocabulary, a duplicate id), DELTA_ERR_UNSUPPORTED (not byte-level BPE),
 * DELTA_ERR_NOMEM. */
DELTA_API delta_tokenizer *delta_tokenizer_load(const char *path,
                                                delta_status *status,
                                                char *err, size_t err_len);
/* The same from the file's text in memory (len bytes, not NUL-terminated
 * necessarily). */
DELTA_API delta_tokenizer *delta_tokenizer_parse(const char *json, size_t len,
                                                 delta_status *status,
                                                 char *err, size_t err_len);
DELTA_API void delta_tokenizer_free(delta_tokenizer *tok); /* accepts NULL */

/* One more than the largest id of the vocabulary and the added tokens
 * (50257 for GPT-2). */
DELTA_API int32_t delta_tokenizer_vocab_size(const delta_tokenizer *tok);

/* Encodes text (len bytes of UTF-8) into ids[0..cap): *n gets the number
 * of ids the text has, of which the first min(*n, cap) are written (call
 * with cap 0 to size the buffer). special: added tokens in the text
 * ("<|endoftext|>") are their ids; false: they are encoded as text.
 * DELTA_ERR_INVALID_ARG for text that is not UTF-8 (the message gives the
 * byte offset), DELTA_ERR_UNSUPPORTED without PCRE2. */
DELTA_API delta_status delta_tokenizer_encode(delta_tokenizer *tok,
                                              const char *text, size_t len,
                                              bool special, int32_t *ids,
                                              size_t cap, size_t *n);

/* Decodes ids[0..n) into out[0..cap): *len gets the bytes the ids stand
 * for, of which the first min(*len, cap) are written, and a NUL after
 * them when *len < cap. An id outside the vocabulary is
 * DELTA_ERR_INVALID_ARG with its position (nothing is written then). */
DELTA_API delta_status delta_tokenizer_decode(delta_tokenizer *tok,
                                              const int32_t *ids, size_t n,
                                              char *out, size_t cap,
                                              size_t *len);

/* The token of an id as the file spells it (byte-level form: "Ġthe" for
 * " the"; an added token's content), or NULL for an unknown id. Lives as
 * long as tok. */
DELTA_API const char *delta_tokenizer_token(const delta_tokenizer *tok,
                                            int32_t id);
/* The id of a token spelled as the file spells it, or -1. */
DELTA_API int32_t delta_tokenizer_find(const delta_tokenizer *tok,
                                       const char *token);

/* Message of the last failed encode or decode. */
DELTA_API const char *delta_tokenizer_error(const delta_tokenizer *tok);

#ifdef __cplusplus
}
#endif
#endif
