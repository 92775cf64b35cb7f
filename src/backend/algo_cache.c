/* Tuned kernel choices kept between runs (algo_cache.h). */
#include "backend/algo_cache.h"
#include "core/files.h"
#include "core/grow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    char *key;
    int algo;
    size_t bytes;
} entry;

struct delta_algo_cache {
    char *path, *device;
    entry *e;
    int n, cap;
    bool dirty;
};

void delta_algo_cache_default_path(const char *name, char *buf, size_t n) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(buf, n, "%s/delta/%s", xdg, name);
    else if (home && *home)
        snprintf(buf, n, "%s/.cache/delta/%s", home, name);
    else if (n)
        buf[0] = '\0';
}

static entry *find(const delta_algo_cache *c, const char *key) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->e[i].key, key)) return &c->e[i];
    return NULL;
}

static bool add(delta_algo_cache *c, const char *key, int algo, size_t bytes) {
    entry *old = find(c, key);
    if (old) {
        old->algo = algo;
        old->bytes = bytes;
        return true;
    }
    if (!delta_grow((void **)&c->e, &c->cap, c->n + 1, sizeof *c->e, 64))
        return false;
    char *k = strdup(key);
    if (!k) return false;
    c->e[c->n++] = (entry){k, algo, bytes};
    return true;
}

/* Splits a line "DEVICE\tKEY\tALGO\tBYTES" in place; false if malformed. */
static bool parse(char *line, char **dev, char **key, int *algo,
                  size_t *bytes) {
    line[strcspn(line, "\r\n")] = '\0';
    char *t1 = strchr(line, '\t');
    char *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
    char *t3 = t2 ? strchr(t2 + 1, '\t') : NULL;
    if (!t3 || t1 == line || t2 == t1 + 1) return false;
    *t1 = *t2 = *t3 = '\0';
    char *end;
    long a = strtol(t2 + 1, &end, 10);
    if (end == t2 + 1 || *end || a < 0 || a > 1000000) return false;
    unsigned long long b = strtoull(t3 + 1, &end, 10);
    if (end == t3 + 1 || *end || t3[1] == '-') return false;
    *dev = line;
    *key = t1 + 1;
    *algo = (int)a;
    *bytes = (size_t)b;
    return true;
}

/* Calls fn for every well-formed line of the file (none when absent). */
static void each_line(const char *path,
                      void (*fn)(void *arg, char *dev, char *key, int algo,
                                 size_t bytes, const char *raw),
                      void *arg) {
    FILE *f = path && *path ? fopen(path, "r") : NULL;
    if (!f) return;
    char line[1024], raw[1024];
    while (fgets(line, sizeof line, f)) {
        snprintf(raw, sizeof raw, "%s", line);
        raw[strcspn(raw, "\r\n")] = '\0';
        char *dev, *key;
        int algo;
        size_t bytes;
        if (parse(line, &dev, &key, &algo, &bytes))
            fn(arg, dev, key, algo, bytes, raw);
    }
    fclose(f);
}

static void load_one(void *arg, char *dev, char *key, int algo, size_t bytes,
                     const char *raw) {
    (void)raw;
    delta_algo_cache *c = arg;
    if (!strcmp(dev, c->device)) (void)add(c, key, algo, bytes);
}

delta_algo_cache *delta_algo_cache_open(const char *path, const char *device) {
    delta_algo_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->path = strdup(path ? path : "");
    c->device = strdup(device ? device : "");
    if (!c->path || !c->device) {
        delta_algo_cache_free(c);
        return NULL;
    }
    /* a device name is one field: tabs and newlines would break lines */
    for (char *p = c->device; *p; p++)
        if (*p == '\t' || *p == '\n' || *p == '\r') *p = ' ';
    each_line(c->path, load_one, c);
    return c;
}

void delta_algo_cache_free(delta_algo_cache *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) free(c->e[i].key);
    free(c->e);
    free(c->path);
    free(c->device);
    free(c);
}

bool delta_algo_cache_get(const delta_algo_cache *c, const char *key,
                          int *algo, size_t *bytes) {
    const entry *e = c ? find(c, key) : NULL;
    if (!e) return false;
    *algo = e->algo;
    *bytes = e->bytes;
    return true;
}

void delta_algo_cache_put(delta_algo_cache *c, const char *key, int algo,
                          size_t bytes) {
    if (c && !strchr(key, '\t') && !strchr(key, '\n') &&
        add(c, key, algo, bytes))
        c->dirty = true;
}

/* The text being saved: grows as lines are appended. */
typedef struct text {
    char *s;
    size_t len, cap;
    const delta_algo_cache *c;
    bool ok;
} text;

static void append(text *t, const char *line) {
    size_t l = strlen(line);
    if (!t->ok) return;
    if (t->len + l + 2 > t->cap) {
        size_t cap = (t->len + l + 2) * 2;
        char *grown = realloc(t->s, cap);
        if (!grown) {
            t->ok = false;
            return;
        }
        t->s = grown;
        t->cap = cap;
    }
    memcpy(t->s + t->len, line, l);
    t->len += l;
    t->s[t->len++] = '\n';
    t->s[t->len] = '\0';
}

/* Keeps a line of the file unless this cache holds the same choice. */
static void keep_other(void *arg, char *dev, char *key, int algo,
                       size_t bytes, const char *raw) {
    (void)algo;
    (void)bytes;
    text *t = arg;
    if (!strcmp(dev, t->c->device) && find(t->c, key)) return;
    append(t, raw);
}

bool delta_algo_cache_save(delta_algo_cache *c, char *err, size_t err_len) {
    if (!c || !c->dirty || !*c->path) return true;
    text t = {.c = c, .ok = true};
    each_line(c->path, keep_other, &t);
    char line[1024];
    for (int i = 0; i < c->n; i++) {
        snprintf(line, sizeof line, "%s\t%s\t%d\t%zu", c->device, c->e[i].key,
                 c->e[i].algo, c->e[i].bytes);
        append(&t, line);
    }
    bool ok = t.ok;
    if (!ok) snprintf(err, err_len, "out of memory saving %s", c->path);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", c->path);
    char *slash = strrchr(dir, '/');
    if (ok && slash && slash != dir) {
        *slash = '\0';
        if (!delta_mkdirs(dir)) {
            snprintf(err, err_len, "cannot create the folder %s", dir);
            ok = false;
        }
    }
    if (ok) ok = delta_file_write_atomic(c->path, t.s ? t.s : "", t.len, err,
                                     err_len) == 0;
    free(t.s);
    if (ok) c->dirty = false;
    return ok;
}
