/* delta — datasets and the batch loader.
 *
 * A dataset is an opaque, read-only collection of samples of one kind:
 *   DELTA_DATA_IMAGES     input F32 (C, H, W), target I32 () class label
 *   DELTA_DATA_CAUSAL_LM  input I32 (T) tokens, target I32 (T) next tokens
 *   DELTA_DATA_MASKED_LM  input I32 (T) tokens with some replaced by [MASK],
 *                         target I32 (T) original token at the chosen
 *                         positions and -100 elsewhere, mask F32 (T) all 1
 * which are the inputs delta_model_build's classifiers, GPT-2 and BERT take
 * (see delta/models.h); a batch stacks B samples: (B, C, H, W) and (B), or
 * (B, T). delta_dataset_info tells the trainer how to configure a model.
 *
 * Sources:
 *  - Fashion-MNIST, read from the gzip'd (or plain) idx files of Debian's
 *    dataset-fashion-mnist package; every header field, size and label is
 *    checked, so a bad file is refused with a message, never a crash.
 *  - Any file as byte-level text (vocab 256), cut into windows for a causal
 *    or a masked language model.
 *  - llm.c's token files (GPT-2 token ids, uint16), memory-mapped and
 *    checked whole, cut into windows for a causal language model.
 *  - Synthetic data of any shape, a pure function of a seed.
 *
 * The loader hands out batches in an order that is a pure function of
 * (seed, epoch): a Fisher-Yates shuffle drawn from a counter-based RNG, or
 * file order. Its position (epoch, index) can be read and set, so training
 * resumes at exactly the next batch. It writes into buffers the caller owns
 * and allocates nothing per batch.
 *
 * Errors: constructors return NULL, set *status (if non-NULL) and write a
 * message naming the file and the problem into err (if non-NULL, err_len
 * bytes): DELTA_ERR_IO for a file that cannot be opened or read,
 * DELTA_ERR_FORMAT for malformed contents, DELTA_ERR_INVALID_ARG for bad
 * options, DELTA_ERR_NOMEM. Every _free accepts NULL. */
#ifndef DELTA_DATA_H
#define DELTA_DATA_H

#include "delta/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum delta_data_kind {
    DELTA_DATA_IMAGES = 0,   /* images -> labels (model task CLASSIFY) */
    DELTA_DATA_CAUSAL_LM,    /* tokens -> next tokens (CAUSAL_LM) */
    DELTA_DATA_MASKED_LM,    /* masked tokens -> originals (MASKED_LM) */
} delta_data_kind;

/* Target value at positions that carry no prediction (cross entropy's
 * ignore_index, as in PyTorch and Hugging Face). */
#define DELTA_DATA_IGNORE (-100)

/* What a dataset holds, per sample. Fields that do not apply are 0. */
typedef struct delta_data_info {
    delta_data_kind kind;
    int64_t len;                      /* number of samples */
    int64_t channels, height, width;  /* images */
    int64_t classes;                  /* images: labels in [0, classes) */
    int64_t seq_len;                  /* tokens: T */
    int64_t vocab;                    /* tokens: ids in [0, vocab) */
    int32_t mask_id;                  /* masked LM: the [MASK] id; else -1 */
    delta_dtype input_dtype;          /* DELTA_F32 images, DELTA_I32 tokens */
    int64_t input_numel;              /* per sample: C*H*W or T */
    int64_t target_numel;             /* per sample: 1 or T */
    int64_t mask_numel;               /* per sample: T for masked LM, else 0 */
} delta_data_info;

typedef struct delta_dataset delta_dataset;

DELTA_API void delta_dataset_free(delta_dataset *ds);
DELTA_API int64_t delta_dataset_len(const delta_dataset *ds);
DELTA_API delta_data_info delta_dataset_info(const delta_dataset *ds);
/* A short description ("fashion-mnist train (60000 images 1x28x28, 10
 * classes)", "text /path: 1234 windows of 128 bytes", ...); never NULL. */
DELTA_API const char *delta_dataset_name(const delta_dataset *ds);

/* Writes sample `index` (0 <= index < len) into input (input_numel
 * elements of input_dtype), target (target_numel) and, when non-NULL, mask
 * (mask_numel elements: T ones for masked LM; other kinds, whose
 * mask_numel is 0, leave it untouched). seed and
 * epoch key the per-draw randomness, which today is only the masked-LM
 * masking (other kinds ignore them); the loader passes its own. */
DELTA_API void delta_dataset_get(const delta_dataset *ds, int64_t index, uint64_t seed,
                       uint64_t epoch, void *input, int32_t *target,
                       float *mask);

/* ---- Fashion-MNIST ------------------------------------------------------
 * Files <dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz; when a .gz
 * file is absent the same name without .gz is tried, and a ".gz" file that
 * holds plain idx bytes is read as is (zlib's reader is transparent).
 * idx: big-endian magic 0x00000803 (u8 images) / 0x00000801 (u8 labels),
 * then the dims (count, rows, cols / count) and the data, nothing after.
 *
 * Images come out as F32 (1, 28, 28) normalized as the common torchvision
 * recipe does (ToTensor, then Normalize with Fashion-MNIST's mean and std
 * over the training pixels): x = (p / 255 - 0.2860) / 0.3530 for a pixel
 * p in 0..255, so values lie in [-0.8102, 2.0227]. Labels are 0..9. */
#define DELTA_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#define DELTA_FASHION_MNIST_MEAN 0.2860f
#define DELTA_FASHION_MNIST_STD 0.3530f
#define DELTA_FASHION_MNIST_CLASSES 10

typedef enum delta_data_split {
    DELTA_SPLIT_TRAIN = 0,  /* train-*: 60000 samples */
    DELTA_SPLIT_TEST,       /* t10k-*: 10000 samples */
} delta_data_split;

/* dir NULL or "" means DELTA_FASHION_MNIST_DIR. Images may be any size
 * from 1x1 to 4096x4096 (the file says); the count is at most 2^28. */
DELTA_API delta_dataset *delta_dataset_fashion_mnist_new(const char *dir,
                                               delta_data_split split,
                                               delta_status *status,
                                               char *err, size_t err_len);

/* ---- byte-level text ----------------------------------------------------
 * The file's bytes are the tokens (ids 0..255).
 *
 * Causal LM: window i covers bytes [i*T, i*T + T] (T + 1 bytes; consecutive
 * windows share one byte): input = bytes [i*T, i*T + T), target = bytes
 * [i*T + 1, i*T + T + 1). There are (size - 1) / T windows; the file must
 * be at least T + 1 bytes.
 *
 * Masked LM (BERT): window i is bytes [i*T, i*T + T) (size / T windows; the
 * file must be at least T bytes). In each window exactly
 * max(1, round(0.15 * T)) positions are chosen as prediction targets (their
 * target is the original byte, -100 elsewhere); of those, 80% become
 * mask_id, 10% a uniformly random byte 0..255 and 10% stay unchanged, each
 * position deciding independently. The choice is a pure function of (seed,
 * epoch, window index), so every epoch masks differently (dynamic masking)
 * and any draw can be repeated. mask_id is vocab - 1: with the default
 * vocab 257 it is 256, outside the bytes; with vocab 256 it is 255, a byte
 * that never occurs in UTF-8 text. The attention mask is all ones (windows
 * are full, there is no padding). */
#define DELTA_MLM_PROB 0.15f         /* share of positions predicted */
#define DELTA_MLM_MASK_SHARE 0.8f    /* of those: replaced by [MASK] */
#define DELTA_MLM_RANDOM_SHARE 0.1f  /* of those: replaced by a random byte */
#define DELTA_TEXT_MLM_VOCAB 257     /* default masked-LM vocab */

typedef struct delta_text_opts {
    delta_data_kind kind;  /* DELTA_DATA_CAUSAL_LM or DELTA_DATA_MASKED_LM */
    int64_t seq_len;       /* T, 1 .. 2^24 */
    int64_t vocab;         /* reported vocab, >= 256; 0: 256 causal,
                              DELTA_TEXT_MLM_VOCAB masked */
} delta_text_opts;

DELTA_API delta_dataset *delta_dataset_text_new(const char *path,
                                      const delta_text_opts *opts,
                                      delta_status *status, char *err,
                                      size_t err_len);

/* ---- llm.c token files ---------------------------------------------------
 * The files llm.c's data scripts write (dev/data/, write_datafile) and
 * its DataLoader reads: a header of 256 little-endian int32 (1024 bytes)
 *   header[0]  magic 20240520 (DELTA_TOKENS_MAGIC)
 *   header[1]  version 1 (DELTA_TOKENS_VERSION): uint16 tokens
 *   header[2]  the token count N, >= 1
 *   header[3..255]  unused (llm.c writes zeros; not checked)
 * then exactly N little-endian uint16 token ids (GPT-2's BPE ids, 0..50256),
 * nothing after. The file is memory-mapped, not copied, and checked whole
 * when it is opened: a bad magic, another version, a count below 1, a file
 * shorter or longer than 1024 + 2N bytes, and a token id >= vocab are each
 * refused (DELTA_ERR_FORMAT) with a message that names the byte offset (and
 * for a token, its index), so a bad file never gets as far as training.
 * (The file must not be truncated while the dataset is open: a mapped page
 * that is gone ends the process with SIGBUS.)
 *
 * Causal LM, as llm.c forms batches: sample i is tokens [i*T, i*T + T) as
 * input and [i*T + 1, i*T + T + 1) as target (consecutive windows share one
 * token; there are (N - 1) / T samples, so N must be at least T + 1). A
 * batch of B samples in file order (the loader without shuffle) starting at
 * sample k*B is therefore exactly llm.c's k-th batch: the B*T + 1 tokens
 * from k*B*T, inputs the first B*T and targets the same shifted by one; and
 * the loader's data-parallel shard (delta_loader_set_shard) gives rank r
 * llm.c's process r's part of that global batch. With shuffle the loader
 * permutes samples (windows of T), where llm.c permutes whole B*T batches
 * within a shard. */
#define DELTA_TOKENS_MAGIC 20240520
#define DELTA_TOKENS_VERSION 1
#define DELTA_TOKENS_HEADER_INTS 256
#define DELTA_TOKENS_HEADER_BYTES (DELTA_TOKENS_HEADER_INTS * 4)
#define DELTA_TOKENS_GPT2_VOCAB 50257  /* GPT-2's BPE vocabulary */

typedef struct delta_tokens_opts {
    int64_t seq_len;  /* T, 1 .. 2^24 */
    int64_t vocab;    /* token ids must be below it, 1 .. INT32_MAX; it is
                         also the reported vocab; 0: DELTA_TOKENS_GPT2_VOCAB
                         (a model's vocab may be larger, e.g. llm.c's padded
                         50304) */
} delta_tokens_opts;

/* A causal-LM dataset over the llm.c token file at path (see above); on
 * failure NULL with *status and err set as for every constructor:
 * DELTA_ERR_IO (cannot open or map; not a regular file), DELTA_ERR_FORMAT
 * (malformed, or fewer than seq_len + 1 tokens), DELTA_ERR_INVALID_ARG (bad
 * options). */
DELTA_API delta_dataset *delta_dataset_tokens_new(const char *path,
                                        const delta_tokens_opts *opts,
                                        delta_status *status, char *err,
                                        size_t err_len);

/* Whether path starts with an llm.c token file's magic (as far as its first
 * 4 bytes tell; false when it cannot be read): how a caller tells a token
 * file from a text file before choosing a constructor. */
DELTA_API bool delta_tokens_file_is(const char *path);

/* Writes tokens[0..n) as an llm.c token file at path (header as above,
 * version 1): atomically (a temporary beside path, fsync, rename, fsync of
 * the folder), replacing only a regular file (a link to one: its target)
 * and keeping its mode. DELTA_ERR_INVALID_ARG, with nothing written, when n
 * is not in 1 .. INT32_MAX, a token is not in 0 .. 65535 (the message names
 * its index), or what is at path is not a regular file; DELTA_ERR_IO when
 * the write fails (the previous file, if any, is unchanged). err (when
 * non-NULL) gets the message, "" on success. */
DELTA_API delta_status delta_tokens_write(const char *path, const int32_t *tokens,
                                int64_t n, char *err, size_t err_len);

/* ---- synthetic ----------------------------------------------------------
 * Every sample is a pure function of (seed, index):
 *  - images: every pixel N(0, 1), label uniform in [0, classes);
 *  - tokens: a walk of a fixed sparse Markov chain over [0, vocab') in which
 *    each token has DELTA_SYNTH_BRANCH possible successors (drawn from the
 *    seed), starting from a uniform token; so a model can learn it (the
 *    best loss is log(DELTA_SYNTH_BRANCH) per token instead of log(vocab)).
 *    Causal LM: input = walk[0, T), target = walk[1, T + 1). Masked LM:
 *    input = walk[0, T) masked as for text (mask_id = vocab - 1, random
 *    replacements in [0, vocab - 1)), and vocab' = vocab - 1 so [MASK]
 *    never occurs in the walk; for causal LM vocab' = vocab. */
#define DELTA_SYNTH_BRANCH 4

typedef struct delta_synth_opts {
    delta_data_kind kind;
    int64_t len;                      /* samples, >= 1 */
    uint64_t seed;
    int64_t channels, height, width;  /* images, each >= 1 */
    int64_t classes;                  /* images, >= 1 */
    int64_t seq_len;                  /* tokens, T >= 1 */
    int64_t vocab;                    /* tokens, >= 2 (>= 3 masked LM) */
} delta_synth_opts;

DELTA_API delta_dataset *delta_dataset_synthetic_new(const delta_synth_opts *opts,
                                           delta_status *status, char *err,
                                           size_t err_len);

/* ---- batches ------------------------------------------------------------
 * A batch's buffers belong to the caller and must hold `batch` samples:
 * input batch*input_numel elements of input_dtype (float for images,
 * int32_t for tokens), target batch*target_numel int32_t, mask
 * batch*mask_numel float (may be NULL when mask_numel is 0 or the mask is
 * not wanted). They may point straight at a program's input tensors. */
typedef struct delta_batch {
    void *input;      /* (B, C, H, W) F32 or (B, T) I32 */
    int32_t *target;  /* (B) or (B, T) */
    float *mask;      /* (B, T) or NULL */
    /* set by delta_loader_next: */
    int64_t size;     /* samples written, <= batch (smaller: last of epoch) */
    int64_t epoch;    /* epoch the batch belongs to */
    int64_t index;    /* position of its first sample within the epoch */
} delta_batch;

/* Allocates (aligned) buffers for `batch` samples of ds into b, zeroing
 * b's other fields; release with delta_batch_release. Convenience only. */
DELTA_API delta_status delta_batch_alloc(delta_batch *b, const delta_dataset *ds,
                               int64_t batch);
DELTA_API void delta_batch_release(delta_batch *b);

/* ---- loader ------------------------------------------------------------- */
typedef struct delta_loader delta_loader;

/* Where a loader stands: the next batch starts at sample `index` of epoch
 * `epoch`'s order. Saving it and setting it on a new loader over the same
 * dataset with the same options resumes at exactly the same batch. */
typedef struct delta_loader_pos {
    int64_t epoch;  /* >= 0 */
    int64_t index;  /* 0 .. len */
} delta_loader_pos;

/* A loader over ds (which must outlive it) giving batches of `batch`
 * samples. shuffle: each epoch visits the samples in a random permutation
 * that is a pure function of (seed, epoch); otherwise in file order.
 * drop_last: an epoch's last, partial batch is skipped; otherwise it is
 * returned with its smaller size. seed also keys the per-draw randomness
 * (masked-LM masking) through delta_dataset_get. Fails
 * (DELTA_ERR_INVALID_ARG) when batch < 1, or drop_last and batch > len (an
 * epoch would have no batch). */
DELTA_API delta_loader *delta_loader_new(const delta_dataset *ds, int64_t batch,
                               uint64_t seed, bool shuffle, bool drop_last,
                               delta_status *status, char *err,
                               size_t err_len);
DELTA_API void delta_loader_free(delta_loader *l);

/* Writes the next batch into out's buffers and sets out->size, ->epoch and
 * ->index. Batches go on forever: after an epoch's last batch the next
 * call starts the next epoch. No allocation. */
DELTA_API void delta_loader_next(delta_loader *l, delta_batch *out);

/* Like delta_loader_next, but token samples (causal and masked LM) hold
 * seq_len tokens, 1 <= seq_len <= the dataset's seq_len, written densely
 * as (B, seq_len) (and the mask (B, seq_len)): the first seq_len tokens of
 * each sample and, for causal LM, their next tokens, so they are a prefix
 * of what delta_loader_next writes; masked LM chooses its
 * max(1, round(0.15 * seq_len)) prediction targets among those seq_len
 * positions. Samples and their order are the same as with
 * delta_loader_next (a text window still starts at index * T). Images
 * ignore seq_len. Trainers that draw a sequence length per step use it. */
DELTA_API void delta_loader_next_len(delta_loader *l, delta_batch *out,
                           int64_t seq_len);

/* Data parallel: the loader hands rank `rank` of `ranks` its share of
 * every global batch (the batch given to delta_loader_new stays per rank).
 * The global batch at the loader's position is the one a loader of ranks x
 * batch samples would hand out, and rank r gets its samples r x b ..
 * (r + 1) x b - 1, b = the global batch's size / ranks: the ranks together
 * see what one rank with ranks x batch would. An epoch's last global batch
 * of n samples gives each rank n / ranks and skips the n % ranks left over
 * (none at all when n < ranks, or with drop_last). Positions count the
 * samples of global batches, so every rank stands at the same one. Call it
 * before the first batch; DELTA_ERR_INVALID_ARG when rank is not in
 * 0..ranks-1 or, with drop_last, the data hold no global batch. */
DELTA_API delta_status delta_loader_set_shard(delta_loader *l, int rank,
                                              int ranks);

/* Batches per epoch: len / batch with drop_last, else ceil(len / batch)
 * (of global batches with a shard). */
DELTA_API int64_t delta_loader_batches_per_epoch(const delta_loader *l);
DELTA_API delta_loader_pos delta_loader_get_pos(const delta_loader *l);
/* DELTA_ERR_INVALID_ARG (loader unchanged) when epoch < 0 or index is
 * outside 0..len. An index at or past the epoch's last batch makes the next
 * call start the following epoch. */
DELTA_API delta_status delta_loader_set_pos(delta_loader *l, delta_loader_pos pos);

/* The shuffled order of epoch `epoch`: writes a permutation of 0..n-1 into
 * perm (n elements), by Fisher-Yates with draws from a counter-based RNG
 * keyed by (seed, epoch); the same arguments give the same order on every
 * machine. This is the order a shuffling loader uses. */
DELTA_API void delta_data_permutation(int64_t n, uint64_t seed, int64_t epoch,
                            int64_t *perm);

#ifdef __cplusplus
}
#endif
#endif
