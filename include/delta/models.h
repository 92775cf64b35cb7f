/* delta — the built-in models, built only through the public graph API.
 *
 * Families and their tensor names (so checkpoints interchange with
 * PyTorch as safetensors; the tool's files add the tied aliases
 * transformers lists, lm_head.weight and cls.predictions.decoder.*:
 * docs/CHECKPOINTS.md):
 *   mlp                      "fc1.weight", "fc1.bias", ... "fc3.bias"
 *                            (nn.Linear layout (out, in))
 *   resnet18/34/50/101/152   torchvision's ResNet ("conv1.weight",
 *                            "bn1.running_mean", "layer1.0.conv1.weight",
 *                            "layer2.0.downsample.1.weight", "fc.weight",
 *                            ...); running stats are STATE tensors
 *   gpt2-tiny/small/medium/large/xl
 *                            Hugging Face GPT2LMHeadModel
 *                            ("transformer.h.0.attn.c_attn.weight" in Conv1D
 *                            layout (in, out); lm_head tied to wte)
 *   bert-tiny/base/large     Hugging Face BertForMaskedLM ("bert.encoder.
 *                            layer.0.attention.self.query.weight", ...,
 *                            "cls.predictions.bias"; the decoder is tied to
 *                            the word embeddings)
 *
 * Inputs (the model's INPUT tensors, by name):
 *   classifiers  "images" (N, C, H, W) F32, "labels" (N) I32
 *   GPT-2        "tokens" (B, T) I32, "targets" (B, T) I32: the next tokens
 *                (the caller shifts; -100 leaves a position out)
 *   BERT         "tokens" (B, T) I32, "targets" (B, T) I32 (the original
 *                token at masked positions, -100 elsewhere),
 *                "attention_mask" (B, T) F32 (1 keep, 0 padding)
 * Transformers also have CONST tensors that the caller must fill once
 * after placing the program: call delta_model_fill_constants.
 *
 * Known differences from the PyTorch originals:
 *  - BERT's word-embedding row 0 (the padding token) is not zeroed at init
 *    and its lookup gradient is not stopped (nn.Embedding padding_idx).
 *    Both agree whenever padding positions are masked and have target
 *    -100, the only way padding is meant to be used. */
#ifndef DELTA_MODELS_H
#define DELTA_MODELS_H

#include "delta/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum delta_model_task {
    DELTA_TASK_CLASSIFY = 0,  /* images -> labels */
    DELTA_TASK_CAUSAL_LM,     /* tokens -> next tokens (GPT-2) */
    DELTA_TASK_MASKED_LM,     /* masked tokens -> original tokens (BERT) */
} delta_model_task;

/* The precision a model trains in (docs/KERNELS.md, "Mixed precision").
 * FP32: every tensor F32. BF16, as PyTorch's autocast: parameters, their
 * gradients and optimizer state stay F32 (master weights); each step casts
 * the weights products need to BF16, products (matmul, linear, conv2d and
 * their gradients, attention's two products) take BF16 operands and sum in
 * fp32; activations and their gradients are BF16, and normalisations,
 * softmax and the loss compute in fp32 inside their kernels; the loss is
 * F32. */
typedef enum delta_precision {
    DELTA_PRECISION_FP32 = 0,
    DELTA_PRECISION_BF16,
    DELTA_PRECISION_COUNT
} delta_precision;

/* "fp32", "bf16" ("?" for others). */
DELTA_API const char *delta_precision_name(delta_precision p);
/* Parses "fp32" or "bf16" into *out; false (and *out untouched) for
 * anything else. */
DELTA_API bool delta_precision_parse(const char *s, delta_precision *out);

/* dropout value that asks for the model's default. */
#define DELTA_MODEL_DROPOUT_DEFAULT (-1.0f)

/* A model's configuration. Zero fields take the named model's defaults
 * (resnet: 224x224x3 images, 1000 classes, width 64; mlp: 28x28x1 images,
 * 10 classes, 256 hidden; gpt2-small: 12 layers, 768 hidden, 12 heads,
 * T 1024, vocab 50257, 1024 positions). Fields that do not apply to the
 * named family must stay 0. The one exception to "zero is the default" is
 * dropout: 0 disables it, a negative value (DELTA_MODEL_DROPOUT_DEFAULT)
 * takes the default 0.1. */
typedef struct delta_model_config {
    const char *name;     /* "resnet18", "gpt2-small", "bert-tiny", ... */
    int64_t batch;        /* required, >= 1 */
    /* image models (mlp, resnet) */
    int64_t image_size;   /* H = W */
    int64_t channels, classes;
    int64_t width;        /* resnet: channels of layer1 (torchvision 64) */
    int64_t mlp_hidden;   /* mlp: width of fc1 and fc2 */
    /* transformers (gpt2, bert) */
    int64_t layers, hidden, heads, seq_len, vocab;
    /* rows of the position table (GPT-2 n_positions, BERT
     * max_position_embeddings): 1024 for GPT-2, raised to seq_len when that
     * is longer; 512 for BERT, where seq_len may not exceed it */
    int64_t positions;
    float dropout;        /* see above; must be < 1 */
    delta_precision precision; /* FP32 (the zero default) or BF16 */
    /* resnet: 0 (the default) fuses each batch norm with the ReLU (and the
     * residual add) after it (delta_ctx_fuse_batchnorm: the same bits, less
     * memory; in either precision); 1 keeps them separate ops */
    int no_fusion;
} delta_model_config;

/* What a built model exposes. */
typedef struct delta_model {
    delta_model_task task;
    delta_model_config cfg;     /* with defaults filled in */
    delta_tensor *loss;         /* scalar mean cross-entropy */
    delta_tensor *logits;       /* (N, classes) or (B*T, V) */
    delta_tensor *input;        /* "images" or "tokens" */
    delta_tensor *target;       /* "labels" or "targets" */
    delta_tensor *mask;         /* BERT "attention_mask" (B, T), else NULL */
    delta_tensor *positions;    /* transformers: "positions" (T) I32 CONST,
                                   must hold 0..T-1; else NULL */
    delta_tensor *token_types;  /* BERT: "token_type_ids" (1) I32 CONST,
                                   must hold 0; else NULL */
    int64_t n_params;           /* trained parameters (tied ones once) */
    int n_param_tensors;        /* PARAM tensors the model made */
    char error[256];            /* why the build failed, "" on success */
} delta_model;

/* Checks cfg and fills in the defaults of its model (into *out, which may
 * be cfg itself). On error writes a message naming the bad field into err
 * (err_len bytes, may be NULL) and returns DELTA_ERR_INVALID_ARG; an
 * unknown name's message lists the valid names. */
DELTA_API delta_status delta_model_resolve(const delta_model_config *cfg,
                                 delta_model_config *out, char *err,
                                 size_t err_len);

/* Records the model's forward pass (and loss) into ctx. Returns the
 * status; on error out->error says why: a bad config (ctx untouched) or
 * the graph's first error (also in delta_ctx_error). Call delta_backward
 * and an optimizer afterwards for training. */
DELTA_API delta_status delta_model_build(delta_ctx *ctx, const delta_model_config *cfg,
                               delta_model *out);

/* Writes the model's constants (positions 0..T-1, token type 0) through
 * data_of, which returns the host data of a tensor (e.g. a wrapper around
 * delta_exec_data). Call once after the program is placed and before the
 * first run; models without constants write nothing. */
DELTA_API void delta_model_fill_constants(const delta_model *m,
                                void *(*data_of)(void *ud,
                                                 const delta_tensor *t),
                                void *ud);

/* The model a checkpoint file holds, for fine-tuning and sampling without
 * naming it:
 *  - a file delta saved: its "model" metadata and saved config fields;
 *  - a Hugging Face GPT-2 (model.safetensors of gpt2, gpt2-medium,
 *    gpt2-large, gpt2-xl, or any GPT2LMHeadModel or GPT2Model): n_layer,
 *    n_embd, n_head, vocab_size and n_positions of config.json in the
 *    file's folder when there (model_type must be "gpt2"; its sizes must
 *    agree with the tensors'), else the tensors' shapes (blocks h.N
 *    counted, wte.weight's rows and columns, wpe.weight's rows) with
 *    heads = width / 64, as in every published GPT-2. The name is the
 *    built-in of those sizes (gpt2 is gpt2-small), else gpt2-small with
 *    the sizes set.
 * Sets cfg->name and fills the architecture fields of *cfg that are 0
 * (a value already set is kept, and the load then checks it against the
 * tensors); seq_len, when 0, becomes the positions of a GPT-2 whose table
 * is shorter than the built-in's default length; batch, dropout and
 * precision are left alone. The file
 * is mapped, not read. DELTA_ERR_FORMAT (a message in err) when the file
 * says nothing delta can read, DELTA_ERR_IO when it cannot be read. */
DELTA_API delta_status delta_model_config_pretrained(const char *path,
                                                     delta_model_config *cfg,
                                                     char *err,
                                                     size_t err_len);

/* Names of the built-in models, NULL-terminated. */
DELTA_API const char *const *delta_model_names(void);

#ifdef __cplusplus
}
#endif
#endif
