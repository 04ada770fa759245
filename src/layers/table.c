/*
 * layers/table: the table of layer kinds, the one list of them. A kind is its
 * entry's file and one line here; the order is the order the plan's messages
 * list the kinds in. A test binary may add entries of its own
 * (layer_register).
 */
#include "layers/layer.h"

#include <string.h>

extern const layer_ops layer_dense_ops, layer_dropout_ops, layer_conv2d_ops, layer_max_pool_ops,
    layer_avg_pool_ops, layer_global_avg_pool_ops, layer_flatten_ops, layer_batch_norm_ops,
    layer_activation_ops;
extern const layer_ops layer_lstm_ops, layer_gru_ops;
extern const layer_ops layer_layer_normalization_ops, layer_multi_head_attention_ops;
extern const layer_ops layer_residual_ops;
extern const layer_ops layer_bidirectional_ops;
extern const layer_ops layer_conv1d_ops, layer_max_pool1d_ops, layer_avg_pool1d_ops,
    layer_global_avg_pool1d_ops, layer_global_max_pool1d_ops;
extern const layer_ops layer_embedding_ops, layer_position_embedding_ops;

/* Room for the built-in kinds and the test binaries' own. */
#define LAYER_TABLE_MAX 64

static const layer_ops *table[LAYER_TABLE_MAX] = {
    &layer_dense_ops,
    &layer_dropout_ops,
    &layer_conv2d_ops,
    &layer_max_pool_ops,
    &layer_avg_pool_ops,
    &layer_global_avg_pool_ops,
    &layer_flatten_ops,
    &layer_batch_norm_ops,
    &layer_activation_ops,
    &layer_lstm_ops,
    &layer_gru_ops,
    &layer_layer_normalization_ops,
    &layer_residual_ops,
    &layer_multi_head_attention_ops,
    &layer_bidirectional_ops,
    &layer_conv1d_ops,
    &layer_max_pool1d_ops,
    &layer_avg_pool1d_ops,
    &layer_global_avg_pool1d_ops,
    &layer_global_max_pool1d_ops,
    &layer_embedding_ops,
    &layer_position_embedding_ops,
};

/* The entries: the listed ones, then the registered. */
static int table_len(void)
{
    int n = 0;
    while (n < LAYER_TABLE_MAX && table[n])
        n++;
    return n;
}

const layer_ops *const *layer_kinds(int *n)
{
    *n = table_len();
    return table;
}

const layer_ops *layer_find(const char *name)
{
    for (int k = 0; k < LAYER_TABLE_MAX && table[k]; k++)
        if (strcmp(name, table[k]->name) == 0)
            return table[k];
    return NULL;
}

static int has_key(const char *const *keys, int n, const char *k)
{
    for (int i = 0; i < n; i++)
        if (strcmp(keys[i], k) == 0)
            return 1;
    return 0;
}

int layer_all_keys(const char **keys, int max)
{
    int n = table_len(), count = 0;
    for (int k = 0; k < n && count < max - 1; k++)
        keys[count++] = table[k]->name;
    for (int k = 0; k < n; k++)
        for (const char *const *key = table[k]->keys; key && *key; key++)
            if (!has_key(keys, count, *key) && count < max - 1)
                keys[count++] = *key;
    keys[count] = NULL;
    return count;
}

int layer_register(const layer_ops *ops)
{
    int n = table_len();
    if (n >= LAYER_TABLE_MAX || !ops->name || layer_find(ops->name))
        return -1;
    table[n] = ops;
    return 0;
}
