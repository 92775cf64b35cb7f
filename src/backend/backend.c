/* The parts of every backend that do not depend on which one it is: the
 * public accessors of delta/backend.h and the few helpers of
 * src/backend/backend.h that are more than one call. */
#include "backend/backend.h"
#include "delta/graph.h"

void delta_backend_free(delta_backend *b) {
    if (!b) return;
    /* destroy drains the streams and frees b itself (b lives inside the
     * backend's own context). */
    b->ops->destroy(b->ctx);
}

const char *delta_backend_name(const delta_backend *b) {
    return b && b->name ? b->name : "none";
}

double delta_backend_link_bps(const delta_backend *b) {
    return b ? b->link_bps : 0.0;
}

double delta_backend_device_bytes(const delta_backend *b) {
    return b ? b->device_bytes : 0.0;
}

void delta_backend_sync_copies(delta_backend *b) {
    delta_event h = delta_backend_record(b, DELTA_STREAM_TO_HOST);
    delta_event d = delta_backend_record(b, DELTA_STREAM_TO_DEVICE);
    delta_backend_sync(b, h);
    delta_backend_sync(b, d);
}

delta_status delta_backend_init_tensor(delta_backend *b, void *dev,
                                       const delta_tensor *t, uint64_t seed) {
    /* no data (sim, also behind the stream checker's fake arena): nothing
     * to fill, and no staging buffer of a paper-scale tensor to make */
    if (!delta_backend_has_data(b)) return DELTA_OK;
    if (!b->ops->upload) {
        delta_init_tensor(dev, t, seed);
        return DELTA_OK;
    }
    void *tmp = delta_alloc_aligned(t->bytes ? t->bytes : 1);
    if (!tmp) return DELTA_ERR_NOMEM;
    delta_init_tensor(tmp, t, seed);
    delta_backend_upload(b, dev, tmp, t->bytes);
    delta_free_aligned(tmp);
    return DELTA_OK;
}
